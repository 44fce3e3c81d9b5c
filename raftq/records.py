"""Frozen records of what the service answers, parsed strictly from its JSON.

A field the service must send and did not raises ``ProtocolError`` naming the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from raftq.errors import ProtocolError


@dataclass(frozen=True, slots=True)
class Record:
    """One message read from a partition."""

    topic: str
    partition_id: int
    offset: int
    key: str | None
    value: str
    timestamp_ms: int
    headers: Mapping[str, str] = field(default_factory=dict)
    """The producer's headers (a dead letter's also name where it came from: ``raftq-*``)."""


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    """Where one produced message landed."""

    partition_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """A partition of a newly created topic: the brokers holding its replicas."""

    partition_id: int
    replicas: tuple[int, ...]
    leader: int | None


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    partitions: tuple[PartitionAssignment, ...]


@dataclass(frozen=True, slots=True)
class TopicSummary:
    name: str
    partition_count: int
    active_partition_count: int
    """The partitions that take messages (the active prefix; the rest are being created)."""


@dataclass(frozen=True, slots=True)
class Redriven:
    """What a redrive of a consumer group did."""

    redriven: int
    """Dead messages deliverable to the group again."""
    gone: int
    """Letters whose message retention had removed from the group's topic."""
    more: bool
    """It stopped before it had read every letter: redrive again for the rest."""


@dataclass(frozen=True, slots=True)
class GroupPartition:
    """A consumer group's figures in one partition (``raftq group describe``)."""

    partition_id: int
    offset: int
    """The group's floor there: every message below is settled."""
    end_offset: int
    lag_messages: int
    lag_s: float
    in_flight: int
    dead_letters_pending: int
    dead_lettered: int


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group with leased delivery, as the managers record it."""

    topic: str
    group: str
    visibility_timeout_ms: int
    max_deliveries: int
    """0: no limit."""
    dead_letter_topic: str | None
    ordering: str
    """``none``, or ``key``: a key's next message waits while an earlier one is leased."""
    lag_messages: int | None = None
    """Listed for one topic: messages not settled, over the partitions that answered."""
    lag_s: float | None = None
    """Listed for one topic: age of the oldest message not settled."""
    in_flight: int | None = None
    dead_letters_pending: int | None = None
    """Listed for one topic: past ``max_deliveries``, not yet in the dead-letter topic (or
    parked, in a group without one)."""
    dead_lettered: int | None = None
    """Listed for one topic: moved to the dead-letter topic so far (by the partitions'
    current leaders' counts)."""
    partitions: tuple[GroupPartition, ...] = ()
    """Listed for one topic: the figures per partition whose leader answered."""
    unavailable_partitions: tuple[int, ...] = ()
    """Listed for one topic: partitions whose leader did not answer (no figures from them)."""


@dataclass(frozen=True, slots=True)
class Replica:
    broker_id: int
    address: str | None
    raft_address: str
    is_leader: bool


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition_id: int
    leader: int | None
    replicas: tuple[Replica, ...]
    active: bool = True
    """False while the partition is still being created (it takes no messages yet)."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    address: str
    alive: bool
    partition_count: int
    """Replicas this broker hosts."""
    draining: bool = False
    """Being removed (``raftq broker remove``): its replicas move away."""


# --- parsing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """An API key as the managers describe it (never the key itself)."""

    key_id: str
    role: str
    topics: tuple[str, ...]
    name: str
    created_ms: int


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just made: ``key`` is shown only this once."""

    key: str
    info: KeyInfo


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    """How far one consumer is behind on one partition."""

    topic: str
    partition_id: int
    consumer_id: str
    offset: int
    """The next offset its pop claims."""
    end_offset: int
    lag_messages: int
    lag_s: float
    """Age of the oldest message it has not popped (0 when none)."""


@dataclass(frozen=True, slots=True)
class TopicLag:
    consumers: list[ConsumerLag]
    unavailable_partitions: list[int]
    """Partitions whose leader did not answer: their consumers are missing."""


def parse_topic_lag(body: object) -> TopicLag:
    where = "GET /lag"
    obj = _obj(body, where)
    consumers = []
    for item in _list(obj, "consumers", where):
        entry = _obj(item, where)
        lag_s = entry.get("lag_s")
        if not isinstance(lag_s, int | float) or isinstance(lag_s, bool):
            raise ProtocolError(f"{where}: field 'lag_s' must be a number")
        consumers.append(
            ConsumerLag(
                _str(entry, "topic", where),
                _int(entry, "partition_id", where),
                _str(entry, "consumer_id", where),
                _int(entry, "offset", where),
                _int(entry, "end_offset", where),
                _int(entry, "lag_messages", where),
                float(lag_s),
            )
        )
    unavailable = [p for p in _list(obj, "unavailable_partitions", where) if isinstance(p, int)]
    return TopicLag(consumers, unavailable)


