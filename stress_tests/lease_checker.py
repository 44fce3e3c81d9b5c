"""The lease checker: judges a consumer group's recorded history against DESIGN §4's leased
delivery (issue 20): every acknowledged message is eventually acked, a message goes to a
second member only after its lease ended or it was nacked, and an ack is for good. Pure: no
I/O, no clock, no randomness; the same history, in any order, always gives the same verdict.

What is recorded (``LeaseHistory``): every acknowledged produce (``Produced``), every
delivery a worker's receive returned (``Received``), the worker's ledger of finished work
(``Finished``), and every ack, nack and extend with its outcome (``Settled``). A message is
``(partition_id, offset)``; a delivery is ``(partition_id, offset, delivery_count)``, one
lease, named by its receipt.

Time. Every time is in ms from one machine's wall clock (``time.time() * 1000``), shared by
the workers and the brokers. Lease times are partition time: the highest timestamp the
partition's leaders proposed, each read from that clock when proposing. Hence:

- a command takes effect at a partition time between its request's ``sent_ms`` and its
  answer's ``at_ms`` (proposed after the request was sent, committed before the answer);
- what an answer at ``at_ms`` shows happened before any request sent after ``at_ms``.

The first is exact up to ``clock_tolerance_ms`` (ms rounding, partition time being the
highest timestamp proposed so far); the second needs no tolerance: both times are readings
of one clock around real events. A receive retried with the same request id may have
leased at its first attempt, so ``Received.sent_ms`` is that first attempt's send. An
``error`` outcome (no answer) may or may not have taken effect: every rule below assumes
whichever is more lenient.

Must be 0 (``MUST_BE_ZERO``):

- lost: a produced message that no answer shows settled by the end of the run: no ack
  ``done`` and no action answering ``already`` (settled before). An ack whose answer was
  lost (``error``), or whose answer a kill -9 kept out of the ledger, may have settled it:
  so the run must ask again (acks are idempotent by receipt) until an answer is recorded,
  e.g. by acking each unsettled message's last receipt once more after the drain, which
  answers ``already`` if it was settled.
- acked_unfinished: an ack ``done`` with no ``Finished`` of the same worker and delivery at
  or before the ack's ``sent_ms``. A worker records its ledger entry, then acks, both on its
  own clock: an ack without one was sent before the work was done.
- redelivered_after_ack: a ``Received`` of a message sent after the ``at_ms`` of an answer
  showing it settled (an ack ``done``, or ``already``): its lease began after its
  ``sent_ms``, so after the settle, and a settled message is never leased again. Or, with
  no clock at all, a delivery count above that of an ack ``done`` of the message: that ack
  acted on the current lease, so no later lease existed before it, and none after it. For a
  message with a copy in the dead-letter topic, in a run with a redrive, only an ack
  ``done`` counts: ``already`` may be its dead-lettering, which the redrive undoes.
- early_redelivery: delivery n+1 returned (its earliest ``at_ms``) before delivery n's lease
  could have ended, less ``clock_tolerance_ms``. Delivery n+1 is leased at a partition time
  at most its ``at_ms``, and only once delivery n's lease ended. The lease began no earlier
  than the earliest ``sent_ms`` of delivery n, so it expires no earlier than that plus
  ``visibility_timeout_ms``; each extend ``done`` took effect after its ``sent_ms``, so the
  lease expires no earlier than that plus its new timeout (an extend never shortens).
  A nack ends the lease early: a nack ``done`` sent at or before the redelivery's
  ``at_ms`` ended the current lease, so the bound is its ``sent_ms`` plus its delay, never
  the lease's; a nack ``error`` (or ``stale``: a repeat whose first attempt acted) may have
  done so, so the bound is the earlier of the two. A
  nack sent after the redelivery returned cannot have caused it. Extends other than
  ``done`` may not have acted; leaving them out only lowers the bound. Not judged when no
  receive of delivery n was recorded (a worker killed before it recorded the answer; see
  ``redeliveries_unjudged``). A holder of delivery n that recorded no settle of it and
  whose ledger ends before the redelivery (killed, say, with a nack sent and its answer
  not recorded: the long tier's lease run, seed 3100) may have nacked it right after its
  receive returned: the bound is then that receive's ``at_ms``.
- one_delivery_two_members: one delivery received by two workers. Each lease raises the
  delivery count, so a delivery is leased by one receive; only a repeat of that receive's
  request id, by the same worker, returns it again.
- one_delivery_two_receives: one delivery in two answered receives of one worker, sent at
  different times. A worker repeats a receive's request id (keeping its first send time)
  only until an answer comes, so two send times are two requests, and the later one leased
  the delivery again: the partition had forgotten the first lease (a power cut that lost an
  answered receive; handed to another worker, it is ``one_delivery_two_members``).
- count_skipped_back: a ``Received`` of delivery count n sent after an answer had handed out
  a higher count of the same message. Counts only grow: its lease began after a later one.
- receipt_mismatch: a receipt that does not name the delivery it came with
  (``"<partition_id>.<offset>.<delivery_count>"``). Acks are matched to receives by delivery.

Dead letters, when the group has ``max_deliveries`` (``LeaseHistory.max_deliveries``) and a
dead-letter topic, whose messages are read after the run (``DeadLetterCopy``, by their
``raftq-*`` headers). *Poison* messages (``Produced.poison``) are nacked by every worker at
every delivery, so each must die at exactly ``max_deliveries``. A message with a copy is
settled by it (not ``lost``). Must be 0:

- poison_not_dead_lettered: a poison message with no copy in the dead-letter topic.
- dead_letter_duplicated: two copies of one message (the dead-letter step is repeated by a
  failover: the repeat must be recognised).
- dead_letter_wrong: a copy that does not match its message: no such produced message,
  another value or producer's headers, another group, or a delivery count other than
  ``max_deliveries`` (a message dies when a delivery numbered ``max_deliveries`` ends).
- delivered_past_max: a delivery numbered above ``max_deliveries``, except, after a redrive,
  one of a message with a copy in the dead-letter topic (a poison message, or one whose
  deliveries all ended unacknowledged: the long tier's seed 3105 had one) answered after
  the redrive began (its lease may have come after: a receive sent before, a long poll
  say, may lease a reopened message) and numbered at most twice that.

A redrive (``LeaseHistory.redrive``: issue 20's ``POST /groups/{group}/redrive``, after the
poison messages reached the dead-letter topic) makes each dead-lettered message deliverable
to the group again, once; a redriven message's delivery count goes on from
``max_deliveries``, and the workers finish and ack it then. Must be 0:

- redrive_missed: a poison message that no ack of a delivery numbered above
  ``max_deliveries`` shows settled (``done``, or ``already``): the redrive did not bring it
  back, or it was lost after.
- redrive_miscounted: the redrive's answers counted another number of messages made
  deliverable again (``redriven``, plus ``gone``) than messages with a copy in the
  dead-letter topic: a letter redriven twice (a repeat after a manager's failover not
  recognised), or one skipped.

Power cuts (``LeaseHistory.power_cuts``): every node killed at once, losing what it had
not synced, then the cluster started again. Leases, delivery counts and settles are Raft
state at the ``fsync`` level: a command is answered only once a majority has it on disk,
so what an answer showed survives a cut, and every rule holds across cuts as it is. An
ack answered ``done`` (or ``already``) before a cut keeps its message settled after it
(else ``redelivered_after_ack``); a lease answered before a cut holds after it (else
``early_redelivery``, or, handed out again with the same count, ``one_delivery_two_members``
or ``one_delivery_two_receives``); counts do not go back (``count_skipped_back``). Partition
time does not go back either: the restarted leaders propose from the same clock. What a cut
may lose is what no answer showed, and the rules already allow it: an ack, nack or extend
whose answer the cut swallowed (``error``) may or may not have acted (an ack is asked
again until answered); a receive whose answer it swallowed is repeated with its request id
and its first send time. A cut is also an outage (not timed). Nothing is concluded from the
cut itself; the figures say what the cuts put to the test: ``acks_done_before_cuts`` (acks
answered ``done`` within ``ACKED_BEFORE_CUT_MS`` before a cut), ``leases_live_at_cuts``
(deliveries answered within the visibility timeout before a cut and not shown settled by
then) and ``settles_unanswered_at_cuts`` (sent before a cut, ``error``). The workers are not
cut: they stand for clients on other machines, and their ledgers are whole.

Reported, not must-be-zero (``late_redelivery``): for each delivery whose lease ended by
expiry (no nack ``done`` or ``error`` sent before the redelivery, no ack ``done``) and that
was delivered again, the latency as the workers saw it: the next delivery's first ``at_ms``
minus the lease's end as seen from its answers (the first ``at_ms`` of delivery n plus the
visibility timeout, or an extend ``done``'s ``at_ms`` plus its timeout, the latest). Issue
20's target is redelivery within the visibility timeout plus one second: p99 of this latency
at most ``redelivery_slack_ms`` (1,000 by default), outside the run's outages (a
redelivery whose wait overlaps a window in which a broker was down or paused on purpose is
counted in ``redeliveries_in_outages``, not timed). With the workers' receive calls
recorded, the latency runs from the lease's end or, when later, from the first receive
after it that had to find the message (``_first_ask_ms``): while every worker works
through a full batch nobody asks, and that wait is the workers' (counted in
``redeliveries_workers_busy``; seed 81001's long run timed six redeliveries 1,822 ms
"late" while its three workers each worked through full batches of ten).
``late_redelivery`` counts the samples above it; ``LeaseVerdict.redelivery_on_target`` says
whether p99 meets it, and ``LeaseVerdict.passed`` is ``ok`` and that.

Also reported: duplicates (messages finished more than once: the price of at-least-once)
and their rate over produced messages, and counts of deliveries, repeats and each action's
outcomes.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from protocol.group_requests import SETTLE_ACTIONS, Outcome

MUST_BE_ZERO = (
    "lost",
    "acked_unfinished",
    "redelivered_after_ack",
    "early_redelivery",
    "one_delivery_two_members",
    "one_delivery_two_receives",
    "count_skipped_back",
    "receipt_mismatch",
    "poison_not_dead_lettered",
    "dead_letter_duplicated",
    "dead_letter_wrong",
    "delivered_past_max",
    "redrive_missed",
    "redrive_miscounted",
)
LATE_REDELIVERY = "late_redelivery"
"""Reported, not must-be-zero: an expired lease's redelivery later than the slack."""
EXAMPLES_PER_KIND_MAX = 5
REDELIVERY_SLACK_MS_DEFAULT = 1000
"""Issue 20's target: redelivered within the visibility timeout plus this, p99."""
ACKED_BEFORE_CUT_MS = 1_000
"""An ack answered ``done`` this close before a power cut counts as put to the test by it."""
ERROR = "error"
"""The outcome of an action that got no answer: it may or may not have taken effect."""
OUTCOMES = (*(outcome.value for outcome in Outcome), ERROR)
MAY_HAVE_ACTED = (Outcome.DONE.value, ERROR)
NACK_MAY_HAVE_ACTED = (*MAY_HAVE_ACTED, Outcome.STALE.value)
"""A nack answered ``stale`` may be a repeat whose first attempt acted: the client repeats a
request whose answer it lost, and the partition, which remembers receipts and not requests,
answers the repeat ``stale`` once the next delivery began (the long tier's seed 3105)."""

