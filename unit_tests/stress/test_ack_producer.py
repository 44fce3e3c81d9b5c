"""``AckRecordingProducer`` against a scripted service (no cluster): an ack records its
``replicas_synced``; a refusal that proves nothing was done (503 NOT_ENOUGH_REPLICAS) keeps
the batch's outcome, one stored but not acknowledged (50309) or a timeout makes it unknown;
an expired registration is renewed and the same sequence resent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import requests

from stress_tests.ack_producer import AckRecordingProducer
from stress_tests.history import Outcome, Position, Recorder


class FakeResponse:
    def __init__(self, status: int, body: Any) -> None:
        self.status_code, self._body = status, body

    def json(self) -> Any:
        return self._body

    def __enter__(self) -> FakeResponse:
        return self

    def __exit__(self, *_: object) -> None:
        return None


class ScriptedSession:
    """Answers ``/producers`` with 201 and ``/logs`` from the script, in order."""

    def __init__(self, answers: list[FakeResponse | Exception]) -> None:
        self._answers: Iterator[FakeResponse | Exception] = iter(answers)
        self.sent: list[dict[str, Any]] = []
        self.registrations = 0

    def post(self, url: str, json: dict[str, Any], timeout: object) -> FakeResponse:
        if url.endswith("/producers"):
            self.registrations += 1
            return FakeResponse(201, {"producer_id": json["producer_id"]})
        self.sent.append(json)
        answer = next(self._answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        return None


def ack(offset: int, synced: int) -> FakeResponse:
    return FakeResponse(
        201,
        {
            "offsets": [{"partition_id": 0, "offset": offset}],
            "acks": [{"partition_id": 0, "replicas_synced": synced}],
        },
    )


def refused(code: int) -> FakeResponse:
    return FakeResponse(int(str(code)[:3]), {"error_code": code, "message": "no"})


def producer(
    session: ScriptedSession, recorder: Recorder, give_up_s: float = 60.0
) -> AckRecordingProducer:
    return AckRecordingProducer(
        "p",
        "http://lb",
        "strict",
        recorder,
        api_key="k",
        batch_messages=1,
        give_up_s=give_up_s,
        session=cast(requests.Session, session),
    )


def test_an_ack_records_its_offsets_and_replicas_synced() -> None:
    recorder = Recorder()
    worker = producer(ScriptedSession([ack(0, 3)]), recorder)
    assert worker.step()
    (send,) = recorder.snapshot().sends
    assert (send.outcome, send.positions, send.replicas_synced) == (
        Outcome.ACKED,
        (Position(0, 0),),
        3,
    )


def test_a_refusal_before_storing_keeps_the_batch_and_resends_its_sequence() -> None:
    session = ScriptedSession([refused(50308), ack(0, 3)])
    recorder = Recorder()
    worker = producer(session, recorder)
    assert not worker.step() and worker.pending
    assert worker.step()
    assert [b["sequence"] for b in session.sent] == [1, 1]


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (refused(50308), Outcome.FAILED),
        (refused(50309), Outcome.UNKNOWN),
        (requests.ReadTimeout("late"), Outcome.UNKNOWN),
        (requests.ConnectTimeout("never connected"), Outcome.FAILED),
    ],
)
def test_a_batch_given_up_is_failed_only_if_nothing_may_have_been_done(
    answer: FakeResponse | Exception, outcome: Outcome
) -> None:
    recorder = Recorder()
    worker = producer(ScriptedSession([answer]), recorder, give_up_s=-1.0)
    assert not worker.step()
    (send,) = recorder.snapshot().sends
    assert send.outcome is outcome and send.replicas_synced is None


def test_a_final_refusal_ends_the_batch_as_failed() -> None:
    recorder = Recorder()
    worker = producer(ScriptedSession([FakeResponse(400, {"error_code": 40001})]), recorder)
    assert not worker.step() and not worker.pending
    assert recorder.snapshot().sends[0].outcome is Outcome.FAILED


def test_an_expired_registration_is_renewed_and_the_same_sequence_resent() -> None:
    session = ScriptedSession([refused(40404), ack(0, 3)])
    worker = producer(session, Recorder())
    assert not worker.step()
    assert worker.step()
    assert session.registrations == 2 and [b["sequence"] for b in session.sent] == [1, 1]
