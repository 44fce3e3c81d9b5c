"""``ManagerService``: the registry operations behind the HTTP API (topics, partitions,
brokers, producers, consumers) and the resumption of half-done topic operations.

Threads: HTTP threads call every public method; the leader-duties thread calls
``resume_pending``. Multi-step operations are serialized by one lock so two of them never
place replicas on the same ports or finish each other's partitions early.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import replace
from typing import TypeVar

from manager.broker_client import BrokerClient
from manager.broker_monitor import BrokerMonitor
from manager.log_routing import routing_count
from manager.placement import drain_refusal, place_partitions
from manager.raft import RegistryMachine
from manager.registry import commands
from manager.registry.brokers import BrokerRecord
from manager.registry.clients import ConsumerRecord, ProducerRecord
from manager.registry.outcome import Outcome
from manager.registry.state import EXPIRED_PER_SWEEP_MAX, ManagerState
from manager.registry.topics import PartitionRecord, TopicRecord
from manager.views import (
    broker_summary,
    partition_detail,
    partition_overview,
    topic_created,
    topic_summary,
)
from protocol.access import (
    KEY_ID_CHARS,
    Grant,
    Principal,
    Role,
    key_hash,
    make_key,
    parse_key,
    same_secret,
)
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import CreateGroup
from protocol.limits import Limits
from protocol.requests import (
    CreateKeyRequest,
    CreateTopic,
    RegisterBroker,
    RegisterConsumer,
    RegisterProducer,
    TopicRef,
    VerifyClient,
)
from protocol.types import BrokerId, ReplicaAddress, ReplicaSpec

_log = logging.getLogger(__name__)
R = TypeVar("R", ProducerRecord, ConsumerRecord)

_ERRORS = {
    Outcome.EXISTS: ErrorCode.TOPIC_EXISTS,
    Outcome.TOO_MANY: ErrorCode.TOO_MANY,
    Outcome.UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC,
    Outcome.UNKNOWN_PARTITION: ErrorCode.UNKNOWN_PARTITION,
    Outcome.UNKNOWN_BROKER: ErrorCode.NOT_ENOUGH_BROKERS,
    Outcome.INVALID: ErrorCode.INVALID_FIELD,
    Outcome.BUSY: ErrorCode.REFUSED,
    Outcome.ADDRESS_TAKEN: ErrorCode.REFUSED,
    Outcome.FAILED: ErrorCode.INTERNAL,
}


def check_outcome(
    outcome: Outcome, what: str, exists: ErrorCode = ErrorCode.TOPIC_EXISTS
) -> Outcome:
    """Return a successful outcome; raise the error a failed one maps to (``exists``: what
    ``Outcome.EXISTS`` means for ``what``)."""
    if outcome.ok:
        return outcome
    code = exists if outcome is Outcome.EXISTS else _ERRORS.get(outcome, ErrorCode.INTERNAL)
    raise RaftQError(code, f"{what}: {outcome.value}")


class ManagerService:
    def __init__(
        self,
        limits: Limits,
        raft: RegistryMachine,
        brokers: BrokerClient,
        monitor: BrokerMonitor,
        executor: Executor,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._limits = limits
        self._clock_ms = clock_ms
        """Wall clock of the proposer: registration leases are stamped with it."""
        self._idle_expiry_ms = int(limits.client_idle_expiry_s * 1000)
        self._raft = raft
        self._brokers = brokers
        self._monitor = monitor
        self._executor = executor
        self._operation_lock = threading.Lock()

    # --- topics and partitions ---------------------------------------------------------------
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
        return topic_created(self._topic(request.name), self._monitor.leader_of)

    def add_partition(self, request: TopicRef) -> dict[str, object]:
        with self._operation_lock:
            topic = self._topic(request.topic)
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
        return self._partition_json(self._topic(request.topic), partition_id)

    def partitions(self, request: TopicRef) -> dict[str, object]:
        topic = self._topic(request.topic)
        return {
            "topic": topic.name,
            "partitions": [self._partition_json(topic, p.partition_id) for p in topic.partitions],
        }

    def consumer_lag(self, request: TopicRef) -> dict[str, object]:
        """Every consumer's lag on each partition of the topic, from the partitions' leaders
        (``GET {broker}/lag``, one call per leading broker). A partition whose leader is not
        known, does not answer, or no longer leads it is listed in ``unavailable_partitions``
        (the others are still answered)."""
        topic = self._topic(request.topic)
        leaders, unavailable = self._leading_brokers(topic)
        consumers: list[dict[str, object]] = []
        partitions: dict[object, dict[str, object]] = {}
        for address, partition_ids in leaders.items():
            try:
                found, figures = self._brokers.consumer_lag(address, topic.name)
            except RaftQError:
                unavailable.extend(partition_ids)
                continue
            answered = {p.get("partition_id"): p for p in figures}
            # A broker that no longer leads a partition leaves it out: leadership moved
            # since the last poll, so that partition has no answer here.
            unavailable.extend(p for p in partition_ids if p not in answered)
            consumers.extend(c for c in found if c.get("partition_id") in answered)
            partitions.update((p, answered[p]) for p in partition_ids if p in answered)
        consumers += self._not_popped_yet(topic.name, consumers, partitions)
        consumers.sort(
            key=lambda c: (str(c.get("consumer_id")), str(c.get("partition_id")).zfill(9))
        )
        return {
            "topic": topic.name,
            "consumers": consumers,
            "unavailable_partitions": sorted(unavailable),
        }

    def _leading_brokers(self, topic: TopicRecord) -> tuple[dict[str, list[int]], list[int]]:
        """The address of each broker that leads partitions of ``topic``, with those
        partitions; and the partitions whose leader is not known."""
        brokers = self._raft.read(lambda s: {b.broker_id: b.address for b in s.brokers.all()})
        leaders: dict[str, list[int]] = {}
        unavailable: list[int] = []
        for partition in topic.partitions:
            leader = self._monitor.leader_of(topic.name, partition.partition_id)
            address = None if leader is None else brokers.get(leader)
            if address is None:
                unavailable.append(partition.partition_id)
            else:
                leaders.setdefault(address, []).append(partition.partition_id)
        return leaders, unavailable

    def _not_popped_yet(
        self,
        topic: str,
        consumers: list[dict[str, object]],
        partitions: dict[object, dict[str, object]],
    ) -> list[dict[str, object]]:
        """A registered consumer that has not popped from a partition yet would start at its
        log start: its lag there is the partition's whole content."""
        popped = {(c.get("consumer_id"), c.get("partition_id")) for c in consumers}
        registered = self._raft.read(lambda s: s.clients.consumers_of(topic))
        return [
            {**figures, "consumer_id": record.consumer_id}
            for record in registered
            for partition_id, figures in partitions.items()
            if record.partition_id in (None, partition_id)
            and (record.consumer_id, partition_id) not in popped
        ]

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
        topic = self._topic(name)
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

    def _topic(self, name: str) -> TopicRecord:
        topic = self._raft.read(lambda s: s.topics.get(name))
        if topic is None:
            raise RaftQError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        return topic

    def _partition_json(self, topic: TopicRecord, partition_id: int) -> dict[str, object]:
        brokers = self._raft.read(lambda s: {b.broker_id: b for b in s.brokers.all()})
        partition = topic.partitions[partition_id]
        return partition_detail(topic.name, partition, brokers, self._monitor.leader_of)

    # --- consumer groups (issue 20) ----------------------------------------------------------
    def create_group(self, request: CreateGroup) -> tuple[dict[str, object], int]:
        """Define a consumer group: 201 and the group; 200 when it exists with these
        settings (nothing is proposed: a client may declare its group at every start);
        409 TOPIC_EXISTS when it exists with others; 404 UNKNOWN_TOPIC for its topic or
        dead-letter topic; 400 INVALID_FIELD past the topic's bound on groups. A refusal
        changes nothing (apply's refusals neither)."""
        topic = self._topic(request.topic)
        dead = request.dead_letter_topic
        if dead is not None and self._raft.read(lambda s: s.topics.get(dead)) is None:
            raise RaftQError(ErrorCode.UNKNOWN_TOPIC, f"unknown dead-letter topic {dead!r}")
        command = commands.DefineGroup(
            request.topic,
            request.group,
            request.visibility_timeout_ms,
            request.max_deliveries,
            dead,
            request.ordering.value,
            self._limits.group_visibility_timeout_ms_min,
            self._limits.group_visibility_timeout_ms_max,
            self._limits.group_max_deliveries_max,
            self._groups_max(topic),
        )
        known = self._raft.read(lambda s: s.groups.get(request.topic, request.group))
        if known is None:
            outcome = self._raft.propose(command)
        else:
            same = known.same_settings(command.entry(known.version))
            outcome = Outcome.UNCHANGED if same else Outcome.EXISTS
        where = f"consumer group {request.group!r} of topic {request.topic!r}"
        if outcome is Outcome.EXISTS:
            raise self._group_conflict(where, command)
        if outcome is Outcome.TOO_MANY:
            raise RaftQError(
                ErrorCode.INVALID_FIELD,
                f"{where}: topic {request.topic!r} has {command.groups_max} consumer groups, "
                "the most it may have (partition_groups_max: every group lives in every "
                "partition of its topic)",
            )
        check_outcome(outcome, where)
        entry = self._raft.read(lambda s: s.groups.get(request.topic, request.group))
        if entry is None:  # groups are never removed
            raise RaftQError(ErrorCode.INTERNAL, f"{where} was defined but is not found")
        return entry.to_json(), 201 if outcome is Outcome.CREATED else 200

    def groups(self, topic: str | None) -> dict[str, object]:
        """One topic's consumer groups by name (404 for an unknown topic), each with its
        figures summed over the partitions' leaders (``GET {broker}/groups``: lag in
        messages and the oldest unsettled message's age, in flight, dead letters waiting
        and moved), and per partition (``partitions``); a partition that did not answer
        is in ``unavailable_partitions``; or every
        topic's groups (``topic`` None), by topic and name, settings only."""
        if topic is None:
            entries = self._raft.read(lambda s: s.groups.all())
            return {"groups": [entry.to_json() for entry in entries]}
        record = self._topic(topic)
        entries = self._raft.read(lambda s: s.groups.of_topic(record.name))
        figures, unavailable = self._group_figures(record, [e.group for e in entries])
        groups = [
            {**entry.to_json(), **_summed(figures[entry.group]), "partitions": figures[entry.group]}
            for entry in entries
        ]
        return {"groups": groups, "unavailable_partitions": sorted(unavailable)}

    def _group_figures(
        self, topic: TopicRecord, names: list[str]
    ) -> tuple[dict[str, list[dict[str, object]]], list[int]]:
        """Each of the groups ``names``' figures per partition, from the partitions'
        leaders; a group that has not received in a partition has that partition's own."""
        leaders, unavailable = self._leading_brokers(topic)
        by_group: dict[str, list[dict[str, object]]] = {name: [] for name in names}
        for address, partition_ids in leaders.items():
            try:
                found, partitions = self._brokers.group_figures(address, topic.name)
            except RaftQError:
                unavailable.extend(partition_ids)
                continue
            # A broker leaves out a partition it no longer leads (see consumer_lag).
            own = {p.get("partition_id"): p for p in partitions}
            unavailable.extend(p for p in partition_ids if p not in own)
            of = {(f.get("group"), f.get("partition_id")): f for f in found}
            for name in names:
                for partition_id in partition_ids:
                    figures = of.get((name, partition_id), own.get(partition_id))
                    if figures is not None:
                        by_group[name].append({**figures, "group": name})
        for per_partition in by_group.values():
            per_partition.sort(key=lambda f: int(str(f.get("partition_id"))))
        return by_group, unavailable

    def _group_conflict(self, where: str, command: commands.DefineGroup) -> RaftQError:
        """409: the group exists with other settings; the message says which differ."""
        known = self._raft.read(lambda s: s.groups.get(command.topic, command.group))
        held = {} if known is None else known.to_json()
        asked = command.entry(0).to_json()
        differences = ", ".join(
            f"{name} is {held[name]!r}, not {value!r}"
            for name, value in asked.items()
            if name in held and held[name] != value
        )
        return RaftQError(
            ErrorCode.TOPIC_EXISTS, f"{where} exists with other settings: {differences}"
        )

    def _groups_max(self, topic: TopicRecord) -> int:
        """Groups a topic may have: this manager's ``partition_groups_max``, or the lower
        bound its partitions were created with (they refuse a group past their own)."""
        bound = self._limits.partition_groups_max
        recorded = topic.partition_limits
        return bound if recorded is None else min(bound, recorded.groups_max)

    # --- API keys ----------------------------------------------------------------------------
    def create_key(self, request: CreateKeyRequest) -> dict[str, object]:
        """Make a key and record its hash; the answer is the only place the key appears."""
        key_id = secrets.token_hex(KEY_ID_CHARS // 2)
        key = make_key(key_id, secrets.token_urlsafe(32))
        outcome = self._raft.propose(
            commands.CreateKey(
                key_id,
                key_hash(key),
                request.role.value,
                request.topics,
                request.name,
                self._clock_ms(),
                self._limits.registry_keys_max,
            )
        )
        check_outcome(outcome, "key")
        record = self._raft.read(lambda s: s.keys.get(key_id))
        if record is None:  # revoked between the propose and the read: say so
            raise RaftQError(ErrorCode.NOT_FOUND, f"key {key_id} was revoked at once")
        return {"key": key, **record.to_json()}

    def keys(self) -> dict[str, object]:
        return {"keys": self._raft.read(lambda s: [r.to_json() for r in s.keys.records()])}

    def revoke_key(self, key_id: str) -> dict[str, object]:
        if self._raft.read(lambda s: s.keys.get(key_id)) is None:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no key {key_id} (or it is revoked already)")
        check_outcome(self._raft.propose(commands.RevokeKey(key_id)), "key")
        return {"key_id": key_id, "revoked": True}

    def grant(self, key: str) -> Grant | None:
        """The grant of an issued, unrevoked key (``None`` for any other string)."""
        key_id = parse_key(key)
        if key_id is None:
            return None
        record = self._raft.read(lambda s: s.keys.get(key_id))
        if record is None or not same_secret(key_hash(key), record.key_hash):
            return None
        return record.grant

    def verify_key(self, key_id: str, hashed: str) -> dict[str, object]:
        """For a broker: the grant of the key whose hash it sends, else 404."""
        record = self._raft.read(lambda s: s.keys.get(key_id))
        if record is None or not same_secret(hashed, record.key_hash):
            raise RaftQError(ErrorCode.NOT_FOUND, "unknown or revoked API key")
        return record.to_json()

    # --- brokers -----------------------------------------------------------------------------
    def register_broker(self, request: RegisterBroker) -> tuple[dict[str, object], int]:
        """201 when registered or updated, 200 when it was already registered as is (and then
        nothing is proposed: brokers re-register every broker_register_period_s)."""
        if self._raft.read(lambda s: s.brokers.is_removed(request.broker_id)):
            raise RaftQError(
                ErrorCode.ID_TAKEN,
                f"broker id {request.broker_id} was removed from the cluster (raftq broker "
                "remove) and is never taken again: give this broker a new id",
            )
        known = self._raft.read(lambda s: s.brokers.get(request.broker_id))
        same = known is not None and known.same_registration(
            request.address, request.raft_host, request.raft_port_min, request.raft_port_max
        )
        if known is not None and known.alive and known.address != request.address:
            # Two processes with one id would share its replicas: the newcomer is refused
            # (its broker stops), as Kafka refuses a broker id that is registered and live.
            # A broker that moved host is accepted once its old address is held dead.
            raise RaftQError(
                ErrorCode.ID_TAKEN,
                f"broker id {request.broker_id} is registered at {known.address} and alive; "
                f"a second broker with this id (at {request.address}) is refused: give each "
                "broker its own id (raftq node check), or stop the other one",
            )
        if not same:
            outcome = self._raft.propose(
                commands.RegisterBroker(
                    request.broker_id,
                    request.address,
                    request.raft_host,
                    request.raft_port_min,
                    request.raft_port_max,
                    self._limits.registry_brokers_max,
                )
            )
            same = check_outcome(outcome, f"broker {request.broker_id}") is Outcome.UNCHANGED
        return {"broker_id": request.broker_id}, 200 if same else 201

    def brokers(self) -> dict[str, object]:
        return {"brokers": self._raft.read(_broker_summaries)}

    def drain_broker(self, broker_id: BrokerId) -> dict[str, object]:
        """``raftq broker remove`` step 1: the broker takes no new replica and the manager
        leader moves its replicas away (``ReplicaMover``), one partition at a time. The
        answer is the broker's summary: ``partitions`` counts the replicas still to move.
        409 CANNOT_MOVE, nothing changed, for a drain that could not finish
        (``drain_refusal``)."""
        # A repeat of a drain under way is not refused: it changes nothing.
        refusal = self._raft.read(
            lambda s: None
            if any(b.broker_id == broker_id and b.draining for b in s.brokers.all())
            else drain_refusal(broker_id, s.topics.all(), s.brokers.all())
        )
        if refusal is not None:
            raise RaftQError(
                ErrorCode.CANNOT_MOVE, f"broker {broker_id} cannot be drained: {refusal}"
            )
        outcome = self._raft.propose(commands.DrainBroker(broker_id))
        if outcome is Outcome.UNKNOWN_BROKER:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no broker {broker_id} is registered")
        check_outcome(outcome, f"broker {broker_id}")
        return self._broker_summary(broker_id)

    def cancel_drain(self, broker_id: BrokerId) -> dict[str, object]:
        """Undo ``drain_broker``: the broker takes replicas again and none of its replicas
        starts moving; a move under way finishes. Idempotent; the broker's summary."""
        outcome = self._raft.propose(commands.CancelDrain(broker_id))
        if outcome is Outcome.UNKNOWN_BROKER:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no broker {broker_id} is registered")
        check_outcome(outcome, f"broker {broker_id}")
        return self._broker_summary(broker_id)

    def remove_broker(self, broker_id: BrokerId) -> dict[str, object]:
        """Step 2: forget a drained broker and refuse its id from then on; 409 while a
        replica is still placed on it or moving away from it (drain it first)."""
        outcome = self._raft.propose(commands.RemoveBroker(broker_id))
        if outcome is Outcome.UNKNOWN_BROKER:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no broker {broker_id} is registered")
        if outcome is Outcome.BUSY:
            raise RaftQError(
                ErrorCode.BROKER_NOT_EMPTY,
                f"broker {broker_id} still holds replicas: drain it first (POST "
                "/brokers/drain), then remove it once it holds none",
            )
        if outcome is Outcome.INVALID:
            raise RaftQError(
                ErrorCode.BROKER_NOT_EMPTY,
                f"broker {broker_id} is not draining: drain it first (POST /brokers/drain)",
            )
        check_outcome(outcome, f"broker {broker_id}")
        return {"broker_id": broker_id, "removed": True}

    def _broker_summary(self, broker_id: BrokerId) -> dict[str, object]:
        summaries = self._raft.read(_broker_summaries)
        return next(s for s in summaries if s["broker_id"] == broker_id)

    def partition_overview(self) -> list[dict[str, object]]:
        """Every partition of every topic with its replicas' last reported figures (the
        dashboard's table; soft state from the broker polls, at most a poll period old)."""
        topics, brokers = self._raft.read(
            lambda s: (s.topics.all(), {b.broker_id: b for b in s.brokers.all()})
        )
        monitor = self._monitor
        return [
            partition_overview(
                topic.name,
                partition,
                brokers,
                monitor.leader_of(topic.name, partition.partition_id),
                monitor.replica_reports(topic.name, partition.partition_id),
            )
            for topic in topics
            for partition in topic.partitions
        ]

    # --- producers and consumers -------------------------------------------------------------
    def register_producer(
        self, request: RegisterProducer, principal: Principal | None = None
    ) -> tuple[dict[str, object], bool]:
        """Register a producer; True when it is new (a known id with the same topic is not).
        The answer carries the producer's pinned ``partition_count``, if it has one. The id
        belongs to the key that registered it (``principal``): another key's registration
        of it is refused (409 ID_TAKEN), except an admin's, which renews it."""
        topic = self._topic(request.topic)
        count = request.partition_count
        if count is not None:
            routing_count(topic, count)  # refuses a count above the active partitions
        # Chosen by the proposer (or the client): apply stays deterministic.
        producer_id = request.producer_id or uuid.uuid4().hex
        now_ms = self._clock_ms()
        known = self._held(lambda s: s.clients.producer(producer_id), now_ms)
        if known is not None and known.topic != request.topic:
            raise _id_taken(f"producer {producer_id!r}", f"topic {known.topic!r}")
        owner = _claim(
            f"producer {producer_id!r}", None if known is None else known.owner, principal
        )
        outcome = self._raft.propose(
            commands.RegisterProducer(
                producer_id,
                request.topic,
                self._limits.registry_clients_max,
                now_ms,
                self._idle_expiry_ms,
                count,
                owner,
            )
        )
        check_outcome(outcome, f"producer {producer_id!r}", ErrorCode.ID_TAKEN)
        body: dict[str, object] = {"producer_id": producer_id, **self._lease()}
        record = self._raft.read(lambda state: state.clients.producer(producer_id))
        if record is not None and record.partition_count is not None:
            body["partition_count"] = record.partition_count
        return body, outcome is Outcome.CREATED

    def register_consumer(
        self, request: RegisterConsumer, principal: Principal | None = None
    ) -> dict[str, object]:
        """Register a consumer; its id belongs to the registering key (as a producer's)."""
        topic = self._topic(request.topic)
        if request.partition_id is not None and request.partition_id >= len(topic.partitions):
            raise RaftQError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {topic.name!r} has no partition {request.partition_id}",
            )
        consumer_id = request.consumer_id or uuid.uuid4().hex
        now_ms = self._clock_ms()
        known = self._held(lambda s: s.clients.consumer(consumer_id), now_ms)
        if known is not None and (known.topic, known.partition_id) != (
            request.topic,
            request.partition_id,
        ):
            partitions = "all" if known.partition_id is None else f"partition {known.partition_id}"
            raise _id_taken(f"consumer {consumer_id!r}", f"topic {known.topic!r} ({partitions})")
        owner = _claim(
            f"consumer {consumer_id!r}", None if known is None else known.owner, principal
        )
        outcome = self._raft.propose(
            commands.RegisterConsumer(
                consumer_id,
                request.topic,
                request.partition_id,
                self._limits.registry_clients_max,
                now_ms,
                self._idle_expiry_ms,
                owner,
            )
        )
        check_outcome(outcome, f"consumer {consumer_id!r}", ErrorCode.ID_TAKEN)
        return {"consumer_id": consumer_id, **self._lease()}

    def verify_client(self, request: VerifyClient) -> dict[str, object]:
        """For a broker (direct-path produce or pop): the registration of a producer or
        consumer id, with its owner's key id, else 404 UNKNOWN_PRODUCER/CONSUMER."""
        if request.kind == "producer":
            producer = self._raft.read(lambda s: s.clients.producer(request.client_id))
            if producer is None:
                raise RaftQError(ErrorCode.UNKNOWN_PRODUCER, "unknown producer; register it first")
            return {"topic": producer.topic, "partition_id": None, "owner": producer.owner}
        consumer = self._raft.read(lambda s: s.clients.consumer(request.client_id))
        if consumer is None:
            raise RaftQError(ErrorCode.UNKNOWN_CONSUMER, "unknown consumer; register it first")
        return {
            "topic": consumer.topic,
            "partition_id": consumer.partition_id,
            "owner": consumer.owner,
        }

    def expire_idle_clients(self) -> int:
        """Leader duty: forget registrations not renewed for ``client_idle_expiry_s``. Proposes
        only when the oldest one is past it (a read), so an idle cluster writes nothing.
        Returns how many registrations are left (for logs and tests)."""
        now_ms = self._clock_ms()
        oldest_ms = self._raft.read(lambda s: s.clients.oldest_seen_ms())
        if oldest_ms is not None and now_ms - oldest_ms > self._idle_expiry_ms:
            outcome = self._raft.propose(
                commands.ExpireIdleClients(now_ms, self._idle_expiry_ms, EXPIRED_PER_SWEEP_MAX)
            )
            check_outcome(outcome, "expiring idle clients")
        return self._raft.read(lambda s: len(s.clients))

    def _held(self, find: Callable[[ManagerState], R | None], now_ms: int) -> R | None:
        """The registration ``find`` reads, if it keeps its id through a registration at
        ``now_ms``. A registration for another topic (or partition) is refused here, before
        proposing: apply would refuse it too, but only after moving registry time and
        forgetting idle clients, so its 409 would not prove that nothing was done. (An id
        whose lease ran out is left to apply, which forgets it and registers it anew.)"""

        def held(state: ManagerState) -> R | None:
            record = find(state)
            if record is None or not state.clients.holds_id(record, now_ms, self._idle_expiry_ms):
                return None
            return record

        return self._raft.read(held)

    def _lease(self) -> dict[str, object]:
        # Tells the client how often to renew (raftq renews every third of it while active).
        return {"idle_expiry_s": self._limits.client_idle_expiry_s}


