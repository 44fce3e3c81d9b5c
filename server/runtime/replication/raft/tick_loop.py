"""``TickLoop``: one thread ticks every Raft node of the process (issue 22, first part).

pysyncobj gives each ``SyncObj`` a tick thread of its own (``autoTick``) and a poller of its
own: at 100 partitions a broker ran 100 tick threads, each waking at least every
``autoTickPeriod`` (50 ms), 2,000+ wake-ups a second and the GIL handed between them. Here
the nodes run with ``autoTick`` off and one loop thread drives all of them:

- **One poll for every node.** Each node's ``SyncObj._poller`` is a ``NodePoller``: pysyncobj
  subscribes through it every descriptor of the node (its TCP server, its connections, the
  read end of its ``PipeNotifier``), and it puts them in the loop's one ``epoll``, with the
  node as their owner. ``NodePoller.poll`` (the end of pysyncobj's ``_onTick``) does nothing:
  the loop polls, once, for all nodes, and hands each event to the callback pysyncobj gave.
- **Timers.** Every node is ticked (``_onTick(0)``: elections, heartbeats, applying, the
  commands queued) once per ``period_s`` (pysyncobj's ``autoTickPeriod``, 50 ms) all
  together, and a node that had an event (a message, a connection, a wake-up) is ticked
  again right after it, as pysyncobj's own loop does after its poll returns.
- **No added latency.** A request thread's proposal queues the command and writes to the
  node's wake-up pipe (pysyncobj's ``PipeNotifier``); that pipe is in the loop's epoll, so
  the loop wakes at once and ticks that node, which appends and sends the entry.
- **Nodes join and leave at run time.** ``add`` queues a node; the loop takes it at its next
  turn (woken by its own pipe) and only then registers the node's descriptors: until then a
  ``NodePoller`` only records them, so no callback of a node runs while its constructor
  still runs on another thread. ``close`` asks the loop: the node is destroyed
  (``_doDestroy``: its sockets, journal) on the loop thread, its remaining descriptors are
  unregistered, and ``closed`` is set for whoever waits. The loop thread ends when it has no
  node left, and a new one starts with the next node.
- **The main-thread tie.** pysyncobj's tick thread stops once the thread that built its node
  has ended; RaftNode tied it to the main thread. The loop stops once the main thread has
  ended (within ``period_s``), leaving its nodes as pysyncobj's threads did.
- **Closed before unsubscribed.** pysyncobj closes a connection's socket and only then
  unsubscribes it: the kernel has already taken it out of the epoll, and its number may be
  another thread's file or socket by then. Unsubscribing it only forgets it here, whatever
  ``epoll_ctl`` says of that number (``TickLoop.unregister``).
- **Failures.** An exception in a node's tick or in one of its callbacks is logged (as
  pysyncobj's "failed _onTick") and the loop goes on with the other nodes.

One loop per process (``shared``), made anew in a forked child: an ``epoll`` shared with the
parent would mix the two processes' descriptors.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Protocol

from pysyncobj.poller import POLL_EVENT_TYPE

logger = logging.getLogger(__name__)

PERIOD_S = 0.05
"""pysyncobj's default ``autoTickPeriod``: every node is ticked at least this often."""

_Callback = Callable[[int, int], None]

_GONE = (errno.EBADF, errno.ENOENT, errno.EPERM)
"""``epoll_ctl(DEL)``'s errors for a descriptor that has left the epoll by being closed
(``TickLoop.unregister``)."""


class Ticked(Protocol):
    """What the loop needs of a node (``RaftNode``)."""

    @property
    def poller(self) -> NodePoller: ...

    def closing(self) -> bool:
        """The node was asked to close (``destroy``)."""
        ...

    def tick_once(self) -> None:
        """One pass of the node's timers (pysyncobj's ``_onTick(0)``)."""
        ...

    def close_on_loop(self) -> None:
        """Destroy the node (pysyncobj's ``_doDestroy``), on the loop thread."""
        ...


