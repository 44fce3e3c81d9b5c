"""Idle consumers and producers expire from ``PartitionLog``, measured in the timestamps the
commands carry (never a local clock), a few per command, identically on every replica; and
commands and snapshots written before expiry existed still load."""

from __future__ import annotations

import pickle
import random
from collections import OrderedDict

from broker.partition.commands import Append, Consume, from_wire, to_wire
from broker.partition.log import Appended, Consumed, PartitionLog, Rejected
from broker.partition.raft import apply_group
from protocol.errors import ErrorCode
from protocol.limits import PartitionLimits
from protocol.types import Offset

EXPIRY_MS = 1_000
T0_MS = 1_700_000_000_000
LIMITS = PartitionLimits(
    unflushed_messages_max=10_000,
    unflushed_bytes_max=1_000_000,
    replica_lag_messages_max=30,
    producers_max=1_000,
    sequences_remembered=2,
    consumers_max=3,
    client_idle_expiry_ms=EXPIRY_MS,
)


def new_log(limits: PartitionLimits = LIMITS) -> PartitionLog:
    return PartitionLog(3, limits)


def fill(log: PartitionLog, count: int, at_ms: int) -> None:
    log.append([(None, f"m{i}") for i in range(count)], at_ms, None, None)


def test_a_full_partition_accepts_a_new_consumer_once_idle_ones_expired() -> None:
    log = new_log()
    fill(log, 10, T0_MS)
    for name in ("a", "b", "c"):
        assert log.consume(name, 1, None, T0_MS) == Consumed(Offset(0), Offset(1))
    refused = log.consume("d", 1, None, T0_MS + EXPIRY_MS)
    assert isinstance(refused, Rejected) and refused.code == ErrorCode.TOO_MANY

    assert log.consume("a", 1, None, T0_MS + EXPIRY_MS) == Consumed(Offset(1), Offset(2))
    # b and c were last named at T0: idle for longer than the expiry one ms later.
    assert log.consume("d", 1, None, T0_MS + EXPIRY_MS + 1) == Consumed(Offset(0), Offset(1))
    assert set(log.consumers) == {"a", "d"}
    assert log.consume("a", 1, None, T0_MS + EXPIRY_MS + 2) == Consumed(Offset(2), Offset(3))


def test_a_consumer_back_after_expiry_starts_where_a_new_consumer_starts() -> None:
    log = new_log()
    fill(log, 10, T0_MS)
    assert log.consume("a", 4, "r1", T0_MS) == Consumed(Offset(0), Offset(4))
    fill(log, 1, T0_MS + EXPIRY_MS + 1)  # any command moves partition time
    assert "a" not in log.consumers
    # Its last request id went too: a retry of r1 is a new pop from the log start.
    assert log.consume("a", 4, "r1", T0_MS + EXPIRY_MS + 2) == Consumed(Offset(0), Offset(4))


def test_an_idle_producer_loses_its_dedup_window_an_active_one_keeps_it() -> None:
    log = new_log()
    first = log.append([(None, "x")], T0_MS, "idle", 1)
    kept = log.append([(None, "y")], T0_MS, "busy", 1)
    assert log.append([(None, "z")], T0_MS + EXPIRY_MS, "busy", 2) == Appended(
        Offset(2), Offset(3), duplicate=False
    )
    late_ms = T0_MS + EXPIRY_MS + 1
    assert log.append([(None, "y")], late_ms, "busy", 1) == Appended(
        Offset(1), Offset(2), duplicate=True
    )
    assert "idle" not in log.producers
    # The documented consequence: a retry after expiry is appended again.
    again = log.append([(None, "x")], late_ms, "idle", 1)
    assert isinstance(first, Appended) and isinstance(kept, Appended)
    assert isinstance(again, Appended) and not again.duplicate and again.start == 3


def test_partition_time_never_goes_back() -> None:
    log = new_log()
    fill(log, 1, T0_MS + 5 * EXPIRY_MS)
    log.consume("a", 1, None, T0_MS)  # an older clock: named at partition time, not at T0
    assert log.clock_ms == T0_MS + 5 * EXPIRY_MS
    fill(log, 1, T0_MS + 5 * EXPIRY_MS + EXPIRY_MS)
    assert "a" in log.consumers


def test_one_command_expires_a_bounded_number_and_later_commands_drain_the_rest() -> None:
    limits = PartitionLimits(**{**_fields(LIMITS), "consumers_max": 1_000})
    log = new_log(limits)
    fill(log, 1, T0_MS)
    for i in range(100):
        log.consume(f"c{i}", 1, None, T0_MS)
    fill(log, 1, T0_MS + EXPIRY_MS + 1)
    assert 80 <= len(log.consumers) < 100
    for step in range(20):
        fill(log, 1, T0_MS + EXPIRY_MS + 2 + step)
    assert log.consumers == {} and log.last_seen_ms == OrderedDict()


