"""``ManagerRaft``: the pysyncobj adapter that replicates ``ManagerState`` among the managers.

The only module that imports pysyncobj. It must be built in the process that serves (a
``SyncObj`` made before a ``fork()`` is dead in the child). Threads: pysyncobj's tick thread
applies commands; HTTP threads propose (blocking until applied or ``raft_commit_timeout_s``)
and read the state under the consumer's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from pysyncobj import SyncObjConsumer, replicated
from pysyncobj.syncobj import SyncObjException

from manager.config import ManagerConfig
from manager.registry.commands import RegistryCommand, command_name, from_wire, to_wire
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.registry.topics import Assignment
from manager.replicated import RaftStatus
from protocol.durable_files import make_directories
from protocol.types import RaftRole
from runtime.replication.raft import journal as durable_journal
from runtime.replication.raft.node import RaftNode, raft_conf, raft_failure

_log = logging.getLogger(__name__)

T = TypeVar("T")


class _RegistryConsumer(SyncObjConsumer):
    """Holds the replicated ``ManagerState``.

    The wire protocol of the managers' Raft log is the list of ``@replicated`` methods below.
    pysyncobj numbers them by sorted ``(ver, name)``: adding, removing or renaming one at
    ``ver=0`` renumbers the others and breaks existing journals and mixed-version clusters.
    Add a new command with the next ``ver`` (and switch the cluster's code version) instead,
    or at ``ver=0`` under a name that sorts after every existing one, which renumbers nothing
    (``sweep_idle_clients``, ``upsert_consumer``, ``upsert_producer``: the timed forms of the
    registrations, for leases; then ``write_command``, which carries any command of
    ``manager.registry.commands`` and is the only one proposed today; the others stay,
    unchanged, so old journals replay). A node of an older version cannot apply the new ones:
    upgrade every manager before proposing.
    """

    def __init__(self) -> None:
        # Set before SyncObjConsumer.__init__: not serialized into the dump.
        self.lock = threading.Lock()
        super().__init__()
        # Set after: serialized (full dump and snapshots sent to lagging peers).
        self.state = ManagerState()

    def _apply(self, name: str, command: Callable[[ManagerState], Outcome]) -> Outcome:
        # An exception escaping a @replicated method wedges the whole group, so none may.
        with self.lock:
            try:
                return command(self.state)
            except Exception:
                _log.exception("replicated command %s failed; applied as a no-op", name)
                return Outcome.FAILED

    @replicated(ver=0)
    def begin_partition(
        self, name: str, partition_id: int, assignment: Assignment, parts_max: int, rf: int
    ) -> Outcome:
        return self._apply(
            "begin_partition",
            lambda s: s.begin_partition(name, partition_id, assignment, parts_max, rf),
        )

    @replicated(ver=0)
    def begin_topic(
        self,
        name: str,
        assignments: tuple[Assignment, ...],
        topics_max: int,
        parts_max: int,
        rf: int,
    ) -> Outcome:
        return self._apply(
            "begin_topic", lambda s: s.begin_topic(name, assignments, topics_max, parts_max, rf)
        )

    @replicated(ver=0)
    def finish_partitions(self, name: str, partition_ids: tuple[int, ...]) -> Outcome:
        return self._apply("finish_partitions", lambda s: s.finish_partitions(name, partition_ids))

    @replicated(ver=0)
    def register_broker(
        self, broker_id: int, address: str, host: str, low: int, high: int, brokers_max: int
    ) -> Outcome:
        return self._apply(
            "register_broker",
            lambda s: s.register_broker(broker_id, address, host, low, high, brokers_max),
        )

    @replicated(ver=0)
    def register_consumer(
        self, consumer_id: str, topic: str, partition_id: int | None, clients_max: int
    ) -> Outcome:
        return self._apply(
            "register_consumer",
            lambda s: s.register_consumer(consumer_id, topic, partition_id, clients_max),
        )

    @replicated(ver=0)
    def register_producer(self, producer_id: str, topic: str, clients_max: int) -> Outcome:
        return self._apply(
            "register_producer", lambda s: s.register_producer(producer_id, topic, clients_max)
        )

    @replicated(ver=0)
    def set_broker_alive(self, broker_id: int, alive: bool) -> Outcome:
        return self._apply("set_broker_alive", lambda s: s.set_broker_alive(broker_id, alive))

    @replicated(ver=0)
    def sweep_idle_clients(self, now_ms: int, expiry_ms: int, count_max: int) -> Outcome:
        return self._apply(
            "sweep_idle_clients", lambda s: s.expire_idle_clients(now_ms, expiry_ms, count_max)
        )

    @replicated(ver=0)
    def upsert_consumer(
        self,
        consumer_id: str,
        topic: str,
        partition_id: int | None,
        clients_max: int,
        now_ms: int,
        expiry_ms: int,
    ) -> Outcome:
        return self._apply(
            "upsert_consumer",
            lambda s: s.register_consumer(
                consumer_id, topic, partition_id, clients_max, now_ms, expiry_ms
            ),
        )

    @replicated(ver=0)
    def upsert_producer(
        self, producer_id: str, topic: str, clients_max: int, now_ms: int, expiry_ms: int
    ) -> Outcome:
        return self._apply(
            "upsert_producer",
            lambda s: s.register_producer(producer_id, topic, clients_max, now_ms, expiry_ms),
        )

    @replicated(ver=0)
    def write_command(self, wire: tuple[object, ...]) -> Outcome:
        """The one command proposed today: any ``manager.registry.commands`` command in its
        wire form. (The methods above are how they were proposed before; they stay so old
        journals replay.)"""
        command = from_wire(wire)
        return self._apply(command_name(command) if command else "?", lambda s: s.apply(command))


class ManagerRaft:
    """Implements ``manager.replicated.ReplicatedRegistry`` over pysyncobj."""

    def __init__(self, config: ManagerConfig) -> None:
        limits = config.limits
        make_directories(config.data_dir)  # durable: the journal and dump inside must be found
        self._commit_timeout_s = limits.raft_commit_timeout_s
        self._leader_fallback_timeout_s = limits.raft_leader_fallback_timeout_s
        conf = raft_conf(
            limits,
            secret=config.secret,
            bind_address=config.raft_address,
            journal_file=str(config.journal_path),
            dump_file=str(config.dump_path),
            membership_changes=True,  # managers are added and removed one at a time
        )
        self._consumer = _RegistryConsumer()
        durable_journal.install()  # entries and votes on disk before Raft acts on them
        self._syncobj = RaftNode(
            config.raft_address,
            config.partner_raft_addresses,
            conf,
            consumers=[self._consumer],
            commit_notice_delay_s=config.limits.raft_commit_notice_delay_s,
        )

    def close(self) -> None:
        self._syncobj.destroy()

    def members(self) -> frozenset[str]:
        return self._syncobj.members()

    def change_member(self, raft_address: str, *, add: bool) -> None:
        self._syncobj.change_member(raft_address, add=add, timeout_s=self._commit_timeout_s)

    def transfer_leadership(self, raft_address: str | None) -> None:
        self._syncobj.transfer_leadership(raft_address)

    def members_answering(self) -> int:
        return self._syncobj.replicas_answering(self._leader_fallback_timeout_s)

    # --- reads -------------------------------------------------------------------------------
    def read(self, query: Callable[[ManagerState], T]) -> T:
        """Run ``query`` on the applied state, atomically with respect to apply."""
        with self._consumer.lock:
            return query(self._consumer.state)

    def is_leader(self) -> bool:
        """Leader and caught up: the no-op of its term is applied, so its state holds every
        committed command (before that a new leader may serve stale reads)."""
        if not self._syncobj._isLeader():
            return False
        noop_index = getattr(self._syncobj, "_SyncObj__noopIDx", None)
        return noop_index is not None and self._syncobj.raftLastApplied >= noop_index

    def leader_raft_address(self) -> str | None:
        leader = self._syncobj._getLeader()
        return None if leader is None else str(leader.address)

    def status(self) -> RaftStatus:
        node = self._syncobj.node_status()
        return RaftStatus(
            role=node.role.value,
            is_leader=node.role is RaftRole.LEADER,
            leader_raft_address=node.leader,
            term=node.term,
            commit_index=node.commit_index,
            last_applied=node.last_applied,
            has_quorum=node.has_quorum,
            uptime_s=node.uptime_s,
        )

    # --- commands ----------------------------------------------------------------------------
    def propose(self, command: RegistryCommand) -> Outcome:
        try:
            result = self._consumer.write_command(
                to_wire(command), sync=True, timeout=self._commit_timeout_s
            )
        except SyncObjException as exc:
            what = f"the managers' {command_name(command)}"
            raise raft_failure(exc.errorCode, what, self._commit_timeout_s) from exc
        return result if isinstance(result, Outcome) else Outcome.FAILED
