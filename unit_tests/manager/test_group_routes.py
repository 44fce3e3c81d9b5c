"""``POST /groups`` and ``GET /groups`` through the manager's own ``create_app`` over the
in-memory registry twin (``in_memory_app``), in process: answers, error codes, that a
refusal or a repeat changes nothing, and who may call them."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import orjson
import pytest

from manager.app import create_app
from manager.broker_client import BrokerClient
from manager.raft import RegistryTwin, registry_twin
from manager.registry.commands import BeginTopic, RegisterBroker
from protocol.access import AUTHORIZATION_HEADER
from protocol.errors import ErrorCode
from protocol.limits import Limits, PartitionLimits
from protocol.types import BrokerId
from runtime.http_api import App
from runtime.http_client import PeerLink
from runtime.http_server import HttpRequest
from unit_tests.manager.in_memory_app import applied_names, as_node, manager_config, patch_manager

LIMITS = Limits()
TOPIC_LIMITS = LIMITS.partition_limits()


@dataclass(frozen=True)
class Manager:
    app: App
    registry: RegistryTwin

    def call(
        self, method: str, target: str, body: object = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, object]]:
        """As a node, unless ``headers`` (a key's) are given."""
        data = b"" if body is None else orjson.dumps(body)
        sent = as_node(method, target, data) if headers is None else list(headers.items())
        answer = self.app.handle(HttpRequest(method, target, sent, data))
        parsed = orjson.loads(answer.body)
        assert isinstance(parsed, dict)
        return answer.status, parsed

    def stored(self) -> bytes:
        return self.registry.read(pickle.dumps)

    def key(self, role: str, topics: list[str]) -> dict[str, str]:
        status, made = self.call("POST", "/keys", {"role": role, "topics": topics})
        assert status == 201, made
        return {AUTHORIZATION_HEADER: f"Bearer {made['key']}"}


def _add_topics(registry: RegistryTwin, limits: PartitionLimits, *names: str) -> None:
    registry.propose(RegisterBroker(1, "http://b1", "h", 1, 999, 10))
    for port, name in enumerate(names, start=1):
        assignment = ((BrokerId(1), f"h:{port}"),)
        registry.propose(BeginTopic(name, (assignment,), 10, 10, 1, limits))


@contextmanager
def _manager(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    limits: Limits = LIMITS,
    topic_limits: PartitionLimits = TOPIC_LIMITS,
) -> Iterator[Manager]:
    registry = registry_twin()
    _add_topics(registry, topic_limits, "orders", "audit", "dead")
    patch_manager(monkeypatch, registry, BrokerClient(limits, PeerLink(None, None)))
    app = create_app(manager_config(tmp_path, limits))
    try:
        yield Manager(app, registry)
    finally:
        app.close()


@pytest.fixture
def manager(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Manager]:
    with _manager(monkeypatch, tmp_path) as running:
        yield running


def _code(body: dict[str, object]) -> ErrorCode:
    code = body["error_code"]
    assert isinstance(code, int)
    return ErrorCode(code)


def test_a_group_is_created_then_a_repeat_is_200_and_proposes_nothing(manager: Manager) -> None:
    asked = {
        "topic": "orders",
        "group": "billing",
        "max_deliveries": 5,
        "dead_letter_topic": "dead",
    }
    status, created = manager.call("POST", "/groups", asked)
    assert status == 201
    assert created == {
        "topic": "orders",
        "group": "billing",
        "visibility_timeout_ms": LIMITS.group_visibility_timeout_ms_default,
        "max_deliveries": 5,
        "dead_letter_topic": "dead",
        "ordering": "none",
    }
    stored, proposed = manager.stored(), list(applied_names(manager.registry))
    assert proposed[-1] == "define_group"
    # The same settings again, the defaults spelled out or null: 200, nothing proposed.
    spelled = {**asked, "visibility_timeout_ms": 30_000, "ordering": "none"}
    for repeat in (asked, spelled, {**asked, "ordering": None}):
        assert manager.call("POST", "/groups", repeat) == (200, created)
    assert manager.stored() == stored and applied_names(manager.registry) == proposed


def test_the_same_group_with_other_settings_is_409_and_changes_nothing(manager: Manager) -> None:
    assert manager.call("POST", "/groups", {"topic": "orders", "group": "g"})[0] == 201
    stored = manager.stored()
    status, body = manager.call(
        "POST", "/groups", {"topic": "orders", "group": "g", "visibility_timeout_ms": 1_000}
    )
    assert status == 409 and _code(body) is ErrorCode.TOPIC_EXISTS
    assert "visibility_timeout_ms is 30000, not 1000" in str(body["message"])
    assert manager.stored() == stored


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"topic": "nope", "group": "g"}, 404, ErrorCode.UNKNOWN_TOPIC),
        (
            {"topic": "orders", "group": "g", "dead_letter_topic": "nope", "max_deliveries": 1},
            404,
            ErrorCode.UNKNOWN_TOPIC,
        ),
        (
            {"topic": "orders", "group": "g", "dead_letter_topic": "orders", "max_deliveries": 1},
            400,
            ErrorCode.INVALID_FIELD,
        ),
        (
            {"topic": "orders", "group": "g", "dead_letter_topic": "dead"},
            400,
            ErrorCode.INVALID_FIELD,
        ),
        ({"topic": "orders", "group": "g", "ordering": "fifo"}, 400, ErrorCode.INVALID_FIELD),
        (
            {"topic": "orders", "group": "g", "visibility_timeout_ms": 99},
            400,
            ErrorCode.INVALID_FIELD,
        ),
        (
            {"topic": "orders", "group": "g", "visibility_timeout_ms": 12 * 3600 * 1000 + 1},
            400,
            ErrorCode.INVALID_FIELD,
        ),
        ({"topic": "orders", "group": "g", "max_deliveries": -1}, 400, ErrorCode.INVALID_FIELD),
        ({"topic": "orders", "group": "g", "max_deliveries": 1_001}, 400, ErrorCode.INVALID_FIELD),
        ({"topic": "orders", "group": "a b"}, 400, ErrorCode.INVALID_FIELD),
        ({"topic": "orders", "group": "g" * 201}, 400, ErrorCode.INVALID_FIELD),
        ({"topic": "orders"}, 400, ErrorCode.INVALID_FIELD),
    ],
)
def test_a_refused_definition_changes_nothing(
    manager: Manager, body: dict[str, object], status: int, code: ErrorCode
) -> None:
    stored, proposed = manager.stored(), list(applied_names(manager.registry))
    answer_status, answer = manager.call("POST", "/groups", body)
    assert (answer_status, _code(answer)) == (status, code), answer
    assert manager.stored() == stored and applied_names(manager.registry) == proposed
    assert manager.call("GET", "/groups")[1] == {"groups": []}


