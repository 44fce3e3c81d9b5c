"""The lease checker on synthetic histories (issue 20): a realistic run of two workers
passes, and each kind of broken consumer group (a message never acked, an ack before the
work, an acked message back, a lease cut short, one delivery to two members or in two
requests of one, a count that went back, a receipt that names another delivery) fails in
exactly its kind; across a power cut, what an answer showed must hold and what it did not
show need not. Boundaries of
the early-redelivery bound at the clock tolerance, the redelivery percentiles on a
hand-computed example, and a verdict independent of the order events were recorded in."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import replace
from typing import Any

import pytest

from stress_tests.lease_checker import (
    EXAMPLES_PER_KIND_MAX,
    LATE_REDELIVERY,
    MUST_BE_ZERO,
    DeadLetterCopy,
    Finished,
    LeaseHistory,
    LeaseVerdict,
    Produced,
    ReceiveCall,
    Received,
    Redrive,
    Settled,
    check,
    percentile_ms,
)

VISIBILITY_MS = 1000
TOLERANCE_MS = 100
A, B, C, D, E, F, H = (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (0, 4), (1, 1)
"""Messages ``(partition_id, offset)`` of the clean run (see ``clean``)."""


def got(worker: str, message: tuple[int, int], count: int, sent_ms: int, at_ms: int) -> Received:
    partition_id, offset = message
    receipt = f"{partition_id}.{offset}.{count}"
    return Received(worker, partition_id, offset, count, receipt, sent_ms, at_ms)


def fin(worker: str, message: tuple[int, int], count: int, at_ms: int) -> Finished:
    return Finished(worker, *message, count, at_ms)


def act(
    worker: str,
    action: str,
    message: tuple[int, int],
    count: int,
    outcome: str,
    sent_ms: int,
    duration_ms: int = 0,
) -> Settled:
    """Answered 10 ms after it was sent."""
    return Settled(worker, action, *message, count, outcome, sent_ms, sent_ms + 10, duration_ms)


def clean() -> LeaseHistory:
    """Two workers, visibility 1,000 ms:
    A acked; B nacked with a 200 ms delay, then delivered again and acked;
    C's lease expired (w1 paused), delivered to w2, w1's late ack stale, w2 acked;
    D extended and acked; E received twice by w1 (a repeat of its request id), its first
    ack unanswered, the retry answered ``already``; F extended, w1 killed, delivered again
    after the extended lease; H expired, delivered to w1 and acked, w2's late ack
    ``already``."""
    received = (
        got("w1", A, 1, 0, 10),
        got("w1", B, 1, 0, 10),
        got("w2", B, 2, 300, 320),
        got("w1", C, 1, 0, 10),
        got("w2", C, 2, 1100, 1150),
        got("w2", D, 1, 0, 20),
        got("w1", E, 1, 400, 450),
        got("w1", E, 1, 400, 480),
        got("w1", F, 1, 2000, 2010),
        got("w2", F, 2, 3550, 3600),
        got("w2", H, 1, 4000, 4010),
        got("w1", H, 2, 5100, 5120),
    )
    finished = (
        fin("w1", A, 1, 50),
        fin("w2", B, 2, 350),
        fin("w1", C, 1, 1160),
        fin("w2", C, 2, 1200),
        fin("w2", D, 1, 1500),
        fin("w1", E, 1, 500),
        fin("w2", F, 2, 3650),
        fin("w1", H, 2, 5150),
        fin("w2", H, 1, 5200),
    )
    settled = (
        act("w1", "ack", A, 1, "done", 60),
        act("w1", "nack", B, 1, "done", 100, 200),
        act("w2", "ack", B, 2, "done", 360),
        act("w1", "ack", C, 1, "stale", 1170),
        act("w2", "ack", C, 2, "done", 1210),
        act("w2", "extend", D, 1, "done", 800, 1000),
        act("w2", "ack", D, 1, "done", 1510),
        Settled("w1", "ack", *E, 1, "error", 510, 530),
        act("w1", "ack", E, 1, "already", 540),
        act("w1", "extend", F, 1, "done", 2500, 1000),
        act("w2", "ack", F, 2, "done", 3660),
        act("w1", "ack", H, 2, "done", 5160),
        act("w2", "ack", H, 1, "already", 5210),
    )
    produced = tuple(Produced(*m, f"v{m}") for m in (A, B, C, D, E, F, H))
    return LeaseHistory(produced, received, finished, settled, VISIBILITY_MS, TOLERANCE_MS)


def with_(history: LeaseHistory, **changes: Any) -> LeaseHistory:
    return dataclasses.replace(history, **changes)


def without(records: tuple[Any, ...], unwanted: Any) -> tuple[Any, ...]:
    assert unwanted in records
    return tuple(r for r in records if r != unwanted)


def replaced(records: tuple[Any, ...], old: Any, new: Any) -> tuple[Any, ...]:
    assert old in records
    return tuple(new if r == old else r for r in records)


def failing(verdict: LeaseVerdict) -> dict[str, int]:
    return {name: n for name, n in verdict.counts.items() if n and name in MUST_BE_ZERO}


# --- a clean run ------------------------------------------------------------------------------


def test_a_clean_run_passes_with_every_must_be_zero_count_at_zero() -> None:
    verdict = check(clean())
    assert verdict.ok, verdict.lines()
    assert {name: verdict.counts[name] for name in MUST_BE_ZERO} == dict.fromkeys(MUST_BE_ZERO, 0)
    assert verdict.counts[LATE_REDELIVERY] == 0
    assert verdict.examples == {}


def test_a_clean_run_reports_its_figures() -> None:
    verdict = check(clean())
    expected = {
        "produced": 7,
        "receives": 12,
        "receive_repeats": 1,
        "deliveries": 11,
        "received_not_produced": 0,
        "finished": 9,
        "duplicates": 2,  # C and H: finished by both workers
        "acks": 10,
        "acks_done": 6,
        "acks_already": 2,
        "acks_stale": 1,
        "acks_error": 1,
        "acks_unknown": 0,
        "nacks": 1,
        "nacks_done": 1,
        "extends": 2,
        "extends_done": 2,
        "expiry_redeliveries": 3,  # C, F and H; B was nacked
        "redeliveries_unjudged": 0,
    }
    assert {name: verdict.info[name] for name in expected} == expected
    assert verdict.duplicate_rate == pytest.approx(2 / 7)


def test_a_clean_run_times_its_expired_leases() -> None:
    verdict = check(clean())
    # F: 3600 - (2510 + 1000), from its extend; H: 5120 - (4010 + 1000); C: 1150 - (10 + 1000)
    assert verdict.redelivery_latencies_ms == [90, 110, 140]
    assert (verdict.redelivery_p50_ms, verdict.redelivery_p99_ms) == (110, 140)
    assert verdict.redelivery_max_ms == 140
    assert verdict.redelivery_on_target


def test_the_report_lines_name_every_kind_and_the_target() -> None:
    lines = check(clean()).lines()
    for name in MUST_BE_ZERO:
        assert any(name in line and "(must be 0)" in line for line in lines)
    assert any("p50/p99/max ms: 110/140/140" in line and "met" in line for line in lines)


def test_an_empty_run_passes_with_no_latencies() -> None:
    verdict = check(LeaseHistory((), (), (), (), VISIBILITY_MS))
    assert verdict.ok
    assert verdict.redelivery_p99_ms is None and verdict.redelivery_on_target
    assert verdict.duplicate_rate == 0.0


# --- one broken history per kind ----------------------------------------------------------------


def test_a_message_never_acked_is_lost() -> None:
    history = clean()
    unacked = with_(history, settled=without(history.settled, act("w2", "ack", D, 1, "done", 1510)))
    verdict = check(unacked)
    assert failing(verdict) == {"lost": 1}
    assert "(0, 3)" in verdict.examples["lost"][0]
    never_received = with_(history, produced=(*history.produced, Produced(2, 0, "v-never")))
    assert failing(check(never_received)) == {"lost": 1}


def test_an_ack_without_an_answer_does_not_settle_a_message() -> None:
    history = clean()
    unanswered = with_(
        history, settled=without(history.settled, act("w1", "ack", E, 1, "already", 540))
    )
    assert failing(check(unanswered)) == {"lost": 1}


def test_a_nack_answered_ended_neither_settles_nor_forbids_a_redelivery() -> None:
    """``ended`` (a repeated nack) says the delivery had ended, not that the message is
    settled: a message whose last answer is a nack ``ended`` is still lost, and a delivery
    after it is no redelivery after an ack."""
    history = clean()
    done = act("w2", "ack", D, 1, "done", 1510)
    ended = act("w2", "nack", D, 1, "ended", 1510)
    assert failing(check(with_(history, settled=replaced(history.settled, done, ended)))) == {
        "lost": 1
    }
    nacked = with_(history, settled=(*history.settled, act("w1", "nack", B, 1, "ended", 250)))
    assert failing(check(nacked)) == {}


def test_lost_examples_are_bounded() -> None:
    produced = tuple(Produced(0, offset, f"v{offset}") for offset in range(8))
    verdict = check(LeaseHistory(produced, (), (), (), VISIBILITY_MS))
    assert failing(verdict) == {"lost": 8}
    assert len(verdict.examples["lost"]) == EXAMPLES_PER_KIND_MAX


def test_an_ack_sent_before_the_work_finished_is_acked_unfinished() -> None:
    history = clean()
    late_ledger = replaced(history.finished, fin("w1", A, 1, 50), fin("w1", A, 1, 65))
    assert failing(check(with_(history, finished=late_ledger))) == {"acked_unfinished": 1}


def test_an_ack_sent_the_moment_the_work_finished_passes() -> None:
    history = clean()
    same_ms = replaced(history.finished, fin("w1", A, 1, 50), fin("w1", A, 1, 60))
    assert check(with_(history, finished=same_ms)).ok


def test_only_the_acking_workers_ledger_of_that_delivery_counts() -> None:
    history = clean()
    other_worker = replaced(history.finished, fin("w1", A, 1, 50), fin("w2", A, 1, 50))
    assert failing(check(with_(history, finished=other_worker))) == {"acked_unfinished": 1}
    # w1 finished delivery 1 of C; w2 acked delivery 2 without finishing it
    other_delivery = without(history.finished, fin("w2", C, 2, 1200))
    assert failing(check(with_(history, finished=other_delivery))) == {"acked_unfinished": 1}


def test_a_message_received_after_its_ack_is_redelivered_after_ack() -> None:
    history = clean()
    back = with_(history, received=(*history.received, got("w2", A, 2, 2000, 2010)))
    verdict = check(back)
    assert failing(verdict) == {"redelivered_after_ack": 1}
    assert verdict.info["expiry_redeliveries"] == 3  # an acked delivery did not expire


def test_a_message_received_after_an_already_answer_is_redelivered_after_ack() -> None:
    history = clean()  # E: its ack answered ``already`` at 550
    back = with_(history, received=(*history.received, got("w2", E, 2, 2000, 2010)))
    assert failing(check(back)) == {"redelivered_after_ack": 1}


def test_a_higher_count_than_an_acked_one_is_redelivered_after_ack_whatever_the_times() -> None:
    history = clean()  # sent before the ack of delivery 1 was answered, returned late
    back = with_(history, received=(*history.received, got("w2", A, 2, 65, 2000)))
    assert failing(check(back)) == {"redelivered_after_ack": 1}


def test_a_receive_sent_before_the_settle_was_answered_is_not_judged_by_time() -> None:
    history = clean()  # a repeat of w1's request for E, answered after the retried ack
    repeat = with_(history, received=(*history.received, got("w1", E, 1, 400, 600)))
    assert check(repeat).ok


SECOND_DELIVERY = {
    B: got("w2", B, 2, 300, 320),
    C: got("w2", C, 2, 1100, 1150),
    F: got("w2", F, 2, 3550, 3600),
}
"""The clean run's redeliveries, after a nack (B), an expiry (C) and an extended expiry (F)."""