Message = tuple[int, int]
"""``(partition_id, offset)``: one message of the topic."""
Delivery = tuple[int, int, int]
"""``(partition_id, offset, delivery_count)``: one lease of one message."""


@dataclass(frozen=True, slots=True, order=True)
class Produced:
    """An acknowledged produce: the message must be acked by the end of the run, or, if
    ``poison`` (every worker nacks it), be found in the dead-letter topic."""

    partition_id: int
    offset: int
    value: str
    poison: bool = False
    headers: tuple[tuple[str, str], ...] = ()
    """The producer's headers, sorted: a dead letter's copy must carry them."""

    @property
    def message(self) -> Message:
        return (self.partition_id, self.offset)


@dataclass(frozen=True, slots=True, order=True)
class Received:
    """A receive sent at ``sent_ms`` (the first attempt of its request id) returned this
    delivery at ``at_ms``: its lease began between the two."""

    worker: str
    partition_id: int
    offset: int
    delivery_count: int
    receipt: str
    sent_ms: int
    at_ms: int

    def __post_init__(self) -> None:
        if self.delivery_count < 1:
            raise ValueError(f"delivery_count starts at 1, not {self.delivery_count}")

    @property
    def message(self) -> Message:
        return (self.partition_id, self.offset)

    @property
    def delivery(self) -> Delivery:
        return (self.partition_id, self.offset, self.delivery_count)


