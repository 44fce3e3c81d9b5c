"""Pure parts of the client: failure classification, backoff, batching, limits, deadline
headers (and the headers on the wire, against the scripted fake)."""

from __future__ import annotations

import random
import time
from collections import deque

import pytest

from protocol.deadline import Deadline
from protocol.types import NewMessage
from raftq.client_limits import ClientLimits
from raftq.http import HttpTransport, backoff_s, classify_answer, deadline_headers
from raftq.producer import take_batch
from unit_tests.raftq.fake_service import FakeService


@pytest.mark.parametrize(
    ("status", "code", "unknown"),
    [
        (503, 50301, False),
        (503, 50302, False),
        (503, 50305, False),
        (429, 42901, False),
        (503, 50303, True),
        (503, 50304, True),
        (503, None, True),
        (502, None, True),
        (500, 50001, True),
    ],
)
def test_retryable_answers(status: int, code: int | None, unknown: bool) -> None:
    failure = classify_answer(status, {"error_code": code, "message": "m"}, "2")
    assert failure is not None
    assert failure.outcome_unknown is unknown
    assert failure.retry_after_s == 2.0


@pytest.mark.parametrize("status", [200, 400, 404, 409, 413])
def test_final_answers(status: int) -> None:
    assert classify_answer(status, {"error_code": status * 100 + 1}, None) is None


def test_backoff_is_jittered_and_capped() -> None:
    limits = ClientLimits(backoff_s_initial=0.1, backoff_s_max=1.0)
    rng = random.Random(7)
    assert all(0.0 <= backoff_s(0, limits, rng) <= 0.1 for _ in range(100))
    assert all(0.0 <= backoff_s(50, limits, rng) <= 1.0 for _ in range(100))
    assert max(backoff_s(50, limits, rng) for _ in range(100)) > 0.5


def test_take_batch_respects_both_bounds() -> None:
    buffer = deque(NewMessage(value="x" * 10) for _ in range(5))
    assert len(take_batch(buffer, messages_max=3, bytes_max=1000)) == 3
    assert len(take_batch(buffer, messages_max=3, bytes_max=15)) == 1
    big = deque([NewMessage(value="y" * 100), NewMessage(value="z")])
    assert len(take_batch(big, messages_max=3, bytes_max=15)) == 1  # alone, not stuck
    assert [m.value for m in take_batch(big, 3, 15)] == ["z"]


def test_client_limits_are_checked() -> None:
    ClientLimits().validate()
    with pytest.raises(ValueError, match="positive"):
        ClientLimits(attempts_max=0).validate()
    with pytest.raises(ValueError, match="batch_messages_max"):
        ClientLimits(batch_messages_max=10**6).validate()
    with pytest.raises(ValueError, match="backoff"):
        ClientLimits(backoff_s_initial=5.0).validate()


def test_the_deadline_goes_as_a_budget_and_as_a_point_in_wall_time() -> None:
    limits = ClientLimits(deadline_reply_margin_s=0.2)
    headers = deadline_headers(5.0, limits, wall_ms=1_000_000)
    assert headers == {"X-RaftQ-Timeout-Ms": "4800", "X-RaftQ-Deadline-Ms": "1004800"}
    assert deadline_headers(0.1, limits, wall_ms=7) == {
        "X-RaftQ-Timeout-Ms": "0",
        "X-RaftQ-Deadline-Ms": "7",
    }


def test_every_request_carries_both_deadline_headers(service: FakeService) -> None:
    service.default("GET", "/topics", lambda _p: (200, {"topics": []}))
    limits = ClientLimits(request_timeout_s=3.0, deadline_reply_margin_s=0.2)
    transport = HttpTransport(service.url, limits)
    before_ms = int(time.time() * 1000)
    transport.call("GET", "/topics", idempotent=True, read_timeout_s=2.0)
    after_ms = int(time.time() * 1000)
    transport.close()
    (received,) = service.received
    assert received.headers["x-raftq-timeout-ms"] == "1800"
    epoch_ms = int(received.headers["x-raftq-deadline-ms"])
    assert before_ms + 1_800 <= epoch_ms <= after_ms + 1_800
    # What a server makes of them: the earlier of the two, here the same point.
    server = Deadline.from_headers(
        received.headers["x-raftq-timeout-ms"],
        received.headers["x-raftq-deadline-ms"],
        now_s=0.0,
        wall_ms=after_ms,
        default_s=10.0,
        skew_s=0.0,
    )
    assert server.remaining_s(0.0) <= 1.8