def again_at(history: LeaseHistory, message: tuple[int, int], at_ms: int) -> LeaseHistory:
    """``message``'s second delivery (to w2) returned at ``at_ms``, sent 10 ms before."""
    moved = got("w2", message, 2, at_ms - 10, at_ms)
    return with_(history, received=replaced(history.received, SECOND_DELIVERY[message], moved))


def with_settle(history: LeaseHistory, old: Settled, new: Settled) -> LeaseHistory:
    return with_(history, settled=replaced(history.settled, old, new))


def early_if(early: bool) -> dict[str, int]:
    return {"early_redelivery": 1} if early else {}


def test_a_delivery_before_the_lease_could_end_is_early_redelivery() -> None:
    verdict = check(again_at(clean(), C, 899))  # leased from 0 at the earliest: ends at 1000
    assert failing(verdict) == {"early_redelivery": 1}
    assert "could end at 1000" in verdict.examples["early_redelivery"][0]


@pytest.mark.parametrize(("at_ms", "early"), [(899, True), (900, False)])
def test_the_lease_bound_holds_up_to_the_clock_tolerance(at_ms: int, early: bool) -> None:
    assert failing(check(again_at(clean(), C, at_ms))) == early_if(early)


@pytest.mark.parametrize(("at_ms", "early"), [(999, True), (1000, False)])
def test_with_no_tolerance_the_bound_is_exact(at_ms: int, early: bool) -> None:
    exact = with_(again_at(clean(), C, at_ms), clock_tolerance_ms=0)
    assert failing(check(exact)) == early_if(early)


