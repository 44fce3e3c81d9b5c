"""``GroupLeases``: one consumer group's leased delivery on one partition (issue 20).

The pure core of a work queue, kept in the partition's replicated state like a consumer's
offset: which offsets are leased to a member and until when, how often each was delivered,
which wait to be delivered again, which are settled (acknowledged, or dead-lettered).
Every method takes the time as an argument (the proposer's clock, fixed in the Raft entry)
and never reads a clock, so every replica that applies the same commands holds the same
state. No I/O, no threads.

Offsets of one group move through these states (half-open ranges, as everywhere):

    [0, floor)                   settled: acknowledged or dead-lettered, never handed out again
    leases       (offset → Lease)  in flight: handed to a member until ``expires_ms``
    waiting      (offset → Wait)   to be handed out (again) from ``ready_ms``: a nack, an
                                   expired lease, or (per-key ordering) skipped while an
                                   earlier message of its key was unsettled
    dead         (offset → Wait)   past ``max_deliveries``: to be produced to the dead-letter
                                   topic, then settled (``settle_dead``); each with its
                                   dead-letter sequence (``dead_sequences``). In a group
                                   without a dead-letter topic they stay here (parked, as
                                   NATS's MaxDeliver leaves them) until a redrive
    settled      (set of offsets)  settled above ``floor`` (folded into ``floor`` once
                                   contiguous)
    [next_offset, end)             never handed out

A *redrive* makes dead messages deliverable again: parked ones (``redrive_parked``), or
settled ones whose copy in the dead-letter topic is being redriven (``reopen``). A reopened
message may lie below ``floor``: ``leases``, ``waiting`` and ``dead`` hold any offset below
``next_offset``, and only ``settled`` is bounded by ``floor`` (everything below ``floor``
that is in none of them is settled). Its delivery count goes on from where it was (so the
receipt of a delivery before the redrive stays stale), and ``max_deliveries`` counts the
deliveries after the redrive (``counted_from``), as SQS resets a redriven message's receive
count.

Every record here pickles by field order (``ByFieldOrder``): a field added later at the
end gets its default in a snapshot written before.

A receipt names one delivery: ``(offset, delivery_count)``. Ack, nack and extend are
idempotent by receipt: the receipt of the current lease acts; one of an earlier delivery
(its lease ended and the message went to another member) changes nothing and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from protocol.group_requests import Outcome
from protocol.invariant import check
from protocol.limits import PartitionLimits
from protocol.snapshot_fields import ByFieldOrder
from protocol.types import Offset


@dataclass(frozen=True, slots=True)
class GroupSettings:
    visibility_timeout_ms: int
    """How long a lease lasts unless extended."""
    max_deliveries: int
    """Deliveries after which a message whose lease ends goes to the dead-letter topic
    instead of being delivered again; 0: no limit."""
    ordered_by_key: bool = False
    """A key's next message is not leased while an earlier one of the same key is
    unsettled (SQS FIFO message groups, Pulsar Key_Shared)."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """One delivery of one message of this partition (on the wire, with the partition:
    ``protocol.group_requests.DeliveryReceipt``)."""

    offset: Offset
    delivery_count: int


@dataclass(slots=True)
class Lease(ByFieldOrder):
    delivery_count: int
    expires_ms: int
    key: str | None
    counted_from: int = 0
    """Deliveries before its last redrive: ``max_deliveries`` counts those after."""


@dataclass(slots=True)
class Wait(ByFieldOrder):
    delivery_count: int
    """Deliveries so far (0: skipped for ordering, never delivered)."""
    ready_ms: int
    key: str | None
    counted_from: int = 0
    """Deliveries before its last redrive: ``max_deliveries`` counts those after."""


_ZERO = Offset(0)


class UnknownKey:
    """What ``key_of`` answers for a message whose key the partition cannot see (it left
    memory, and the proposer did not supply it): an ordered group's receive stops there."""


KEY_UNKNOWN = UnknownKey()
KeyOf = Callable[[Offset], str | None | UnknownKey]


@dataclass(frozen=True, slots=True)
class GroupFigures:
    """What one group has left to do in one partition (``GET /groups`` at a broker)."""

    floor: int
    """Everything below is settled: the oldest message not settled, if any, is here."""
    unsettled: int
    """Messages of ``[floor, end)`` not settled: never delivered, leased, waiting or dead."""
    in_flight: int
    """Leased now."""
    dead: int
    """Past ``max_deliveries``, waiting for the dead-letter topic."""
    dead_lettered: int = 0
    """Settled by their copy in the dead-letter topic so far."""


