"""The requests of consumer groups with leased delivery (issue 20): receive, and ack, nack
or extend by receipt. Pure: parsing and the receipt's wire form only.

A receipt names one delivery of one message: ``"<partition_id>.<offset>.<delivery_count>"``.
The partition is in it so that ``POST /groups/{group}/ack`` needs only the receipts (the
router sends each to its partition), and the delivery count so that the receipt of an
earlier delivery never settles a later one (its lease ended and the message was handed out
again: ``stale``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TypeGuard

from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import (
    Params,
    get_int,
    get_str,
    invalid,
    partition_ref,
    topic_name,
    wait_ms_of,
)
from protocol.types import Offset, PartitionId, RequestId

SETTLE_ACTIONS = ("ack", "nack", "extend")
"""What a member does with a delivery: its one list (the partition's ``Settle`` takes them)."""


class Ordering(Enum):
    """A consumer group's delivery order: ``key`` holds a key's next message back while an
    earlier one of that key is unsettled (SQS FIFO message groups, Pulsar Key_Shared)."""

    NONE = "none"
    KEY = "key"


@dataclass(frozen=True, slots=True)
class CreateGroup:
    """``POST /groups {"topic", "group", "visibility_timeout_ms"?, "max_deliveries"?,
    "dead_letter_topic"?, "ordering"?}``: define a consumer group of a topic (admins). Its
    name follows the rule of topic names. ``max_deliveries`` 0 (the default) is no limit; a
    ``dead_letter_topic`` must be another topic and needs ``max_deliveries`` of 1 or more:
    the deliveries after which a message goes there. Absent or null fields take their
    defaults (``group_visibility_timeout_ms_default``, 0, none, ``none``)."""

    topic: str
    group: str
    visibility_timeout_ms: int
    max_deliveries: int = 0
    dead_letter_topic: str | None = None
    ordering: Ordering = Ordering.NONE

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> CreateGroup:
        topic = topic_name(params, limits)
        dead_letter_topic = (
            None
            if params.get("dead_letter_topic") is None
            else topic_name(params, limits, "dead_letter_topic")
        )
        max_deliveries = max_deliveries_of(params, limits, default=0)
        if dead_letter_topic == topic:
            raise invalid("field 'dead_letter_topic' must name another topic than 'topic'")
        if dead_letter_topic is not None and max_deliveries < 1:
            raise invalid(
                "field 'dead_letter_topic' needs 'max_deliveries' of 1 or more: the deliveries "
                "after which a message goes to the dead-letter topic"
            )
        return cls(
            topic=topic,
            group=topic_name(params, limits, "group"),
            visibility_timeout_ms=visibility_timeout_ms(
                params,
                "visibility_timeout_ms",
                limits,
                default=limits.group_visibility_timeout_ms_default,
            ),
            max_deliveries=max_deliveries,
            dead_letter_topic=dead_letter_topic,
            ordering=_ordering(params),
        )


def _ordering(params: Params) -> Ordering:
    value = params.get("ordering")
    if value is None:
        return Ordering.NONE
    try:
        return Ordering(value)
    except ValueError:
        names = ", ".join(repr(o.value) for o in Ordering)
        raise invalid(f"field 'ordering' must be one of {names}") from None


@dataclass(frozen=True, slots=True)
class ListGroups:
    """``GET /groups?topic=T``: one topic's consumer groups; without ``topic``, every
    topic's."""

    topic: str | None

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> ListGroups:
        return cls(None if params.get("topic") is None else topic_name(params, limits))


def visibility_timeout_ms(
    params: Params, field: str, limits: Limits, default: int | None = None
) -> int:
    return get_int(
        params,
        field,
        minimum=limits.group_visibility_timeout_ms_min,
        maximum=limits.group_visibility_timeout_ms_max,
        default=default,
    )


def max_deliveries_of(params: Params, limits: Limits, default: int | None = None) -> int:
    return get_int(
        params,
        "max_deliveries",
        minimum=0,
        maximum=limits.group_max_deliveries_max,
        default=default,
    )


class Outcome(Enum):
    """What an ack, nack or extend did with one receipt."""

    DONE = "done"
    """It acted on the current lease."""
    ALREADY = "already"
    """The message is settled already (a repeat of an ack): nothing to do."""
    ENDED = "ended"
    """A nack's only: this delivery had ended already (a repeat of the nack whose answer
    was lost, or its lease ran out) and no later one began: nothing changed, and the
    message is not settled (it waits to be delivered again)."""
    STALE = "stale"
    """Not the current delivery: the lease ended and the message is waiting or leased to
    another member; nothing changed (an ack here does not settle it)."""
    UNKNOWN = "unknown"
    """The offset was never handed out."""


@dataclass(frozen=True, slots=True, order=True)
class DeliveryReceipt:
    partition_id: PartitionId
    offset: Offset
    delivery_count: int

    def to_wire(self) -> str:
        return f"{self.partition_id}.{self.offset}.{self.delivery_count}"

    @classmethod
    def from_wire(cls, text: str) -> DeliveryReceipt | None:
        """``None`` for anything but three dot-separated decimal numbers, the last >= 1."""
        parts = text.split(".")
        if len(parts) != 3 or not all(p.isdigit() and p.isascii() and len(p) <= 19 for p in parts):
            return None
        partition_id, offset, count = (int(p) for p in parts)
        if count < 1:
            return None
        return cls(PartitionId(partition_id), Offset(offset), count)


def group_name(group: str, limits: Limits) -> str:
    """A group's name (from the path): the rule of topic names."""
    return topic_name({"group": group}, limits, "group")


@dataclass(frozen=True, slots=True)
class GroupSettingsParams:
    """A group's settings as a broker receives them with every receive (the managers'
    registry holds them; the router and the client's direct path send them)."""

    visibility_timeout_ms: int
    max_deliveries: int
    ordering: Ordering

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> GroupSettingsParams:
        return cls(
            visibility_timeout_ms=visibility_timeout_ms(params, "visibility_timeout_ms", limits),
            max_deliveries=max_deliveries_of(params, limits),
            ordering=_ordering(params),
        )

    def to_params(self) -> dict[str, object]:
        return {
            "visibility_timeout_ms": self.visibility_timeout_ms,
            "max_deliveries": self.max_deliveries,
            "ordering": self.ordering.value,
        }


@dataclass(frozen=True, slots=True)
class GroupReceive:
    """``GET /groups/{group}/messages?topic=T&max_messages=N&request_id=R&wait_ms=W``: lease
    up to N messages of the topic's partitions to a member (the managers' router, with the
    group's settings from their registry), waiting up to W ms for one."""

    topic: str
    group: str
    max_messages: int
    request_id: RequestId | None
    wait_ms: int = 0
    """Wait up to this long for a message when none is there (a long poll)."""

    @classmethod
    def parse(cls, params: Params, group: str, limits: Limits) -> GroupReceive:
        return cls(
            topic=topic_name(params, limits),
            group=group_name(group, limits),
            max_messages=_max_messages(params, limits),
            request_id=_request_id(params, limits),
            wait_ms=wait_ms_of(params, limits),
        )


def _request_id(params: Params, limits: Limits) -> RequestId | None:
    request = get_str(params, "request_id", limits.id_chars_max, required=False)
    return None if request is None else RequestId(request)


def _max_messages(params: Params, limits: Limits) -> int:
    return get_int(params, "max_messages", minimum=1, maximum=limits.fetch_messages_max, default=1)


@dataclass(frozen=True, slots=True)
class BrokerReceive:
    """``GET /groups/{group}/messages?topic=T&partition_id=P&max_messages=N&request_id=R
    &wait_ms=W`` at a broker, with the group's settings: lease up to N messages of one
    partition, waiting up to W ms at the partition for one (a long poll)."""

    topic: str
    partition_id: PartitionId
    group: str
    settings: GroupSettingsParams
    max_messages: int
    request_id: RequestId | None
    wait_ms: int = 0

    @classmethod
    def parse(cls, params: Params, group: str, limits: Limits) -> BrokerReceive:
        topic, partition_id = partition_ref(params, limits)
        return cls(
            topic=topic,
            partition_id=partition_id,
            group=group_name(group, limits),
            settings=GroupSettingsParams.parse(params, limits),
            max_messages=_max_messages(params, limits),
            request_id=_request_id(params, limits),
            wait_ms=wait_ms_of(params, limits),
        )

    def to_params(self) -> dict[str, str]:
        """The query string ``parse`` reads (the router's and the direct path's request)."""
        params = {
            "topic": self.topic,
            "partition_id": str(self.partition_id),
            "max_messages": str(self.max_messages),
            **{name: str(value) for name, value in self.settings.to_params().items()},
        }
        if self.request_id is not None:
            params["request_id"] = self.request_id
        if self.wait_ms:
            params["wait_ms"] = str(self.wait_ms)
        return params


@dataclass(frozen=True, slots=True)
class SettleRequest:
    """``POST /groups/{group}/{ack|nack|extend} {"topic", "receipts", "delay_ms"?,
    "visibility_timeout_ms"?}``: ``duration_ms`` is a nack's delay (0: deliverable at
    once), an extend's new visibility timeout, 0 for an ack. At a broker the body also
    names ``partition_id``, and every receipt must be of that partition."""

    topic: str
    group: str
    action: str
    receipts: tuple[DeliveryReceipt, ...]
    duration_ms: int

    @classmethod
    def parse(cls, params: Params, group: str, action: str, limits: Limits) -> SettleRequest:
        if action not in SETTLE_ACTIONS:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no such group action: {action}")
        if action == "nack":
            duration_ms = get_int(
                params,
                "delay_ms",
                minimum=0,
                maximum=limits.group_visibility_timeout_ms_max,
                default=0,
            )
        elif action == "extend":
            duration_ms = visibility_timeout_ms(params, "visibility_timeout_ms", limits)
        else:
            duration_ms = 0
        return cls(
            topic=topic_name(params, limits),
            group=group_name(group, limits),
            action=action,
            receipts=receipts(params, limits),
            duration_ms=duration_ms,
        )

    def broker_body(
        self, partition_id: PartitionId, receipts: tuple[DeliveryReceipt, ...]
    ) -> dict[str, object]:
        """The body ``parse`` reads at the broker of ``partition_id``, for its receipts."""
        body: dict[str, object] = {
            "topic": self.topic,
            "partition_id": partition_id,
            "receipts": [receipt.to_wire() for receipt in receipts],
        }
        if self.action == "nack":
            body["delay_ms"] = self.duration_ms
        elif self.action == "extend":
            body["visibility_timeout_ms"] = self.duration_ms
        return body

    def of_partition(self, params: Params, limits: Limits) -> PartitionId:
        """At a broker: the body's ``partition_id``, which every receipt must name."""
        _, partition_id = partition_ref(params, limits)
        others = [r for r in self.receipts if r.partition_id != partition_id]
        if others:
            raise invalid(
                f"receipt {others[0].to_wire()!r} is not of partition {partition_id}: "
                "send each receipt to its partition"
            )
        return partition_id


def receipts(params: Params, limits: Limits) -> tuple[DeliveryReceipt, ...]:
    """``receipts``: 1 to ``fetch_messages_max`` receipt strings, repeats dropped."""
    value = params.get("receipts")
    if not isinstance(value, list) or not value:
        raise invalid("field 'receipts' must be a non-empty list of receipt strings")
    if len(value) > limits.fetch_messages_max:
        raise invalid(f"field 'receipts' holds more than {limits.fetch_messages_max}")
    found: dict[DeliveryReceipt, None] = {}
    for text in value:
        receipt = DeliveryReceipt.from_wire(text) if isinstance(text, str) else None
        if receipt is None:
            raise invalid(f"receipt {text!r} is not '<partition_id>.<offset>.<delivery_count>'")
        found[receipt] = None
    return tuple(found)


@dataclass(frozen=True, slots=True)
class DeadLettersQuery:
    """``GET /dead-letters?max_messages=N`` at a broker (nodes only): up to N messages past
    their group's ``max_deliveries`` in the partitions it leads (``protocol.dead_letters``)."""

    max_messages: int

    @classmethod
    def parse(cls, params: Params, limits: Limits) -> DeadLettersQuery:
        return cls(
            get_int(
                params,
                "max_messages",
                minimum=1,
                maximum=limits.dead_letter_batch_max,
                default=limits.dead_letter_batch_max,
            )
        )


@dataclass(frozen=True, slots=True)
class MarkDeadLettered:
    """``POST /groups/{group}/dead-lettered {"topic", "partition_id", "offsets"}`` at a
    broker (nodes only): the dead-letter topic holds copies of these messages now."""

    topic: str
    partition_id: PartitionId
    group: str
    offsets: tuple[Offset, ...]

    @classmethod
    def parse(cls, params: Params, group: str, limits: Limits) -> MarkDeadLettered:
        topic, partition_id = partition_ref(params, limits)
        value = params.get("offsets")
        if (
            not isinstance(value, list)
            or not value
            or len(value) > limits.dead_letter_batch_max
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in value)
        ):
            raise invalid(f"field 'offsets' must hold 1 to {limits.dead_letter_batch_max} offsets")
        return cls(topic, partition_id, group_name(group, limits), tuple(Offset(o) for o in value))

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "partition_id": self.partition_id, "offsets": self.offsets}