@pytest.mark.parametrize(("at_ms", "early"), [(3399, True), (3400, False)])
def test_an_extend_done_pushes_the_bound(at_ms: int, early: bool) -> None:
    # F: leased from 2000, extended by 1000 from 2500 at the earliest: ends at 3500
    assert failing(check(again_at(clean(), F, at_ms))) == early_if(early)


@pytest.mark.parametrize("outcome", ["error", "stale", "unknown"])
@pytest.mark.parametrize(("at_ms", "early"), [(2899, True), (2900, False)])
def test_an_extend_that_may_not_have_acted_does_not_push_the_bound(
    outcome: str, at_ms: int, early: bool
) -> None:
    extend = act("w1", "extend", F, 1, "done", 2500, 1000)
    unsure = dataclasses.replace(extend, outcome=outcome)  # F's lease ends at 3000 at the earliest
    history = with_settle(again_at(clean(), F, at_ms), extend, unsure)
    assert failing(check(history)) == early_if(early)


NACK_B = act("w1", "nack", B, 1, "done", 100, 200)


@pytest.mark.parametrize("outcome", ["done", "error"])
@pytest.mark.parametrize(("at_ms", "early"), [(199, True), (200, False)])
def test_a_nack_bounds_the_redelivery_by_its_delay(outcome: str, at_ms: int, early: bool) -> None:
    nack = dataclasses.replace(NACK_B, outcome=outcome)  # sent at 100, 200 ms: from 300 on
    history = with_settle(again_at(clean(), B, at_ms), NACK_B, nack)
    assert failing(check(history)) == early_if(early)


