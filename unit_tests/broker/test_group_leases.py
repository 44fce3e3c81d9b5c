"""``GroupLeases``, the pure core of leased delivery (issue 20): leases, acks, nacks,
extends, expiry, dead letters, per-key ordering and their bounds, by example and by a
seeded random walk that checks the delivery rules after every step."""

from __future__ import annotations

import copy
import pickle
import random

import pytest

from broker.partition.group_leases import (
    KEY_UNKNOWN,
    DeadLetter,
    GroupFigures,
    GroupLeases,
    GroupSettings,
    Letter,
    Receipt,
    Redriven,
    UnknownKey,
    tracking_leases,
)
from protocol.group_requests import Outcome
from protocol.types import Offset

PLAIN = GroupSettings(visibility_timeout_ms=1_000, max_deliveries=3)
BY_KEY = GroupSettings(visibility_timeout_ms=1_000, max_deliveries=0, ordered_by_key=True)
BOUNDS = {"leases_max": 100, "unsettled_max": 200, "scan_max": 500}


def _receive(
    group: GroupLeases,
    n: int,
    now_ms: int,
    end: int = 10,
    settings: GroupSettings = PLAIN,
    keys: dict[int, str | None] | None = None,
    **bounds: int,
) -> list[tuple[Offset, int]]:
    return group.receive(
        settings,
        n,
        now_ms,
        end,
        lambda offset: (keys or {}).get(offset),
        **{**BOUNDS, **bounds},
    )


def _receipts(leased: list[tuple[Offset, int]]) -> list[Receipt]:
    return [Receipt(offset, count) for offset, count in leased]


def test_a_receive_leases_new_offsets_in_order_and_an_ack_settles_them() -> None:
    group = tracking_leases()
    leased = _receive(group, 3, now_ms=0)
    assert leased == [(0, 1), (1, 1), (2, 1)]
    assert group.ack(_receipts(leased[:2])) == [Outcome.DONE, Outcome.DONE]
    assert group.floor == 2 and group.in_flight() == 1
    assert group.ack(_receipts(leased[:1])) == [Outcome.ALREADY]  # idempotent
    assert _receive(group, 10, now_ms=10) == [(o, 1) for o in range(3, 10)]


def test_an_expired_lease_is_delivered_again_with_a_higher_count() -> None:
    group = tracking_leases()
    first = _receive(group, 1, now_ms=0)
    assert _receive(group, 1, now_ms=999) == [(1, 1)]  # offset 0 still leased
    assert _receive(group, 1, now_ms=1_000) == [(0, 2)]  # its lease ended at 1,000
    # The first delivery's receipt is stale now: it neither settles nor ends the new lease.
    assert group.ack(_receipts(first)) == [Outcome.STALE]
    assert group.in_flight() == 2 and group.floor == 0


def test_a_nack_redelivers_after_its_delay_and_an_extend_keeps_a_lease() -> None:
    group = tracking_leases()
    leased = _receive(group, 2, now_ms=0, end=2)
    assert group.nack(PLAIN, _receipts(leased[:1]), delay_ms=500, now_ms=100) == [Outcome.DONE]
    assert group.extend(_receipts(leased[1:]), 5_000, now_ms=100) == [Outcome.DONE]
    assert _receive(group, 5, now_ms=599, end=2) == []
    assert _receive(group, 5, now_ms=600, end=2) == [(0, 2)]
    group.ack([Receipt(Offset(0), 2)])
    assert _receive(group, 5, now_ms=5_099, end=2) == []  # offset 1's lease was extended
    assert _receive(group, 5, now_ms=5_100, end=2) == [(1, 2)]


def test_an_ack_after_a_nack_is_stale_and_the_message_comes_again() -> None:
    group = tracking_leases()
    leased = _receipts(_receive(group, 1, now_ms=0, end=1))
    group.nack(PLAIN, leased, delay_ms=0, now_ms=1)
    assert group.ack(leased) == [Outcome.STALE]
    assert _receive(group, 1, now_ms=2, end=1) == [(0, 2)]