@dataclass(frozen=True, slots=True)
class RedriveRequest:
    """``POST /groups/{group}/redrive {"topic", "max_messages"?, "request_id"?}`` (admins):
    make up to ``max_messages`` dead messages of the group deliverable to it again: those
    whose copies its dead-letter topic holds (read from where the last redrive stopped), or,
    in a group without a dead-letter topic, those parked in its partitions. ``request_id``
    makes a retry whose answer was lost do nothing again (a parked redrive; a dead-letter
    topic's redrive is repeatable anyway: it resumes where it stopped)."""

    topic: str
    group: str
    max_messages: int
    request_id: RequestId | None

    @classmethod
    def parse(cls, params: Params, group: str, limits: Limits) -> RedriveRequest:
        return cls(
            topic=topic_name(params, limits),
            group=group_name(group, limits),
            max_messages=get_int(
                params,
                "max_messages",
                minimum=1,
                maximum=limits.fetch_messages_max,
                default=limits.fetch_messages_max,
            ),
            request_id=_request_id(params, limits),
        )


@dataclass(frozen=True, slots=True)
class RedriveLetter:
    """A message to reopen in its partition, as its dead-letter copy names it."""

    offset: Offset
    delivery_count: int
    key: str | None

    def to_json(self) -> dict[str, object]:
        return {"offset": self.offset, "delivery_count": self.delivery_count, "key": self.key}


