"""``RaftMachine``: a ``ReplicatedMachine`` over pysyncobj.

One node of a Raft group (a ``RaftNode``, one TCP port) replicating one ``Definition``'s
state (a ``StateConsumer``). It must be built in the process that serves: a ``SyncObj`` made
before a ``fork()`` is dead in the child, and it binds only ``RaftConfig.address``.

Threads: pysyncobj's tick thread per node applies committed entries (with
``Environment.shared_loop`` on, the process's one tick loop, ``tick_loop.TickLoop``, issue 22,
ticks every node instead; with ``Environment.auto_tick`` off, its owner: ``tick``);
a proposer blocks in ``propose`` until its entry
is applied here, bounded by ``leader_wait_s`` plus ``raft_commit_timeout_s``; any thread
reads under the state's lock.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pysyncobj import FAIL_REASON
from pysyncobj.syncobj import SyncObjException
from pysyncobj.transport import Transport

from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from runtime.durable_files import fsync_directory, make_directories
from runtime.replication.machine import C, Definition, Entry, R, RaftStatus, S
from runtime.replication.raft.consumer import Applied, StateConsumer, consumer_type
from runtime.replication.raft.node import RaftNode, SnapshotTransport, raft_conf, raft_failure
from runtime.replication.raft.tick_loop import TickLoop

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RaftConfig:
    name: str
    """Names the group in error messages."""
    address: str
    """This node's Raft address (``host:port``); its port binds this host only."""
    partners: tuple[str, ...]
    """The other members when the group was created (a restart takes them from its log)."""
    data_dir: str
    """Holds ``{stem}.journal``, ``{stem}.journal.meta`` and ``{stem}.dump``."""
    secret: str
    """Encrypts and authenticates the group's traffic (without it pysyncobj unpickles
    whatever anyone sends)."""
    limits: Limits
    stem: str = "raft"
    leader_wait_s: float = 0.0
    """How long ``propose`` rides out an election before it answers NO_LEADER (0: at once)."""
    members_min: int = 1
    """The fewest members the owner ever lets the group shrink to (a partition's
    re-replication removes a dead member before adding its replacement: its replication
    factor less one). A follower's acknowledgement claims the majority of no fewer."""
    compaction_bytes_min: int | None = None
    """Also compact the log once its entries take this many bytes (pysyncobj holds every
    entry in memory until a compaction, which it starts by count or time only)."""

    @property
    def journal_file(self) -> str:
        return os.path.join(self.data_dir, f"{self.stem}.journal")

    @property
    def dump_file(self) -> str:
        return os.path.join(self.data_dir, f"{self.stem}.dump")


@dataclass(frozen=True, slots=True)
class Environment:
    """What a ``RaftMachine`` takes from the world, in one place so that a simulator can give
    its own: the transport its node talks through, and whether pysyncobj's thread ticks it
    or its owner does (``RaftMachine.tick``). The clock is not here: pysyncobj reads its own
    module's, which the simulator replaces while it steps (``sim.world``)."""

    transport: type[Transport] = SnapshotTransport
    auto_tick: bool = True
    shared_loop: bool = False
    """With ``auto_tick``: ticked by the process's ``TickLoop.shared()`` with its other nodes
    (one thread for all) instead of a pysyncobj tick thread of its own. Off by default: with
    it on, full test runs still failed one real-node test each (a new member not catching
    up; an election during a big snapshot, when one node's slow tick delays every node's
    heartbeats), causes not found (ARCHITECTURE.md, "One tick loop per process")."""
    loop: TickLoop | None = None
    """With ``auto_tick``: a loop of its own to tick on (tests), whatever ``shared_loop``."""

    def tick_loop(self) -> TickLoop | None:
        if not self.auto_tick:
            return None
        if self.loop is not None:
            return self.loop
        return TickLoop.shared() if self.shared_loop else None


