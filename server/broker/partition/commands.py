"""The commands a partition's Raft log carries, and their wire form.

Each committed Raft entry of a partition holds a *group* of these commands (group commit:
concurrent produce, pop and flush requests share one entry, one journal sync and one round
trip to the followers). In the entry they travel as plain tuples of strings and ints, never
as pickled classes, so renaming or moving a class here can never break a journal on disk:

    ("append", ((key, value[, headers]), ...), timestamp_ms, producer_id, sequence)
    ("consume", consumer_id, max_messages, request_id, timestamp_ms)
    ("mark_flushed", replica_id, flushed_offset, start, raft_address)
    ("truncate", log_start_offset)
    ("reset_replica", replica_id, raft_address)
    ("receive", group, max_messages, timestamp_ms, request_id,
        visibility_timeout_ms, max_deliveries, ordered_by_key[, ((offset, key), ...)])
    ("settle", group, action, ((offset, delivery_count), ...), timestamp_ms, duration_ms)
    ("dead_lettered", group, (offset, ...))
    ("redrive", group, request_id, timestamp_ms, max_messages,
        ((offset, delivery_count, key), ...))

This tuple layout is a wire protocol: change it only by adding a new tag or a trailing
field that the decoder still accepts without (``consume`` gained ``timestamp_ms`` for client
expiry; journals written before carry the 3-field form, which decodes with ``None``; so do
``mark_flushed`` without ``start`` or ``raft_address`` and ``reset_replica`` without
``raft_address``).
Pure: no I/O; ``from_wire`` is total (anything malformed decodes to ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from protocol.command_codec import CommandCodec
from protocol.group_requests import SETTLE_ACTIONS
from protocol.types import Headers, Offset, ReplicaId

KeyValue = tuple[str | None, str] | tuple[str | None, str, Headers]
"""One message as an append carries it: key first, then value (the order everywhere below
the HTTP layer), then its headers when it has any. A message without headers travels as
the pair alone: appends written before headers existed hold only pairs, and the journal
stays as small as it was."""


@dataclass(frozen=True, slots=True)
class Append:
    messages: tuple[KeyValue, ...]
    timestamp_ms: int
    producer_id: str | None
    sequence: int | None


@dataclass(frozen=True, slots=True)
class Consume:
    consumer_id: str
    max_messages: int
    request_id: str | None
    timestamp_ms: int | None = None
    """The proposer's clock; ``None`` only in entries written before consumes carried it."""
    sequence: int | None = None
    """The consumer's pop sequence (increasing per consumer): a copy of an older pop, however
    late it arrives, is recognised and claims nothing. ``None``: only ``request_id`` is
    compared (raw clients, and entries written before pops carried it)."""


@dataclass(frozen=True, slots=True)
class MarkFlushed:
    replica_id: ReplicaId
    flushed_offset: Offset
    start: Offset | None = None
    """The flushed offset the flusher read before writing ``[start, flushed_offset)``: the
    mark applies only if the replica's flushed prefix still reaches it, so a batch written
    on a stale view (the slot was reset meanwhile: re-replication) never leaves a hole.
    The flusher sends it with every mark; ``None`` only in entries written before."""
    raft_address: str | None = None
    """The Raft address of the replica that flushed. Once a ``ResetReplica`` recorded who
    holds the slot, a mark from anyone else (a leaving member still flushing, or one without
    an address) changes nothing. ``None``: entries written before the field existed."""


@dataclass(frozen=True, slots=True)
class Truncate:
    """Retention: messages below ``log_start_offset`` leave the partition (the leader's
    broker proposes it from its database, see ``broker/retention.py``)."""

    log_start_offset: Offset


@dataclass(frozen=True, slots=True)
class ResetReplica:
    """Re-replication: the replica slot ``replica_id`` now belongs to a new, empty replica
    (the old one's broker died for good), so its flushed offset starts again from 0. The
    partition leader proposes it after removing the old replica from the Raft group and
    before adding the new one, so the new replica never sees the old one's offset."""

    replica_id: ReplicaId
    raft_address: str | None = None
    """The new replica's Raft address: from now on only its flush marks move the slot
    (``MarkFlushed.raft_address``). ``None``: entries written before the field existed
    (the slot's holder is then unknown, and any mark counts, as before)."""


@dataclass(frozen=True, slots=True)
class Receive:
    """Lease up to ``max_messages`` messages to a member of consumer group ``group``
    (issue 20). The group's settings travel with every receive (the manager's registry
    holds them), so the partition always applies the latest."""

    group: str
    max_messages: int
    timestamp_ms: int
    request_id: str | None
    visibility_timeout_ms: int
    max_deliveries: int
    ordered_by_key: bool
    keys: tuple[tuple[int, str | None], ...] = ()
    """For per-key ordering: ``(offset, key)`` of the messages the receive reaches first,
    read by the leader from memory or its database (the log keeps keys only of messages
    in memory, and those may leave it before the receive is applied)."""


@dataclass(frozen=True, slots=True)
class Settle:
    """``ack``, ``nack`` or ``extend`` deliveries by receipt: ``(offset, delivery_count)``.
    ``duration_ms``: a nack's delay, an extend's new visibility timeout (0 for an ack)."""

    group: str
    action: str
    receipts: tuple[tuple[int, int], ...]
    timestamp_ms: int
    duration_ms: int


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """The dead-letter topic holds these offsets of ``group``'s dead messages now."""

    group: str
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Redrive:
    """Dead messages of ``group`` are deliverable again: those ``letters`` name, by
    ``(offset, delivery_count, key)`` as their copies in the dead-letter topic say, or,
    without letters, up to ``max_messages`` parked ones (a group without a dead-letter
    topic). A repeat of a recent ``request_id`` does nothing."""

    group: str
    request_id: str | None
    timestamp_ms: int
    max_messages: int
    letters: tuple[tuple[int, int, str | None], ...] = ()