def b_again_after_nack(at_ms: int, nack: Settled) -> LeaseHistory:
    """B nacked by ``nack``, delivered again at ``at_ms``, w2's work and ack after that."""
    history = with_settle(again_at(clean(), B, at_ms), NACK_B, nack)
    ack = act("w2", "ack", B, 2, "done", 360)
    history = with_settle(
        history, ack, dataclasses.replace(ack, sent_ms=at_ms + 20, at_ms=at_ms + 30)
    )
    finished = replaced(history.finished, fin("w2", B, 2, 350), fin("w2", B, 2, at_ms + 10))
    return with_(history, finished=finished)


def test_a_nack_done_with_a_delay_past_the_lease_is_judged_by_its_delay() -> None:
    nack = dataclasses.replace(NACK_B, duration_ms=2000)  # from 2100 on, past the lease's 1000
    assert failing(check(b_again_after_nack(1999, nack))) == {"early_redelivery": 1}
    assert check(b_again_after_nack(2000, nack)).ok


def test_a_nack_error_with_a_delay_past_the_lease_allows_the_lease_bound() -> None:
    nack = dataclasses.replace(NACK_B, outcome="error", duration_ms=2000)  # may not have acted
    assert failing(check(b_again_after_nack(899, nack))) == {"early_redelivery": 1}
    assert check(b_again_after_nack(900, nack)).ok


def test_a_nack_sent_after_the_redelivery_returned_cannot_explain_it() -> None:
    # B delivered again at 320: counted, a nack at 330 without delay would allow it from 230
    late = dataclasses.replace(NACK_B, sent_ms=330, at_ms=340, duration_ms=0)
    assert failing(check(with_settle(clean(), NACK_B, late))) == {"early_redelivery": 1}


def test_a_redelivery_whose_previous_delivery_was_never_recorded_is_not_judged() -> None:
    history = clean()  # w1 killed before it recorded delivery 1 of C
    unseen = with_(
        history,
        received=without(history.received, got("w1", C, 1, 0, 10)),
        settled=without(history.settled, act("w1", "ack", C, 1, "stale", 1170)),
        finished=without(history.finished, fin("w1", C, 1, 1160)),
    )
    verdict = check(unseen)
    assert verdict.ok, verdict.lines()
    assert verdict.info["redeliveries_unjudged"] == 1


def test_a_holder_that_died_without_a_settle_recorded_may_have_nacked_at_once() -> None:
    """The long tier's lease run (seed 3100): a worker received a poison message, nacked it
    and was killed before it recorded the nack's answer; the next delivery came before
    the lease's end. A holder whose ledger goes on is judged by the lease (its nack would
    be in its ledger)."""
    history = clean()  # C: delivery 1 to w3, who records nothing after it
    died = with_(
        history,
        received=(*without(history.received, got("w1", C, 1, 0, 10)), got("w3", C, 1, 0, 10)),
        settled=without(history.settled, act("w1", "ack", C, 1, "stale", 1170)),
        finished=without(history.finished, fin("w1", C, 1, 1160)),
    )
    assert check(again_at(died, C, 20)).ok  # after w3's receive returned
    assert failing(check(again_at(died, C, 5))) == {"early_redelivery": 1}  # before it did
    lived = with_(died, finished=(*died.finished, fin("w3", A, 9, 9_000)))
    assert failing(check(again_at(lived, C, 20))) == {"early_redelivery": 1}


def test_one_delivery_to_two_workers_is_flagged() -> None:
    history = clean()
    twice = with_(history, received=(*history.received, got("w2", A, 1, 0, 12)))
    verdict = check(twice)
    assert failing(verdict) == {"one_delivery_two_members": 1}
    assert verdict.examples["one_delivery_two_members"] == ["(0, 0, 1) to w1, w2"]


def test_a_lower_count_sent_after_a_higher_one_was_returned_skipped_back() -> None:
    history = clean()  # C: delivery 2 returned at 1150; w1 then gets delivery 1 again
    back = with_(history, received=(*history.received, got("w1", C, 1, 1160, 1165)))
    verdict = check(back)
    # by a second request of w1's too (sent at 1160, not at its first receive's 0)
    assert failing(verdict) == {"count_skipped_back": 1, "one_delivery_two_receives": 1}
    assert "after count 2" in verdict.examples["count_skipped_back"][0]


def test_a_lower_count_sent_as_the_higher_one_returned_may_be_a_repeat() -> None:
    history = clean()  # sent at 1150, the ms delivery 2 was returned: not provably after
    repeat = with_(history, received=(*history.received, got("w1", C, 1, 1150, 1165)))
    # not skipped back; but a repeat of w1's first request would carry its send, 0
    assert failing(check(repeat)) == {"one_delivery_two_receives": 1}


