"""Parsing and validation of API requests into frozen records.

A request's parameters are one mapping: the query string merged over the JSON body (the seed's
clients send a JSON body with GET). Every check that can reject input happens here, before
anything is proposed to Raft, so replicated commands only ever see valid arguments.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from protocol.access import KEY_ID_CHARS, Role, check_topic_patterns
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits, PartitionLimits
from protocol.node_auth import valid_nonce
from protocol.types import (
    NO_HEADERS,
    BrokerId,
    ConsumerId,
    Durability,
    Headers,
    NewMessage,
    Offset,
    PartitionId,
    ProducerId,
    ReplicaAddress,
    ReplicaId,
    ReplicaSpec,
    RequestId,
    headers_of,
)

Params = Mapping[str, object]


class QueryText(str):
    """A value from the query string, where every value is text: only these may spell a
    number (``?offset=5``). In a JSON body a number is a number: ``"partitions": "3"`` is
    the wrong type (400), as the API document says."""

    __slots__ = ()


KEY_NAME_CHARS_MAX = 100
"""A key's name: a label for people (``raftq key list``)."""
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_MISSING = object()


def invalid(message: str) -> RaftQError:
    return RaftQError(ErrorCode.INVALID_FIELD, message)


def get_str(params: Params, name: str, chars_max: int, *, required: bool = True) -> str | None:
    value = params.get(name, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise invalid(f"missing field {name!r}")
        return None
    if not isinstance(value, str):
        raise invalid(f"field {name!r} must be a string")
    if not value:
        raise invalid(f"field {name!r} must not be empty")
    if len(value) > chars_max:
        raise invalid(f"field {name!r} is longer than {chars_max} characters")
    return value


def require_str(params: Params, name: str, chars_max: int) -> str:
    value = get_str(params, name, chars_max)
    if value is None:  # unreachable: required=True raises; kept for the type checker
        raise invalid(f"missing field {name!r}")
    return value


def get_int(
    params: Params, name: str, *, minimum: int, maximum: int, default: int | None = None
) -> int:
    value = params.get(name, _MISSING)
    if value is _MISSING or value is None:
        if default is None:
            raise invalid(f"missing field {name!r}")
        return default
    if isinstance(value, bool):
        raise invalid(f"field {name!r} must be an integer")
    if isinstance(value, QueryText):
        if not re.fullmatch(r"-?[0-9]{1,19}", value):
            raise invalid(f"field {name!r} must be an integer")
        value = int(value)
    if not isinstance(value, int):
        raise invalid(f"field {name!r} must be an integer")
    if not minimum <= value <= maximum:
        raise invalid(f"field {name!r} must be between {minimum} and {maximum}, got {value}")
    return value


def get_optional_int(params: Params, name: str, *, minimum: int, maximum: int) -> int | None:
    if params.get(name) is None:
        return None
    return get_int(params, name, minimum=minimum, maximum=maximum)


def topic_name(params: Params, limits: Limits, field: str = "topic") -> str:
    name = require_str(params, field, limits.topic_name_chars_max)
    if not _TOPIC_NAME.match(name):
        raise invalid(f"field {field!r} may hold only letters, digits, '.', '_' and '-'")
    return name


_INT_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    partitions: int
    replication_factor: int
    retention_ms: int = 0
    """Messages older than this leave (0: kept however old)."""
    retention_bytes: int = 0
    """Per partition, the oldest messages leave while it holds more (0: no bound)."""
    min_insync_replicas: int | None = None
    """Replicas that must be in sync for a produce to be taken (``None``: a majority of the
    replication factor)."""

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> CreateTopic:
        replication_factor = get_int(
            params,
            "replication_factor",
            minimum=1,
            maximum=limits.replication_factor,
            default=limits.replication_factor,
        )
        min_insync = get_int(
            params,
            "min_insync_replicas",
            minimum=1,
            maximum=limits.replication_factor,
            default=replication_factor // 2 + 1,
        )
        if min_insync > replication_factor:
            raise invalid(
                f"field 'min_insync_replicas' ({min_insync}) must not exceed the replication "
                f"factor ({replication_factor})"
            )
        return cls(
            name=topic_name(params, limits, "name"),
            partitions=get_int(
                params, "partitions", minimum=1, maximum=limits.topic_partitions_max, default=1
            ),
            replication_factor=replication_factor,
            retention_ms=get_int(params, "retention_ms", minimum=0, maximum=_INT_MAX, default=0),
            retention_bytes=get_int(
                params, "retention_bytes", minimum=0, maximum=_INT_MAX, default=0
            ),
            min_insync_replicas=min_insync,
        )


@dataclass(frozen=True, slots=True)
class TopicRef:
    """``POST /partitions {"topic"}``, ``POST /producers {"topic"}``, ``GET /partitions?topic=``."""

    topic: str

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> TopicRef:
        return cls(topic=topic_name(params, limits))


@dataclass(frozen=True, slots=True)
class RegisterProducer:
    """``POST /producers {"topic", "producer_id"?, "partition_count"?}``. A client-chosen
    ``producer_id`` (like Kafka's ``transactional.id``) registers idempotently, so a retried
    Spark task or a restarted job keeps its id and its sequences. ``partition_count`` pins
    the count the producer's batches are cut with: the first registration of the id that
    carries one records it, and every later registration answers the recorded count, so a
    replay after a partition was added reaches the partitions its first attempt did."""

    topic: str
    producer_id: ProducerId | None
    partition_count: int | None = None

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> RegisterProducer:
        producer = get_str(params, "producer_id", limits.id_chars_max, required=False)
        return cls(
            topic=topic_name(params, limits),
            producer_id=None if producer is None else ProducerId(producer),
            partition_count=get_optional_int(
                params, "partition_count", minimum=1, maximum=limits.topic_partitions_max
            ),
        )


@dataclass(frozen=True, slots=True)
class RegisterConsumer:
    """``POST /consumers {"topic", "partition_id"?, "consumer_id"?}``. With the
    ``consumer_id`` it was given, a consumer renews its registration (a lease of
    ``client_idle_expiry_s``), or registers again under it after the lease ran out."""

    topic: str
    partition_id: PartitionId | None
    consumer_id: ConsumerId | None = None

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> RegisterConsumer:
        pid = get_optional_int(
            params, "partition_id", minimum=0, maximum=limits.topic_partitions_max - 1
        )
        consumer = get_str(params, "consumer_id", limits.id_chars_max, required=False)
        return cls(
            topic=topic_name(params, limits),
            partition_id=None if pid is None else PartitionId(pid),
            consumer_id=None if consumer is None else ConsumerId(consumer),
        )


def _utf8_bytes_over(text: str, bound: int) -> int:
    """The UTF-8 size of ``text`` where it could exceed ``bound``; below that, its length
    (a code point takes at most 4 bytes, so the cheap answer cannot hide an excess)."""
    return len(text) if len(text) * 4 <= bound else len(text.encode("utf-8"))


def _parse_message(
    item: Params, limits: Limits, index: int | None, trusted: bool = False
) -> NewMessage:
    """One message; ``index`` is its place in a batch (``None`` for a single message). The
    checks run per message on the hot path, so error text is only built on failure.
    ``trusted``: sent by a node, which may set RaftQ's own headers (a dead letter's)."""
    value = item.get("message")
    key = item.get("key")
    if not isinstance(value, str):
        raise invalid(f"{_where(index)}: field 'message' must be a string")
    key_bytes = 0
    if key is not None:
        if not isinstance(key, str):
            raise invalid(f"{_where(index)}: field 'key' must be a string or null")
        key_bytes = _utf8_bytes_over(key, limits.key_bytes_max)
        if key_bytes > limits.key_bytes_max:
            raise RaftQError(
                ErrorCode.TOO_LARGE, f"{_where(index)}: key exceeds {limits.key_bytes_max} bytes"
            )
    raw_headers = item.get("headers")
    headers = NO_HEADERS
    if raw_headers is not None:
        headers, header_bytes = _parse_headers(raw_headers, limits, index, trusted)
        key_bytes += header_bytes
    value_bytes_max = limits.message_bytes_max - key_bytes
    if value_bytes_max < 0 or _utf8_bytes_over(value, value_bytes_max) > value_bytes_max:
        raise RaftQError(
            ErrorCode.TOO_LARGE,
            f"{_where(index)}: message exceeds {limits.message_bytes_max} bytes",
        )
    return NewMessage(value=value, key=key, headers=headers)


RESERVED_HEADER_PREFIX = "raftq-"
"""Header names RaftQ itself sets (a dead letter's origin): a producer may not send them, so
a consumer can trust them."""


def _parse_headers(
    raw: object, limits: Limits, index: int | None, trusted: bool
) -> tuple[Headers, int]:
    """A message's ``headers`` object: the canonical tuple and its size in UTF-8 bytes.
    RaftQ's own headers, which only a node may send, count towards neither bound: a
    message at the bounds can still be dead-lettered."""
    if not isinstance(raw, dict):
        raise invalid(f"{_where(index)}: field 'headers' must be an object of strings")
    size_bytes = 0
    count = 0
    for name, header_value in raw.items():
        if not isinstance(header_value, str):
            raise invalid(f"{_where(index)}: header {name!r} must be a string")
        name_bytes = len(name.encode("utf-8"))
        if not name or name_bytes > limits.header_name_bytes_max:
            raise invalid(
                f"{_where(index)}: a header name is 1 to {limits.header_name_bytes_max} bytes"
            )
        if name.lower().startswith(RESERVED_HEADER_PREFIX):
            if not trusted:
                raise invalid(
                    f"{_where(index)}: header names starting {RESERVED_HEADER_PREFIX!r} are "
                    "set by RaftQ only"
                )
            continue
        count += 1
        size_bytes += name_bytes + len(header_value.encode("utf-8"))
    if count > limits.message_headers_max:
        raise RaftQError(
            ErrorCode.TOO_LARGE,
            f"{_where(index)}: at most {limits.message_headers_max} headers per message",
        )
    return headers_of(raw), size_bytes


def _where(index: int | None) -> str:
    return "message" if index is None else f"messages[{index}]"


def parse_messages(
    params: Params, limits: Limits, trusted: bool = False
) -> tuple[tuple[NewMessage, ...], bool]:
    """The messages of a produce request and whether it was a batch (``"messages"``)."""
    has_one = "message" in params
    has_many = "messages" in params
    if has_one == has_many:
        raise invalid("give exactly one of 'message' and 'messages'")
    if has_one:
        return (_parse_message(params, limits, None, trusted),), False
    items = params["messages"]
    if not isinstance(items, list) or not items:
        raise invalid("field 'messages' must be a non-empty list")
    if len(items) > limits.request_messages_max:
        raise RaftQError(
            ErrorCode.TOO_LARGE, f"a batch holds at most {limits.request_messages_max} messages"
        )
    parsed = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise invalid(f"messages[{index}] must be an object")
        parsed.append(_parse_message(item, limits, index, trusted))
    return tuple(parsed), True


@dataclass(frozen=True, slots=True)
class Produce:
    """``POST /logs``. At the manager ``partition_id`` may be absent (routed by key);
    a broker always gets one partition's messages with ``partition_id`` set."""

    topic: str
    partition_id: PartitionId | None
    messages: tuple[NewMessage, ...]
    is_batch: bool
    producer_id: ProducerId | None
    sequence: int | None
    partition_count: int | None = None
    """The partition count the sender routed (or wants routed) with: the manager cuts the
    batch over partitions ``0 .. partition_count-1`` instead of the topic's current count, so
    a retry after partitions were added lands where the first attempt did."""
    durability: Durability = Durability.FSYNC
    """What the acknowledgement waits for; the answer's ``ack`` says what was achieved."""

    @classmethod
    def parse(cls, params: Params, limits: Limits, *, trusted: bool = False) -> Produce:
        """``trusted``: from a node, which may send RaftQ's own headers."""
        messages, is_batch = parse_messages(params, limits, trusted)
        pid = get_optional_int(
            params, "partition_id", minimum=0, maximum=limits.topic_partitions_max - 1
        )
        producer = get_str(params, "producer_id", limits.id_chars_max, required=False)
        sequence = get_optional_int(params, "sequence", minimum=0, maximum=_INT_MAX)
        if sequence is not None and producer is None:
            raise invalid("field 'sequence' needs 'producer_id'")
        return cls(
            topic=topic_name(params, limits),
            partition_id=None if pid is None else PartitionId(pid),
            messages=messages,
            is_batch=is_batch,
            producer_id=None if producer is None else ProducerId(producer),
            sequence=sequence,
            partition_count=routing_partition_count(params, limits),
            durability=_durability(params),
        )

    @classmethod
    def parse_one_partition(
        cls, params: Params, limits: Limits, *, trusted: bool = False
    ) -> tuple[Produce, PartitionId]:
        """``POST /logs`` at a broker: one partition's messages, so ``partition_id`` is
        required (and returned beside the request, as set)."""
        request = cls.parse(params, limits, trusted=trusted)
        if request.partition_id is None:
            raise invalid("a broker needs 'partition_id'")
        return request, request.partition_id

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {
            "topic": self.topic,
            "messages": [m.to_json() for m in self.messages],
        }
        if self.partition_id is not None:
            body["partition_id"] = self.partition_id
        if self.producer_id is not None:
            body["producer_id"] = self.producer_id
        if self.sequence is not None:
            body["sequence"] = self.sequence
        if self.partition_count is not None:
            body["partition_count"] = self.partition_count
        if self.durability is not Durability.FSYNC:
            body["durability"] = self.durability.value
        return body


def _durability(params: Params) -> Durability:
    value = params.get("durability", Durability.FSYNC.value)
    try:
        return Durability(value)
    except ValueError:
        names = ", ".join(repr(d.value) for d in Durability)
        raise invalid(f"field 'durability' must be one of {names}") from None


@dataclass(frozen=True, slots=True)
class Pop:
    """``GET /logs?consumer_id=C&max_messages=N&request_id=R``. At a broker the request also
    names ``topic`` and ``partition_id``."""

    consumer_id: ConsumerId
    max_messages: int
    request_id: RequestId | None
    partition_count: int | None = None
    """As for ``Produce``: a consumer of the whole topic visits partitions
    ``0 .. partition_count-1``, so a retried pop asks the partitions that served it before."""
    sequence: int | None = None
    """Increasing per consumer (the client library uses microseconds since the epoch, kept
    above its last): a partition answers a repeat of its last pop with the same range and
    refuses an older one (409), so a late copy of a pop never claims a range nobody gets."""
    after_unknown_outcome: bool = False
    """This pop repeats one an earlier attempt of which had an unknown outcome: it may have
    claimed a range at any partition, so no partition's refusal may end it (the manager's
    router fails it with 503 UNAVAILABLE rather than answer the others' messages)."""
    wait_ms: int = 0
    """Wait up to this long for a message when none is there (a long poll): at a broker,
    proposing nothing while it waits."""
    if_ready: bool = False
    """At a broker: claim only if there is something to claim; else answer nothing without
    proposing (the managers' long poll over several partitions asks each this way)."""

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> Pop:
        request = get_str(params, "request_id", limits.id_chars_max, required=False)
        return cls(
            consumer_id=ConsumerId(require_str(params, "consumer_id", limits.id_chars_max)),
            max_messages=get_int(
                params, "max_messages", minimum=1, maximum=limits.fetch_messages_max, default=1
            ),
            request_id=None if request is None else RequestId(request),
            partition_count=routing_partition_count(params, limits),
            sequence=get_optional_int(params, "sequence", minimum=0, maximum=_INT_MAX),
            after_unknown_outcome=_flag(params, "after_unknown_outcome"),
            wait_ms=wait_ms_of(params, limits),
            if_ready=_flag(params, "if_ready"),
        )


def wait_ms_of(params: Params, limits: Limits) -> int:
    """A long poll's ``wait_ms``: 0 (the default) to ``long_poll_wait_ms_max``."""
    return get_int(params, "wait_ms", minimum=0, maximum=limits.long_poll_wait_ms_max, default=0)


def _flag(params: Params, name: str) -> bool:
    """A boolean query parameter: ``true`` or ``false`` (absent: false)."""
    value = params.get(name)
    if value is None or value in ("false", False):
        return False
    if value in ("true", True):
        return True
    raise RaftQError(ErrorCode.INVALID_FIELD, f"{name} must be true or false")


def routing_partition_count(params: Params, limits: Limits) -> int | None:
    return get_optional_int(
        params, "partition_count", minimum=1, maximum=limits.topic_partitions_max
    )


@dataclass(frozen=True, slots=True)
class Fetch:
    """``GET /logs?topic=T&partition_id=P&offset=O&max_messages=N&skip_removed=B``:
    stateless read. An offset below the log start (retention removed it) is refused with
    404 OFFSET_OUT_OF_RANGE, or with ``skip_removed=true`` read from the log start (each
    message names its offset), as Kafka's ``auto.offset.reset=earliest``."""

    topic: str
    partition_id: PartitionId
    offset: Offset
    max_messages: int
    skip_removed: bool = False
    wait_ms: int = 0
    """Wait up to this long for a message at ``offset`` when none is there yet (a long
    poll)."""

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> Fetch:
        return cls(
            topic=topic_name(params, limits),
            partition_id=PartitionId(
                get_int(params, "partition_id", minimum=0, maximum=limits.topic_partitions_max - 1)
            ),
            offset=Offset(get_int(params, "offset", minimum=0, maximum=_INT_MAX)),
            max_messages=get_int(
                params, "max_messages", minimum=1, maximum=limits.fetch_messages_max, default=100
            ),
            skip_removed=_flag(params, "skip_removed"),
            wait_ms=wait_ms_of(params, limits),
        )

    def to_params(self) -> dict[str, str]:
        """The query string ``parse`` reads (the router's request to a broker)."""
        params = {
            "topic": self.topic,
            "partition_id": str(self.partition_id),
            "offset": str(self.offset),
            "max_messages": str(self.max_messages),
        }
        if self.skip_removed:
            params["skip_removed"] = "true"
        if self.wait_ms:
            params["wait_ms"] = str(self.wait_ms)
        return params


def partition_ref(params: Params, limits: Limits) -> tuple[str, PartitionId]:
    """``topic`` and required ``partition_id`` (broker-side requests)."""
    return topic_name(params, limits), PartitionId(
        get_int(params, "partition_id", minimum=0, maximum=limits.topic_partitions_max - 1)
    )


@dataclass(frozen=True, slots=True)
class ReplicaConsumer:
    """``POST /consumers`` at a broker: is the consumer's partition hosted here? (Its offset
    is created at its first pop.)"""

    topic: str
    partition_id: PartitionId
    consumer_id: ConsumerId

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> ReplicaConsumer:
        topic, partition_id = partition_ref(params, limits)
        consumer_id = ConsumerId(require_str(params, "consumer_id", limits.id_chars_max))
        return cls(topic, partition_id, consumer_id)


@dataclass(frozen=True, slots=True)
class ReplicaRef:
    """``{"topic", "partition_id", "raft_address"}``: one replica of a partition, at a
    broker. ``POST /leadership`` (the manager leader's leader balancing: hand the
    partition's leadership to that replica) and ``DELETE /partitions`` (stop hosting that
    replica, which its partition no longer has)."""

    topic: str
    partition_id: PartitionId
    raft_address: str

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> ReplicaRef:
        topic, partition_id = partition_ref(params, limits)
        return cls(topic, partition_id, _raft_address(params, "field 'raft_address'"))


@dataclass(frozen=True, slots=True)
class ReplaceMember:
    """``POST /partitions/members {"spec": ReplicaSpec, "moved_replica_id", "removed",
    "removed_alive"?}`` at a broker (the manager leader's re-replication): the partition's
    replica ``moved_replica_id`` is a new one now, in place of the one at Raft address
    ``removed``; ``removed_alive`` (default false): that one still runs (a drain), so it
    leaves the Raft group last, after the new one caught up."""

    spec: ReplicaSpec
    moved_replica_id: ReplicaId
    removed: str
    removed_alive: bool = False

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> ReplaceMember:
        spec = params.get("spec")
        if not isinstance(spec, dict):
            raise invalid("field 'spec' must be an object (a replica spec)")
        parsed = parse_replica_spec(spec, limits)
        moved = get_int(params, "moved_replica_id", minimum=0, maximum=len(parsed.replicas) - 1)
        removed = _raft_address({"raft_address": params.get("removed")}, "field 'removed'")
        if removed in {r.raft_address for r in parsed.replicas}:
            raise invalid("field 'removed' names a replica the spec still has")
        alive = params.get("removed_alive", False)
        if not isinstance(alive, bool):
            raise invalid("field 'removed_alive' must be a boolean")
        return cls(parsed, ReplicaId(moved), removed, alive)


@dataclass(frozen=True, slots=True)
class ChecksumRange:
    """``GET /checksum?topic&partition_id&start&end``: a replica's database rows in
    ``[start, end)``; ``start`` defaults to 0."""

    topic: str
    partition_id: PartitionId
    start: Offset
    end: Offset

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> ChecksumRange:
        topic, partition_id = partition_ref(params, limits)
        start = get_int(params, "start", minimum=0, maximum=_INT_MAX, default=0)
        end = get_int(params, "end", minimum=start, maximum=_INT_MAX)
        return cls(topic, partition_id, Offset(start), Offset(end))


@dataclass(frozen=True, slots=True)
class ManagerRef:
    """``POST /managers {"manager_id", "http_url", "raft_address"}`` (add one manager) and
    ``DELETE /managers {"manager_id"}`` (``parse_id``)."""

    manager_id: int
    http_url: str
    raft_address: str

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> ManagerRef:
        url = require_str(params, "http_url", 300).rstrip("/")
        if not re.fullmatch(r"https?://[^/@\s]+", url):
            raise invalid(f"field 'http_url' must be http(s)://host:port, not {url!r}")
        return cls(
            cls.parse_id(params, limits),
            url,
            _raft_address(params, "field 'raft_address'"),
        )

    @staticmethod
    def parse_id(params: Params, limits: Limits) -> int:
        return get_int(params, "manager_id", minimum=1, maximum=_MANAGER_ID_MAX)


@dataclass(frozen=True, slots=True)
class AddressChallenge:
    """``POST /managers/proof {"nonce"}``: the leader's challenge to a manager it is asked to
    add (``protocol.node_auth``): 32 to 128 lowercase hex characters."""

    nonce: str

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> AddressChallenge:
        nonce = require_str(params, "nonce", 128)
        if not valid_nonce(nonce):
            raise invalid("field 'nonce' must be 32 to 128 lowercase hex characters")
        return cls(nonce)


@dataclass(frozen=True, slots=True)
class BrokerRef:
    """``POST /brokers/drain`` and ``DELETE /brokers``: ``{"broker_id"}``."""

    broker_id: BrokerId

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> BrokerRef:
        return cls(BrokerId(get_int(params, "broker_id", minimum=0, maximum=_BROKER_ID_MAX)))


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """``POST /brokers``: a broker announces itself (idempotent)."""

    broker_id: BrokerId
    address: str
    raft_host: str
    raft_port_min: int
    raft_port_max: int

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> RegisterBroker:
        address = require_str(params, "address", 300)
        if not address.startswith(("http://", "https://")):
            raise invalid("field 'address' must be an http:// or https:// URL")
        low = get_int(params, "raft_port_min", minimum=1, maximum=65535)
        high = get_int(params, "raft_port_max", minimum=1, maximum=65535)
        if high < low:
            raise invalid("raft_port_max must not be below raft_port_min")
        return cls(
            broker_id=BrokerId(get_int(params, "broker_id", minimum=0, maximum=_BROKER_ID_MAX)),
            address=address.rstrip("/"),
            raft_host=require_str(params, "raft_host", 255),
            raft_port_min=low,
            raft_port_max=high,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "broker_id": self.broker_id,
            "address": self.address,
            "raft_host": self.raft_host,
            "raft_port_min": self.raft_port_min,
            "raft_port_max": self.raft_port_max,
        }


def parse_replica_spec(params: Params, limits: Limits) -> ReplicaSpec:
    """``POST /partitions`` at a broker: host one replica (sent by the manager leader)."""
    topic, partition_id = partition_ref(params, limits)
    replica_id = get_int(params, "replica_id", minimum=0, maximum=limits.replication_factor - 1)
    items = params.get("replicas")
    if not isinstance(items, list) or not 1 <= len(items) <= limits.replication_factor:
        raise invalid(f"field 'replicas' must list 1 to {limits.replication_factor} replicas")
    replicas = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise invalid(f"replicas[{index}] must be an object")
        replicas.append(_replica_address(item, index, f"replicas[{index}]"))
    if replica_id >= len(replicas):
        raise invalid("replica_id is not in 'replicas'")
    leaving = _leaving(params.get("leaving"), len(replicas))
    addresses = [r.raft_address for r in replicas] + (
        [] if leaving is None else [leaving.raft_address]
    )
    if len(set(addresses)) != len(addresses):
        raise invalid("replicas (and leaving) must have distinct raft addresses")
    return ReplicaSpec(
        topic=topic,
        partition_id=partition_id,
        replica_id=ReplicaId(replica_id),
        replicas=tuple(replicas),
        limits=_partition_limits(params.get("limits")),
        leaving=leaving,
    )


def _replica_address(item: Params, replica_id: int, where: str) -> ReplicaAddress:
    return ReplicaAddress(
        replica_id=ReplicaId(get_int(item, "replica_id", minimum=replica_id, maximum=replica_id)),
        broker_id=BrokerId(get_int(item, "broker_id", minimum=0, maximum=_BROKER_ID_MAX)),
        address=require_str(item, "address", 300).rstrip("/"),
        raft_address=_raft_address(item, f"{where}.raft_address"),
    )


def _leaving(item: object, replica_count: int) -> ReplicaAddress | None:
    """A drain's leaving replica (``ReplicaSpec.leaving``): it leaves one of the slots."""
    if item is None:
        return None
    if not isinstance(item, dict):
        raise invalid("field 'leaving' must be an object")
    slot = get_int(item, "replica_id", minimum=0, maximum=replica_count - 1)
    return _replica_address(item, slot, "leaving")


_BROKER_ID_MAX = 1_000_000
_MANAGER_ID_MAX = 1_000


_PORT = re.compile(r"[0-9]{1,5}")


def _raft_address(item: Params, where: str) -> str:
    """``host:port``, as pysyncobj splits it (at the last ':'). Checked here because the
    broker records a spec before it builds the replica, and pysyncobj raises on anything
    else: a 500, and a replica that fails again at every start."""
    address = require_str(item, "raft_address", 300)
    host, _, port = address.rpartition(":")
    if not host or not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise invalid(f"{where} must be host:port, got {address!r}")
    return address


def _partition_limits(body: object) -> PartitionLimits | None:
    if body is None:
        return None
    try:
        return PartitionLimits.from_json(body)
    except ValueError as exc:
        raise invalid(f"field 'limits': {exc}") from None


# --- API keys ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateKeyRequest:
    """``POST /keys {"role", "topics"?, "name"?}``: ``topics`` (names, prefixes ending in
    ``*``, or ``*``) is required for a producer or consumer key and ignored for an admin or
    metrics key (which concern no topic)."""

    role: Role
    topics: tuple[str, ...]
    name: str

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> CreateKeyRequest:
        raw_role = require_str(params, "role", 20)
        try:
            role = Role(raw_role)
        except ValueError:
            choices = ", ".join(r.value for r in Role)
            raise invalid(f"field 'role' must be one of {choices}, got {raw_role!r}") from None
        raw_topics = params.get("topics", [])
        if not isinstance(raw_topics, list):
            raise invalid("field 'topics' must be a list of topic names or patterns")
        try:
            topics = check_topic_patterns(raw_topics, limits.topic_name_chars_max)
        except ValueError as exc:
            raise invalid(f"field 'topics': {exc}") from None
        topicless = role in (Role.ADMIN, Role.METRICS)
        if not topicless and not topics:
            raise invalid(f"a {role.value} key needs 'topics' (names, 'prefix*' or '*')")
        name = get_str(params, "name", KEY_NAME_CHARS_MAX, required=False) or ""
        return cls(role, () if topicless else topics, name)


@dataclass(frozen=True, slots=True)
class KeyRef:
    """``POST /keys/revoke {"key_id"}``."""

    key_id: str

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> KeyRef:
        return cls(_key_id(params))


@dataclass(frozen=True, slots=True)
class VerifyKey:
    """``POST /keys/verify {"key_id", "key_hash"}``: a broker asks about a client's key."""

    key_id: str
    key_hash: str

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> VerifyKey:
        return cls(_key_id(params), require_str(params, "key_hash", 64))


@dataclass(frozen=True, slots=True)
class VerifyClient:
    """``POST /clients/verify {"kind", "client_id"}``: a broker asks about a producer or
    consumer id a direct-path client sends (issue 23): registered? for which topic? whose?"""

    kind: str
    """``producer`` or ``consumer``."""
    client_id: str

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> VerifyClient:
        kind = require_str(params, "kind", 20)
        if kind not in ("producer", "consumer"):
            raise invalid(f"field 'kind' must be producer or consumer, got {kind!r}")
        return cls(kind, require_str(params, "client_id", limits.id_chars_max))


def _key_id(params: Params) -> str:
    key_id = require_str(params, "key_id", KEY_ID_CHARS)
    if not re.fullmatch(r"[0-9a-f]+", key_id) or len(key_id) != KEY_ID_CHARS:
        raise invalid(f"field 'key_id' must be {KEY_ID_CHARS} hex digits")
    return key_id