def test_a_repeated_nack_is_already_done_until_the_next_delivery() -> None:
    """A nack whose answer was lost is sent again (seen after a leadership move): it says
    ``ended``, not ``stale``, while the message waits; once delivered again, it is
    another delivery's, and the old receipt is stale."""
    group = tracking_leases()
    leased = _receipts(_receive(group, 1, now_ms=0, end=1))
    assert group.nack(PLAIN, leased, delay_ms=500, now_ms=1) == [Outcome.DONE]
    assert group.nack(PLAIN, leased, delay_ms=0, now_ms=2) == [Outcome.ENDED]
    assert group.ack(leased) == [Outcome.STALE]  # not settled: an ack of it does nothing
    assert _receive(group, 1, now_ms=3, end=1) == []  # the repeat did not shorten the delay
    assert _receive(group, 1, now_ms=501, end=1) == [(0, 2)]
    assert group.nack(PLAIN, leased, delay_ms=0, now_ms=502) == [Outcome.STALE]


def test_a_late_extend_never_shortens_a_lease() -> None:
    group = tracking_leases()
    leased = _receipts(_receive(group, 1, now_ms=0))
    group.extend(leased, 10_000, now_ms=0)
    group.extend(leased, 10, now_ms=50)
    assert group.leases[0].expires_ms == 10_000


def test_past_max_deliveries_a_message_is_dead_lettered_then_settled() -> None:
    group = tracking_leases()
    for count in (1, 2, 3):
        leased = _receive(group, 1, now_ms=count * 10, end=1)
        assert leased == [(0, count)]
        group.nack(PLAIN, _receipts(leased), delay_ms=0, now_ms=count * 10)
    assert group.pending_dead(10) == [DeadLetter(Offset(0), 3, sequence=1)]
    assert _receive(group, 1, now_ms=100, end=1) == []  # never delivered a fourth time
    group.settle_dead([0])
    group.settle_dead([0])  # a repeated mark (the step repeated after a failover)
    assert group.pending_dead(10) == [] and group.floor == 1
    assert group.figures(1).dead_lettered == 1


def test_dead_letters_are_numbered_in_the_order_they_died() -> None:
    """The dead-letter sequence follows deaths, not offsets: the copies reach the dead-letter
    partitions with increasing sequences, as a producer's must."""
    group = tracking_leases()
    settings = GroupSettings(visibility_timeout_ms=1_000, max_deliveries=1)
    leased = _receive(group, 3, now_ms=0, end=3, settings=settings)
    group.nack(settings, _receipts(leased[2:]), delay_ms=0, now_ms=5)  # offset 2 dies first
    group.nack(settings, _receipts(leased[:1]), delay_ms=0, now_ms=6)
    assert group.pending_dead(10) == [
        DeadLetter(Offset(2), 1, sequence=1),
        DeadLetter(Offset(0), 1, sequence=2),
    ]
    assert group.pending_dead(1) == [DeadLetter(Offset(2), 1, sequence=1)]
    group.settle_dead([2])
    group.expire(settings, now_ms=2_000)  # offset 1's lease ends: the third death
    assert [d.sequence for d in group.pending_dead(10)] == [2, 3]
    group.skip_below(1)  # retention took offset 0: its letter goes with it
    assert group.pending_dead(10) == [DeadLetter(Offset(1), 1, sequence=3)]


def _kill(group: GroupLeases, offset_count: int, settings: GroupSettings = PLAIN) -> None:
    """Nack offsets ``[0, offset_count)`` until each is dead (``max_deliveries``)."""
    for step in range(settings.max_deliveries):
        leased = _receive(group, offset_count, now_ms=step, end=offset_count, settings=settings)
        group.nack(settings, _receipts(leased), delay_ms=0, now_ms=step)
    assert len(group.dead) == offset_count