def test_state_stays_bounded_by_the_clients_of_one_expiry_window() -> None:
    """One new consumer and one new producer per 10 ms, each used once: the state holds
    about the last ``EXPIRY_MS / 10`` of each, however many were ever seen."""
    limits = PartitionLimits(**{**_fields(LIMITS), "consumers_max": 10_000})
    log = new_log(limits)
    for i in range(2_000):
        at_ms = T0_MS + 10 * i
        log.append([(None, "v")], at_ms, f"p{i}", 0)
        log.consume(f"c{i}", 1, None, at_ms)
        assert len(log.consumers) <= EXPIRY_MS // 10 + 2
        assert len(log.producers) <= EXPIRY_MS // 10 + 2


def test_replicas_with_unordered_proposer_clocks_agree() -> None:
    rng = random.Random(7)
    commands: list[tuple[object, ...]] = []
    for step in range(500):
        at_ms = T0_MS + 10 * step + rng.randint(-300, 300)  # brokers' clocks disagree a bit
        client = f"k{rng.randint(0, 40)}"
        if rng.random() < 0.5:
            commands.append(to_wire(Append(((None, "v"),), at_ms, client, step)))
        else:
            commands.append(to_wire(Consume(client, 2, f"r{step % 3}", at_ms)))
    one, two = new_log(), new_log()
    for wire in commands:
        assert apply_group(one, [wire]) == apply_group(two, [wire])
    assert pickle.dumps(one.__dict__) == pickle.dumps(two.__dict__)
    restored = pickle.loads(pickle.dumps(one))
    assert restored.last_seen_ms == one.last_seen_ms and restored.clock_ms == one.clock_ms


def test_a_consume_from_an_old_journal_decodes_without_a_timestamp() -> None:
    assert from_wire(("consume", "c", 5, "r")) == Consume("c", 5, "r", None)
    assert from_wire(("consume", "c", 5, "r", T0_MS)) == Consume("c", 5, "r", T0_MS)
    assert from_wire(("consume", "c", 5, "r", "soon")) is None
    assert to_wire(Consume("c", 5, "r", T0_MS)) == ("consume", "c", 5, "r", T0_MS, None)
    log = new_log()
    fill(log, 3, T0_MS)
    assert apply_group(log, [("consume", "c", 2, "r")]) == [Consumed(Offset(0), Offset(2))]
    assert log.last_seen_ms[("c", "c")] == T0_MS


def test_a_snapshot_from_before_expiry_loads_and_its_clients_start_idling_at_load() -> None:
    log = new_log()
    log.consume("old-c", 1, None, None)
    log.append([(None, "v")], 5, "old-p", 1)
    old = _as_before_expiry(log)

    restored: PartitionLog = pickle.loads(pickle.dumps(old))
    assert (
        restored.limits.client_idle_expiry_ms
        == PartitionLimits(1, 1, 1, 1, 1, 1).client_idle_expiry_ms
    )
    restored.limits = LIMITS  # a short expiry, to watch it work
    fill(restored, 1, T0_MS)
    assert set(restored.consumers) == {"old-c"} and set(restored.producers) == {"old-p"}
    fill(restored, 1, T0_MS + EXPIRY_MS + 1)
    assert restored.consumers == {} and not restored.producers


def _as_before_expiry(log: PartitionLog) -> PartitionLog:
    """A copy shaped like a replica pickled before expiry existed: no clock, no activity,
    and limits pickled with one field fewer."""
    old: PartitionLog = pickle.loads(pickle.dumps(log))
    del old.__dict__["clock_ms"], old.__dict__["last_seen_ms"]
    old.consumers = dict(old.consumers)
    names = list(_fields(log.limits))
    values = list(_fields(log.limits).values())[: names.index("client_idle_expiry_ms")]
    old.__dict__["limits"] = _OldLimits(values)
    return old


class _OldLimits:
    """Pickles as the ``PartitionLimits`` of before: its dataclass state had six values."""

    def __init__(self, values: list[int]) -> None:
        self.values = values

    def __reduce__(self) -> tuple[object, ...]:
        return (object.__new__, (PartitionLimits,), self.values)


def _fields(limits: PartitionLimits) -> dict[str, int]:
    return {name: getattr(limits, name) for name in limits.__slots__}