def test_one_delivery_in_two_requests_of_one_worker_is_flagged() -> None:
    history = clean()  # A: w1 received delivery 1 by a receive sent at 0; again, sent at 20
    again = with_(history, received=(*history.received, got("w1", A, 1, 20, 30)))
    verdict = check(again)
    assert failing(verdict) == {"one_delivery_two_receives": 1}
    assert verdict.examples["one_delivery_two_receives"] == [
        "(0, 0, 1) to w1 by receives sent at 0, 20"
    ]


def test_a_repeat_of_one_request_keeps_its_first_send_and_is_not_flagged() -> None:
    history = clean()  # E: w1's receive sent at 400 answered twice (450, 480)
    assert {r.sent_ms for r in history.received if r.message == E} == {400}
    assert check(history).ok


def test_a_receipt_naming_another_delivery_is_a_mismatch() -> None:
    history = clean()
    wrong = dataclasses.replace(got("w1", A, 1, 0, 10), receipt="0.0.2")
    verdict = check(
        with_(history, received=replaced(history.received, got("w1", A, 1, 0, 10), wrong))
    )
    assert failing(verdict) == {"receipt_mismatch": 1}


# --- redelivery latency -------------------------------------------------------------------------


def expired(offset: int, latency_ms: int) -> LeaseHistory:
    """Message ``(2, offset)``: w1's lease expires unused; w2 gets it ``latency_ms`` after
    the lease's end as seen from w1's answer (at ``offset * 10_000 + 10``)."""
    start_ms = offset * 10_000
    again_ms = start_ms + 10 + VISIBILITY_MS + latency_ms
    message = (2, offset)
    return LeaseHistory(
        (Produced(*message, f"x{offset}"),),
        (
            got("w1", message, 1, start_ms, start_ms + 10),
            got("w2", message, 2, again_ms - 5, again_ms),
        ),
        (fin("w2", message, 2, again_ms + 1),),
        (act("w2", "ack", message, 2, "done", again_ms + 2),),
        VISIBILITY_MS,
    )


def merged(*histories: LeaseHistory) -> LeaseHistory:
    def joined(name: str) -> tuple[Any, ...]:
        return tuple(r for h in histories for r in getattr(h, name))

    names = ("produced", "received", "finished", "settled")
    return with_(histories[0], **{name: joined(name) for name in names})


def test_redelivery_percentiles_on_a_hand_computed_example() -> None:
    history = merged(*(expired(i, ms) for i, ms in enumerate([100, 300, 200, 1200])))
    verdict = check(history)
    assert verdict.ok, verdict.lines()
    assert verdict.redelivery_latencies_ms == [100, 200, 300, 1200]
    # nearest rank: p50 the 2nd of 4, p99 the 4th
    assert (verdict.redelivery_p50_ms, verdict.redelivery_p99_ms) == (200, 1200)
    assert verdict.redelivery_max_ms == 1200
    assert verdict.counts[LATE_REDELIVERY] == 1
    assert not verdict.redelivery_on_target
    assert any("MISSED" in line for line in verdict.lines())
    relaxed = check(history, redelivery_slack_ms=1200)
    assert relaxed.redelivery_on_target and relaxed.counts[LATE_REDELIVERY] == 0


def test_a_redelivery_whose_wait_overlaps_an_outage_is_not_timed() -> None:
    history = merged(*(expired(i, ms) for i, ms in enumerate([100, 300, 200, 1200])))
    everything = check(replace(history, outages=((0, 10**12),)))
    assert everything.redelivery_latencies_ms == []
    assert everything.info["redeliveries_in_outages"] == 4
    assert everything.passed
    far = check(replace(history, outages=((10**12, 10**12 + 1),)))
    assert far.redelivery_latencies_ms == [100, 200, 300, 1200]
    assert "redeliveries_in_outages" not in far.info


def test_late_redelivery_is_reported_not_must_be_zero() -> None:
    verdict = check(clean(), redelivery_slack_ms=100)  # C was 140 ms late, H 110
    assert verdict.counts[LATE_REDELIVERY] == 2
    assert verdict.ok and not verdict.redelivery_on_target
    assert not verdict.passed  # a run is held to the target
    assert LATE_REDELIVERY not in MUST_BE_ZERO
    assert check(clean()).passed


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile_ms([], 50) is None
    assert [percentile_ms([7], p) for p in (0, 50, 99, 100)] == [7, 7, 7, 7]
    hundred = list(range(1, 101))
    assert [percentile_ms(hundred, p) for p in (50, 99, 100)] == [50, 99, 100]


# --- determinism and inputs ---------------------------------------------------------------------


def broken() -> LeaseHistory:
    """Several kinds at once, so the examples' order matters too."""
    history = clean()
    extra = (
        got("w2", A, 1, 0, 12),
        got("w1", C, 1, 1160, 1165),
        got("w2", E, 2, 2000, 2010),
        got("w2", A, 2, 2000, 2010),
    )
    produced = (*history.produced, *(Produced(3, o, f"n{o}") for o in range(7)))
    return with_(history, received=(*history.received, *extra), produced=produced)