def test_a_parked_redrive_delivers_dead_messages_again_counting_deliveries_afresh() -> None:
    group = tracking_leases()
    _kill(group, 3)
    assert group.redrive_parked(2, now_ms=100) == 2  # the first two to die
    assert sorted(group.waiting) == [0, 1] and list(group.dead) == [2]
    stale = Receipt(Offset(0), 3)  # the delivery before the redrive
    assert group.ack([stale]) == [Outcome.STALE]
    leased = _receive(group, 5, now_ms=100, end=3)
    assert leased == [(0, 4), (1, 4)]  # counts go on, so old receipts stay stale
    for count in (4, 5):  # max_deliveries (3) counts from the redrive: 4, 5, 6
        group.nack(PLAIN, [Receipt(Offset(0), count)], delay_ms=0, now_ms=100)
        assert _receive(group, 1, now_ms=100, end=3) == [(0, count + 1)]
    group.nack(PLAIN, [Receipt(Offset(0), 6)], delay_ms=0, now_ms=100)
    assert 0 in group.dead and group.pending_dead(10)[-1] == DeadLetter(Offset(0), 6, 4)
    assert group.ack([Receipt(Offset(1), 4)]) == [Outcome.DONE]
    assert group.redrive_parked(10, now_ms=200) == 2 and not group.dead


def test_a_reopened_message_below_the_floor_is_delivered_once_and_settles_again() -> None:
    group = tracking_leases()
    _kill(group, 2)
    group.settle_dead([0, 1])
    leased = _receive(group, 3, now_ms=10, end=5)
    group.ack(_receipts(leased))
    assert group.floor == 5 and group.figures(5).unsettled == 0
    done = group.reopen([Letter(Offset(1), 3, "k")], now_ms=20, log_start_offset=0)
    assert done == Redriven(1, 0) and group.figures(5).unsettled == 1
    assert group.ack([Receipt(Offset(1), 3)]) == [Outcome.STALE]  # waiting, below the floor
    assert group.reopen([Letter(Offset(1), 3, "k")], 21, 0) == Redriven(0, 0)  # waiting
    leased = _receive(group, 5, now_ms=30, end=5)
    assert leased == [(1, 4)] and group.leases[1].key == "k"
    assert group.ack(_receipts(leased)) == [Outcome.DONE]
    assert group.ack(_receipts(leased)) == [Outcome.ALREADY]
    assert group.floor == 5 and not group.settled and group.figures(5).unsettled == 0
    assert _receive(group, 5, now_ms=40, end=5) == []


def test_reopen_takes_settled_and_dead_offsets_and_leaves_the_rest() -> None:
    group = tracking_leases()
    settings = GroupSettings(visibility_timeout_ms=1_000, max_deliveries=1)
    leased = _receive(group, 4, now_ms=0, end=6, settings=settings)
    group.nack(settings, _receipts(leased[1:2]), 0, now_ms=1)  # 1 dies, copy pending
    group.nack(settings, _receipts(leased[2:3]), 0, now_ms=1)  # 2 dies
    group.settle_dead([2])  # its copy is stored: settled above the floor (0 is leased)
    letters = [
        Letter(Offset(1), 1, None),  # dead, copy pending: reopened
        Letter(Offset(2), 1, None),  # settled above the floor: reopened
        Letter(Offset(3), 1, None),  # leased: left as it is
        Letter(Offset(5), 1, None),  # never handed out: left as it is
    ]
    assert group.reopen(letters, now_ms=5, log_start_offset=0) == Redriven(2, 0)
    assert sorted(group.waiting) == [1, 2] and not group.dead and not group.dead_sequences
    assert group.pending_dead(10) == []
    assert group.reopen([Letter(Offset(0), 1, None)], 6, log_start_offset=1) == Redriven(0, 1)