_MASKS = (
    (POLL_EVENT_TYPE.READ, select.EPOLLIN, select.EPOLLIN),
    (POLL_EVENT_TYPE.WRITE, select.EPOLLOUT, select.EPOLLOUT),
    (POLL_EVENT_TYPE.ERROR, select.EPOLLERR, select.EPOLLERR | select.EPOLLHUP),
)
"""pysyncobj's event bit, the epoll bit asked for it, the epoll bits that report it (a hang-up
is an error to pysyncobj)."""


def _epoll_mask(mask: int) -> int:
    return sum(asked for ours, asked, _ in _MASKS if mask & ours)


def _poll_mask(events: int) -> int:
    return sum(ours for ours, _, reported in _MASKS if events & reported)


class NodePoller:
    """pysyncobj's ``Poller`` interface for one node on a ``TickLoop``: its descriptors, in
    the loop's epoll once the loop has taken the node (recorded only until then)."""

    def __init__(self, loop: TickLoop) -> None:
        self._loop = loop
        self._callbacks: dict[int, tuple[_Callback, int]] = {}
        self._attached = False
        self.active = False
        """An event came for the node since its last tick (loop thread)."""

    # pysyncobj's Poller
    def subscribe(self, descr: int, callback: _Callback, eventMask: int) -> None:  # noqa: N803
        self._callbacks[descr] = (callback, eventMask)
        if self._attached:
            self._loop.register(descr, self, eventMask)

    def unsubscribe(self, descr: int) -> None:
        if self._callbacks.pop(descr, None) is not None and self._attached:
            self._loop.unregister(descr, self)

    def poll(self, timeout: float) -> None:
        """The end of pysyncobj's ``_onTick``: nothing, the loop polls for every node."""

    # the loop's
    def descriptors(self) -> list[int]:
        return list(self._callbacks)

    def attach(self) -> None:
        """Loop thread: the node's descriptors into the loop's epoll."""
        self._attached = True
        for descr, (_callback, mask) in list(self._callbacks.items()):
            try:
                self._loop.register(descr, self, mask)
            except OSError:  # closed since (pysyncobj unsubscribes before it closes)
                logger.exception("a Raft node's descriptor %s could not join the loop", descr)

    def detach(self) -> None:
        """Loop thread: the node's remaining descriptors out of the loop's epoll (pysyncobj
        never closes its ``PipeNotifier``'s pipe)."""
        self._attached = False
        for descr in list(self._callbacks):
            self._loop.unregister(descr, self)
        self._callbacks.clear()

    def dispatch(self, descr: int, events: int) -> None:
        found = self._callbacks.get(descr)
        if found is None:
            return  # unsubscribed by an earlier callback of this poll
        self.active = True
        found[0](descr, _poll_mask(events))