@dataclass(frozen=True, slots=True, order=True)
class Finished:
    """The worker's ledger: it finished its work on this delivery (before acking it)."""

    worker: str
    partition_id: int
    offset: int
    delivery_count: int
    at_ms: int

    @property
    def message(self) -> Message:
        return (self.partition_id, self.offset)

    @property
    def delivery(self) -> Delivery:
        return (self.partition_id, self.offset, self.delivery_count)


@dataclass(frozen=True, slots=True, order=True)
class Settled:
    """One receipt of an ack, nack or extend sent at ``sent_ms``, answered at ``at_ms``
    (``error``: no answer). ``duration_ms``: a nack's delay, an extend's new visibility
    timeout, 0 for an ack."""

    worker: str
    action: str
    partition_id: int
    offset: int
    delivery_count: int
    outcome: str
    sent_ms: int
    at_ms: int
    duration_ms: int = 0

    def __post_init__(self) -> None:
        if self.action not in SETTLE_ACTIONS:
            raise ValueError(f"action {self.action!r} is not one of {SETTLE_ACTIONS}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")

    @property
    def message(self) -> Message:
        return (self.partition_id, self.offset)

    @property
    def delivery(self) -> Delivery:
        return (self.partition_id, self.offset, self.delivery_count)

    @property
    def shows_settled(self) -> bool:
        """The answer proves the message settled by ``at_ms``."""
        acked = self.action == "ack" and self.outcome == Outcome.DONE.value
        return acked or self.outcome == Outcome.ALREADY.value


@dataclass(frozen=True, slots=True, order=True)
class ReceiveCall:
    """One receive a worker made, sent at ``sent_ms``, answered at ``at_ms`` with ``got``
    deliveries of the ``asked`` (a receive that failed is not recorded)."""

    worker: str
    sent_ms: int
    at_ms: int
    asked: int
    got: int