def test_a_second_redrive_of_one_copy_leaves_the_acknowledged_message_settled() -> None:
    """The long tier's lease run (seed 3100): a redrive repeated with a new plan after the
    manager leader's kill named a copy whose message had been redriven, delivered and
    acknowledged since; it was delivered again, with the same count."""
    group = tracking_leases()
    _kill(group, 1)
    group.settle_dead([0])
    letter = Letter(Offset(0), 3, None)
    assert group.reopen([letter], now_ms=10, log_start_offset=0) == Redriven(1, 0)
    leased = _receive(group, 5, now_ms=20, end=1)
    assert leased == [(0, 4)] and group.ack(_receipts(leased)) == [Outcome.DONE]
    assert group.reopen([letter], now_ms=30, log_start_offset=0) == Redriven(0, 0)
    assert _receive(group, 5, now_ms=40, end=1) == [] and group.figures(1).unsettled == 0
    group.skip_below(1)  # retention: nothing below the log start is remembered
    assert not group.in_dead_letter_topic


def test_a_group_from_an_older_snapshot_reopens_any_settled_message_a_copy_names() -> None:
    """Written before the record of copies existed: nothing says which settled messages
    are in the dead-letter topic, so a copy reopens its message (the rule before)."""
    older = GroupLeases()
    older.__setstate__(tracking_leases().__getstate__()[:-2])
    assert not older.tracks_dead_letter_topic
    _kill(older, 1)
    older.settle_dead([0])
    leased = _receive(older, 5, now_ms=0, end=1)
    assert leased == [] and older.floor == 1
    assert older.reopen([Letter(Offset(0), 3, None)], 10, 0) == Redriven(1, 0)


def test_retention_removes_reopened_messages_below_the_log_start() -> None:
    group = tracking_leases()
    _kill(group, 2)
    group.settle_dead([0, 1])
    group.reopen([Letter(Offset(0), 3, None), Letter(Offset(1), 3, None)], 10, 0)
    group.skip_below(1)
    assert sorted(group.waiting) == [1] and group.floor == 2
    assert _receive(group, 5, now_ms=20, end=2) == [(1, 4)]


def test_receipts_of_offsets_never_handed_out_are_unknown() -> None:
    group = tracking_leases()
    assert group.ack([Receipt(Offset(5), 1)]) == [Outcome.UNKNOWN]
    assert group.floor == 0 and not group.settled


def test_leases_in_flight_and_unsettled_messages_are_bounded() -> None:
    group = tracking_leases()
    assert len(_receive(group, 10, now_ms=0, leases_max=4)) == 4
    assert _receive(group, 10, now_ms=1, leases_max=4) == []
    other = GroupLeases()
    # Ordering holds back every later "k" message: they count toward the bound.
    keys: dict[int, str | None] = dict.fromkeys(range(10), "k")
    leased = _receive(other, 10, now_ms=0, settings=BY_KEY, keys=keys, unsettled_max=3)
    assert leased == [(0, 1)] and other.next_offset == 3 and len(other.waiting) == 2


def test_by_key_a_keys_next_message_waits_for_the_earlier_one() -> None:
    keys: dict[int, str | None] = {0: "a", 1: "a", 2: "b", 3: None, 4: None, 5: "b"}
    group = tracking_leases()
    leased = _receive(group, 10, now_ms=0, end=6, settings=BY_KEY, keys=keys)
    assert [o for o, _ in leased] == [0, 2, 3, 4]  # 1 waits for 0, 5 for 2; no key: free
    group.ack(_receipts(leased[:1]))  # offset 0 ("a") settled
    assert [o for o, _ in _receive(group, 10, 1, end=6, settings=BY_KEY, keys=keys)] == [1]
    # A nacked "b" message keeps its key's next one back until it is delivered again.
    group.nack(BY_KEY, [Receipt(Offset(2), 1)], delay_ms=100, now_ms=2)
    assert _receive(group, 10, now_ms=50, end=6, settings=BY_KEY, keys=keys) == []
    assert _receive(group, 10, now_ms=102, end=6, settings=BY_KEY, keys=keys) == [(2, 2)]


def test_retention_below_the_floor_skips_what_was_not_settled() -> None:
    group = tracking_leases()
    _receive(group, 3, now_ms=0)
    group.skip_below(5)
    assert group.floor == 5 and group.next_offset == 5 and group.in_flight() == 0
    assert _receive(group, 1, now_ms=1) == [(5, 1)]