Command = (
    Append
    | Consume
    | MarkFlushed
    | Truncate
    | ResetReplica
    | Receive
    | Settle
    | DeadLettered
    | Redrive
)
WireCommand = tuple[object, ...]


def _append(values: tuple[object, ...]) -> tuple[object, ...] | None:
    messages, timestamp_ms, producer_id, sequence = values
    valid = _messages(messages) and isinstance(timestamp_ms, int)
    return values if valid and _opt(producer_id, str) and _opt(sequence, int) else None


def _consume(values: tuple[object, ...]) -> tuple[object, ...] | None:
    # Older journals hold the 3- and 4-field forms (no timestamp, no sequence).
    consumer_id, max_messages, request_id, timestamp_ms, sequence = (*values, None, None)[:5]
    valid = isinstance(consumer_id, str) and isinstance(max_messages, int)
    optional = _opt(request_id, str) and _opt(timestamp_ms, int) and _opt(sequence, int)
    return values if valid and optional else None


def _mark_flushed(values: tuple[object, ...]) -> tuple[object, ...] | None:
    # Older journals hold the 2- and 3-field forms (no start, no address).
    replica_id, flushed_offset, start, address = (*values, None, None)[:4]
    valid = _int(replica_id) and _int(flushed_offset)
    return values if valid and _opt(start, int) and _opt(address, str) else None


def _truncate(values: tuple[object, ...]) -> tuple[object, ...] | None:
    return values if _int(values[0]) else None


def _reset_replica(values: tuple[object, ...]) -> tuple[object, ...] | None:
    # Older journals hold the 1-field form (no address).
    replica_id, address = (*values, None)[:2]
    return values if _int(replica_id) and _opt(address, str) else None


def _receive(values: tuple[object, ...]) -> tuple[object, ...] | None:
    group, max_messages, timestamp_ms, request_id, timeout_ms, most, keyed = values[:7]
    keys = values[7] if len(values) == 8 else ()
    valid = isinstance(group, str) and _int(max_messages) and _int(timestamp_ms)
    valid = valid and _opt(request_id, str) and _int(timeout_ms) and _int(most)
    return values if valid and isinstance(keyed, bool) and _keys(keys) else None


def _settle(values: tuple[object, ...]) -> tuple[object, ...] | None:
    group, action, receipts, timestamp_ms, duration_ms = values
    valid = isinstance(group, str) and isinstance(action, str) and action in SETTLE_ACTIONS
    return (
        values if valid and _pairs(receipts) and _int(timestamp_ms) and _int(duration_ms) else None
    )


def _dead_lettered(values: tuple[object, ...]) -> tuple[object, ...] | None:
    group, offsets = values
    valid = isinstance(offsets, tuple) and all(_int(o) for o in offsets)
    return values if isinstance(group, str) and valid else None


def _redrive(values: tuple[object, ...]) -> tuple[object, ...] | None:
    if len(values) != 5:  # ``letters`` was never left out
        return None
    group, request_id, timestamp_ms, max_messages, letters = values
    valid = isinstance(group, str) and _opt(request_id, str) and _letters(letters)
    return values if valid and _int(timestamp_ms) and _int(max_messages) else None


_CODEC = CommandCodec[Command](
    {
        "append": Append,
        "consume": Consume,
        "mark_flushed": MarkFlushed,
        "truncate": Truncate,
        "reset_replica": ResetReplica,
        "receive": Receive,
        "settle": Settle,
        "dead_lettered": DeadLettered,
        "redrive": Redrive,
    },
    {
        Append: _append,
        Consume: _consume,
        MarkFlushed: _mark_flushed,
        Truncate: _truncate,
        ResetReplica: _reset_replica,
        Receive: _receive,
        Settle: _settle,
        DeadLettered: _dead_lettered,
        Redrive: _redrive,
    },
)
"""The tags are part of the journal format, never renamed; every field is written (a node
of an older version decodes every command written here)."""


def to_wire(command: Command) -> WireCommand:
    return _CODEC.to_wire(command)


def from_wire(wire: object) -> Command | None:
    """The command a wire tuple holds, or ``None`` when it is not one (apply must not raise,
    so a malformed entry becomes a rejection, never an exception)."""
    return _CODEC.from_wire(wire)


def _letters(value: object) -> TypeGuard[tuple[tuple[int, int, str | None], ...]]:
    return isinstance(value, tuple) and all(
        isinstance(t, tuple)
        and len(t) == 3
        and _int(t[0])
        and _int(t[1])
        and (t[2] is None or isinstance(t[2], str))
        for t in value
    )


def _keys(value: object) -> TypeGuard[tuple[tuple[int, str | None], ...]]:
    return isinstance(value, tuple) and all(
        isinstance(pair, tuple)
        and len(pair) == 2
        and _int(pair[0])
        and (pair[1] is None or isinstance(pair[1], str))
        for pair in value
    )


def _pairs(value: object) -> TypeGuard[tuple[tuple[int, int], ...]]:
    return isinstance(value, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and _int(p[0]) and _int(p[1]) for p in value
    )


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt(value: object, kind: type) -> bool:
    return value is None or isinstance(value, kind)


def _messages(value: object) -> bool:
    return isinstance(value, tuple | list) and all(
        isinstance(m, tuple)
        and (len(m) == 2 or (len(m) == 3 and _headers(m[2])))
        and _opt(m[0], str)
        and isinstance(m[1], str)
        for m in value
    )


def _headers(value: object) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str) and isinstance(h[1], str)
        for h in value
    )