class RaftMachine(Generic[S, C, R]):
    """Implements ``ReplicatedMachine``. The only code that calls a ``RaftNode``."""

    def __init__(
        self,
        definition: Definition[S, C, R],
        config: RaftConfig,
        environment: Environment | None = None,
    ) -> None:
        environment = environment or Environment()
        self._definition = definition
        self._config = config
        make_directories(config.data_dir)  # durable: the journal and dump inside must be found
        consumer: StateConsumer[S, C, R] = consumer_type(definition.methods)(definition)
        self._consumer = consumer
        loop = environment.tick_loop()
        self._node = RaftNode(
            config.address,
            list(config.partners),
            _conf(config, environment.auto_tick and loop is None),
            consumers=[consumer],
            commit_notice_delay_s=config.limits.raft_commit_notice_delay_s,
            transport=environment.transport,
            loop=loop,
        )
        unsynced = {f"{m.name}_v{m.version}" for m in definition.methods if not m.synced}
        self._node.leave_unsynced(consumer, frozenset(unsynced))
        if config.compaction_bytes_min is not None:
            self._node.addOnTickCallback(self._compact_when_large)

    @property
    def name(self) -> str:
        return self._config.name

    def propose(self, command: C, *, synced: bool = True) -> R:
        if self._config.leader_wait_s > 0:
            self._node.wait_for_leader(self._config.leader_wait_s, self.name)
        name, args = self._definition.encode(command, synced)
        return self._result(self._call(name, args), synced)

    def _result(self, applied: Applied, synced: bool) -> R:
        # Every replica that acknowledged a synced entry synced it first. The leader counts
        # them (its match indexes). A follower (pysyncobj forwards its proposals) knows only
        # that a majority of the members of the commit did, and a member may have been
        # added or removed since: it claims the smallest such majority, one member fewer
        # than it sees (one change at a time), but never of fewer than ``members_min`` (a
        # follower of a group of 3 shrunk to 2 while a dead member is replaced claimed 1
        # where both held the entry: simulator, moves workload). Not the majority of the
        # members the node started with: a node added to a group of 3 took 3 for it after
        # the group was back to 3 members, and a follower took the new majority of 4 for an
        # entry committed by 2 of 3, both claiming 3 replicas where 2 held the entry
        # (simulator, in-order network, seeds 7 and 22).
        if not synced:
            replicas_synced = 0
        elif self._node.leads():
            replicas_synced = self._node.replicas_holding(applied.index)
        else:
            others = max(len(self._node.members()), self._config.members_min)
            replicas_synced = others // 2 + 1
        entry = Entry(applied.term, applied.index, replicas_synced)
        return self._definition.result(applied.value, entry)

    def _call(self, name: str, args: tuple[object, ...]) -> Applied:
        timeout_s = self._config.limits.raft_commit_timeout_s
        try:
            applied = getattr(self._consumer, name)(*args, sync=True, timeout=timeout_s)
        except SyncObjException as exc:
            raise raft_failure(exc.errorCode, self.name, timeout_s) from exc
        if not isinstance(applied, Applied):
            raise RaftQError(ErrorCode.INTERNAL, f"{self.name}: {name} applied as {applied!r}")
        return applied

    def read(self, query: Callable[[S], T]) -> T:
        with self._consumer.lock:
            return query(self._consumer.held_state())

    def status(self) -> RaftStatus:
        return self._node.node_status()

    def leads(self) -> bool:
        return self._node.leads()

    def caught_up(self) -> bool:
        return self._node.caught_up()

    def members(self) -> frozenset[str]:
        return self._node.members()

    def change_member(self, address: str, *, add: bool) -> None:
        timeout_s = self._config.limits.raft_commit_timeout_s
        self._node.change_member(address, add=add, timeout_s=timeout_s)

    def member_holds(self, address: str, index: int) -> bool:
        return self._node.member_holds(address, index)

    def transfer_leadership(self, address: str | None) -> None:
        self._node.transfer_leadership(address)

    def replicas_answering(self) -> int:
        """Within ``raft_leader_fallback_timeout_s``: after it pysyncobj's leader would count
        its quorum lost too."""
        return self._node.replicas_answering(self._config.limits.raft_leader_fallback_timeout_s)

    def replicas_holding(self, entry: Entry) -> int:
        if entry.term != self._node.node_status().term:
            return 0  # led in another term: what the match indexes say is not about it
        return self._node.replicas_holding(entry.index)

    def close(self) -> None:
        self._node.destroy()

    def discard(self) -> None:
        # The tick thread must have closed the journal before its files go.
        self._node.close(self._config.limits.http_shutdown_grace_s)
        directory = self._config.data_dir
        for path in glob.glob(os.path.join(glob.escape(directory), f"{self._config.stem}.*")):
            os.remove(path)  # journal, meta, dump, and what a write cut short left
        if os.path.isdir(directory) and not os.listdir(directory):
            os.rmdir(directory)
        fsync_directory(os.path.dirname(os.path.abspath(directory)))

    # --- beyond the interface: for tests and the simulator --------------------------------

    def compact(self) -> None:
        """Start a log compaction (a full dump) at the next tick, whatever the bounds."""
        self._node.forceLogCompaction()

    def stop(self, wait_s: float) -> None:
        """``close`` and wait (bounded) until the tick thread has closed the sockets and the
        journal (``close`` alone only asks it to, at its next tick)."""
        self._node.close(wait_s)

    def tick(self, wait_s: float = 0.0) -> None:
        """One pass of the node's loop, by its owner (``Environment.auto_tick`` off)."""
        self._node.doTick(wait_s)

    def submit(
        self, command: C, answered: Callable[[R | RaftQError], None], *, synced: bool = True
    ) -> None:
        """``propose`` without the wait, for an owner that ticks the node itself (the
        simulator): ``answered`` gets what ``propose`` would return or raise, on the ticking
        thread (never, if the node stops first)."""
        name, args = self._definition.encode(command, synced)

        def callback(applied: object, reason: object) -> None:
            if reason != FAIL_REASON.SUCCESS or not isinstance(applied, Applied):
                answered(raft_failure(reason, self.name, 0.0))
                return
            try:
                answered(self._result(applied, synced))
            except RaftQError as exc:
                answered(exc)

        getattr(self._consumer, name)(*args, callback=callback)

    def start_member_change(
        self, address: str, add: bool, answered: Callable[[RaftQError | None], None]
    ) -> None:
        """``change_member`` without the wait (the simulator): ``answered(None)`` once
        committed, else the error. Raises NOT_LEADER at once as ``change_member`` does."""

        def done(reason: object) -> None:
            ok = reason == FAIL_REASON.SUCCESS
            answered(None if ok else raft_failure(reason, self.name, 0.0))

        self._node.start_member_change(address, add=add, answered=done)

    @property
    def node(self) -> RaftNode:
        """The pysyncobj node, for the simulator's checks (inside this package only)."""
        return self._node

    def _compact_when_large(self) -> None:
        """Tick thread: bound the memory the Raft log holds by bytes."""
        journal = self._node.journal
        bound = self._config.compaction_bytes_min
        if journal is not None and bound is not None and journal.entry_bytes >= bound:
            self._node.forceLogCompaction()


def _conf(config: RaftConfig, auto_tick: bool) -> Any:
    return raft_conf(
        config.limits,
        secret=config.secret,
        bind_address=config.address,
        journal_file=config.journal_file,
        dump_file=config.dump_file,
        membership_changes=True,  # members are replaced (partitions) or added (managers)
        auto_tick=auto_tick,
    )