@pytest.mark.parametrize("seed", range(20))
def test_a_random_walk_keeps_the_delivery_rules(seed: int) -> None:
    """Receives, acks, nacks, extends and time passing at random, with per-key ordering
    on half the seeds: a message is never leased twice at once, each delivery's count is
    one more than the last, a key never has two messages in flight (ordered), nothing
    settled is handed out again, and once every message is acked the floor is the end."""
    rng = random.Random(seed)
    settings = BY_KEY if seed % 2 else PLAIN
    keys = {o: rng.choice(["a", "b", "c", None]) for o in range(60)}
    group = tracking_leases()
    delivered: dict[int, int] = {}
    acked: set[int] = set()
    now_ms = 0
    for _ in range(400):
        now_ms += rng.choice([0, 10, 300, 1_200])
        leased = _receive(group, rng.randint(1, 5), now_ms, 60, settings, keys)
        for offset, count in leased:
            assert offset not in acked, f"settled offset {offset} handed out again"
            assert count == delivered.get(offset, 0) + 1
            delivered[offset] = count
        if settings.ordered_by_key:
            in_flight = [keys[o] for o in group.leases if keys[o] is not None]
            assert len(in_flight) == len(set(in_flight)), "a key has two messages in flight"
        current = [Receipt(Offset(o), lease.delivery_count) for o, lease in group.leases.items()]
        rng.shuffle(current)
        chosen = current[: rng.randint(0, len(current))]
        action = rng.choice(["ack", "ack", "nack", "extend"])
        if action == "ack":
            assert set(group.ack(chosen)) <= {Outcome.DONE}
            acked.update(r.offset for r in chosen)
        elif action == "nack":
            group.nack(settings, chosen, rng.choice([0, 500]), now_ms)
        else:
            group.extend(chosen, 2_000, now_ms)
        # A late ack of an earlier delivery changes nothing.
        stale = [Receipt(Offset(o), c - 1) for o, c in delivered.items() if c > 1]
        for receipt in rng.sample(stale, min(len(stale), 2)):
            assert group.ack([receipt]) in ([Outcome.STALE], [Outcome.ALREADY])
        dead = [d.offset for d in group.pending_dead(100)]
        if rng.random() < 0.1:  # a redrive: delivered again, counting afresh
            group.redrive_parked(rng.randint(0, 5), now_ms)
        group.settle_dead(dead)
        if rng.random() < 0.1 and dead:  # their copies redriven
            letters = [Letter(Offset(o), delivered[o], keys[o]) for o in dead]
            group.reopen(letters, now_ms, log_start_offset=0)
            acked.difference_update(dead)
        acked.update(o for o in range(group.floor) if not _unsettled(group, o))
        acked.update(group.settled)
    while not _drained(group, 60):  # drain: ack whatever is handed out
        now_ms += 2_000
        leased = _receive(group, 60, now_ms, 60, settings, keys)
        group.ack(_receipts(leased))
        group.settle_dead([d.offset for d in group.pending_dead(100)])
    assert group.floor == 60 and not group.leases and not group.waiting


def _unsettled(group: GroupLeases, offset: int) -> bool:
    return any(offset in table for table in (group.leases, group.waiting, group.dead))


def _drained(group: GroupLeases, end: int) -> bool:
    return group.floor == end and not (group.leases or group.waiting or group.dead)


def test_a_snapshot_restores_the_same_state_and_an_older_one_gets_defaults() -> None:
    group = tracking_leases()
    leased = _receive(group, 3, now_ms=0)
    group.nack(PLAIN, _receipts(leased[:1]), delay_ms=5, now_ms=1)
    group.ack(_receipts(leased[1:2]))
    restored = pickle.loads(pickle.dumps(group))
    assert restored == group
    older = GroupLeases.__new__(GroupLeases)
    older.__setstate__([Offset(2), Offset(4)])  # written before the tables existed
    assert older.leases == {} and older.settled == set() and older.next_offset == 4