@dataclass(frozen=True, slots=True)
class Redrive:
    """The run's redrive of the group's dead letters: its first call's send, its last
    answer, and the answers' sums."""

    sent_ms: int
    at_ms: int
    redriven: int
    gone: int = 0


@dataclass(frozen=True, slots=True, order=True)
class DeadLetterCopy:
    """A message of the group's dead-letter topic, by what its ``raftq-*`` headers say."""

    origin_partition_id: int
    origin_offset: int
    value: str
    group: str
    delivery_count: int
    headers: tuple[tuple[str, str], ...]
    """Its headers other than RaftQ's own, sorted."""

    @property
    def message(self) -> Message:
        return (self.origin_partition_id, self.origin_offset)


@dataclass(frozen=True, slots=True)
class LeaseHistory:
    produced: tuple[Produced, ...]
    received: tuple[Received, ...]
    finished: tuple[Finished, ...]
    settled: tuple[Settled, ...]
    visibility_timeout_ms: int
    """The group's lease length (every receive of the run uses the group's)."""
    clock_tolerance_ms: int = 100
    """How far partition time may be from the workers' clock readings (one clock)."""
    outages: tuple[tuple[int, int], ...] = ()
    """``(start_ms, end_ms)`` windows in which the service was impaired on purpose (a
    broker killed or paused, and its recovery): a redelivery whose wait overlaps one is not
    timed against the target (a receive cannot reach a paused leader's partition)."""
    max_deliveries: int = 0
    """The group's; 0: no limit (and no dead letters are judged)."""
    group: str = ""
    dead_letters: tuple[DeadLetterCopy, ...] = ()
    """Every message of the group's dead-letter topic after the run."""
    receive_calls: tuple[ReceiveCall, ...] = ()
    """Every answered receive (with them, a redelivery is timed only when a receive with
    room to spare was made after the lease ended: see ``late_redelivery``)."""
    power_cuts: tuple[tuple[int, int], ...] = ()
    """``(cut_ms, back_ms)``: every node killed at ``cut_ms``, what it had not synced lost;
    acks answered again from ``back_ms`` on. Each is an outage too."""
    redrive: Redrive | None = None
    """The redrive after the poison messages died, if the run made one."""

    def __post_init__(self) -> None:
        if self.visibility_timeout_ms <= 0:
            raise ValueError(f"visibility_timeout_ms must be > 0: {self.visibility_timeout_ms}")
        if self.clock_tolerance_ms < 0:
            raise ValueError(f"clock_tolerance_ms must be >= 0: {self.clock_tolerance_ms}")
        for cut_ms, back_ms in self.power_cuts:
            if back_ms < cut_ms:
                raise ValueError(f"a power cut ends before it began: {(cut_ms, back_ms)}")

    @property
    def impaired(self) -> tuple[tuple[int, int], ...]:
        """Every window in which the service was impaired on purpose: outages and cuts."""
        return (*self.outages, *self.power_cuts)