def test_groups_past_partition_groups_max_are_refused_with_a_field_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with _manager(monkeypatch, tmp_path, replace(LIMITS, partition_groups_max=2)) as manager:
        for name in ("a", "b"):
            assert manager.call("POST", "/groups", {"topic": "orders", "group": name})[0] == 201
        stored = manager.stored()
        status, body = manager.call("POST", "/groups", {"topic": "orders", "group": "c"})
        assert status == 400 and _code(body) is ErrorCode.INVALID_FIELD
        assert "partition_groups_max" in str(body["message"]) and manager.stored() == stored
        assert manager.call("POST", "/groups", {"topic": "orders", "group": "a"})[0] == 200
        assert manager.call("POST", "/groups", {"topic": "audit", "group": "c"})[0] == 201


def test_a_topic_created_with_a_lower_bound_on_groups_keeps_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its partitions apply the bound they were created with, whatever the manager's
    ``partition_groups_max`` says now."""
    recorded = replace(LIMITS.partition_limits(), groups_max=1)
    with _manager(monkeypatch, tmp_path, topic_limits=recorded) as manager:
        assert manager.call("POST", "/groups", {"topic": "orders", "group": "a"})[0] == 201
        status, body = manager.call("POST", "/groups", {"topic": "orders", "group": "b"})
        assert status == 400 and "has 1 consumer groups" in str(body["message"])


def test_groups_are_listed_by_name_per_topic_or_all(manager: Manager) -> None:
    for topic, group in (("orders", "b"), ("audit", "z"), ("orders", "a")):
        assert manager.call("POST", "/groups", {"topic": topic, "group": group})[0] == 201
    status, listed = manager.call("GET", "/groups?topic=orders")
    assert status == 200
    assert listed == {
        "groups": [
            {
                "topic": "orders",
                "group": name,
                "visibility_timeout_ms": 30_000,
                "max_deliveries": 0,
                "dead_letter_topic": None,
                "ordering": "none",
                # No broker leads partition 0 here: its figures are missing, and it is
                # listed as unavailable (``GET /groups`` with ``topic`` asks the leaders).
                "lag_messages": 0,
                "lag_s": 0.0,
                "in_flight": 0,
                "dead_letters_pending": 0,
                "dead_lettered": 0,
                "partitions": [],
            }
            for name in ("a", "b")
        ],
        "unavailable_partitions": [0],
    }
    every = manager.call("GET", "/groups")[1]["groups"]
    assert isinstance(every, list)
    assert [(g["topic"], g["group"]) for g in every] == [
        ("audit", "z"),
        ("orders", "a"),
        ("orders", "b"),
    ]
    assert manager.call("GET", "/groups?topic=dead") == (
        200,
        {"groups": [], "unavailable_partitions": [0]},
    )
    status, body = manager.call("GET", "/groups?topic=nope")
    assert status == 404 and _code(body) is ErrorCode.UNKNOWN_TOPIC
    status, body = manager.call("GET", "/groups?topic=a%20b")
    assert status == 400 and _code(body) is ErrorCode.INVALID_FIELD


def test_admins_create_groups_and_any_key_lists_them(manager: Manager) -> None:
    admin = manager.key("admin", [])
    consumer = manager.key("consumer", ["orders"])
    producer = manager.key("producer", ["audit"])
    stored = manager.stored()
    for key in (consumer, producer):
        status, body = manager.call("POST", "/groups", {"topic": "orders", "group": "g"}, key)
        assert status == 403 and _code(body) is ErrorCode.FORBIDDEN
    status, body = manager.call("POST", "/groups", {"topic": "orders", "group": "g"}, {})
    assert status == 401 and _code(body) is ErrorCode.UNAUTHENTICATED
    assert manager.stored() == stored
    assert manager.call("POST", "/groups", {"topic": "orders", "group": "g"}, admin)[0] == 201
    for key in (admin, consumer, producer):
        status, listed = manager.call("GET", "/groups", headers=key)
        assert status == 200 and len(listed["groups"]) == 1  # type: ignore[arg-type]
    assert manager.call("GET", "/groups", headers={})[0] == 401
