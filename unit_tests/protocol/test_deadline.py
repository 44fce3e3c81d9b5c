"""The deadline that travels with a request: a relative budget and an absolute point in
wall-clock time."""

from __future__ import annotations

import pytest

from protocol.deadline import Deadline


@pytest.mark.parametrize(
    ("header", "budget_s"),
    [(None, 10.0), ("2500", 2.5), ("0", 0.0), ("99999999", 10.0), ("soon", 10.0), ("-5", 10.0)],
)
def test_the_header_is_a_budget_capped_by_this_hops_own_bound(
    header: str | None, budget_s: float
) -> None:
    deadline = Deadline.from_header(header, now_s=100.0, default_s=10.0)
    assert deadline.remaining_s(100.0) == pytest.approx(budget_s)


def test_what_is_sent_onward_is_what_is_left_less_the_reply_margin() -> None:
    deadline = Deadline.after(3.0, now_s=50.0)
    assert deadline.header_value(51.0, reply_margin_s=0.2) == "1800"
    assert deadline.header_value(52.9, reply_margin_s=0.2) == "0"
    assert deadline.bound(10.0, 51.0) == pytest.approx(2.0)
    assert deadline.bound(0.5, 51.0) == 0.5
    assert not deadline.expired(52.99) and deadline.expired(53.0)
    assert deadline.remaining_s(60.0) == 0.0


WALL_MS = 1_700_000_000_000
"""A wall clock reading (epoch ms) for the hop under test."""


@pytest.mark.parametrize(
    ("relative", "epoch", "budget_s"),
    [
        ("5000", None, 5.0),  # an older caller: the relative budget alone
        ("5000", str(WALL_MS + 2_000), 3.0),  # absolute earlier: it wins, plus the skew
        ("2000", str(WALL_MS + 9_000), 2.0),  # relative earlier: it wins
        ("5000", str(WALL_MS - 1_000), 0.0),  # passed by the skew allowance: expired
        ("5000", str(WALL_MS - 500), 0.5),  # passed, but within the skew allowance
        ("5000", "soon", 5.0),  # malformed: ignored, the relative budget holds
        (None, str(WALL_MS + 60_000), 10.0),  # this hop's own bound still holds
    ],
)
def test_the_earlier_of_the_two_headers_wins_with_the_skew_granted_to_the_absolute_one(
    relative: str | None, epoch: str | None, budget_s: float
) -> None:
    deadline = Deadline.from_headers(
        relative, epoch, now_s=100.0, wall_ms=WALL_MS, default_s=10.0, skew_s=1.0
    )
    assert deadline.remaining_s(100.0) == pytest.approx(budget_s)


def test_a_request_read_after_its_node_was_stopped_past_the_deadline_is_expired() -> None:
    """Sent at ``WALL_MS`` with 5 s to go; the node was stopped with the request in its
    socket and reads it 8 s later: the relative budget alone would grant it 5 s more."""
    sent = Deadline.after(5.0, now_s=0.0)
    relative = sent.header_value(0.0, reply_margin_s=0.2)
    epoch = sent.epoch_header_value(0.0, WALL_MS, reply_margin_s=0.2)
    read = Deadline.from_headers(
        relative, epoch, now_s=500.0, wall_ms=WALL_MS + 8_000, default_s=10.0, skew_s=1.0
    )
    assert read.expired(500.0)
    assert not Deadline.from_header(relative, now_s=500.0, default_s=10.0).expired(500.0)


def test_each_hop_sends_the_absolute_deadline_it_received_less_the_margin_never_its_skew() -> None:
    """Three hops with one clock: the skew a hop grants itself is not passed on, so the
    absolute deadline only moves earlier, by the reply margin per hop."""
    epoch = str(WALL_MS + 5_000)
    relative = "60000"  # an absolute deadline that binds
    for hop in range(3):
        deadline = Deadline.from_headers(
            relative, epoch, now_s=10.0, wall_ms=WALL_MS, default_s=30.0, skew_s=1.0
        )
        assert deadline.remaining_s(10.0) == pytest.approx(6.0 - 0.2 * hop)
        relative = deadline.header_value(10.0, reply_margin_s=0.2)
        epoch = deadline.epoch_header_value(10.0, WALL_MS, reply_margin_s=0.2)
        assert int(epoch) == WALL_MS + 5_000 - 200 * (hop + 1)


def test_the_absolute_value_without_one_received_is_the_budget_in_wall_time() -> None:
    deadline = Deadline.after(3.0, now_s=50.0)
    assert deadline.epoch_header_value(51.0, WALL_MS, reply_margin_s=0.2) == str(WALL_MS + 1_800)
    assert deadline.epoch_header_value(60.0, WALL_MS, reply_margin_s=0.2) == str(WALL_MS)
    gone = Deadline.from_headers("100", "100", 0.0, WALL_MS, default_s=1.0, skew_s=1.0)
    assert gone.epoch_header_value(0.0, WALL_MS, reply_margin_s=0.2) == "0"  # never negative
