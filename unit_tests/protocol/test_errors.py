"""The one rule on which answers prove that nothing was done."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode, proves_nothing_done

NOTHING_DONE_5XX = {
    ErrorCode.NO_LEADER,
    ErrorCode.NOT_LEADER,
    ErrorCode.NOT_ENOUGH_BROKERS,
    ErrorCode.REFUSED,
    ErrorCode.NOT_ENOUGH_REPLICAS,  # checked at the leader before proposing
}


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_code_has_one_answer(code: ErrorCode) -> None:
    expected = code.status < 500 or code in NOTHING_DONE_5XX
    assert code.proves_nothing_done is expected
    assert proves_nothing_done(code.status, {"error_code": code.value}) is expected


def test_outcome_open_codes_are_not_claimed_as_nothing_done() -> None:
    for code in (
        ErrorCode.UNAVAILABLE,
        ErrorCode.COMMIT_TIMEOUT,
        ErrorCode.PARTIALLY_WRITTEN,
        ErrorCode.INTERNAL,
    ):
        assert not code.proves_nothing_done, code


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, None, True),
        (429, "not json", True),
        (500, None, False),
        (502, {"message": "bad gateway"}, False),
        (503, {"error_code": 99999}, False),
        (503, {"error_code": "50302"}, False),
        # A code that does not belong to the status is not trusted.
        (500, {"error_code": ErrorCode.NOT_LEADER.value}, False),
    ],
)
def test_answers_without_a_known_code_fall_back_on_the_status(
    status: int, body: object, expected: bool
) -> None:
    assert proves_nothing_done(status, body) is expected