@dataclass
class LeaseVerdict:
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((*MUST_BE_ZERO, LATE_REDELIVERY), 0)
    )
    info: dict[str, int] = field(default_factory=dict)
    """Figures that may be anything: produced, deliveries, each action's outcomes, ..."""
    examples: dict[str, list[str]] = field(default_factory=dict)
    redelivery_latencies_ms: list[int] = field(default_factory=list)
    """After an expired lease, ascending (see ``late_redelivery`` in the module doc)."""
    redelivery_slack_ms: int = REDELIVERY_SLACK_MS_DEFAULT
    duplicate_rate: float = 0.0
    """Messages finished more than once, over messages produced."""

    @property
    def ok(self) -> bool:
        return all(self.counts[name] == 0 for name in MUST_BE_ZERO)

    @property
    def redelivery_p50_ms(self) -> int | None:
        return percentile_ms(self.redelivery_latencies_ms, 50)

    @property
    def redelivery_p99_ms(self) -> int | None:
        return percentile_ms(self.redelivery_latencies_ms, 99)

    @property
    def redelivery_max_ms(self) -> int | None:
        return percentile_ms(self.redelivery_latencies_ms, 100)

    @property
    def passed(self) -> bool:
        """What a run is held to: ``ok`` and the redelivery target met."""
        return self.ok and self.redelivery_on_target

    @property
    def redelivery_on_target(self) -> bool:
        """p99 of the redelivery latency within the slack (true with no expired lease)."""
        p99 = self.redelivery_p99_ms
        return p99 is None or p99 <= self.redelivery_slack_ms

    def flag(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < EXAMPLES_PER_KIND_MAX:
            shown.append(example)

    def lines(self) -> list[str]:
        out = [f"  {name:<26} {self.counts[name]:>8}  (must be 0)" for name in MUST_BE_ZERO]
        late = self.counts[LATE_REDELIVERY]
        out.append(f"  {LATE_REDELIVERY:<26} {late:>8}  (> {self.redelivery_slack_ms} ms)")
        out += [f"  {name:<26} {value:>8}" for name, value in sorted(self.info.items())]
        out.append(f"  {'duplicate_rate':<26} {self.duplicate_rate:>8.4f}")
        target = "met" if self.redelivery_on_target else "MISSED"
        out.append(
            f"  redelivery after lease end p50/p99/max ms: {self.redelivery_p50_ms}/"
            f"{self.redelivery_p99_ms}/{self.redelivery_max_ms} (target p99 <= "
            f"{self.redelivery_slack_ms}: {target})"
        )
        for name, shown in sorted(self.examples.items()):
            out += [f"  e.g. {name}: {example}" for example in shown]
        return out


def percentile_ms(ascending: Sequence[int], percent: int) -> int | None:
    """Nearest rank: the smallest sample with ``percent`` % of the samples at or below it."""
    if not ascending:
        return None
    rank = -(-percent * len(ascending) // 100)  # ceil without floats
    return ascending[max(rank, 1) - 1]


Timed = TypeVar("Timed", Received, Finished, Settled)


def in_time_order(records: Iterable[Timed]) -> list[Timed]:
    """By ``at_ms``, then by every field: the same list whatever order they were recorded."""
    return sorted(records, key=lambda record: (record.at_ms, record))


@dataclass(frozen=True)
class HistoryIndex:
    """The history by message and by delivery, each list in time order."""

    receives: dict[Message, list[Received]]
    deliveries: dict[Delivery, list[Received]]
    settles: dict[Delivery, list[Settled]]
    settled_ms: dict[Message, int]
    """The earliest ``at_ms`` of an answer that shows the message settled."""
    acked_count: dict[Message, int]
    """The lowest delivery count an ack ``done`` settled."""
    acked_ms: dict[Message, int]
    """The earliest ``at_ms`` of an ack ``done``."""
    finished_ms: dict[tuple[str, Delivery], int]
    """The earliest ``Finished`` of a worker's delivery."""
    ledger_end_ms: dict[str, int]
    """Each worker's last recorded time: its ledger ends there (a worker killed stops it)."""

    @classmethod
    def of(cls, history: LeaseHistory) -> HistoryIndex:
        receives: dict[Message, list[Received]] = defaultdict(list)
        deliveries: dict[Delivery, list[Received]] = defaultdict(list)
        for received in in_time_order(history.received):
            receives[received.message].append(received)
            deliveries[received.delivery].append(received)
        settles: dict[Delivery, list[Settled]] = defaultdict(list)
        settled_ms: dict[Message, int] = {}
        acked_count: dict[Message, int] = {}
        acked_ms: dict[Message, int] = {}
        for settled in in_time_order(history.settled):
            settles[settled.delivery].append(settled)
            if settled.shows_settled:
                settled_ms.setdefault(settled.message, settled.at_ms)
            if settled.action == "ack" and settled.outcome == Outcome.DONE.value:
                count = acked_count.get(settled.message, settled.delivery_count)
                acked_count[settled.message] = min(count, settled.delivery_count)
                acked_ms.setdefault(settled.message, settled.at_ms)
        finished_ms: dict[tuple[str, Delivery], int] = {}
        for finished in in_time_order(history.finished):
            finished_ms.setdefault((finished.worker, finished.delivery), finished.at_ms)
        return cls(
            dict(receives),
            dict(deliveries),
            dict(settles),
            settled_ms,
            acked_count,
            acked_ms,
            finished_ms,
            ledger_ends(history),
        )


def ledger_ends(history: LeaseHistory) -> dict[str, int]:
    ends: dict[str, int] = {}
    records: list[Received | Finished | Settled] = [
        *history.received,
        *history.finished,
        *history.settled,
    ]
    for record in records:
        ends[record.worker] = max(ends.get(record.worker, record.at_ms), record.at_ms)
    return ends


def check(
    history: LeaseHistory, redelivery_slack_ms: int = REDELIVERY_SLACK_MS_DEFAULT
) -> LeaseVerdict:
    verdict = LeaseVerdict(redelivery_slack_ms=redelivery_slack_ms)
    index = HistoryIndex.of(history)
    check_receipts(index, verdict)
    check_lost(history, index, verdict)
    check_acks_follow_work(history, index, verdict)
    check_settled_stays_settled(history, index, verdict)
    check_one_member_per_delivery(index, verdict)
    check_one_receive_per_delivery(index, verdict)
    check_counts_grow(index, verdict)
    check_redeliveries(history, index, verdict)
    if history.max_deliveries:
        check_dead_letters(history, verdict)
    count_figures(history, index, verdict)
    if history.power_cuts:
        count_power_cuts(history, index, verdict)
    return verdict


def check_receipts(index: HistoryIndex, verdict: LeaseVerdict) -> None:
    for (partition_id, offset, count), receives in sorted(index.deliveries.items()):
        for received in receives:
            if received.receipt != f"{partition_id}.{offset}.{count}":
                verdict.flag("receipt_mismatch", f"{received}")


def check_lost(history: LeaseHistory, index: HistoryIndex, verdict: LeaseVerdict) -> None:
    dead = {copy.message for copy in history.dead_letters}
    for produced in sorted(set(history.produced)):
        if produced.poison or produced.message in dead:
            continue  # judged by ``check_dead_letters``
        if produced.message not in index.settled_ms:
            verdict.flag("lost", f"{produced.value!r} at {produced.message}: never acked")


def check_acks_follow_work(
    history: LeaseHistory, index: HistoryIndex, verdict: LeaseVerdict
) -> None:
    for settled in in_time_order(history.settled):
        if settled.action != "ack" or settled.outcome != Outcome.DONE.value:
            continue
        finished_ms = index.finished_ms.get((settled.worker, settled.delivery))
        if finished_ms is None or finished_ms > settled.sent_ms:
            when = "never" if finished_ms is None else f"at {finished_ms}"
            verdict.flag(
                "acked_unfinished",
                f"{settled.worker} acked {settled.delivery} at {settled.sent_ms}, finished {when}",
            )


def check_settled_stays_settled(
    history: LeaseHistory, index: HistoryIndex, verdict: LeaseVerdict
) -> None:
    copied = {copy.message for copy in history.dead_letters}
    for message, receives in sorted(index.receives.items()):
        settled_ms = index.settled_ms.get(message)
        if message in copied and history.redrive is not None:
            # ``already`` may be its dead-lettering, which the redrive undoes: an ack only.
            settled_ms = index.acked_ms.get(message)
        acked_count = index.acked_count.get(message)
        for received in receives:
            after_ms = settled_ms is not None and received.sent_ms > settled_ms
            after_count = acked_count is not None and received.delivery_count > acked_count
            if after_ms or after_count:
                verdict.flag(
                    "redelivered_after_ack",
                    f"{received.worker} got {received.delivery} sent at {received.sent_ms}, "
                    f"settled at {settled_ms} (count {acked_count} acked)",
                )


def check_one_member_per_delivery(index: HistoryIndex, verdict: LeaseVerdict) -> None:
    for delivery, receives in sorted(index.deliveries.items()):
        workers = sorted({received.worker for received in receives})
        if len(workers) > 1:
            verdict.flag("one_delivery_two_members", f"{delivery} to {', '.join(workers)}")


def check_one_receive_per_delivery(index: HistoryIndex, verdict: LeaseVerdict) -> None:
    """One worker's receives of a delivery share the first send of one request id."""
    for delivery, receives in sorted(index.deliveries.items()):
        sent_ms: dict[str, set[int]] = defaultdict(set)
        for received in receives:
            sent_ms[received.worker].add(received.sent_ms)
        for worker, sends in sorted(sent_ms.items()):
            if len(sends) > 1:
                shown = ", ".join(map(str, sorted(sends)))
                example = f"{delivery} to {worker} by receives sent at {shown}"
                verdict.flag("one_delivery_two_receives", example)


def check_counts_grow(index: HistoryIndex, verdict: LeaseVerdict) -> None:
    """A receive sent after an answer handed out a higher count of its message went back."""
    for receives in (index.receives[m] for m in sorted(index.receives)):
        answered_ms = [received.at_ms for received in receives]
        highest = [0]  # highest[i]: the highest count among the first i answers
        for received in receives:
            highest.append(max(highest[-1], received.delivery_count))
        for received in receives:
            before = bisect.bisect_left(answered_ms, received.sent_ms)
            if highest[before] > received.delivery_count:
                verdict.flag(
                    "count_skipped_back",
                    f"{received.worker} got {received.delivery} sent at {received.sent_ms}, "
                    f"after count {highest[before]} was handed out",
                )


def check_redeliveries(history: LeaseHistory, index: HistoryIndex, verdict: LeaseVerdict) -> None:
    """Judge each delivery n+1 against delivery n's lease; time the expired ones."""
    unjudged = 0
    for partition_id, offset, count in sorted(index.deliveries):
        if count == 1:
            continue
        previous = (partition_id, offset, count - 1)
        if previous not in index.deliveries:
            unjudged += 1
            continue
        redelivery = index.deliveries[(partition_id, offset, count)][0]
        check_redelivery_time(history, index, previous, redelivery.at_ms, verdict)
        time_redelivery(history, index, previous, redelivery, verdict)
    verdict.redelivery_latencies_ms.sort()
    verdict.info["redeliveries_unjudged"] = unjudged


def check_redelivery_time(
    history: LeaseHistory,
    index: HistoryIndex,
    previous: Delivery,
    redelivered_ms: int,
    verdict: LeaseVerdict,
) -> None:
    leased = index.deliveries[previous]
    settles = index.settles.get(previous, [])
    earliest_ms = earliest_redelivery_ms(
        leased, settles, redelivered_ms, history.visibility_timeout_ms
    )
    if not settles and all(index.ledger_end_ms[r.worker] < redelivered_ms for r in leased):
        # Its holder died holding it: a nack it sent may have left no record.
        earliest_ms = min([earliest_ms, *(r.at_ms for r in leased)])
    if redelivered_ms < earliest_ms - history.clock_tolerance_ms:
        verdict.flag(
            "early_redelivery",
            f"{previous} followed at {redelivered_ms}, its lease could end at {earliest_ms} "
            f"at the earliest",
        )


def earliest_redelivery_ms(
    leased: Sequence[Received],
    settles: Sequence[Settled],
    redelivered_ms: int,
    visibility_timeout_ms: int,
) -> int:
    """The earliest partition time at which the next delivery may be handed out."""
    nacks = nacks_before(settles, redelivered_ms)
    done_ms = [n.sent_ms + n.duration_ms for n in nacks if n.outcome == Outcome.DONE.value]
    if done_ms:
        return min(done_ms)  # it ended the current lease: the lease's end does not apply
    maybe_ms = [n.sent_ms + n.duration_ms for n in nacks]  # errors: perhaps ended it
    return min([lease_end_min_ms(leased, settles, visibility_timeout_ms), *maybe_ms])


def nacks_before(settles: Iterable[Settled], redelivered_ms: int) -> list[Settled]:
    """The nacks that may have ended the lease before the next delivery returned."""
    return [
        s
        for s in settles
        if s.action == "nack" and s.outcome in NACK_MAY_HAVE_ACTED and s.sent_ms <= redelivered_ms
    ]


def lease_end_min_ms(
    leased: Sequence[Received], settles: Iterable[Settled], visibility_timeout_ms: int
) -> int:
    """The earliest the lease may expire: begun after its first receive was sent, pushed
    by each extend that acted from after that extend was sent."""
    began_ms = min(received.sent_ms for received in leased)
    extended_ms = [s.sent_ms + s.duration_ms for s in extends_done(settles)]
    return max([began_ms + visibility_timeout_ms, *extended_ms])


def extends_done(settles: Iterable[Settled]) -> list[Settled]:
    return [s for s in settles if s.action == "extend" and s.outcome == Outcome.DONE.value]


def time_redelivery(
    history: LeaseHistory,
    index: HistoryIndex,
    previous: Delivery,
    redelivery: Received,
    verdict: LeaseVerdict,
) -> None:
    """The latency of a redelivery after an expired lease, as the workers saw it, from
    when the lease ended or, if later, when a worker first asked (``_first_ask_ms``)."""
    redelivered_ms = redelivery.at_ms
    settles = index.settles.get(previous, [])
    acked = any(s.action == "ack" and s.outcome == Outcome.DONE.value for s in settles)
    if acked or nacks_before(settles, redelivered_ms):
        return  # nacked (or perhaps), or acked (flagged above): not an expiry
    seen_ms = index.deliveries[previous][0].at_ms + history.visibility_timeout_ms
    extended_ms = [s.at_ms + s.duration_ms for s in extends_done(settles)]
    ended_ms = max([seen_ms, *extended_ms])
    if any(start <= redelivered_ms and ended_ms <= end for start, end in history.impaired):
        verdict.info["redeliveries_in_outages"] = verdict.info.get("redeliveries_in_outages", 0) + 1
        return
    asked_ms = _first_ask_ms(history, ended_ms, redelivery.sent_ms)
    if asked_ms > ended_ms:
        verdict.info["redeliveries_workers_busy"] = (
            verdict.info.get("redeliveries_workers_busy", 0) + 1
        )
    latency_ms = redelivered_ms - max(ended_ms, asked_ms)
    verdict.redelivery_latencies_ms.append(latency_ms)
    if latency_ms > verdict.redelivery_slack_ms:
        verdict.flag(LATE_REDELIVERY, f"{previous} expired, delivered again {latency_ms} ms late")


def _first_ask_ms(history: LeaseHistory, ended_ms: int, redelivery_sent_ms: int) -> int:
    """When, after the lease ended, a worker first asked in a way that had to find the
    message if it was deliverable: a receive that came back with fewer messages than it
    asked for (it looked at every partition, with room to spare), or the receive that
    redelivered it. A receive that came back full may have filled up from the partitions
    it visited first; while every worker is busy nobody asks: that wait is the workers',
    not the service's. Without recorded receive calls: the lease's end."""
    if not history.receive_calls:
        return ended_ms
    roomy = [
        call.sent_ms
        for call in history.receive_calls
        if call.sent_ms >= ended_ms and call.got < call.asked
    ]
    return min([redelivery_sent_ms, *roomy])


def check_dead_letters(history: LeaseHistory, verdict: LeaseVerdict) -> None:
    produced = {p.message: p for p in history.produced}
    copies = Counter(copy.message for copy in history.dead_letters)
    for poison in sorted(p for p in produced.values() if p.poison):
        if poison.message not in copies:
            verdict.flag("poison_not_dead_lettered", f"{poison.value!r} at {poison.message}")
    for message, count in sorted(copies.items()):
        if count > 1:
            verdict.flag("dead_letter_duplicated", f"{message}: {count} copies")
    for copy in sorted(history.dead_letters):
        original = produced.get(copy.message)
        if (
            original is None
            or (copy.value, copy.headers) != (original.value, original.headers)
            or copy.group != history.group
            or copy.delivery_count != history.max_deliveries
        ):
            verdict.flag("dead_letter_wrong", f"{copy} for {original}")
    poisoned = {m for m, p in produced.items() if p.poison}
    for received in sorted(history.received):
        if received.delivery_count > history.max_deliveries and not _after_redrive(
            history, received, set(copies)
        ):
            verdict.flag("delivered_past_max", f"{received}")
    if history.redrive is not None:
        check_redrive(history, history.redrive, poisoned, set(copies), verdict)


def _after_redrive(history: LeaseHistory, received: Received, copied: set[Message]) -> bool:
    """A dead-lettered message's delivery the redrive explains: answered after it began (leased
    then, at the latest: CI's seed 5039 had a long poll sent before the redrive lease a
    message it reopened), numbered at most ``max_deliveries`` more."""
    redrive = history.redrive
    return (
        redrive is not None
        and received.message in copied
        and received.at_ms >= redrive.sent_ms
        and received.delivery_count <= 2 * history.max_deliveries
    )


def check_redrive(
    history: LeaseHistory,
    redrive: Redrive,
    poison: set[Message],
    copied: set[Message],
    verdict: LeaseVerdict,
) -> None:
    settled_after = {
        s.message
        for s in history.settled
        if s.action == "ack"
        and s.shows_settled
        and s.delivery[2] > history.max_deliveries
        and s.sent_ms >= redrive.sent_ms
    }
    for message in sorted(poison - settled_after):
        verdict.flag("redrive_missed", f"{message}: no ack after the redrive")
    expected = len(copied)
    if redrive.redriven + redrive.gone != expected:
        verdict.flag(
            "redrive_miscounted",
            f"redriven {redrive.redriven} + gone {redrive.gone}, letters {expected}",
        )


def count_figures(history: LeaseHistory, index: HistoryIndex, verdict: LeaseVerdict) -> None:
    produced = {p.message for p in history.produced}
    finishes = Counter(finished.message for finished in history.finished)
    duplicates = sum(1 for n in finishes.values() if n > 1)
    repeats = len(history.received) - len({(r.worker, r.delivery) for r in history.received})
    actions = Counter((s.action, s.outcome) for s in history.settled)
    verdict.info.update(
        produced=len(produced),
        receives=len(history.received),
        receive_repeats=repeats,
        deliveries=len(index.deliveries),
        received_not_produced=len(set(index.receives) - produced),
        finished=len(history.finished),
        duplicates=duplicates,
        expiry_redeliveries=len(verdict.redelivery_latencies_ms),
        poison_produced=sum(1 for p in history.produced if p.poison),
        dead_letters=len(history.dead_letters),
    )
    for action in SETTLE_ACTIONS:
        verdict.info[f"{action}s"] = sum(actions[(action, o)] for o in OUTCOMES)
        for outcome in OUTCOMES:
            verdict.info[f"{action}s_{outcome}"] = actions[(action, outcome)]
    verdict.duplicate_rate = duplicates / len(produced) if produced else 0.0


def count_power_cuts(history: LeaseHistory, index: HistoryIndex, verdict: LeaseVerdict) -> None:
    """What the cuts put to the test (figures: the rules above judge it)."""
    acked = live = unanswered = 0
    for cut_ms, _back_ms in history.power_cuts:
        for settled in history.settled:
            if settled.outcome == ERROR and settled.sent_ms <= cut_ms <= settled.at_ms:
                unanswered += 1
            elif (
                settled.action == "ack"
                and settled.outcome == Outcome.DONE.value
                and cut_ms - ACKED_BEFORE_CUT_MS <= settled.at_ms <= cut_ms
            ):
                acked += 1
        for (partition_id, offset, _count), receives in index.deliveries.items():
            answered_ms = receives[0].at_ms
            settled_ms = index.settled_ms.get((partition_id, offset), cut_ms + 1)
            if cut_ms - history.visibility_timeout_ms < answered_ms <= cut_ms < settled_ms:
                live += 1
    verdict.info.update(
        power_cuts=len(history.power_cuts),
        acks_done_before_cuts=acked,
        leases_live_at_cuts=live,
        settles_unanswered_at_cuts=unanswered,
    )