def test_figures_count_the_unsettled_from_the_floor() -> None:
    group = tracking_leases()
    leased = _receive(group, 3, now_ms=0)
    assert group.figures(5) == GroupFigures(floor=0, unsettled=5, in_flight=3, dead=0)
    group.ack([Receipt(Offset(o), n) for o, n in leased[1:2]])
    assert group.figures(5) == GroupFigures(floor=0, unsettled=4, in_flight=2, dead=0)
    group.ack([Receipt(Offset(o), n) for o, n in leased[:1]])
    assert group.figures(5) == GroupFigures(floor=2, unsettled=3, in_flight=1, dead=0)


def _may(group: GroupLeases, now_ms: int, end: int, settings: GroupSettings = PLAIN) -> bool:
    return group.may_deliver(now_ms, end, settings.ordered_by_key, BOUNDS["scan_max"])


def test_may_deliver_whenever_a_receive_would_lease_something() -> None:
    group = tracking_leases()
    assert _may(group, 0, 3)
    leased = _receive(group, 3, now_ms=0, end=3)
    timeout_ms = PLAIN.visibility_timeout_ms
    assert not _may(group, timeout_ms - 1, 3)
    assert _may(group, 1, 4)  # a message never delivered
    assert _may(group, timeout_ms, 3)  # a lease that ended
    group.nack(PLAIN, [Receipt(Offset(o), n) for o, n in leased[:1]], 50, now_ms=10)
    assert not _may(group, 59, 3) and _may(group, 60, 3)  # waiting, then ready


def test_with_per_key_ordering_a_held_back_message_is_not_deliverable() -> None:
    """A long poll of an ordered group whose next messages wait for their key asked the
    partition every 50 ms, and each ask proposed an entry that leased nothing."""
    keys: dict[int, str | None] = {0: "a", 1: "a", 2: "a"}
    group = tracking_leases()
    assert _receive(group, 3, now_ms=0, end=3, settings=BY_KEY, keys=keys) == [(0, 1)]
    assert not _may(group, 10, 3, BY_KEY)  # 1 and 2 wait for 0, leased
    assert _may(group, 10, 3)  # unordered, they would go


@pytest.mark.parametrize("settings", [PLAIN, BY_KEY], ids=["plain", "by-key"])
def test_may_deliver_is_never_false_when_a_receive_would_lease(settings: GroupSettings) -> None:
    rng = random.Random(7)
    keys: dict[int, str | None] = {o: rng.choice(["a", "b", None]) for o in range(40)}
    group, end = GroupLeases(), 0
    for step in range(300):
        now_ms = step * 37
        end = min(40, end + rng.randrange(3))
        probe = copy.deepcopy(group)
        would = bool(_receive(probe, 2, now_ms=now_ms, end=end, settings=settings, keys=keys))
        assert _may(group, now_ms, end, settings) or not would, step
        leased = _receive(
            group, rng.randrange(1, 3), now_ms=now_ms, end=end, settings=settings, keys=keys
        )
        for offset, count in leased:
            action = rng.choice(["ack", "nack", "hold"])
            if action == "ack":
                group.ack([Receipt(offset, count)])
            elif action == "nack":
                group.nack(settings, [Receipt(offset, count)], rng.randrange(100), now_ms)


def test_an_unknown_key_stops_an_ordered_receive_and_not_another() -> None:
    def key_of(offset: Offset) -> str | None | UnknownKey:
        return "k" if offset < 2 else KEY_UNKNOWN

    ordered = GroupLeases()
    leased = ordered.receive(BY_KEY, 10, 0, 5, key_of, **BOUNDS)
    assert leased == [(0, 1)] and ordered.next_offset == 2  # 1 waits for 0; 2 is unknown
    plain = GroupLeases()
    assert len(plain.receive(PLAIN, 10, 0, 5, key_of, **BOUNDS)) == 5