@dataclass(frozen=True, slots=True)
class GroupRedrive:
    """``POST /groups/{group}/redrive {"topic", "partition_id", "max_messages",
    "request_id"?, "letters"?: [{"offset", "delivery_count", "key"}]}`` at a broker (nodes
    only): one partition's part of a redrive. With ``letters``, those messages (their
    copies in the dead-letter topic are redriven); without, up to ``max_messages`` parked
    ones. A repeat of a recent ``request_id`` does nothing."""

    topic: str
    partition_id: PartitionId
    group: str
    max_messages: int
    request_id: RequestId | None
    letters: tuple[RedriveLetter, ...] = ()

    @classmethod
    def parse(cls, params: Params, group: str, limits: Limits) -> GroupRedrive:
        topic, partition_id = partition_ref(params, limits)
        return cls(
            topic=topic,
            partition_id=partition_id,
            group=group_name(group, limits),
            max_messages=_max_messages(params, limits),
            request_id=_request_id(params, limits),
            letters=_letters(params.get("letters", []), limits),
        )

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {
            "topic": self.topic,
            "partition_id": self.partition_id,
            "max_messages": self.max_messages,
            "letters": [letter.to_json() for letter in self.letters],
        }
        if self.request_id is not None:
            body["request_id"] = self.request_id
        return body


def _letters(value: object, limits: Limits) -> tuple[RedriveLetter, ...]:
    if not isinstance(value, list) or len(value) > limits.fetch_messages_max:
        raise invalid(f"field 'letters' must be a list of at most {limits.fetch_messages_max}")
    found = []
    for item in value:
        offset = item.get("offset") if isinstance(item, dict) else None
        count = item.get("delivery_count") if isinstance(item, dict) else None
        key = item.get("key") if isinstance(item, dict) else None
        if not (_natural(offset) and _natural(count) and (key is None or isinstance(key, str))):
            raise invalid(
                'each of \'letters\' must be {"offset": int >= 0, "delivery_count": '
                'int >= 0, "key": string or null}'
            )
        if key is not None and len(key.encode("utf-8")) > limits.key_bytes_max:
            raise RaftQError(ErrorCode.TOO_LARGE, f"a key exceeds {limits.key_bytes_max} bytes")
        found.append(RedriveLetter(Offset(offset), count, key))
    return tuple(found)


def _natural(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
