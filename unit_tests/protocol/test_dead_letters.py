"""A dead letter's wire form (broker to manager) and its copy's headers."""

from __future__ import annotations

import pytest

from protocol.dead_letters import PendingDeadLetter, dead_letter_producer_id
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.types import Offset, PartitionId, StoredMessage

LETTER = PendingDeadLetter(
    "orders",
    PartitionId(2),
    "workers",
    4,
    9,
    StoredMessage(offset=Offset(7), key=None, value="v", timestamp_ms=5, headers=(("a", "1"),)),
)


def test_a_pending_dead_letter_round_trips() -> None:
    assert PendingDeadLetter.from_json(LETTER.to_json()) == LETTER


@pytest.mark.parametrize(
    "broken",
    [
        {"sequence": "9"},
        {"delivery_count": True},
        {"headers": {"a": 1}},
        {"message": None},
    ],
)
def test_a_malformed_entry_is_refused(broken: dict[str, object]) -> None:
    with pytest.raises(RaftQError) as refused:
        PendingDeadLetter.from_json({**LETTER.to_json(), **broken})
    assert refused.value.code is ErrorCode.INTERNAL


def test_the_copy_keeps_the_original_and_the_producer_id_is_bounded() -> None:
    copy = LETTER.copy()
    assert (copy.key, copy.value, dict(copy.headers)["a"]) == (None, "v", "1")
    assert dict(copy.headers)["raftq-origin-offset"] == "7"
    long_id = dead_letter_producer_id("t" * 200, 255, "g" * 200)
    assert len(long_id) <= Limits().id_chars_max
    assert long_id == dead_letter_producer_id("t" * 200, 255, "g" * 200)
    assert long_id != dead_letter_producer_id("t" * 200, 254, "g" * 200)
