"""``broker.managers.Managers``: a broker finds the manager leader itself (issue 23: never
through the load balancer), following NOT_LEADER hints and passing over managers that
refuse connections; what it cannot know (an answer lost after sending) is the caller's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.managers import Managers
from protocol.errors import ErrorCode
from protocol.limits import Limits
from runtime.http_client import HttpAnswer, JsonHttpClient, NoAnswerError, PeerLink

LIMITS = replace(Limits(), lb_managers_max=4)
OK = HttpAnswer(200, {"ok": True}, {})


def _not_leader(hint: str | None) -> HttpAnswer:
    body: dict[str, object] = {"error_code": ErrorCode.NOT_LEADER.value, "message": "no"}
    if hint is not None:
        body["leader_hint"] = hint
    return HttpAnswer(503, body, {})


class Scripted(JsonHttpClient):
    """Answers per manager URL; records the URLs called."""

    def __init__(self, answers: dict[str, HttpAnswer | NoAnswerError]) -> None:
        super().__init__(LIMITS, PeerLink(None, None))
        self.answers = answers
        self.called: list[str] = []

    def call(self, method: str, url: str, body: object | None = None, **_: object) -> HttpAnswer:
        base = url.removesuffix("/brokers")
        self.called.append(base)
        answer = self.answers[base]
        if isinstance(answer, NoAnswerError):
            raise answer
        return answer


def test_the_leader_is_found_by_hints_and_kept() -> None:
    client = Scripted(
        {
            "http://m1": NoAnswerError("refused", refused=True),
            "http://m2": _not_leader("http://m4"),  # a manager added since the broker started
            "http://m3": _not_leader(None),
            "http://m4": OK,
        }
    )
    managers = Managers(["http://m1", "http://m2", "http://m3"], LIMITS, client)
    assert managers.call("GET", "/brokers") == OK
    assert client.called == ["http://m1", "http://m2", "http://m4"]
    client.called.clear()
    assert managers.call_ok("GET", "/brokers") == {"ok": True}
    assert client.called == ["http://m4"]  # the leader it found


def test_no_leader_gives_the_last_refusal_and_no_answer_raises() -> None:
    client = Scripted({"http://m1": _not_leader(None), "http://m2": _not_leader("http://m1")})
    managers = Managers(["http://m1", "http://m2"], LIMITS, client)
    assert managers.call("GET", "/brokers").status == 503
    assert client.called == ["http://m1", "http://m2"]
    down = Scripted({"http://m1": NoAnswerError("refused", refused=True)})
    with pytest.raises(NoAnswerError) as none:
        Managers(["http://m1"], LIMITS, down).call("GET", "/brokers")
    assert none.value.refused
    lost = Scripted({"http://m1": NoAnswerError("lost", refused=False), "http://m2": OK})
    with pytest.raises(NoAnswerError):  # it may have acted: not sent again elsewhere
        Managers(["http://m1", "http://m2"], LIMITS, lost).call("POST", "/brokers", {})
    assert lost.called == ["http://m1"]


def test_hints_learnt_are_bounded() -> None:
    answers: dict[str, HttpAnswer | NoAnswerError] = {
        f"http://m{i}": _not_leader(f"http://m{i + 1}") for i in range(1, 20)
    }
    client = Scripted(answers)
    managers = Managers(["http://m1"], LIMITS, client)
    assert managers.call("GET", "/brokers").status == 503
    assert client.called == ["http://m1", "http://m2", "http://m3", "http://m4"]