def parse_key_info(body: object, where: str) -> KeyInfo:
    obj = _obj(body, where)
    topics = _list(obj, "topics", where)
    if not all(isinstance(t, str) for t in topics):
        raise ProtocolError(f"{where}: 'topics' must be strings")
    return KeyInfo(
        _str(obj, "key_id", where),
        _str(obj, "role", where),
        tuple(str(t) for t in topics),
        str(obj.get("name") or ""),
        _int(obj, "created_ms", where),
    )


def parse_new_key(body: object) -> NewKey:
    where = "POST /keys"
    return NewKey(_str(_obj(body, where), "key", where), parse_key_info(body, where))


def parse_keys(body: object) -> list[KeyInfo]:
    where = "GET /keys"
    return [parse_key_info(item, where) for item in _list(_obj(body, where), "keys", where)]


def parse_group(body: object, where: str) -> GroupInfo:
    entry = _obj(body, where)
    return GroupInfo(
        topic=_str(entry, "topic", where),
        group=_str(entry, "group", where),
        visibility_timeout_ms=_int(entry, "visibility_timeout_ms", where),
        max_deliveries=_int(entry, "max_deliveries", where),
        dead_letter_topic=_opt_str(entry, "dead_letter_topic"),
        ordering=_str(entry, "ordering", where),
        lag_messages=_opt_int(entry, "lag_messages"),
        lag_s=_opt_float(entry, "lag_s"),
        in_flight=_opt_int(entry, "in_flight"),
        dead_letters_pending=_opt_int(entry, "dead_letters_pending"),
        dead_lettered=_opt_int(entry, "dead_lettered"),
        partitions=tuple(
            _group_partition(_obj(item, where), where)
            for item in (_list(entry, "partitions", where) if "partitions" in entry else [])
        ),
    )


def _group_partition(figures: Mapping[str, object], where: str) -> GroupPartition:
    lag_s = _opt_float(figures, "lag_s")
    if lag_s is None:
        raise ProtocolError(f"{where}: field 'lag_s' must be a number")
    return GroupPartition(
        partition_id=_int(figures, "partition_id", where),
        offset=_int(figures, "offset", where),
        end_offset=_int(figures, "end_offset", where),
        lag_messages=_int(figures, "lag_messages", where),
        lag_s=lag_s,
        in_flight=_int(figures, "in_flight", where),
        dead_letters_pending=_int(figures, "dead_letters_pending", where),
        dead_lettered=_opt_int(figures, "dead_lettered") or 0,
    )


def parse_groups(body: object) -> list[GroupInfo]:
    where = "GET /groups"
    found = _obj(body, where)
    unavailable = found.get("unavailable_partitions", [])
    if not isinstance(unavailable, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in unavailable
    ):
        raise ProtocolError(f"{where}: field 'unavailable_partitions' must be a list of integers")
    return [
        dataclasses.replace(parse_group(item, where), unavailable_partitions=tuple(unavailable))
        for item in _list(found, "groups", where)
    ]


def parse_redriven(body: object) -> Redriven:
    where = "POST /groups/{group}/redrive"
    found = _obj(body, where)
    return Redriven(
        _int(found, "redriven", where), _int(found, "gone", where), _bool(found, "more", where)
    )


def _obj(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected a JSON object")
    return value


def _list(body: Mapping[str, object], name: str, where: str) -> list[object]:
    value = body.get(name)
    if not isinstance(value, list):
        raise ProtocolError(f"{where}: field {name!r} must be a list")
    return value


def _int(body: Mapping[str, object], name: str, where: str) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"{where}: field {name!r} must be an integer")
    return value