@dataclass(frozen=True, slots=True)
class Letter:
    """A message to reopen: named by its copy in the dead-letter topic (origin offset, the
    delivery count it died with, its key)."""

    offset: Offset
    delivery_count: int
    key: str | None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message past ``max_deliveries``, to be produced to the dead-letter topic."""

    offset: Offset
    delivery_count: int
    sequence: int
    """Its dead-letter sequence (``GroupLeases.dead_sequences``)."""


@dataclass(slots=True)
class GroupLeases(ByFieldOrder):
    floor: Offset = _ZERO
    next_offset: Offset = _ZERO
    leases: dict[int, Lease] = field(default_factory=dict)
    waiting: dict[int, Wait] = field(default_factory=dict)
    dead: dict[int, Wait] = field(default_factory=dict)
    settled: set[int] = field(default_factory=set)
    dead_sequences: dict[int, int] = field(default_factory=dict)
    """Per offset in ``dead``: the sequence its copy is produced to the dead-letter topic
    with (from ``dead_sequence_next``, in the order messages died), so that a repeat of
    that produce after a failover is recognised by the dead-letter partition."""
    dead_sequence_next: int = 1
    dead_lettered: int = 0
    """Messages settled by their copy in the dead-letter topic so far."""
    in_dead_letter_topic: set[int] = field(default_factory=set)
    """Offsets settled by their copy in the dead-letter topic and not reopened since: the
    only settled messages a redrive may reopen. A second redrive of one copy (a new plan
    after a manager's failover, from a cursor the first did not move yet) finds its
    message delivered and acknowledged since, and leaves it settled."""
    tracks_dead_letter_topic: bool = False
    """Whether ``in_dead_letter_topic`` is kept (every group made since it exists:
    ``tracking_leases``). A group restored from a snapshot written before holds no record of
    its copies, so there a redrive reopens any settled message a copy names, as before."""

    # --- commands (apply) ------------------------------------------------------------------

    def receive(
        self,
        settings: GroupSettings,
        max_messages: int,
        now_ms: int,
        end_offset: int,
        key_of: KeyOf,
        *,
        leases_max: int,
        unsettled_max: int,
        scan_max: int,
    ) -> list[tuple[Offset, int]]:
        """Lease up to ``max_messages`` offsets until ``now_ms + visibility_timeout_ms``:
        first those waiting and ready (lowest offset first), then never-delivered ones from
        ``next_offset``. Bounded: never more than ``leases_max`` in flight, never more than
        ``unsettled_max`` handed out and not settled, never more than ``scan_max`` offsets
        looked at. Returns ``(offset, delivery_count)`` per lease."""
        self.expire(settings, now_ms)
        room = min(max_messages, leases_max - len(self.leases))
        ordered = settings.ordered_by_key
        blocked = self._keys_unsettled() if ordered else set()
        leased: list[tuple[Offset, int]] = []
        scanned = 0
        for offset in sorted(self.waiting):
            if len(leased) >= room or scanned >= scan_max:
                break
            scanned += 1
            wait = self.waiting[offset]
            held = ordered and wait.key is not None and wait.key in blocked
            if wait.ready_ms <= now_ms and not held:
                del self.waiting[offset]
                leased.append(self._lease(settings, Offset(offset), wait, now_ms))
            if ordered and wait.key is not None:
                blocked.add(wait.key)  # its later messages wait for this one
        while (
            len(leased) < room
            and scanned < scan_max
            and self.next_offset < end_offset
            and self._unsettled() < unsettled_max
        ):
            offset = self.next_offset
            key = key_of(offset)
            if isinstance(key, UnknownKey):
                if ordered:
                    break  # its key decides whether it may go: wait for a receive that has it
                key = None
            scanned += 1
            self.next_offset = Offset(offset + 1)
            wait = Wait(0, now_ms, key)
            if ordered and wait.key is not None and wait.key in blocked:
                self.waiting[offset] = wait  # handed out in order once its key is free
                continue
            leased.append(self._lease(settings, offset, wait, now_ms))
            if ordered and wait.key is not None:
                blocked.add(wait.key)
        self._check_invariants()
        return leased

    def ack(self, receipts: Iterable[Receipt]) -> list[Outcome]:
        """Settle each receipt's message (idempotent)."""
        outcomes = []
        for receipt in receipts:
            outcome = self._current(receipt)
            if outcome is Outcome.DONE:
                del self.leases[receipt.offset]
                self._settle(receipt.offset)
            outcomes.append(outcome)
        self._check_invariants()
        return outcomes

    def nack(
        self, settings: GroupSettings, receipts: Iterable[Receipt], delay_ms: int, now_ms: int
    ) -> list[Outcome]:
        """End each receipt's lease now: its message is delivered again from
        ``now_ms + delay_ms``, or dead-lettered past ``max_deliveries``. A nack of a
        delivery that ended already, with none after it, is ``ENDED``."""
        outcomes = []
        for receipt in receipts:
            outcome = self._current(receipt)
            if outcome is Outcome.DONE:
                self._end_lease(settings, receipt.offset, now_ms + delay_ms)
            elif outcome is Outcome.STALE and self._ended(receipt):
                # This delivery ended already (a repeat of this nack whose answer was lost,
                # or its lease ran out) and no later one began: not another's message.
                outcome = Outcome.ENDED
            outcomes.append(outcome)
        self._check_invariants()
        return outcomes

    def extend(
        self, receipts: Iterable[Receipt], visibility_timeout_ms: int, now_ms: int
    ) -> list[Outcome]:
        """Each current lease now ends at ``now_ms + visibility_timeout_ms`` (never earlier
        than it did: an extend that arrives late shortens nothing)."""
        outcomes = []
        for receipt in receipts:
            outcome = self._current(receipt)
            if outcome is Outcome.DONE:
                lease = self.leases[receipt.offset]
                lease.expires_ms = max(lease.expires_ms, now_ms + visibility_timeout_ms)
            outcomes.append(outcome)
        return outcomes

    def expire(self, settings: GroupSettings, now_ms: int) -> None:
        """Every lease that ended by ``now_ms`` ends: delivered again at once, or
        dead-lettered past ``max_deliveries``."""
        for offset in [o for o, lease in self.leases.items() if lease.expires_ms <= now_ms]:
            self._end_lease(settings, Offset(offset), now_ms)

    def settle_dead(self, offsets: Iterable[int]) -> None:
        """The dead-letter topic holds these messages now: settled (idempotent)."""
        for offset in offsets:
            if self.dead.pop(offset, None) is not None:
                del self.dead_sequences[offset]
                self.dead_lettered += 1
                self.in_dead_letter_topic.add(offset)
                self._settle(Offset(offset))
        self._check_invariants()

    def redrive_parked(self, most: int, now_ms: int) -> int:
        """Up to ``most`` parked dead messages, in the order they died, are deliverable again
        from ``now_ms``; how many."""
        first = sorted(self.dead, key=self.dead_sequences.__getitem__)[: max(0, most)]
        for offset in first:
            wait = self.dead.pop(offset)
            del self.dead_sequences[offset]
            self._reopened(offset, wait.delivery_count, wait.key, now_ms)
        self._check_invariants()
        return len(first)

    def reopen(self, letters: Iterable[Letter], now_ms: int, log_start_offset: int) -> Redriven:
        """Each letter's message, dead-lettered (or dead and about to be), is deliverable
        again from ``now_ms``. One that retention removed is ``gone``; one that is leased or
        waiting already, was never handed out, or was reopened by an earlier redrive (and
        maybe acknowledged since), is left as it is."""
        redriven = gone = 0
        for letter in letters:
            offset = letter.offset
            if offset < log_start_offset:
                gone += 1
                continue
            if offset not in self.dead and not self._reopenable(offset):
                continue
            count, key = letter.delivery_count, letter.key
            wait = self.dead.pop(offset, None)
            if wait is not None:
                del self.dead_sequences[offset]
                count, key = max(count, wait.delivery_count), wait.key
            self.in_dead_letter_topic.discard(offset)
            self.settled.discard(offset)
            self._reopened(offset, count, key, now_ms)
            redriven += 1
        self._check_invariants()
        return Redriven(redriven, gone)

    def _reopenable(self, offset: int) -> bool:
        """A settled message in the dead-letter topic, not reopened since it went there."""
        if not self.tracks_dead_letter_topic:
            handed_out = offset < self.next_offset
            return handed_out and offset not in self.leases and offset not in self.waiting
        return offset in self.in_dead_letter_topic

    def skip_below(self, log_start_offset: int) -> None:
        """Retention removed everything below ``log_start_offset``: what the group had not
        settled there is gone (as for a consumer below the log start, Kafka's
        auto.offset.reset=earliest)."""
        for table in (self.leases, self.waiting, self.dead, self.dead_sequences):
            for offset in [o for o in table if o < log_start_offset]:
                del table[offset]
        kept = {o for o in self.in_dead_letter_topic if o >= log_start_offset}
        self.in_dead_letter_topic = kept
        if log_start_offset <= self.floor:
            return
        self.settled = {o for o in self.settled if o >= log_start_offset}
        self.floor = Offset(log_start_offset)
        self.next_offset = Offset(max(self.next_offset, log_start_offset))
        self._fold()
        self._check_invariants()

    # --- queries ---------------------------------------------------------------------------

    def in_flight(self) -> int:
        return len(self.leases)

    def pending_dead(self, most: int) -> list[DeadLetter]:
        """Up to ``most`` messages to produce to the dead-letter topic, in the order they
        died (their sequences')."""
        first = sorted(self.dead, key=self.dead_sequences.__getitem__)[:most]
        return [
            DeadLetter(Offset(o), self.dead[o].delivery_count, self.dead_sequences[o])
            for o in first
        ]

    # --- internals -------------------------------------------------------------------------

    def _lease(
        self, settings: GroupSettings, offset: Offset, wait: Wait, now_ms: int
    ) -> tuple[Offset, int]:
        count = wait.delivery_count + 1
        expires_ms = now_ms + settings.visibility_timeout_ms
        self.leases[offset] = Lease(count, expires_ms, wait.key, wait.counted_from)
        return offset, count

    def _reopened(self, offset: int, delivery_count: int, key: str | None, now_ms: int) -> None:
        self.waiting[offset] = Wait(delivery_count, now_ms, key, counted_from=delivery_count)

    def _unsettled(self) -> int:
        return len(self.leases) + len(self.waiting) + len(self.dead)

    def may_deliver(self, now_ms: int, end_offset: int, ordered: bool, scan_max: int) -> bool:
        """Read only, and never False when a receive at ``now_ms`` would lease something:
        a lease that has ended, a message waiting and ready (with per-key ordering: and
        not held back by an earlier one of its key, looked at as ``receive`` does), or a
        message never delivered. A receive finding nothing is not proposed: an entry that
        changes nothing, which a long poll would propose at every ask."""
        if any(lease.expires_ms <= now_ms for lease in self.leases.values()):
            return True
        blocked = self._keys_unsettled() if ordered else set()
        for offset in sorted(self.waiting)[:scan_max]:
            wait = self.waiting[offset]
            held = ordered and wait.key is not None and wait.key in blocked
            if wait.ready_ms <= now_ms and not held:
                return True
            if ordered and wait.key is not None:
                blocked.add(wait.key)
        return self.next_offset < end_offset

    def next_change_ms(self, after_ms: int) -> int | None:
        """The earliest time after ``after_ms`` that a lease ends or a waiting message
        becomes ready: a long poll that found nothing wakes then (nothing else changes with
        time alone; a time already past changes nothing more)."""
        times = [lease.expires_ms for lease in self.leases.values()]
        times += [wait.ready_ms for wait in self.waiting.values()]
        return min((t for t in times if t > after_ms), default=None)

    def figures(self, end_offset: int) -> GroupFigures:
        above = sum(1 for offset in self.settled if offset < end_offset)
        below = sum(1 for t in (self.leases, self.waiting, self.dead) for o in t if o < self.floor)
        unsettled = max(0, end_offset - self.floor - above) + below
        return GroupFigures(
            self.floor, unsettled, len(self.leases), len(self.dead), self.dead_lettered
        )

    def _current(self, receipt: Receipt) -> Outcome:
        lease = self.leases.get(receipt.offset)
        if lease is not None and lease.delivery_count == receipt.delivery_count:
            return Outcome.DONE
        if any(receipt.offset in table for table in (self.leases, self.waiting, self.dead)):
            return Outcome.STALE  # before the floor's test: a redriven message may lie below
        if receipt.offset < self.floor or receipt.offset in self.settled:
            return Outcome.ALREADY
        if receipt.offset >= self.next_offset:
            return Outcome.UNKNOWN
        return Outcome.STALE

    def _ended(self, receipt: Receipt) -> bool:
        """The receipt's delivery is the message's last one, and it has ended."""
        wait = self.waiting.get(receipt.offset) or self.dead.get(receipt.offset)
        return wait is not None and wait.delivery_count == receipt.delivery_count

    def _end_lease(self, settings: GroupSettings, offset: Offset, ready_ms: int) -> None:
        lease = self.leases.pop(offset)
        wait = Wait(lease.delivery_count, ready_ms, lease.key, lease.counted_from)
        since_redrive = lease.delivery_count - lease.counted_from
        if settings.max_deliveries and since_redrive >= settings.max_deliveries:
            self.dead[offset] = wait
            self.dead_sequences[offset] = self.dead_sequence_next
            self.dead_sequence_next += 1
        else:
            self.waiting[offset] = wait

    def _settle(self, offset: Offset) -> None:
        if offset < self.floor:
            return  # a redriven message: below the floor, settled is what is in no table
        self.settled.add(offset)
        self._fold()

    def _fold(self) -> None:
        """Move ``floor`` over the settled offsets right above it."""
        while self.floor in self.settled:
            self.settled.discard(self.floor)
            self.floor = Offset(self.floor + 1)

    def _keys_unsettled(self) -> set[str]:
        """Keys of messages in flight or being dead-lettered: their later messages wait
        (messages without a key are not ordered)."""
        leased = [lease.key for lease in self.leases.values()]
        dead = [wait.key for wait in self.dead.values()]
        return {key for key in leased + dead if key is not None}

    def _check_invariants(self) -> None:
        check(self.floor <= self.next_offset, "floor <= next_offset")
        tables = [set(self.leases), set(self.waiting), set(self.dead), self.settled]
        check(
            sum(len(t) for t in tables) == len(set().union(*tables)),
            "an offset is in at most one of leases, waiting, dead, settled",
        )
        check(
            all(self.floor <= o < self.next_offset for o in self.settled),
            "settled lies in [floor, next_offset)",
        )
        check(
            all(0 <= o < self.next_offset for t in tables[:3] for o in t),
            "leases, waiting and dead lie below next_offset",
        )
        check(self.dead_sequences.keys() == self.dead.keys(), "each dead letter has a sequence")
        check(
            not self.in_dead_letter_topic & set().union(*tables[:3]),
            "a message in the dead-letter topic is settled",
        )


def tracking_leases() -> GroupLeases:
    """A new group's leases, recording which messages are in its dead-letter topic."""
    return GroupLeases(tracks_dead_letter_topic=True)


@dataclass(frozen=True, slots=True)
class GroupRequest:
    max_messages: int
    now_ms: int
    """The proposer's clock."""
    request_id: str | None


@dataclass(frozen=True, slots=True)
class Leased:
    """What a receive leased: ``(offset, delivery_count)`` per message, in the order to
    hand them out (a repeat of the same request id gets the same list)."""

    leases: tuple[tuple[Offset, int], ...]


@dataclass(frozen=True, slots=True)
class Redriven:
    """What a redrive did in one partition."""

    redriven: int
    """Messages deliverable again."""
    gone: int = 0
    """Messages whose copy was redriven but which retention had removed here."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What an ack, nack or extend did, per receipt in the order given."""

    outcomes: tuple[Outcome, ...]


@dataclass(slots=True)
class _Group(ByFieldOrder):
    settings: GroupSettings
    leases: GroupLeases = field(default_factory=tracking_leases)
    receives: dict[str, tuple[tuple[Offset, int], ...]] = field(default_factory=dict)
    """The leases of the last few receives by request id, oldest first (insertion order):
    a repeat whose answer was lost gets them again and leases nothing more."""
    redrives: dict[str, Redriven] = field(default_factory=dict)
    """What the last few redrives did, by request id, oldest first: a repeat (its answer
    was lost, or the step is repeated after a failover) does nothing again."""


@dataclass(slots=True)
class ConsumerGroups(ByFieldOrder):
    """The consumer groups of one partition, by name: each group's settings (as its
    latest receive carried them), its ``GroupLeases`` and its recent receives. Part of
    ``PartitionLog``'s replicated state; pure."""

    groups: dict[str, _Group] = field(default_factory=dict)

    def may_deliver(
        self,
        name: str,
        request: GroupRequest,
        ordered: bool,
        start: int,
        end_offset: int,
        scan_max: int,
    ) -> bool:
        """Whether a receive of group ``name`` could lease something (``GroupLeases.
        may_deliver``), or is a repeat whose leases come back; a group not seen here yet
        starts at the log start."""
        group = self.groups.get(name)
        if group is None:
            return start < end_offset
        if request.request_id is not None and request.request_id in group.receives:
            return True
        return group.leases.may_deliver(request.now_ms, end_offset, ordered, scan_max)

    def next_change_ms(self, name: str, after_ms: int) -> int | None:
        """``GroupLeases.next_change_ms`` of group ``name`` (None for a group not seen)."""
        group = self.groups.get(name)
        return None if group is None else group.leases.next_change_ms(after_ms)

    def next_offset(self, name: str, log_start_offset: int) -> int:
        """The first offset a receive of group ``name`` has never handed out."""
        group = self.groups.get(name)
        return (
            log_start_offset if group is None else max(group.leases.next_offset, log_start_offset)
        )

    def figures(self, end_offset: int) -> list[tuple[str, GroupFigures]]:
        """Each group's figures, by name (a group appears at its first receive here)."""
        return [
            (name, self.groups[name].leases.figures(end_offset)) for name in sorted(self.groups)
        ]

    def receive(
        self,
        name: str,
        settings: GroupSettings,
        request: GroupRequest,
        end_offset: int,
        key_of: KeyOf,
        limits: PartitionLimits,
    ) -> Leased | None:
        """Lease what ``request`` asks for (``GroupLeases.receive``); a repeat of one of
        the group's last ``request_ids_remembered`` request ids gets its leases again.
        ``None``: a new group past ``groups_max`` (nothing changed)."""
        group = self.groups.get(name)
        if group is None:
            if len(self.groups) >= limits.groups_max:
                return None
            group = self.groups[name] = _Group(settings)
        group.settings = settings
        if request.request_id is not None and request.request_id in group.receives:
            return Leased(group.receives[request.request_id])
        leased = group.leases.receive(
            settings,
            request.max_messages,
            request.now_ms,
            end_offset,
            key_of,
            leases_max=limits.group_leases_max,
            unsettled_max=limits.group_unsettled_max,
            scan_max=limits.group_scan_max,
        )
        # An empty answer is not remembered: its repeat (a long poll asks again with the
        # same request id) leases whatever has come since, and nothing was handed out.
        if request.request_id is not None and leased:
            group.receives[request.request_id] = tuple(leased)
            while len(group.receives) > limits.request_ids_remembered:
                del group.receives[next(iter(group.receives))]
        return Leased(tuple(leased))

    def settle(
        self, name: str, action: str, receipts: Iterable[Receipt], now_ms: int, duration_ms: int
    ) -> Settled:
        """``ack``, ``nack`` (again after ``duration_ms``) or ``extend`` (for
        ``duration_ms`` more) each receipt; a group this partition never saw knows none."""
        receipts = list(receipts)
        group = self.groups.get(name)
        if group is None:
            return Settled(tuple(Outcome.UNKNOWN for _ in receipts))
        leases = group.leases
        if action == "ack":
            outcomes = leases.ack(receipts)
        elif action == "nack":
            outcomes = leases.nack(group.settings, receipts, duration_ms, now_ms)
        else:
            outcomes = leases.extend(receipts, duration_ms, now_ms)
        return Settled(tuple(outcomes))

    def redrive(
        self,
        name: str,
        request: GroupRequest,
        letters: Sequence[Letter],
        log_start_offset: int,
        remembered: int,
    ) -> Redriven:
        """Make dead messages of group ``name`` deliverable again: those ``letters`` name
        (their copies in the dead-letter topic are redriven), or without letters up to
        ``request.max_messages`` parked ones. A repeat of one of the group's last
        ``remembered`` request ids does nothing and answers the same."""
        group = self.groups.get(name)
        if group is None:
            return Redriven(0)
        if request.request_id is not None and request.request_id in group.redrives:
            return group.redrives[request.request_id]
        if letters:
            done = group.leases.reopen(letters, request.now_ms, log_start_offset)
        else:
            done = Redriven(group.leases.redrive_parked(request.max_messages, request.now_ms))
        if request.request_id is not None:
            group.redrives[request.request_id] = done
            while len(group.redrives) > remembered:
                del group.redrives[next(iter(group.redrives))]
        return done

    def dead_lettered(self, name: str, offsets: Iterable[int]) -> None:
        group = self.groups.get(name)
        if group is not None:
            group.leases.settle_dead(offsets)

    def pending_dead(self, most: int) -> list[tuple[str, DeadLetter]]:
        """Up to ``most`` dead letters to produce, over the groups by name, each group's in
        the order they died."""
        found: list[tuple[str, DeadLetter]] = []
        for name in sorted(self.groups):
            if len(found) >= most:
                break
            dead = self.groups[name].leases.pending_dead(most - len(found))
            found.extend((name, letter) for letter in dead)
        return found

    def skip_below(self, log_start_offset: int) -> None:
        for group in self.groups.values():
            group.leases.skip_below(log_start_offset)
