"""``ManagerRaft``: the pysyncobj adapter that replicates ``ManagerState`` among the managers.

The only module that imports pysyncobj. It must be built inside the gunicorn worker (a
``SyncObj`` made before ``fork()`` is dead in the child). Threads: pysyncobj's tick thread
applies commands; HTTP threads propose (blocking until applied or ``raft_commit_timeout_s``)
and read the state under the consumer's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pysyncobj import FAIL_REASON, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.syncobj import SyncObjException

from manager.config import ManagerConfig
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.registry.topics import Assignment
from manager.replicated import RaftStatus
from protocol.durable_files import make_directories
from protocol.errors import ErrorCode, RaftQError
from runtime import durable_journal
from runtime.raft_node import RaftNode

_log = logging.getLogger(__name__)

T = TypeVar("T")

_STATE_LEADER = 2
_ROLES = {0: "follower", 1: "candidate", 2: "leader"}


class _RegistryConsumer(SyncObjConsumer):
    """Holds the replicated ``ManagerState``.

    The wire protocol of the managers' Raft log is the list of ``@replicated`` methods below.
    pysyncobj numbers them by sorted ``(ver, name)``: adding, removing or renaming one at
    ``ver=0`` renumbers the others and breaks existing journals and mixed-version clusters.
    Add a new command with the next ``ver`` (and switch the cluster's code version) instead,
    or at ``ver=0`` under a name that sorts after every existing one, which renumbers nothing
    (``sweep_idle_clients``, ``upsert_consumer``, ``upsert_producer``: the timed forms of the
    registrations, for leases; ``register_*`` stay, unchanged, so old journals replay). A node
    of an older version cannot apply the new ones: upgrade every manager before proposing.
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


class ManagerRaft:
    """Implements ``manager.replicated.ReplicatedRegistry`` over pysyncobj."""

    def __init__(self, config: ManagerConfig) -> None:
        limits = config.limits
        make_directories(config.data_dir)  # durable: the journal and dump inside must be found
        self._commit_timeout_s = limits.raft_commit_timeout_s
        conf = SyncObjConf(
            password=config.secret,
            bindAddress=config.raft_address,  # never 0.0.0.0
            appendEntriesUseBatch=False,  # with batching every commit waits 100 ms
            leaderFallbackTimeout=limits.raft_leader_fallback_timeout_s,
            raftMinTimeout=limits.raft_election_timeout_min_s,
            raftMaxTimeout=limits.raft_election_timeout_max_s,
            connectionTimeout=limits.raft_connection_timeout_s,
            # Both files are needed to survive a restart of the whole cluster.
            journalFile=str(config.journal_path),
            fullDumpFile=str(config.dump_path),
            useFork=False,
            commandsWaitLeader=False,  # fail fast without a leader
            dynamicMembershipChange=False,
            logCompactionMinEntries=limits.raft_log_compaction_entries_min,
            logCompactionMinTime=limits.raft_log_compaction_time_min_s,
        )
        self._consumer = _RegistryConsumer()
        durable_journal.install()  # entries and votes on disk before Raft acts on them
        self._syncobj = RaftNode(
            config.raft_address, config.partner_raft_addresses, conf, consumers=[self._consumer]
        )

    def close(self) -> None:
        self._syncobj.destroy()

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
        raw: dict[str, Any] = self._syncobj.getStatus()
        leader = raw.get("leader")
        return RaftStatus(
            role=_ROLES.get(raw["state"], "unknown"),
            is_leader=raw["state"] == _STATE_LEADER,
            leader_raft_address=None if leader is None else str(leader.address),
            term=int(raw["raft_term"]),
            commit_index=int(raw["commit_idx"]),
            last_applied=int(raw["last_applied"]),
            has_quorum=bool(raw["has_quorum"]),
            uptime_s=int(raw["uptime"]),
        )

    # --- commands ----------------------------------------------------------------------------
    def begin_topic(
        self,
        name: str,
        assignments: tuple[Assignment, ...],
        topics_max: int,
        partitions_max: int,
        replicas_max: int,
    ) -> Outcome:
        return self._propose(
            self._consumer.begin_topic, name, assignments, topics_max, partitions_max, replicas_max
        )

    def begin_partition(
        self,
        name: str,
        partition_id: int,
        assignment: Assignment,
        partitions_max: int,
        replicas_max: int,
    ) -> Outcome:
        return self._propose(
            self._consumer.begin_partition,
            name,
            partition_id,
            assignment,
            partitions_max,
            replicas_max,
        )

    def finish_partitions(self, name: str, partition_ids: tuple[int, ...]) -> Outcome:
        return self._propose(self._consumer.finish_partitions, name, partition_ids)

    def register_broker(
        self, broker_id: int, address: str, host: str, low: int, high: int, brokers_max: int
    ) -> Outcome:
        return self._propose(
            self._consumer.register_broker, broker_id, address, host, low, high, brokers_max
        )

    def set_broker_alive(self, broker_id: int, alive: bool) -> Outcome:
        return self._propose(self._consumer.set_broker_alive, broker_id, alive)

    def register_producer(
        self, producer_id: str, topic: str, clients_max: int, now_ms: int, expiry_ms: int
    ) -> Outcome:
        return self._propose(
            self._consumer.upsert_producer, producer_id, topic, clients_max, now_ms, expiry_ms
        )

    def register_consumer(
        self,
        consumer_id: str,
        topic: str,
        partition_id: int | None,
        clients_max: int,
        now_ms: int,
        expiry_ms: int,
    ) -> Outcome:
        return self._propose(
            self._consumer.upsert_consumer,
            consumer_id,
            topic,
            partition_id,
            clients_max,
            now_ms,
            expiry_ms,
        )

    def expire_idle_clients(self, now_ms: int, expiry_ms: int, count_max: int) -> Outcome:
        return self._propose(self._consumer.sweep_idle_clients, now_ms, expiry_ms, count_max)

    def _propose(self, command: Callable[..., Any], *args: object) -> Outcome:
        try:
            result = command(*args, sync=True, timeout=self._commit_timeout_s)
        except SyncObjException as exc:
            raise self._error(exc.errorCode) from exc
        return result if isinstance(result, Outcome) else Outcome.FAILED

    def _error(self, reason: object) -> RaftQError:
        hint = self.leader_raft_address()
        if reason == FAIL_REASON.MISSING_LEADER:
            return RaftQError(ErrorCode.NO_LEADER, "the managers have no Raft leader")
        if reason in (FAIL_REASON.DISCARDED, FAIL_REASON.NOT_LEADER):
            return RaftQError(ErrorCode.NOT_LEADER, f"leadership moved (to {hint}); not applied")
        if reason in (FAIL_REASON.QUEUE_FULL, FAIL_REASON.REQUEST_DENIED):
            return RaftQError(ErrorCode.UNAVAILABLE, f"command refused by Raft ({reason})")
        # 'Timeout', LEADER_CHANGED, UNKNOWN_OUTCOME: it may still be applied later.
        return RaftQError(
            ErrorCode.COMMIT_TIMEOUT,
            f"the command did not commit within {self._commit_timeout_s} s ({reason}); "
            "it may still be applied",
        )
