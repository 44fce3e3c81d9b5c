"""The consumer-group request plan both paths drive (``protocol.consume_plan``)."""

from __future__ import annotations

import pytest

from protocol.consume_plan import receive, receive_order, settle, visit
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import DeliveryReceipt
from protocol.types import Offset, PartitionId

P0, P1, P2 = PartitionId(0), PartitionId(1), PartitionId(2)


def test_a_repeated_receive_visits_the_same_partitions_in_the_same_order() -> None:
    first = receive_order(5, "workers", "r1", round_robin=0)
    assert sorted(first) == list(range(5))
    assert receive_order(5, "workers", "r1", round_robin=3) == first
    starts = {receive_order(5, "workers", f"r{i}", 0)[0] for i in range(50)}
    assert len(starts) > 1  # request ids spread the start


def test_receive_asks_each_partition_for_what_is_still_wanted() -> None:
    asked: list[tuple[int, int]] = []

    def ask(partition_id: PartitionId, wanted: int) -> list[str]:
        asked.append((partition_id, wanted))
        return [f"{partition_id}-{i}" for i in range(min(wanted, 2))]

    assert receive([P2, P0, P1], 3, ask) == ["2-0", "2-1", "0-0"]
    assert asked == [(2, 3), (0, 1)]


def test_a_failure_after_leases_answers_them_and_before_any_fails() -> None:
    def ask(partition_id: PartitionId, wanted: int) -> list[str]:
        if partition_id == P1:
            raise RaftQError(ErrorCode.NO_LEADER, "election")
        return ["m"] * min(wanted, 1)

    assert receive([P0, P1, P2], 5, ask) == ["m"]
    with pytest.raises(RaftQError):
        receive([P1, P0], 5, ask)


def test_settle_sends_each_partition_its_receipts_and_keeps_their_order() -> None:
    receipts = [
        DeliveryReceipt(P1, Offset(4), 1),
        DeliveryReceipt(P0, Offset(2), 1),
        DeliveryReceipt(P1, Offset(5), 2),
    ]
    asked: list[tuple[int, tuple[str, ...]]] = []

    def ask(partition_id: PartitionId, of: tuple[DeliveryReceipt, ...]) -> list[str]:
        asked.append((partition_id, tuple(r.to_wire() for r in of)))
        return ["done" if r.delivery_count == 1 else "stale" for r in of]

    outcomes = [(r.to_wire(), o) for r, o in settle(receipts, ask)]
    assert outcomes == [("1.4.1", "done"), ("0.2.1", "done"), ("1.5.2", "stale")]
    assert asked == [(1, ("1.4.1", "1.5.2")), (0, ("0.2.1",))]


def test_a_partition_answering_the_wrong_number_of_outcomes_is_an_error() -> None:
    with pytest.raises(RaftQError) as raised:
        settle([DeliveryReceipt(P0, Offset(0), 1)], lambda _p, _r: [])
    assert raised.value.code is ErrorCode.INTERNAL


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.5.1", DeliveryReceipt(P0, Offset(5), 1)),
        ("12.0.3", DeliveryReceipt(PartitionId(12), Offset(0), 3)),
        ("0.5.0", None),
        ("0.5", None),
        ("a.5.1", None),
        ("0.-5.1", None),
        ("0.5.1.2", None),
        ("0.\u0665.1", None),  # a non-ASCII digit
        ("", None),
    ],
)
def test_a_receipt_reads_back_only_from_its_own_form(
    text: str, expected: DeliveryReceipt | None
) -> None:
    assert DeliveryReceipt.from_wire(text) == expected
    if expected is not None:
        assert expected.to_wire() == text


class RefusedError(Exception):
    pass


def _visit(fails_at: PartitionId, failure: Exception, ends: bool) -> list[str]:
    def ask(partition_id: PartitionId, wanted: int) -> list[str]:
        if partition_id == fails_at:
            raise failure
        return ["m"] * min(wanted, 1)

    def claimed(partition_id: PartitionId, error: Exception) -> Exception:
        return RaftQError(ErrorCode.UNAVAILABLE, f"claimed before {partition_id}: {error}")

    return visit([P0, P1, P2], 5, ask, (RefusedError,), lambda _e: ends, claimed)


def test_a_visit_fails_alone_ends_or_fails_as_unknown_by_the_callers_rule() -> None:
    with pytest.raises(RefusedError):
        _visit(P0, RefusedError(), ends=True)  # nothing in hand: the failure is the request's
    assert _visit(P1, RefusedError(), ends=True) == ["m"]  # a refusal that ends it
    with pytest.raises(RaftQError) as raised:
        _visit(P1, RefusedError(), ends=False)  # claimed before: an unknown outcome
    assert raised.value.code is ErrorCode.UNAVAILABLE
    with pytest.raises(ValueError):
        _visit(P1, ValueError("a bug"), ends=True)  # not judged: untouched