def _opt_int(body: Mapping[str, object], name: str) -> int | None:
    value = body.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_float(body: Mapping[str, object], name: str) -> float | None:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _str(body: Mapping[str, object], name: str, where: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise ProtocolError(f"{where}: field {name!r} must be a string")
    return value


def _opt_str(body: Mapping[str, object], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) else None


def _bool(body: Mapping[str, object], name: str, where: str) -> bool:
    value = body.get(name)
    if not isinstance(value, bool):
        raise ProtocolError(f"{where}: field {name!r} must be true or false")
    return value


def _count(body: Mapping[str, object], name: str, where: str) -> int:
    """A count the service may send as a number or as the list it counts."""
    value = body.get(name)
    if isinstance(value, list):
        return len(value)
    return _int(body, name, where)


def parse_records(body: object) -> list[Record]:
    items = _list(_obj(body, "GET /logs"), "messages", "GET /logs")
    return [
        _record(_obj(item, f"GET /logs messages[{i}]"), f"GET /logs messages[{i}]")
        for i, item in enumerate(items)
    ]


def parse_deliveries(body: object, where: str) -> list[tuple[Record, int, str]]:
    """A receive's messages: each record with its delivery count and receipt."""
    items = _list(_obj(body, where), "messages", where)
    found = []
    for index, item in enumerate(items):
        at = f"{where} messages[{index}]"
        message = _obj(item, at)
        found.append(
            (
                _record(message, at),
                _int(message, "delivery_count", at),
                _str(message, "receipt", at),
            )
        )
    return found


def parse_outcomes(body: object, where: str) -> list[tuple[str, str]]:
    """An ack's, nack's or extend's ``outcomes``: each receipt with what it did."""
    items = _list(_obj(body, where), "outcomes", where)
    found = []
    for index, item in enumerate(items):
        outcome = _obj(item, f"{where} outcomes[{index}]")
        found.append((_str(outcome, "receipt", where), _str(outcome, "outcome", where)))
    return found


def _record(message: Mapping[str, object], where: str) -> Record:
    return Record(
        topic=_str(message, "topic", where),
        partition_id=_int(message, "partition_id", where),
        offset=_int(message, "offset", where),
        key=_opt_str(message, "key"),
        value=_str(message, "message", where),
        timestamp_ms=_int(message, "timestamp_ms", where),
        headers=_headers(message, where),
    )


def _headers(message: Mapping[str, object], where: str) -> dict[str, str]:
    """A message's ``headers`` (absent from services older than headers: none)."""
    value = message.get("headers", {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ProtocolError(f"{where}: field 'headers' must be an object of strings")
    return value


def parse_offsets(body: object, expected_count: int) -> list[PartitionOffset]:
    where = "POST /logs"
    answer = _obj(body, where)
    if "offsets" in answer:
        items = [_obj(i, f"{where} offsets") for i in _list(answer, "offsets", where)]
    else:  # the single-message answer {"partition_id", "offset"}
        items = [answer]
    offsets = [
        PartitionOffset(_int(i, "partition_id", where), _int(i, "offset", where)) for i in items
    ]
    if len(offsets) != expected_count:
        raise ProtocolError(f"{where}: {len(offsets)} offsets for {expected_count} messages")
    return offsets


def parse_topic(body: object) -> Topic:
    where = "POST /topics"
    answer = _obj(body, where)
    partitions = []
    for item in _list(answer, "partitions", where):
        part = _obj(item, f"{where} partitions")
        replicas = tuple(r for r in _list(part, "replicas", where) if isinstance(r, int))
        partitions.append(
            PartitionAssignment(
                _int(part, "partition_id", where), replicas, _opt_int(part, "leader")
            )
        )
    return Topic(_str(answer, "name", where), tuple(partitions))


def parse_topic_summaries(body: object) -> list[TopicSummary]:
    where = "GET /topics"
    items = _list(_obj(body, where), "topics", where)
    return [
        TopicSummary(
            _str(t, "name", where),
            _count(t, "partitions", where),
            _count(t, "active_partitions", where),
        )
        for t in (_obj(i, where) for i in items)
    ]


def parse_partition(body: object, where: str) -> PartitionInfo:
    part = _obj(body, where)
    replicas = []
    for item in _list(part, "replicas", where):
        replica = _obj(item, f"{where} replicas")
        replicas.append(
            Replica(
                broker_id=_int(replica, "broker_id", where),
                address=_opt_str(replica, "address"),
                raft_address=_str(replica, "raft_address", where),
                is_leader=_bool(replica, "is_leader", where),
            )
        )
    return PartitionInfo(
        _int(part, "partition_id", where),
        _opt_int(part, "leader"),
        tuple(replicas),
        active=part.get("state", "active") == "active",
    )


def parse_partitions(body: object) -> list[PartitionInfo]:
    where = "GET /partitions"
    return [parse_partition(p, where) for p in _list(_obj(body, where), "partitions", where)]


def parse_brokers(body: object) -> list[BrokerInfo]:
    where = "GET /brokers"
    return [
        BrokerInfo(
            broker_id=_int(b, "broker_id", where),
            address=_str(b, "address", where),
            alive=_bool(b, "alive", where),
            partition_count=_count(b, "partitions", where),
            draining=b.get("draining") is True,
        )
        for b in (_obj(i, where) for i in _list(_obj(body, where), "brokers", where))
    ]


def parse_broker_offsets(
    body: object, partition_id: int, expected_count: int
) -> list[PartitionOffset]:
    """A broker's produce answer ``{"partition_id", "offsets": [o, ...]}`` (the direct path)."""
    where = "POST {broker}/logs"
    answer = _obj(body, where)
    if _int(answer, "partition_id", where) != partition_id:
        raise ProtocolError(f"{where}: answered for another partition")
    offsets = []
    for item in _list(answer, "offsets", where):
        if not isinstance(item, int) or isinstance(item, bool):
            raise ProtocolError(f"{where}: offsets must be integers")
        offsets.append(PartitionOffset(partition_id, item))
    if len(offsets) != expected_count:
        raise ProtocolError(f"{where}: {len(offsets)} offsets for {expected_count} messages")
    return offsets
