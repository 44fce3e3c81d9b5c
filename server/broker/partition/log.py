"""``PartitionLog``: the replicated state machine of one partition. Pure.

No threads, sockets, clock, randomness or database: every input (timestamps, ids) is fixed by
the proposer and passed in, so every replica that applies the same commands in the same order
reaches the same state. Every command is total: bad input becomes a ``Rejected`` result, never
an exception (an exception inside a pysyncobj apply wedges the Raft group).

Vocabulary: offsets are message positions, contiguous from 0, never Raft indexes. Ranges are
half-open ``[start, end)``. "Flush" is a replica writing messages to its own database; a
replica's *flushed offset* is the end of the prefix it has flushed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

from broker.partition.commands import (
    Append,
    Command,
    Consume,
    DeadLettered,
    KeyValue,
    MarkFlushed,
    Receive,
    Redrive,
    ResetReplica,
    Settle,
    Truncate,
)
from broker.partition.group_leases import (
    KEY_UNKNOWN,
    ConsumerGroups,
    GroupRequest,
    GroupSettings,
    KeyOf,
    Leased,
    Letter,
    Receipt,
    Redriven,
    Settled,
    UnknownKey,
)
from protocol import snapshot_fields
from protocol.errors import ErrorCode
from protocol.invariant import check

# Also reached by this module's name: full dumps written before it moved to protocol.
from protocol.limits import PartitionLimits
from protocol.types import NO_HEADERS, Headers, Offset, ReplicaId

_EXPIRED_PER_COMMAND_MAX = 8
"""Idle clients one command forgets at most, so no apply scans every client. A command names
at most one new client and forgets up to this many idle ones, so the idle ones never pile up
(amortized O(1) per command)."""

_CONSUMER = "c"
_PRODUCER = "p"
ClientKey = tuple[str, str]
"""``(_CONSUMER or _PRODUCER, client id)``."""


@dataclass(frozen=True, slots=True)
class Appended:
    start: Offset
    end: Offset
    duplicate: bool
    """True when the ``(producer_id, sequence)`` was seen before: nothing was appended and
    ``[start, end)`` are the offsets of the original batch."""


@dataclass(frozen=True, slots=True)
class Consumed:
    start: Offset
    end: Offset


@dataclass(frozen=True, slots=True)
class Flushed:
    flushed_offset: Offset
    evicted_offset: Offset


@dataclass(frozen=True, slots=True)
class Truncated:
    log_start_offset: Offset


@dataclass(frozen=True, slots=True)
class Rejected:
    code: ErrorCode
    message: str


@dataclass(slots=True)
class _Producer:
    last_sequence: int
    ranges: OrderedDict[int, tuple[Offset, Offset]] = field(default_factory=OrderedDict)
    """Offsets of the producer's last few batches by sequence, oldest first."""


@dataclass(slots=True)
class _Consumer:
    offset: Offset
    last_request_id: str | None = None
    last_range: tuple[Offset, Offset] = (Offset(0), Offset(0))
    last_sequence: int | None = None
    """The highest pop sequence applied (``None`` until a pop carries one)."""
    request_ranges: OrderedDict[str, tuple[Offset, Offset]] = field(default_factory=OrderedDict)
    """The ranges of the last ``request_ids_remembered`` pops without a sequence, by request
    id, oldest first: a repeat or a late copy of any of them gets its range again."""

    # Snapshots written before ``last_sequence`` (``request_ranges``) existed hold three
    # (four) fields.
    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)


# (key, value, timestamp_ms, headers); a tuple keeps snapshots and memory small.
MessageTuple = tuple[str | None, str, int, Headers]

Result = Appended | Consumed | Flushed | Truncated | Leased | Settled | Redriven | Rejected