class TickLoop:
    """One thread that ticks and polls for many nodes (module docstring)."""

    _shared: TickLoop | None = None
    _shared_pid = 0
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls) -> TickLoop:
        """The process's one loop (a forked child makes its own)."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared_pid != os.getpid():
                cls._shared = TickLoop()
                cls._shared_pid = os.getpid()
            return cls._shared

    def __init__(self, period_s: float = PERIOD_S, name: str = "raft-tick-loop") -> None:
        self._period_s = period_s
        self._name = name
        self._epoll = select.epoll()
        self._owners: dict[int, NodePoller] = {}
        self._register_lock = threading.Lock()
        self._lock = threading.Lock()
        self._joining: list[Ticked] = []
        self._nodes: list[Ticked] = []  # loop thread only
        self._thread: threading.Thread | None = None
        self._rounds = 0
        """Rounds in which every node ticked (tests wait for a number of them)."""
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._epoll.register(self._wake_read, select.EPOLLIN)

    # --- any thread -----------------------------------------------------------------------

    def add(self, node: Ticked) -> None:
        """The loop ticks ``node`` from its next turn on (its thread starts if none runs)."""
        with self._lock:
            self._joining.append(node)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name)
                self._thread.start()
        self.wake()

    def wake(self) -> None:
        """The loop's poll returns at once (a node to take or to close)."""
        with contextlib.suppress(BlockingIOError):  # full: wake-ups are waiting already
            os.write(self._wake_write, b"w")

    def on_loop(self) -> bool:
        return threading.current_thread() is self._thread

    @property
    def thread(self) -> threading.Thread | None:
        """The loop's thread while it runs (tests)."""
        return self._thread

    @property
    def rounds(self) -> int:
        """How many rounds have ticked every node so far (one per ``period_s``)."""
        return self._rounds

    def node_count(self) -> int:
        with self._lock:
            return len(self._nodes) + len(self._joining)

    def register(self, descr: int, owner: NodePoller, mask: int) -> None:
        events = _epoll_mask(mask)
        with self._register_lock:
            known = self._owners.get(descr) is not None
            self._owners[descr] = owner
            try:
                if known:
                    self._epoll.modify(descr, events)
                else:
                    self._epoll.register(descr, events)
            except FileNotFoundError:  # closed and reopened since: epoll dropped it
                self._epoll.register(descr, events)
            except FileExistsError:
                self._epoll.modify(descr, events)

    def unregister(self, descr: int, owner: NodePoller) -> None:
        with self._register_lock:
            if self._owners.get(descr) is not owner:
                return  # closed, and reused by another node since
            del self._owners[descr]
            try:
                self._epoll.unregister(descr)
            except OSError as exc:
                # pysyncobj closes a connection's socket before it unsubscribes it
                # (``TcpConnection.disconnect``): the kernel dropped it from the epoll at its
                # close, and by now another thread may have the number: no descriptor
                # (EBADF), a socket not in this epoll (ENOENT) or a file (EPERM: a journal,
                # a log). Raised, the error ended pysyncobj's disconnect half done: the
                # connection never reconnected, and its node stayed cut off from that peer.
                if exc.errno not in _GONE:
                    raise

    # --- the loop thread --------------------------------------------------------------------

    def _run(self) -> None:
        main = threading.main_thread()
        next_all = 0.0
        while main.is_alive():
            with self._lock:
                joining, self._joining = self._joining, []
                if not joining and not self._nodes:
                    self._thread = None
                    return
            for node in joining:
                self._nodes.append(node)
                try:
                    node.poller.attach()
                except Exception:  # its ticks go on; a descriptor missing shows in its logs
                    logger.exception("failed to add a Raft node's descriptors to the tick loop")
            now = time.monotonic()
            every = now >= next_all
            if every:
                next_all = now + self._period_s
                self._rounds += 1
            for node in list(self._nodes):
                if node.closing():
                    self._close(node)
                    continue
                poller = node.poller
                if every or poller.active:
                    poller.active = False
                    try:
                        node.tick_once()
                    except Exception:
                        logger.exception("failed _onTick in the tick loop")
            timeout = max(0.0, next_all - time.monotonic())
            self._poll(timeout)
        logger.info("the main thread has ended: the Raft tick loop stops")

    def _poll(self, timeout: float) -> None:
        try:
            events = self._epoll.poll(timeout)
        except InterruptedError:
            return
        except OSError:  # never seen; the loop must not end for it (every group stops)
            logger.exception("the tick loop's poll failed")
            time.sleep(timeout)
            return
        for descr, mask in events:
            if descr == self._wake_read:
                self._drain()
                continue
            owner = self._owners.get(descr)
            if owner is None:
                continue
            try:
                owner.dispatch(descr, mask)
            except Exception:
                logger.exception("failed _onTick in the tick loop (a poll callback)")

    def _drain(self) -> None:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass

    def _close(self, node: Ticked) -> None:
        self._nodes.remove(node)
        try:
            node.close_on_loop()
        except Exception:
            logger.exception("failed to destroy a Raft node in the tick loop")
        finally:
            node.poller.detach()
