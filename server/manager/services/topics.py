"""Topics and partitions: creating them in three recorded steps (placement, replicas hosted,
finished), resuming or rolling back a half-done one, and their descriptions.

Threads: HTTP threads, and the leader-duties thread (``resume_pending``). Multi-step
operations are serialized by one lock so two of them never place replicas on the same ports
or finish each other's partitions early."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from manager.placement import place_partitions
from manager.registry import commands
from manager.registry.brokers import BrokerRecord
from manager.registry.state import ManagerState
from manager.registry.topics import PartitionRecord, TopicRecord
from manager.services.context import ServiceContext, check_outcome
from manager.views import partition_detail, topic_created, topic_summary
from protocol.errors import ErrorCode, RaftQError
from protocol.requests import CreateTopic, TopicRef
from protocol.types import BrokerId, ReplicaAddress, ReplicaSpec

_log = logging.getLogger(__name__)


class TopicService:
    """Create topics and partitions; describe them."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._limits = context.limits
        self._raft = context.raft
        self._monitor = context.monitor
        self._brokers = context.brokers
        self._executor = context.executor
        self._operation_lock = threading.Lock()

    def create_topic(self, request: CreateTopic) -> dict[str, object]:
        limits = self._limits
        with self._operation_lock:
            if self._raft.read(lambda s: s.topics.get(request.name)) is not None:
                raise RaftQError(ErrorCode.TOPIC_EXISTS, f"topic {request.name!r} exists")
            assignments = self._raft.read(
                lambda s: place_partitions(
                    range(request.partitions),
                    request.replication_factor,
                    s.brokers.all(),
                    s.topics.replica_count_by_broker(),
                    s.topics.raft_ports_by_host(),
                )
            )
            outcome = self._raft.propose(
                commands.BeginTopic(
                    request.name,
                    assignments,
                    limits.registry_topics_max,
                    limits.topic_partitions_max,
                    limits.replication_factor,
                    replace(
                        limits.partition_limits(),
                        retention_ms=request.retention_ms,
                        retention_bytes=request.retention_bytes,
                        min_insync_replicas=request.min_insync_replicas
                        or request.replication_factor // 2 + 1,
                    ),
                )
            )
            check_outcome(outcome, f"topic {request.name!r}")
            self._complete_recorded(request.name, tuple(range(request.partitions)))
        return topic_created(self._context.topic(request.name), self._monitor.leader_of)

    def add_partition(self, request: TopicRef) -> dict[str, object]:
        with self._operation_lock:
            topic = self._context.topic(request.topic)
            if topic.creating:
                raise RaftQError(ErrorCode.REFUSED, f"topic {topic.name!r} is being created")
            partition_id = len(topic.partitions)
            replication_factor = len(topic.partitions[0].replicas)
            (assignment,) = self._raft.read(
                lambda s: place_partitions(
                    (partition_id,),
                    replication_factor,
                    s.brokers.all(),
                    s.topics.replica_count_by_broker(),
                    s.topics.raft_ports_by_host(),
                )
            )
            outcome = self._raft.propose(
                commands.BeginPartition(
                    topic.name,
                    partition_id,
                    assignment,
                    self._limits.topic_partitions_max,
                    self._limits.replication_factor,
                )
            )
            check_outcome(outcome, f"partition {partition_id} of {topic.name!r}")
            self._complete_recorded(topic.name, (partition_id,))
        return self._partition_json(self._context.topic(request.topic), partition_id)

    def partitions(self, request: TopicRef) -> dict[str, object]:
        topic = self._context.topic(request.topic)
        return {
            "topic": topic.name,
            "partitions": [self._partition_json(topic, p.partition_id) for p in topic.partitions],
        }

    def topics(self) -> dict[str, object]:
        return {"topics": [topic_summary(t) for t in self._raft.read(lambda s: s.topics.all())]}

    def resume_pending(self) -> None:
        """Finish every CREATING partition (a failed request, or a previous leader's): re-send
        its replica specs (idempotent at the brokers), then record it ACTIVE; or, when a
        broker it was placed on is gone (``BrokerMonitor.gone``), roll the operation back."""
        pending = self._raft.read(
            lambda s: [(t.name, tuple(p.partition_id for p in t.creating)) for t in s.topics.all()]
        )
        brokers = self._raft.read(lambda s: s.brokers.all())
        gone = self._monitor.gone(brokers, self._limits.broker_replace_after_s, time.monotonic())
        for name, partition_ids in pending:
            if not partition_ids:
                continue
            if self._placed_on(name, gone):
                self._roll_back(name, partition_ids)
                continue
            try:
                with self._operation_lock:
                    self._complete(name, partition_ids)
                _log.info("resumed topic %s partitions %s", name, partition_ids)
            except RaftQError as exc:
                _log.warning("topic %s still not created: %s", name, exc.message)

    def _placed_on(self, name: str, gone: set[BrokerId]) -> bool:
        """A CREATING partition of the topic has a replica on a gone or removed broker."""

        def placed(s: ManagerState) -> bool:
            topic = s.topics.get(name)
            return topic is not None and any(
                r.broker_id in gone or s.brokers.get(r.broker_id) is None
                for p in topic.creating
                for r in p.replicas
            )

        return self._raft.read(placed)

    def _roll_back(self, name: str, partition_ids: tuple[int, ...]) -> None:
        """A creation that cannot finish is forgotten, not retried forever; the replicas
        already hosted are dropped as strays (``ReplicaMover``). A client that repeats the
        request creates it anew on live brokers."""
        try:
            with self._operation_lock:
                outcome = self._raft.propose(commands.RollBackPartitions(name, partition_ids))
            check_outcome(outcome, f"topic {name!r}")
            _log.warning(
                "rolled back topic %s partitions %s: a broker they were placed on is gone",
                name,
                partition_ids,
            )
        except RaftQError as exc:
            _log.warning("topic %s not rolled back yet: %s", name, exc.message)

    def _complete_recorded(self, name: str, partition_ids: tuple[int, ...]) -> None:
        """``_complete`` for an operation whose first step was just committed: a failure now
        must not answer a code that proves nothing was done (say NOT_LEADER after this
        manager lost leadership): the placement is recorded, a retry would find the topic
        (409), and the load balancer repeats NOT_LEADER answers at once. It is an unknown
        outcome, finished in the background (``resume_pending``)."""
        try:
            self._complete(name, partition_ids)
        except RaftQError as exc:
            if not exc.code.proves_nothing_done:
                raise
            raise RaftQError(
                ErrorCode.UNAVAILABLE,
                f"topic {name!r}: recorded, and finished in the background ({exc.message})",
            ) from exc

    def _complete(self, name: str, partition_ids: tuple[int, ...]) -> None:
        """Steps (b) and (c) of a topic operation; (a), the recorded placement, is done."""
        topic = self._context.topic(name)
        brokers = self._raft.read(lambda s: {b.broker_id: b for b in s.brokers.all()})
        futures = []
        for partition in topic.creating:
            if partition.partition_id not in partition_ids:
                continue
            for address, spec in replica_specs(topic, partition, brokers):
                futures.append(self._executor.submit(self._brokers.host_replica, address, spec))
        failures = [str(f.exception()) for f in futures if f.exception() is not None]
        if failures:
            raise RaftQError(
                ErrorCode.UNAVAILABLE,
                f"topic {name!r} is recorded but {len(failures)} replica(s) are not yet hosted "
                f"(retried in the background): {failures[0]}",
            )
        finished = self._raft.propose(commands.FinishPartitions(name, partition_ids))
        check_outcome(finished, f"topic {name!r}")

    def _partition_json(self, topic: TopicRecord, partition_id: int) -> dict[str, object]:
        brokers = self._raft.read(lambda s: {b.broker_id: b for b in s.brokers.all()})
        partition = topic.partitions[partition_id]
        return partition_detail(topic.name, partition, brokers, self._monitor.leader_of)


