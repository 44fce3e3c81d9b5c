"""The deadline that travels with a request as a relative budget."""

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
