"""The queue checker: judges a run's ``History`` plus its ``FinalRead`` against DESIGN §4.
Pure: no I/O, no clock; the same inputs always give the same verdict.

Every value a workload sends is unique, so a value identifies one message. The "reference
log" of a partition is its longest replica log (after healing, every replica should hold the
same one; any difference is counted as divergence, not hidden).

Must be 0 (``MUST_BE_ZERO``): lost (acknowledged, or popped by a consumer, so committed, yet
not in the final log; whatever its send's outcome), phantom (read but never sent),
failed_but_present (refused outright, yet stored or popped), duplicate (one value at two
positions, or popped twice by one consumer), order_violation (a producer's later batch at a
lower offset of a partition, its acknowledged batches and its stored unknown-outcome ones
alike, or a consumer going backwards), offset_gap (offsets not contiguous from 0 in a replica,
or a consumer skipping one), offset_mismatch (acknowledged or popped at one position, stored at
another), divergence (replicas differ at an offset, or a replica's database checksum differs
from its own served log over a range), unpopped (a stored message that a consumer which ran to
the end, ``History.consumers``, never popped: it stopped short or was wedged).

Retention: a replica read from its log start (``ReplicaLog.log_start``, the same on every
replica once they converged) holds ``[log start, end)``. Below the final log start a message
is legitimately gone: an acknowledged or popped one there is not lost, and a consumer's
jump forward that ends at or below it is retention, not a skip (the log start only grows,
so every log start a consumer met is at most the final one). Every rule above holds over
``[log start, end)``; with no retention the log start is 0 and nothing changes.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from stress_tests.history import (
    Entry,
    FinalRead,
    History,
    Outcome,
    Position,
    RangeSum,
    ReplicaLog,
    Send,
)

MUST_BE_ZERO = (
    "lost",
    "phantom",
    "failed_but_present",
    "duplicate",
    "order_violation",
    "offset_gap",
    "offset_mismatch",
    "divergence",
    "unpopped",
)
EXAMPLES_PER_CATEGORY_MAX = 5


@dataclass
class Verdict:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MUST_BE_ZERO, 0))
    info: dict[str, int] = field(default_factory=dict)
    """Figures that may be anything: how many sent, acknowledged, unknown and found, ..."""
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.counts[name] == 0 for name in MUST_BE_ZERO)

    def flag(self, category: str, example: str, n: int = 1) -> None:
        self.counts[category] += n
        shown = self.examples.setdefault(category, [])
        if len(shown) < EXAMPLES_PER_CATEGORY_MAX:
            shown.append(example)

    def lines(self) -> list[str]:
        out = [f"  {name:<20} {self.counts[name]:>8}  (must be 0)" for name in MUST_BE_ZERO]
        out += [f"  {name:<20} {value:>8}" for name, value in sorted(self.info.items())]
        for name, shown in sorted(self.examples.items()):
            out += [f"  e.g. {name}: {example}" for example in shown]
        return out


def check(history: History, final: FinalRead) -> Verdict:
    verdict = Verdict()
    reference = reference_logs(final.replicas)
    starts = log_starts(final.replicas)
    check_replicas(final.replicas, reference, verdict)
    stored = stored_positions(reference, verdict)
    check_sends(history, stored, verdict, starts)
    check_reads(history, stored, verdict, starts)
    check_popped_then_gone(history, stored, verdict, starts)
    check_phantoms(history, stored, verdict)
    check_consumers_complete(history, reference, verdict)
    return verdict


def reference_logs(replicas: Iterable[ReplicaLog]) -> dict[int, tuple[Entry, ...]]:
    """Per partition, the longest replica log (the first such, by broker id)."""
    best: dict[int, tuple[Entry, ...]] = {}
    for replica in sorted(replicas, key=lambda r: (r.partition_id, r.broker_id)):
        if len(replica.entries) > len(best.get(replica.partition_id, ())):
            best[replica.partition_id] = replica.entries
        best.setdefault(replica.partition_id, replica.entries)
    return best


def log_starts(replicas: Iterable[ReplicaLog]) -> dict[int, int]:
    """Per partition, the highest log start of its replicas (they differ only when the
    replicas diverged, which ``check_replicas`` counts)."""
    starts: dict[int, int] = {}
    for replica in replicas:
        starts[replica.partition_id] = max(starts.get(replica.partition_id, 0), replica.log_start)
    return starts


def retained_away(position: Position, starts: Mapping[int, int]) -> bool:
    """Below its partition's final log start: retention removed it."""
    return position.offset < starts.get(position.partition_id, 0)


