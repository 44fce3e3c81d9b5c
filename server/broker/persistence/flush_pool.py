"""``FlushPool``: the broker's few flush threads, serving every hosted replica's ``Flusher``.

Threads: ``Limits.flush_threads`` daemon threads per broker process (4 by default),
whatever the number of replicas it hosts (issue 22: it was one thread per replica). The
pool is a thin scheduler around ``Flusher.run_round`` (one round of one replica: retention,
then one bounded batch), which holds every rule of flushing; the pool only decides which
replica's round runs next and on which thread:

- a replica is due once its "not before" time has passed: at once when added, and after a
  round at the end of that round plus the pause the round returned (0 after a full batch,
  ``flush_period_s`` after one that was not full, a growing backoff after a failure). A
  paused replica costs no thread: it waits in a heap ordered by that time;
- due replicas run in the order they became due (a FIFO queue): a replica whose round was
  full goes behind every replica already due, so a busy partition cannot starve the others
  (round-robin between partitions);
- a replica is in exactly one place at a time (the heap, the queue, or running on one
  thread), so two rounds of one replica never run at once;
- a round that raises (``run_round`` logs and swallows the expected failures; this is for
  anything else) is logged and that replica paused ``flush_retry_backoff_s_max``: the other
  replicas' rounds go on;
- ``remove`` (a replica closed or dropped) starts no round of it again; a round of it
  already running ends on its own, and ``Removed.wait`` waits for it, bounded (a dropped
  replica's rows are deleted only after it); ``close`` (the broker stopping) starts no
  round again and lets each thread end after its round (``join`` waits for them).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

_log = logging.getLogger(__name__)


class Round(Protocol):
    """What the pool runs: ``Flusher`` (or a test's stand-in)."""

    @property
    def name(self) -> str: ...

    def run_round(self) -> float:
        """Run one round; return the pause, in seconds, before the next one."""
        ...


@dataclass(eq=False)
class _Entry:
    flusher: Round
    idle: threading.Condition
    """Notified when a round of it ends (``remove`` waits on it)."""
    removed: bool = False
    running_on: int | None = None
    """The ident of the thread running its round, if one is."""


class Removed:
    """A replica taken out of the pool: ``wait`` for a round of it that was running."""

    def __init__(self, lock: threading.Lock, entry: _Entry | None) -> None:
        self._lock = lock
        self._entry = entry

    def wait(self, wait_s: float) -> bool:
        """True once no round of it runs (at once from that round's own thread); False
        after ``wait_s`` if one still does."""
        entry = self._entry
        if entry is None:
            return True
        with self._lock:
            if entry.running_on in (None, threading.get_ident()):
                return True
            ended = entry.idle.wait_for(lambda: entry.running_on is None, wait_s)
        if not ended:
            _log.warning("%s: its flush round still runs after %.1f s", entry.flusher.name, wait_s)
        return ended


class FlushPool:
    def __init__(self, threads: int, error_pause_s: float, name: str = "flush") -> None:
        if threads < 1:
            raise ValueError(f"a flush pool needs at least one thread, got {threads}")
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        """Notified when a replica may have become due, or the pool closes."""
        self._error_pause_s = error_pause_s
        self._entries: dict[int, _Entry] = {}
        """By ``id`` of the flusher: the replicas this pool serves."""
        self._due: deque[_Entry] = deque()
        self._waiting: list[tuple[float, int, _Entry]] = []
        """Heap of (not before, tie-breaker, entry): paused replicas."""
        self._order = itertools.count()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name} {i}", daemon=True)
            for i in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def thread_count(self) -> int:
        return len(self._threads)

    def add(self, flusher: Round) -> None:
        """Serve ``flusher`` from now on; its first round is due at once."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the flush pool is closed")
            if id(flusher) in self._entries:
                raise ValueError(f"{flusher.name} is in the flush pool already")
            entry = _Entry(flusher, threading.Condition(self._lock))
            self._entries[id(flusher)] = entry
            self._due.append(entry)
            self._changed.notify()

    def remove(self, flusher: Round) -> Removed:
        """No round of ``flusher`` starts from now on (a round already running ends on its
        own: ``Removed.wait``)."""
        with self._lock:
            entry = self._entries.pop(id(flusher), None)
            if entry is not None:
                entry.removed = True  # left in the queue or heap: skipped when reached
        return Removed(self._lock, entry)

    def close(self) -> None:
        """No round starts from now on; each thread ends once its round ends (``join``)."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()

    def join(self, wait_s: float) -> bool:
        """Wait at most ``wait_s`` in all for the threads to end (after ``close``)."""
        until_s = time.monotonic() + wait_s
        for thread in self._threads:
            if thread.ident is not None and thread is not threading.current_thread():
                thread.join(max(0.0, until_s - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _work(self) -> None:
        while True:
            entry = self._take()
            if entry is None:
                return
            try:
                pause_s = entry.flusher.run_round()
            except Exception:  # one replica's fault must not stop the others' flushing
                _log.exception("%s: flush round failed", entry.flusher.name)
                pause_s = self._error_pause_s
            self._done(entry, pause_s)

    def _take(self) -> _Entry | None:
        """The next due replica, marked running on this thread; None once closed."""
        with self._lock:
            while not self._closed:
                now_s = time.monotonic()
                while self._waiting and self._waiting[0][0] <= now_s:
                    self._due.append(heapq.heappop(self._waiting)[2])
                while self._due:
                    entry = self._due.popleft()
                    if not entry.removed:
                        entry.running_on = threading.get_ident()
                        if self._due:  # more due: another thread may start on it
                            self._changed.notify()
                        return entry
                timeout_s = self._waiting[0][0] - now_s if self._waiting else None
                self._changed.wait(timeout_s)
            return None

    def _done(self, entry: _Entry, pause_s: float) -> None:
        with self._lock:
            entry.running_on = None
            entry.idle.notify_all()
            if entry.removed:
                return
            if pause_s <= 0:
                self._due.append(entry)  # behind every replica already due
                self._changed.notify()
                return
            not_before_s = time.monotonic() + pause_s
            heapq.heappush(self._waiting, (not_before_s, next(self._order), entry))
            if self._waiting[0][2] is entry:
                # Due before whatever an idle thread waits for: this thread may start a long
                # round next, so wake one to wait for the new, sooner time. Otherwise no
                # wake-up (one per round would be every replica's idle cost again).
                self._changed.notify()