def _id_taken(client: str, registered_for: str) -> RaftQError:
    return RaftQError(ErrorCode.ID_TAKEN, f"{client} is registered for {registered_for}")


def _broker_summaries(state: ManagerState) -> list[dict[str, object]]:
    counts = state.topics.held_count_by_broker()
    return [broker_summary(b, counts.get(b.broker_id, 0)) for b in state.brokers.all()]


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
    return [
        (
            replica.address,
            ReplicaSpec(
                topic.name,
                partition.partition_id,
                replica.replica_id,
                replicas,
                topic.partition_limits,
            ),
        )
        for replica in replicas
    ]


def _broker(brokers: dict[BrokerId, BrokerRecord], broker_id: BrokerId) -> BrokerRecord:
    broker = brokers.get(broker_id)
    if broker is None:  # a broker is removed only once no replica is placed on it
        raise RaftQError(ErrorCode.INTERNAL, f"broker {broker_id} is not registered")
    return broker


def _summed(per_partition: list[dict[str, object]]) -> dict[str, object]:
    """A group's figures over its partitions: counts added, the oldest age kept."""

    def total(name: str) -> int:
        return sum(int(str(f.get(name, 0))) for f in per_partition)

    ages = [float(str(f.get("lag_s", 0))) for f in per_partition]
    return {
        "lag_messages": total("lag_messages"),
        "lag_s": max(ages, default=0.0),
        "in_flight": total("in_flight"),
        "dead_letters_pending": total("dead_letters_pending"),
        "dead_lettered": total("dead_lettered"),
    }


def _claim(what: str, owner: str | None, principal: Principal | None) -> str | None:
    """The owner a registration by ``principal`` records for an id ``owner`` holds
    (``None``: no claim). Another key's id is refused, unless the caller is an admin (a
    super-user, as in Kafka: it acts for any id and claims none it does not own)."""
    if not isinstance(principal, Grant):
        return None  # a node (the managers' own clients) claims nothing
    if owner is None or owner == principal.key_id:
        return principal.key_id
    if principal.role is Role.ADMIN:
        return None
    raise RaftQError(ErrorCode.ID_TAKEN, f"{what} belongs to another API key: register a new id")