def replica_specs(
    topic: TopicRecord, partition: PartitionRecord, brokers: dict[BrokerId, BrokerRecord]
) -> list[tuple[str, ReplicaSpec]]:
    """What each replica's broker is told to host: its HTTP address and the spec."""
    replicas = tuple(
        ReplicaAddress(
            r.replica_id, r.broker_id, _broker(brokers, r.broker_id).address, r.raft_address
        )
        for r in partition.replicas
    )
    leaving = _leaving(partition, brokers)
    return [
        (
            replica.address,
            ReplicaSpec(
                topic.name,
                partition.partition_id,
                replica.replica_id,
                replicas,
                topic.partition_limits,
                leaving,
            ),
        )
        for replica in replicas
    ]


def _leaving(
    partition: PartitionRecord, brokers: dict[BrokerId, BrokerRecord]
) -> ReplicaAddress | None:
    """A move's leaving replica while its broker lives (a drain): it stays a member until
    the new one caught up (``ReplicaSpec.leaving``). A dead one is removed first and told
    to no one."""
    move = partition.moving
    broker = None if move is None else brokers.get(move.removed.broker_id)
    if move is None or broker is None or not broker.alive:
        return None
    removed = move.removed
    return ReplicaAddress(
        removed.replica_id, removed.broker_id, broker.address, removed.raft_address
    )


def _broker(brokers: dict[BrokerId, BrokerRecord], broker_id: BrokerId) -> BrokerRecord:
    broker = brokers.get(broker_id)
    if broker is None:  # a broker is removed only once no replica is placed on it
        raise RaftQError(ErrorCode.INTERNAL, f"broker {broker_id} is not registered")
    return broker