def shuffled(history: LeaseHistory, seed: int) -> LeaseHistory:
    rng = random.Random(seed)

    def mixed(records: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(rng.sample(records, len(records)))

    names = ("produced", "received", "finished", "settled")
    return with_(history, **{name: mixed(getattr(history, name)) for name in names})


@pytest.mark.parametrize("history", [clean(), broken()], ids=["clean", "broken"])
def test_the_verdict_is_deterministic_and_ignores_the_order_of_events(
    history: LeaseHistory,
) -> None:
    verdict = check(history)
    assert check(history) == verdict
    for seed in range(5):
        assert check(shuffled(history, seed)) == verdict


def test_the_broken_history_fails_in_each_of_its_kinds() -> None:
    assert failing(check(broken())) == {
        "lost": 7,
        "one_delivery_two_members": 1,
        "one_delivery_two_receives": 1,
        "count_skipped_back": 1,
        "redelivered_after_ack": 2,
    }


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: act("w", "pop", A, 1, "done", 0), "action"),
        (lambda: act("w", "ack", A, 1, "maybe", 0), "outcome"),
        (lambda: got("w", A, 0, 0, 1), "delivery_count"),
        (lambda: LeaseHistory((), (), (), (), 0), "visibility_timeout_ms"),
        (lambda: LeaseHistory((), (), (), (), VISIBILITY_MS, -1), "clock_tolerance_ms"),
        (lambda: LeaseHistory((), (), (), (), VISIBILITY_MS, power_cuts=((9, 8),)), "ends"),
    ],
)
def test_invalid_records_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


# --- dead letters -----------------------------------------------------------------------------

P = (1, 5)
"""A poison message: nacked at both of its deliveries (``max_deliveries`` 2)."""


def poisoned() -> LeaseHistory:
    """The clean run with ``max_deliveries`` 2 and one poison message P, nacked twice and
    found once in the dead-letter topic with its headers."""
    history = clean()
    poison = Produced(*P, "poison-1", poison=True, headers=(("n", "1"),))
    copy = DeadLetterCopy(*P, "poison-1", "g", 2, (("n", "1"),))
    return with_(
        history,
        produced=(*history.produced, poison),
        received=(*history.received, got("w1", P, 1, 6000, 6010), got("w2", P, 2, 6100, 6110)),
        settled=(
            *history.settled,
            act("w1", "nack", P, 1, "done", 6020),
            act("w2", "nack", P, 2, "done", 6120),
        ),
        max_deliveries=2,
        group="g",
        dead_letters=(copy,),
    )


def test_a_poisoned_run_with_each_letter_once_passes() -> None:
    verdict = check(poisoned())
    assert failing(verdict) == {}
    assert (verdict.info["poison_produced"], verdict.info["dead_letters"]) == (1, 1)


def test_a_poison_message_missing_from_the_dead_letter_topic_is_flagged() -> None:
    assert failing(check(with_(poisoned(), dead_letters=()))) == {"poison_not_dead_lettered": 1}


def test_a_second_copy_of_a_dead_letter_is_flagged() -> None:
    history = poisoned()
    twice = with_(history, dead_letters=history.dead_letters * 2)
    assert failing(check(twice)) == {"dead_letter_duplicated": 1}


@pytest.mark.parametrize(
    "change",
    [
        {"value": "poison-2"},
        {"headers": ()},
        {"group": "other"},
        {"delivery_count": 1},
        {"origin_offset": 99},
    ],
)
def test_a_copy_that_does_not_match_its_message_is_flagged(change: dict[str, Any]) -> None:
    history = poisoned()
    (copy,) = history.dead_letters
    wrong = with_(history, dead_letters=(dataclasses.replace(copy, **change),))
    counts = failing(check(wrong))
    assert counts.get("dead_letter_wrong") == 1
    if "origin_offset" in change:  # P itself has no copy now
        assert counts == {"dead_letter_wrong": 1, "poison_not_dead_lettered": 1}


def test_a_delivery_past_max_deliveries_is_flagged() -> None:
    history = poisoned()
    third = with_(history, received=(*history.received, got("w1", P, 3, 6200, 6210)))
    assert failing(check(third)) == {"delivered_past_max": 1}


def test_a_message_that_died_of_expiries_is_settled_by_its_copy_not_lost() -> None:
    """A plain message whose leases ran out ``max_deliveries`` times (its workers killed)
    is a dead letter, not a lost message; without its copy it is lost."""
    history = poisoned()
    unacked = without(history.settled, act("w2", "ack", D, 1, "done", 1510))
    copy = DeadLetterCopy(*D, f"v{D}", "g", 2, ())
    died = with_(history, settled=unacked, dead_letters=(*history.dead_letters, copy))
    assert failing(check(died)) == {}
    assert failing(check(with_(died, dead_letters=history.dead_letters))) == {"lost": 1}