class PartitionLog:
    def __init__(self, replica_count: int, limits: PartitionLimits) -> None:
        self.limits = limits
        self.end_offset = Offset(0)
        """Offset the next appended message gets: every offset below it is committed."""
        self.durable_end_offset = Offset(0)
        """Every message below it is on disk on a majority: a synced entry (a majority
        fdatasyncs its journal before acknowledging one, which covers every entry before it)
        was applied after it. Below ``end_offset`` only while ``replicated`` appends wait
        for the next synced entry. Replicas flush only below it, so no database ever holds
        a message a power cut could take from the Raft log."""
        self.log_start_offset = Offset(0)
        """First offset still readable: retention moves it (``truncate``), never past
        ``evicted_offset``, so messages leave memory only once flushed."""
        self.messages: dict[Offset, MessageTuple] = {}
        """``msg_dict``: committed messages that some replica has not flushed yet; holds
        exactly ``[evicted_offset, end_offset)``."""
        self.unflushed_bytes = 0
        self.flushed_offsets = [Offset(0)] * replica_count
        """Per replica, the end of the prefix it has flushed: always ``<= end_offset``. Its
        database holds ``[log_start_offset, flushed)`` without a hole: a mark moves it only
        from the slot's holder and from a prefix that still reaches the batch's start."""
        self.holders: list[str | None] = [None] * replica_count
        """Per replica slot, the Raft address of the replica that holds it, as the last
        ``reset_replica`` recorded it (``None``: unknown, never reset with an address, and
        then any flush mark counts)."""
        self.evicted_offset = Offset(0)
        """Messages below it have left ``msg_dict``: every in-sync replica (and always a
        majority) has them in its database; a lagging replica copies them from a peer."""
        self.consumers: dict[str, _Consumer] = {}
        self.producers: OrderedDict[str, _Producer] = OrderedDict()
        """Least recently used first, so the oldest is forgotten when over the bound."""
        self.clock_ms = 0
        """Partition time: the highest timestamp a command carried (proposers' clocks, so
        the same on every replica; never the local clock). 0 until the first one."""
        self.last_seen_ms: OrderedDict[ClientKey, int] = OrderedDict()
        """Every consumer and producer above, with the partition time of the last command
        naming it; oldest first, so expiry looks only at the front."""
        self.groups = ConsumerGroups()
        """Consumer groups with leased delivery (issue 20): leases, acks, dead letters."""

    def __setstate__(self, state: dict[str, object]) -> None:
        """Unpickle a snapshot, also one taken before clients expired: its clients are
        stamped when the first timestamped command sets the clock (see ``_advance``)."""
        self.__dict__.update(state)
        if "durable_end_offset" not in state:  # every entry was synced before
            self.durable_end_offset = self.end_offset
        if "holders" not in state:  # no slot was reset with an address before
            self.holders = [None] * len(self.flushed_offsets)
        if "groups" not in state:  # no consumer group had leases before
            self.groups = ConsumerGroups()
        if any(len(m) == 3 for m in self.messages.values()):  # kept before headers existed
            self.messages = {o: (*m[:3], NO_HEADERS) for o, m in self.messages.items()}
        self.limits = self.limits.with_every_field()
        if "last_seen_ms" not in state:
            self.clock_ms = 0
            keys = [(_CONSUMER, c) for c in self.consumers] + [
                (_PRODUCER, p) for p in self.producers
            ]
            self.last_seen_ms = OrderedDict((key, 0) for key in keys)

    # --- commands (apply) -----------------------------------------------------------------

    def mark_durable(self) -> None:
        """After applying a synced entry: everything so far is on disk on a majority."""
        self.durable_end_offset = self.end_offset

    def apply(self, command: Command | None) -> Result:
        """Apply one command of a committed group; ``None`` (a malformed wire command)
        is rejected, never raised."""
        match command:
            case Append(messages, timestamp_ms, producer_id, sequence):
                return self.append(messages, timestamp_ms, producer_id, sequence)
            case Consume(consumer_id, max_messages, request_id, timestamp_ms, sequence):
                return self.consume(consumer_id, max_messages, request_id, timestamp_ms, sequence)
            case MarkFlushed(replica_id, flushed_offset, start, raft_address):
                return self.mark_flushed(replica_id, flushed_offset, start, raft_address)
            case Truncate(log_start_offset):
                return self.truncate(log_start_offset)
            case ResetReplica(replica_id, raft_address):
                return self.reset_replica(replica_id, raft_address)
            case Receive() | Settle() | DeadLettered() | Redrive():
                return self.apply_consumer_group(command)
        return Rejected(ErrorCode.INVALID_FIELD, "not a partition command")

    def apply_consumer_group(
        self, command: Receive | Settle | DeadLettered | Redrive
    ) -> Leased | Settled | Redriven | Rejected:
        """A consumer group's command (issue 20); lease times are partition time."""
        match command:
            case Receive(
                group, max_messages, timestamp_ms, request_id, timeout_ms, most, keyed, keys
            ):
                self._advance(timestamp_ms)
                if max_messages < 1 or timeout_ms < 1 or most < 0:
                    return Rejected(ErrorCode.INVALID_FIELD, "not a receive")
                settings = GroupSettings(timeout_ms, most, keyed)
                request = GroupRequest(max_messages, self.clock_ms, request_id)
                leased = self.groups.receive(
                    group, settings, request, self.end_offset, self._key_of(keys), self.limits
                )
                if leased is None:
                    return Rejected(
                        ErrorCode.TOO_MANY,
                        f"this partition has {self.limits.groups_max} consumer groups already",
                    )
                return leased
            case Settle(group, action, receipts, timestamp_ms, duration_ms):
                self._advance(timestamp_ms)
                settled = [Receipt(Offset(o), c) for o, c in receipts]
                return self.groups.settle(group, action, settled, self.clock_ms, duration_ms)
            case DeadLettered(group, offsets):
                self.groups.dead_lettered(group, offsets)
                return Settled(())
            case Redrive(group, request_id, timestamp_ms, max_messages, letters):
                self._advance(timestamp_ms)
                request = GroupRequest(max_messages, self.clock_ms, request_id)
                named = [Letter(Offset(o), count, key) for o, count, key in letters]
                return self.groups.redrive(
                    group,
                    request,
                    named,
                    self.log_start_offset,
                    self.limits.request_ids_remembered,
                )

    def _key_of(self, supplied: tuple[tuple[int, str | None], ...]) -> KeyOf:
        """A message's key: from memory, else as the receive supplied it (read from the
        leader's database), else unknown. Deterministic: memory holds the same messages on
        every replica at an entry (eviction is applied with ``MarkFlushed``)."""
        given = dict(supplied)

        def key_of(offset: Offset) -> str | None | UnknownKey:
            message = self.messages.get(offset)
            if message is not None:
                return message[0]
            return given.get(offset, KEY_UNKNOWN)

        return key_of

    def append(
        self,
        messages: Sequence[KeyValue],
        timestamp_ms: int,
        producer_id: str | None,
        sequence: int | None,
    ) -> Appended | Rejected:
        """Append a batch of ``(key, value)``; idempotent per ``(producer_id, sequence)``."""
        self._advance(timestamp_ms)
        if producer_id is not None and producer_id in self.producers:
            self._touch(_PRODUCER, producer_id)
        if producer_id is not None and sequence is not None:
            seen = self._seen_sequence(producer_id, sequence)
            if seen is not None:
                return seen
        if not messages:
            return Rejected(ErrorCode.INVALID_FIELD, "an append needs at least one message")
        size_bytes = sum(_size_bytes(m[0], m[1], _headers(m)) for m in messages)
        full = self._backpressure(len(messages), size_bytes)
        if full is not None:
            return full
        start = self.end_offset
        # One dict update for the batch; Offset() per message would cost a call each (the
        # NewType is free only to the type checker).
        by_offset = cast(dict[int, MessageTuple], self.messages)
        # Stamped with partition time, not the proposer's own: timestamps never go back
        # along the offsets, and age retention compares them with partition time.
        by_offset.update(
            zip(range(start, start + len(messages)), _stamped(messages, self.clock_ms), strict=True)
        )
        self.end_offset = Offset(start + len(messages))
        self.unflushed_bytes += size_bytes
        if producer_id is not None and sequence is not None:
            self._remember(producer_id, sequence, start, self.end_offset)
        self._check_invariants()
        return Appended(start, self.end_offset, duplicate=False)

    def consume(
        self,
        consumer_id: str,
        max_messages: int,
        request_id: str | None,
        timestamp_ms: int | None = None,
        sequence: int | None = None,
    ) -> Consumed | Rejected:
        """Advance ``consumer_id`` by up to ``max_messages``; a repeat of the last pop (its
        ``sequence``, or without one its ``request_id`` or that of one of its last
        ``request_ids_remembered`` pops without a sequence) gets its range again, less what
        retention removed meanwhile, and advances nothing; a pop with a sequence older than
        the last (a late copy) claims nothing."""
        self._advance(timestamp_ms)
        if max_messages <= 0:
            return Rejected(ErrorCode.INVALID_FIELD, "max_messages must be positive")
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            if len(self.consumers) >= self.limits.consumers_max:
                return Rejected(ErrorCode.TOO_MANY, "this partition has too many consumers")
            consumer = _Consumer(offset=self.log_start_offset)
            self.consumers[consumer_id] = consumer
        self._touch(_CONSUMER, consumer_id)
        repeated = self._repeated_pop(consumer, request_id, sequence)
        if repeated is not None:
            return repeated
        start = max(consumer.offset, self.log_start_offset)
        end = Offset(min(start + max_messages, self.end_offset))
        consumer.offset = end
        consumer.last_request_id = request_id
        consumer.last_range = (start, end)
        if sequence is not None:
            consumer.last_sequence = sequence
        elif request_id is not None:
            consumer.request_ranges[request_id] = (start, end)
            while len(consumer.request_ranges) > self.limits.request_ids_remembered:
                consumer.request_ranges.popitem(last=False)
        return Consumed(start, end)

    def pop_may_claim(self, consumer_id: str, request_id: str | None, sequence: int | None) -> bool:
        """Whether a pop could answer anything: messages past the consumer's offset, or a
        repeat or late copy of one of its pops (answered from the state, or refused). Read
        only; a long poll waits while it is False, then answers empty without proposing
        (an empty pop claims nothing, so its repeat may claim what came since)."""
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            return self.log_start_offset < self.end_offset
        last = consumer.last_sequence
        if sequence is not None and last is not None and sequence <= last:
            return True
        remembered = request_id == consumer.last_request_id or (
            request_id in consumer.request_ranges
        )
        if sequence is None and request_id is not None and remembered:
            return True
        return max(consumer.offset, self.log_start_offset) < self.end_offset

    def mark_flushed(
        self,
        replica_id: ReplicaId,
        flushed_offset: int,
        start: int | None = None,
        raft_address: str | None = None,
    ) -> Flushed | Rejected:
        """Replica ``replica_id`` has every message below ``flushed_offset`` in its database.
        Idempotent and monotonic: a lower or equal offset changes nothing, and so does a
        batch written from ``start`` when the replica's prefix no longer reaches ``start``
        (its slot was reset: ``reset_replica``), and a mark from a replica at another
        ``raft_address`` than the slot's recorded holder (one that no longer holds the slot,
        or a mark without an address)."""
        if not 0 <= replica_id < len(self.flushed_offsets):
            return Rejected(ErrorCode.INVALID_FIELD, f"no replica {replica_id}")
        if flushed_offset > self.end_offset:
            return Rejected(ErrorCode.INVALID_FIELD, "cannot flush past the end offset")
        holder = self.holders[replica_id]
        holds = holder is None or raft_address == holder
        contiguous = start is None or start <= self.flushed_offsets[replica_id]
        if holds and contiguous and flushed_offset > self.flushed_offsets[replica_id]:
            self.flushed_offsets[replica_id] = Offset(flushed_offset)
            self._evict(self._eviction_floor())
        self._check_invariants()
        return Flushed(self.flushed_offsets[replica_id], self.evicted_offset)

    def truncate(self, log_start_offset: int) -> Truncated:
        """Retention: move the log start up to ``log_start_offset``, but never past what
        every in-sync replica has flushed (``evicted_offset``: nothing still in memory
        leaves) nor back. Consumers below it continue from it (``consume``); a replica
        that has not flushed up to it skips the rest (``Flusher``). Idempotent."""
        new_start = min(log_start_offset, self.evicted_offset)
        if new_start > self.log_start_offset:
            self.log_start_offset = Offset(new_start)
            self.groups.skip_below(new_start)
        return Truncated(self.log_start_offset)

    def reset_replica(self, replica_id: int, raft_address: str | None = None) -> Flushed | Rejected:
        """Re-replication: slot ``replica_id`` belongs to a new replica (at ``raft_address``)
        whose database is empty, so its flushed offset is 0 again, and only that replica's
        marks move it from now on. Nothing is evicted (the floor can only drop), so the
        messages still in memory stay; the new replica copies what is below
        ``evicted_offset`` from a peer (``lagging``). Eviction then waits for it only once
        it is back within ``replica_lag_messages_max`` (``_eviction_floor``).

        Checked before anything changes: refused (state unchanged) when no other slot has
        flushed up to ``evicted_offset``, since the slot's old replica alone would then hold
        what left memory. A repeat naming the slot's recorded holder changes nothing (a
        Raft address is never reused), so it never undoes the new replica's progress."""
        if not 0 <= replica_id < len(self.flushed_offsets):
            return Rejected(ErrorCode.INVALID_FIELD, f"no replica {replica_id}")
        if raft_address is not None and raft_address == self.holders[replica_id]:
            return Flushed(self.flushed_offsets[replica_id], self.evicted_offset)
        others = [f for slot, f in enumerate(self.flushed_offsets) if slot != replica_id]
        if max(others, default=Offset(0)) < self.evicted_offset:
            return Rejected(
                ErrorCode.REFUSED,
                f"only replica {replica_id} has flushed up to the evicted offset "
                f"{self.evicted_offset}: resetting it would leave no copy of what left memory",
            )
        self.flushed_offsets[replica_id] = Offset(0)
        self.holders[replica_id] = raft_address
        self._check_invariants()
        return Flushed(self.flushed_offsets[replica_id], self.evicted_offset)

    # --- queries (any thread, under the adapter's lock) -----------------------------------

    def lagging(self, replica_id: ReplicaId) -> bool:
        """True when messages this replica has not flushed have already left memory: it must
        copy ``[its flushed offset, evicted_offset)`` from a peer's database."""
        return self.flushed_offsets[replica_id] < self.evicted_offset

    def holds_batch(self, producer_id: str, sequence: int) -> bool:
        """This producer's batch ``sequence`` is stored and still remembered: its repeat is
        the duplicate ``append`` answers (``_seen_sequence``), not a new batch."""
        producer = self.producers.get(producer_id)
        return producer is not None and sequence in producer.ranges

    def read(self, start: int, end: int) -> list[tuple[Offset, MessageTuple]]:
        """Messages of ``[start, end)`` still in memory, in offset order."""
        low = max(start, self.evicted_offset)
        high = min(end, self.end_offset)
        messages = cast(dict[int, MessageTuple], self.messages)
        return cast(
            list[tuple[Offset, MessageTuple]],
            [(offset, messages[offset]) for offset in range(low, high)],
        )

    def replicated_bitmasks(self, start: int, end: int) -> list[int]:
        """``replicated_bitmask`` of each offset in ``[start, end)``: the mask changes only at
        a flushed offset, so it is computed once per run, not once per message."""
        masks: list[int] = []
        offset = start
        for bound in sorted({f for f in self.flushed_offsets if start < f < end} | {end}):
            masks.extend([self.replicated_bitmask(offset)] * (bound - offset))
            offset = bound
        return masks

    def replicated_bitmask(self, offset: int) -> int:
        """The seed's ``msg_replicated_bitmask``: bit r is set while replica r has not
        flushed ``offset``."""
        return sum(1 << r for r, flushed in enumerate(self.flushed_offsets) if flushed <= offset)

    # --- internals ------------------------------------------------------------------------

    def _advance(self, timestamp_ms: int | None) -> None:
        """Move partition time to ``timestamp_ms`` (never back: proposers' clocks differ a
        little) and forget a few clients idle for longer than the expiry."""
        if timestamp_ms is not None and timestamp_ms > self.clock_ms:
            if self.clock_ms == 0:
                # Clients recorded before any timestamp (an old snapshot or journal): their
                # idle time starts now, not at the epoch.
                self.last_seen_ms = OrderedDict.fromkeys(self.last_seen_ms, timestamp_ms)
            self.clock_ms = timestamp_ms
        self._expire_idle()

    def _expire_idle(self) -> None:
        horizon_ms = self.clock_ms - self.limits.client_idle_expiry_ms
        for _ in range(_EXPIRED_PER_COMMAND_MAX):
            oldest = next(iter(self.last_seen_ms.items()), None)
            if oldest is None or oldest[1] >= horizon_ms:
                return
            (kind, client_id), _ = self.last_seen_ms.popitem(last=False)
            if kind == _CONSUMER:
                del self.consumers[client_id]
            else:
                del self.producers[client_id]

    def _touch(self, kind: str, client_id: str) -> None:
        key = (kind, client_id)
        self.last_seen_ms[key] = self.clock_ms
        self.last_seen_ms.move_to_end(key)

    def _repeated_pop(
        self, consumer: _Consumer, request_id: str | None, sequence: int | None
    ) -> Consumed | Rejected | None:
        """The answer to a pop this consumer made before (see ``consume``), or ``None`` for a
        new one."""
        last = consumer.last_sequence
        if sequence is not None and last is not None and sequence <= last:
            if sequence == last:
                return self._retained(consumer.last_range)
            return Rejected(
                ErrorCode.SEQUENCE_OUT_OF_ORDER,
                f"pop sequence {sequence} is older than this consumer's last ({last}): a "
                "late copy of an answered pop; nothing was claimed",
            )
        if sequence is not None or request_id is None:
            return None
        if request_id == consumer.last_request_id:
            return self._retained(consumer.last_range)
        known = consumer.request_ranges.get(request_id)
        return None if known is None else self._retained(known)

    def _retained(self, claimed: tuple[Offset, Offset]) -> Consumed:
        """A claimed range less what retention removed since (as a fresh pop starts at the
        log start): its rows are gone from every database, so answering them is impossible,
        and the caller gets every retained message of it."""
        start, end = claimed
        return Consumed(Offset(min(max(start, self.log_start_offset), end)), end)

    def _seen_sequence(self, producer_id: str, sequence: int) -> Appended | Rejected | None:
        producer = self.producers.get(producer_id)
        if producer is None:
            return None
        known = producer.ranges.get(sequence)
        if known is not None:
            self.producers.move_to_end(producer_id)
            return Appended(known[0], known[1], duplicate=True)
        if sequence <= producer.last_sequence:
            return Rejected(
                ErrorCode.SEQUENCE_OUT_OF_ORDER,
                f"sequence {sequence} is not above the last one ({producer.last_sequence}) "
                "and too old to be recognised as a retry",
            )
        return None

    def _remember(self, producer_id: str, sequence: int, start: Offset, end: Offset) -> None:
        producer = self.producers.get(producer_id)
        if producer is None:
            producer = _Producer(last_sequence=sequence)
            self.producers[producer_id] = producer
        self.producers.move_to_end(producer_id)
        self._touch(_PRODUCER, producer_id)
        producer.last_sequence = sequence
        producer.ranges[sequence] = (start, end)
        while len(producer.ranges) > self.limits.sequences_remembered:
            producer.ranges.popitem(last=False)
        while len(self.producers) > self.limits.producers_max:
            forgotten, _ = self.producers.popitem(last=False)
            del self.last_seen_ms[(_PRODUCER, forgotten)]

    def _backpressure(self, count: int, size_bytes: int) -> Rejected | None:
        unflushed = self.end_offset - self.evicted_offset
        if unflushed + count > self.limits.unflushed_messages_max:
            return Rejected(
                ErrorCode.BACKPRESSURE,
                f"{unflushed} messages wait to be flushed by every replica; retry later",
            )
        if self.unflushed_bytes + size_bytes > self.limits.unflushed_bytes_max:
            return Rejected(
                ErrorCode.BACKPRESSURE,
                f"{self.unflushed_bytes} bytes wait to be flushed by every replica; retry later",
            )
        return None

    def _eviction_floor(self) -> Offset:
        """Wait for every replica within ``replica_lag_messages_max`` of the most advanced
        one, but never evict what fewer than a majority have flushed."""
        flushed = sorted(self.flushed_offsets)
        majority_floor = flushed[len(flushed) - (len(flushed) // 2 + 1)]
        in_sync = [f for f in flushed if f >= flushed[-1] - self.limits.replica_lag_messages_max]
        return min(*in_sync, majority_floor)

    def _evict(self, new_evicted_offset: Offset) -> None:
        messages = cast(dict[int, MessageTuple], self.messages)
        for offset in range(self.evicted_offset, new_evicted_offset):
            key, value, _, headers = messages.pop(offset)
            self.unflushed_bytes -= _size_bytes(key, value, headers)
        self.evicted_offset = max(self.evicted_offset, new_evicted_offset)

    def _check_invariants(self) -> None:
        # Eviction itself waits for a majority (``_eviction_floor``); once a dead replica's
        # slot is reset (``reset_replica``) only the survivors hold what was evicted, so
        # the invariant is that some replica always does.
        check(
            self.evicted_offset <= max(self.flushed_offsets) <= self.end_offset,
            "evicted <= what some replica flushed, every flushed offset <= end",
        )
        check(
            len(self.messages) == self.end_offset - self.evicted_offset,
            "msg_dict holds exactly [evicted_offset, end_offset)",
        )
        check(
            len(self.last_seen_ms) == len(self.consumers) + len(self.producers),
            "last_seen_ms names exactly the consumers and producers",
        )


def _stamped(messages: Sequence[KeyValue], timestamp_ms: int) -> Iterator[MessageTuple]:
    # ``_headers`` inlined: this runs per message in every replica's apply.
    return ((m[0], m[1], timestamp_ms, m[2] if len(m) == 3 else NO_HEADERS) for m in messages)


def _headers(message: KeyValue) -> Headers:
    return message[2] if len(message) == 3 else NO_HEADERS


def _size_bytes(key: str | None, value: str, headers: Headers) -> int:
    # len() of str counts code points; close enough for a memory bound and far cheaper
    # than encoding every message in apply.
    size = len(value) + (0 if key is None else len(key))
    for name, header_value in headers:
        size += len(name) + len(header_value)
    return size