def check_replicas(
    replicas: Iterable[ReplicaLog], reference: Mapping[int, tuple[Entry, ...]], verdict: Verdict
) -> None:
    for replica in replicas:
        where = f"partition {replica.partition_id} broker {replica.broker_id}"
        for index, entry in enumerate(replica.entries):
            if entry.offset != replica.log_start + index:
                verdict.flag("offset_gap", f"{where}: offset {entry.offset} at position {index}")
                break
        ref = reference[replica.partition_id]
        differing = sum(a != b for a, b in zip(ref, replica.entries, strict=False))
        differing += abs(len(ref) - len(replica.entries))
        if differing:
            verdict.flag("divergence", f"{where}: {differing} offsets differ", differing)
        for db_sum in replica.db_sums:
            if db_sum != log_checksum(replica.entries, db_sum.start, db_sum.end):
                verdict.flag(
                    "divergence",
                    f"{where}: database differs in [{db_sum.start}, {db_sum.end}) from its log",
                )


def log_checksum(entries: tuple[Entry, ...], start: int, end: int) -> RangeSum:
    """The checksum the broker's ``GET /checksum`` computes, over the served log instead of
    the database (same byte layout as ``broker.persistence.store.range_checksum``)."""
    digest = hashlib.sha256()
    count = 0
    for entry in entries:
        if start <= entry.offset < end:
            key = "\x01" if entry.key is None else "\x02" + entry.key
            digest.update(f"{entry.offset}\x00{key}\x00{entry.timestamp_ms}\x00".encode())
            digest.update(entry.value.encode("utf-8"))
            digest.update(b"\n")
            count += 1
    return RangeSum(start, end, count, digest.hexdigest())


def stored_positions(
    reference: Mapping[int, tuple[Entry, ...]], verdict: Verdict
) -> dict[str, Position]:
    """value -> where the final log holds it; a value held twice is a duplicate."""
    stored: dict[str, Position] = {}
    for partition_id, entries in sorted(reference.items()):
        for entry in entries:
            here = Position(partition_id, entry.offset)
            if entry.value in stored:
                verdict.flag("duplicate", f"{entry.value!r} at {stored[entry.value]} and {here}")
            else:
                stored[entry.value] = here
        verdict.info[f"final_messages_p{partition_id}"] = len(entries)
    return stored


def check_sends(
    history: History,
    stored: Mapping[str, Position],
    verdict: Verdict,
    starts: Mapping[int, int] | None = None,
) -> None:
    tally: Counter[str] = Counter()
    for send in history.sends:
        tally[send.outcome.value] += len(send.values)
        if send.outcome is Outcome.ACKED:
            check_acked(send.values, send.positions, stored, verdict, starts)
        elif send.outcome is Outcome.FAILED:
            for value in send.values:
                if value in stored:
                    verdict.flag(
                        "failed_but_present", f"{value!r} at {stored[value]} ({send.detail})"
                    )
        else:
            tally["unknown_present"] += sum(value in stored for value in send.values)
    for outcome in Outcome:
        verdict.info[f"sent_{outcome.value}"] = tally[outcome.value]
    verdict.info["unknown_present"] = tally["unknown_present"]
    check_producer_order(history, stored, verdict)


def check_acked(
    values: tuple[str, ...],
    positions: tuple[Position, ...],
    stored: Mapping[str, Position],
    verdict: Verdict,
    starts: Mapping[int, int] | None = None,
) -> None:
    if len(positions) != len(values):
        verdict.flag("offset_mismatch", f"{len(values)} values acked with {len(positions)} offsets")
    for value, acked_at in zip(values, positions, strict=False):
        found = stored.get(value)
        if found is None and retained_away(acked_at, starts or {}):
            verdict.info["acked_retained_away"] = verdict.info.get("acked_retained_away", 0) + 1
        elif found is None:
            verdict.flag("lost", f"{value!r} acked at {acked_at}")
        elif found != acked_at:
            verdict.flag("offset_mismatch", f"{value!r} acked at {acked_at}, stored at {found}")


def check_producer_order(
    history: History, stored: Mapping[str, Position], verdict: Verdict
) -> None:
    """A producer sends one batch at a time, so each of its batches that landed must land in
    every partition after all of that producer's earlier batches, in request order: the
    acknowledged ones at their acknowledged positions, the unknown-outcome ones found in the
    final log at their stored positions (a late copy of an old batch must not land after a
    newer one)."""
    last: dict[tuple[str, int], int] = {}
    landed = (s for s in history.sends if s.outcome is not Outcome.FAILED)
    for send in sorted(landed, key=lambda s: (s.producer, s.sequence)):
        for value, position in landed_positions(send, stored):
            key = (send.producer, position.partition_id)
            if position.offset <= last.get(key, -1):
                verdict.flag(
                    "order_violation",
                    f"{send.producer} seq {send.sequence} ({send.outcome.value}): {value!r} at "
                    f"{position} after offset {last[key]}",
                )
            last[key] = max(position.offset, last.get(key, -1))