def redriven() -> LeaseHistory:
    """``poisoned`` with a redrive at 7000 that brought P back once: delivered a third
    time (its count goes on), finished and acked."""
    history = poisoned()
    return with_(
        history,
        received=(*history.received, got("w1", P, 3, 7100, 7110)),
        finished=(*history.finished, fin("w1", P, 3, 7120)),
        settled=(*history.settled, act("w1", "ack", P, 3, "done", 7130)),
        redrive=Redrive(7000, 7050, redriven=1),
    )


def test_a_redrive_that_brings_each_letter_back_once_passes() -> None:
    assert failing(check(redriven())) == {}


def test_a_redriven_message_never_acked_is_flagged() -> None:
    history = redriven()
    unacked = without(history.settled, act("w1", "ack", P, 3, "done", 7130))
    assert failing(check(with_(history, settled=unacked))) == {"redrive_missed": 1}
    assert failing(check(with_(poisoned(), redrive=Redrive(7000, 7050, 1)))) == {
        "redrive_missed": 1
    }


def test_a_redrive_counting_a_letter_twice_or_none_is_flagged() -> None:
    for count in (0, 2):
        miscounted = with_(redriven(), redrive=Redrive(7000, 7050, redriven=count))
        assert failing(check(miscounted)) == {"redrive_miscounted": 1}


def test_a_receive_sent_before_the_redrive_may_lease_what_it_reopened() -> None:
    """CI's seed 5039: a worker's long poll, sent just before the redrive began, was
    answered with a message the redrive had reopened."""
    history = redriven()
    assert failing(check(with_(history, redrive=Redrive(7105, 7108, redriven=1)))) == {}


def test_a_delivery_past_max_before_the_redrive_or_past_twice_max_is_flagged() -> None:
    history = redriven()
    early = with_(history, redrive=Redrive(7200, 7250, redriven=1))  # P came back before it
    assert failing(check(early)) == {"delivered_past_max": 1, "redrive_missed": 1}
    fifth = with_(history, received=(*history.received, got("w2", P, 5, 7300, 7310)))
    assert failing(check(fifth))["delivered_past_max"] == 1


def died_of_expiries_and_redriven() -> LeaseHistory:
    """``redriven`` plus D, a plain message whose two leases ran out (no ack): it has a
    copy too, the redrive brought back both letters, and D's third delivery was acked."""
    history = redriven()
    copy = DeadLetterCopy(*D, f"v{D}", "g", 2, ())
    unacked = without(history.settled, act("w2", "ack", D, 1, "done", 1510))
    return with_(
        history,
        received=(*history.received, got("w2", D, 2, 2600, 2610), got("w1", D, 3, 7200, 7210)),
        finished=(*history.finished, fin("w1", D, 3, 7220)),
        settled=(*unacked, act("w1", "ack", D, 3, "done", 7230)),
        dead_letters=(*history.dead_letters, copy),
        redrive=Redrive(7000, 7050, redriven=2),
    )


def test_a_redriven_plain_message_with_a_copy_may_be_delivered_past_max() -> None:
    """The long tier's seed 3105: 81 poison messages and one plain message died; the redrive
    brought back all 82. Counting only the poison ones, the checker flagged the count and
    the plain message's delivery after the redrive."""
    history = died_of_expiries_and_redriven()
    assert failing(check(history)) == {}
    skipped = with_(history, redrive=Redrive(7000, 7050, redriven=1))
    assert failing(check(skipped)) == {"redrive_miscounted": 1}
    uncopied = with_(history, dead_letters=history.dead_letters[:1])
    assert failing(check(uncopied))["delivered_past_max"] == 1


def test_an_already_answer_of_a_dead_letter_does_not_forbid_its_redelivery() -> None:
    """The long tier's seed 3105: a late nack of P's first delivery answered ``already`` (P
    was dead-lettered by then); the redrive brought P back. An ack ``done`` still does."""
    history = redriven()
    late = act("w1", "nack", P, 1, "already", 6500)
    assert failing(check(with_(history, settled=(*history.settled, late)))) == {}
    acked = act("w1", "ack", P, 2, "done", 6500)
    assert (
        failing(check(with_(history, settled=(*history.settled, acked))))["redelivered_after_ack"]
        == 1
    )


def test_a_nack_answered_stale_may_have_ended_the_lease_at_its_first_attempt() -> None:
    """The long tier's seed 3105: a nack's first attempt ended the lease, its answer was
    lost, and the repeat answered ``stale`` once the next delivery had begun."""
    stale = replace(NACK_B, outcome="stale", duration_ms=0)
    assert check(b_again_after_nack(200, stale)).ok
    unknown = replace(stale, outcome="unknown")  # a receipt the partition never gave
    assert failing(check(b_again_after_nack(200, unknown))) == {"early_redelivery": 1}


# --- redelivery timing and busy workers --------------------------------------------------------

J = (1, 7)


def late_j(calls: tuple[ReceiveCall, ...]) -> LeaseHistory:
    """The clean run plus J: leased at 6010, its lease ends at 7010, delivered again at
    8650 (1,640 ms late), then acked; ``calls``: the workers' receives."""
    history = clean()
    return with_(
        history,
        produced=(*history.produced, Produced(*J, "v-j")),
        received=(*history.received, got("w1", J, 1, 6000, 6010), got("w2", J, 2, 8600, 8650)),
        finished=(*history.finished, fin("w2", J, 2, 8700)),
        settled=(*history.settled, act("w2", "ack", J, 2, "done", 8710)),
        receive_calls=calls,
    )


