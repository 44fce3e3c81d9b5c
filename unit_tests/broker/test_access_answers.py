"""``ManagerAnswers``, the cache behind a broker's key and client-id checks: an answer (and
"unknown") is kept ``key_cache_s``, the cache is bounded, and a manager that cannot answer
gets a 503 REFUSED that names what was being checked."""

from __future__ import annotations

from typing import cast

import pytest

from broker.access import ManagerAnswers
from broker.managers import Managers
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from runtime.http_client import HttpAnswer

LIMITS = Limits(key_cache_s=10.0, key_cache_entries_max=2)


class ScriptedManagers:
    def __init__(self) -> None:
        self.asked: list[object] = []
        self.status = 200

    def call(self, method: str, path: str, body: object, **_: object) -> HttpAnswer:
        self.asked.append(body)
        assert (method, path) == ("POST", "/things/verify")
        found = {"name": f"thing-{len(self.asked)}"} if self.status == 200 else {}
        return HttpAnswer(self.status, found, {})


def _answers(managers: ScriptedManagers, now: list[float]) -> ManagerAnswers[str, str]:
    return ManagerAnswers(cast(Managers, managers), LIMITS, "/things/verify", lambda: now[0])


def _name(body: dict[str, object]) -> str:
    return str(body["name"])


def test_an_answer_and_an_unknown_are_kept_for_key_cache_s() -> None:
    managers, now = ScriptedManagers(), [0.0]
    answers = _answers(managers, now)
    assert answers.get("a", {"q": "a"}, "thing", _name) == "thing-1"
    assert answers.get("a", {"q": "a"}, "thing", _name) == "thing-1"  # kept
    managers.status = 404
    assert answers.get("b", {"q": "b"}, "thing", _name) is None
    managers.status = 200
    assert answers.get("b", {"q": "b"}, "thing", _name) is None  # unknown is kept too
    now[0] = 10.5
    assert answers.get("a", {"q": "a"}, "thing", _name) == "thing-3"  # asked again
    assert managers.asked == [{"q": "a"}, {"q": "b"}, {"q": "a"}]


def test_the_cache_is_bounded() -> None:
    managers, now = ScriptedManagers(), [0.0]
    answers = _answers(managers, now)
    for question in ("a", "b", "c", "a"):
        answers.get(question, {"q": question}, "thing", _name)
    assert len(managers.asked) == 4  # full at "c": forgotten, "a" asked again


def test_a_manager_that_cannot_answer_is_a_refusal_naming_what() -> None:
    managers, now = ScriptedManagers(), [0.0]
    managers.status = 503
    with pytest.raises(RaftQError) as refused:
        _answers(managers, now).get("a", {"q": "a"}, "API key", _name)
    assert refused.value.code is ErrorCode.REFUSED
    assert "cannot check the API key with the managers now (503)" in refused.value.message