def landed_positions(send: Send, stored: Mapping[str, Position]) -> list[tuple[str, Position]]:
    """(value, position) in request order: where it was acknowledged, or for an unknown
    outcome where the final log holds it (values not stored are left out)."""
    if send.outcome is Outcome.ACKED:
        return list(zip(send.values, send.positions, strict=False))
    return [(value, stored[value]) for value in send.values if value in stored]


def check_reads(
    history: History,
    stored: Mapping[str, Position],
    verdict: Verdict,
    starts: Mapping[int, int] | None = None,
) -> None:
    """Each consumer pops every partition in order, contiguously from 0 (jumping only over
    what retention removed), each value once."""
    by_consumer: dict[tuple[str, int], list[int]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for read in history.reads:
        here = Position(read.partition_id, read.offset)
        if (read.consumer, read.value) in seen:
            verdict.flag("duplicate", f"{read.consumer} popped {read.value!r} twice")
        seen.add((read.consumer, read.value))
        found = stored.get(read.value)
        if found is not None and found != here:
            verdict.flag("offset_mismatch", f"{read.value!r} popped at {here}, stored at {found}")
        by_consumer[(read.consumer, read.partition_id)].append(read.offset)
    for (consumer, partition_id), offsets in sorted(by_consumer.items()):
        start = (starts or {}).get(partition_id, 0)
        check_pop_sequence(consumer, partition_id, offsets, verdict, start)
    verdict.info["reads"] = len(history.reads)


def check_pop_sequence(
    consumer: str, partition_id: int, offsets: list[int], verdict: Verdict, log_start: int = 0
) -> None:
    """A jump forward that ends at or below the final ``log_start`` went over messages
    retention removed; any other jump skipped messages."""
    expected = 0
    for offset in offsets:
        where = f"{consumer} partition {partition_id}"
        if offset < expected:
            verdict.flag("order_violation", f"{where}: offset {offset} after {expected - 1}")
            continue
        if offset > expected and offset > log_start:
            verdict.flag("offset_gap", f"{where}: skipped [{expected}, {offset})")
        expected = offset + 1


def check_popped_then_gone(
    history: History,
    stored: Mapping[str, Position],
    verdict: Verdict,
    starts: Mapping[int, int] | None = None,
) -> None:
    """A popped message was committed, so it must be in the final log, whatever its send's
    outcome. An acknowledged one missing is already lost by ``check_acked``, a never-sent one
    a phantom; each value is counted once, however many consumers popped it. A popped message
    of a refused send also contradicts that refusal, stored or not."""
    outcome = {value: send.outcome for send in history.sends for value in send.values}
    flagged: set[str] = set()
    for read in history.reads:
        sent = outcome.get(read.value)
        if read.value in flagged or sent is None:
            continue
        if sent is Outcome.FAILED and read.value not in stored:
            flagged.add(read.value)  # stored ones are flagged by ``check_sends``
            verdict.flag("failed_but_present", f"{read.consumer} popped refused {read.value!r}")
        here = Position(read.partition_id, read.offset)
        if retained_away(here, starts or {}):
            continue  # popped, then removed by retention
        if read.value not in stored and sent is not Outcome.ACKED:
            flagged.add(read.value)
            verdict.flag(
                "lost",
                f"{read.value!r} ({sent.value}) popped by {read.consumer} at {here}, "
                "not in the final log",
            )


def check_consumers_complete(
    history: History, reference: Mapping[int, tuple[Entry, ...]], verdict: Verdict
) -> None:
    """Every consumer that ran to the end popped every stored message: one that stopped short
    (a claimed range never delivered, a drain that gave up) or was wedged by refusals did
    not."""
    popped: dict[str, set[str]] = defaultdict(set)
    for read in history.reads:
        popped[read.consumer].add(read.value)
    for consumer in history.consumers:
        for partition_id, entries in sorted(reference.items()):
            missing = [e.offset for e in entries if e.value not in popped[consumer]]
            if missing:
                verdict.flag(
                    "unpopped",
                    f"{consumer} partition {partition_id}: {len(missing)} of {len(entries)} "
                    f"stored messages never popped, the first at offset {missing[0]}",
                    len(missing),
                )
    verdict.info["consumers_held_to_the_end"] = len(history.consumers)


def check_phantoms(history: History, stored: Mapping[str, Position], verdict: Verdict) -> None:
    sent = {value for send in history.sends for value in send.values}
    for value, position in stored.items():
        if value not in sent:
            verdict.flag("phantom", f"{value!r} stored at {position}, never sent")
    for read in history.reads:
        if read.value not in sent:
            verdict.flag("phantom", f"{read.consumer} popped {read.value!r}, never sent")