def test_a_late_redelivery_after_a_receive_with_room_is_late() -> None:
    roomy = (ReceiveCall("w1", 7200, 7210, 10, 3),)  # after the lease's end, not full
    verdict = check(late_j(roomy))
    assert verdict.counts[LATE_REDELIVERY] == 1 and not verdict.redelivery_on_target
    assert 1450 in verdict.redelivery_latencies_ms  # 8650 - 7200: asked at 7200
    assert failing(verdict) == {}


@pytest.mark.parametrize(
    ("calls", "latency_ms"),
    [
        ((), 50),  # nobody asked until the receive that redelivered it, sent at 8600
        ((ReceiveCall("w1", 7200, 7210, 10, 10),), 50),  # that receive came back full
        ((ReceiveCall("w1", 6900, 6950, 10, 3),), 50),  # with room, but before the end
    ],
)
def test_a_redelivery_is_timed_from_the_first_receive_that_had_to_find_it(
    calls: tuple[ReceiveCall, ...], latency_ms: int
) -> None:
    other = (ReceiveCall("w2", 100, 110, 10, 10),)  # some call recorded: calls are known
    verdict = check(late_j((*other, *calls)))
    assert verdict.counts[LATE_REDELIVERY] == 0 and verdict.redelivery_on_target
    assert latency_ms in verdict.redelivery_latencies_ms
    assert verdict.info["redeliveries_workers_busy"] >= 1


def test_without_recorded_calls_a_redelivery_is_timed_from_the_leases_end() -> None:
    verdict = check(late_j(()))
    assert verdict.counts[LATE_REDELIVERY] == 1
    assert 1640 in verdict.redelivery_latencies_ms


# --- power cuts -------------------------------------------------------------------------------

CUT = (10_000, 15_000)
"""Every node killed at 10,000 ms; acks answered again from 15,000."""
K1, K2, K3 = (2, 0), (2, 1), (2, 2)


def across_a_cut() -> LeaseHistory:
    """K1 acked (answered ``done``) 490 ms before the cut; K2's ack sent 10 ms before it,
    its answer lost (``error``), then delivered again after the cut and acked; K3 leased
    300 ms before the cut, its lease ended in the dark, delivered again after and acked."""
    received = (
        got("w1", K1, 1, 9000, 9010),
        got("w1", K2, 1, 9600, 9610),
        got("w2", K3, 1, 9700, 9710),
        got("w2", K2, 2, 15_500, 15_510),
        got("w1", K3, 2, 15_500, 15_520),
    )
    finished = (
        fin("w1", K1, 1, 9400),
        fin("w1", K2, 1, 9900),
        fin("w2", K2, 2, 15_550),
        fin("w1", K3, 2, 15_560),
    )
    settled = (
        act("w1", "ack", K1, 1, "done", 9500),
        Settled("w1", "ack", *K2, 1, "error", 9990, 14_000),
        act("w2", "ack", K2, 2, "done", 15_600),
        act("w1", "ack", K3, 2, "done", 15_610),
    )
    produced = tuple(Produced(*m, f"v{m}") for m in (K1, K2, K3))
    return LeaseHistory(
        produced, received, finished, settled, VISIBILITY_MS, TOLERANCE_MS, power_cuts=(CUT,)
    )


def test_what_no_answer_showed_may_change_across_a_cut() -> None:
    verdict = check(across_a_cut())
    assert verdict.ok, verdict.lines()
    assert verdict.info["power_cuts"] == 1
    assert verdict.info["acks_done_before_cuts"] == 1  # K1's
    assert verdict.info["settles_unanswered_at_cuts"] == 1  # K2's ack
    assert verdict.info["leases_live_at_cuts"] == 2  # K2's and K3's first deliveries
    assert verdict.info["redeliveries_in_outages"] == 2  # a cut is an outage: not timed
    assert verdict.redelivery_latencies_ms == []


def test_an_ack_answered_before_a_cut_must_outlive_it() -> None:
    history = across_a_cut()
    back = with_(history, received=(*history.received, got("w2", K1, 2, 15_500, 15_530)))
    verdict = check(back)
    assert failing(verdict) == {"redelivered_after_ack": 1}
    assert "settled at 9510" in verdict.examples["redelivered_after_ack"][0]


@pytest.mark.parametrize(
    ("worker", "kind"), [("w1", "one_delivery_two_members"), ("w2", "one_delivery_two_receives")]
)
def test_a_lease_answered_before_a_cut_must_outlive_it(worker: str, kind: str) -> None:
    history = across_a_cut()  # K3's first lease forgotten: delivery 1 handed out again
    again = got(worker, K3, 1, 15_400, 15_410)
    verdict = check(with_(history, received=(*history.received, again)))
    assert failing(verdict) == {kind: 1}
