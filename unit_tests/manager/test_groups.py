"""The managers' consumer-group registry (issue 20): ``GroupRegistry`` and ``DefineGroup``
as ``ManagerState`` applies them. Pure: no Raft, no HTTP."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from manager.registry.commands import (
    BeginTopic,
    DefineGroup,
    FinishRedrive,
    PlanRedrive,
    RegisterBroker,
    RegistryCommand,
    from_wire,
    to_wire,
)
from manager.registry.groups import GroupEntry, RedriveProgress
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from protocol.limits import Limits
from protocol.types import BrokerId

LIMITS = Limits()
HOURS_12_MS = 12 * 3600 * 1000


def _group(
    group: str = "g",
    *,
    topic: str = "orders",
    timeout_ms: int = 30_000,
    max_deliveries: int = 0,
    dead_letter_topic: str | None = None,
    ordering: str = "none",
    groups_max: int = 100,
) -> DefineGroup:
    return DefineGroup(
        topic,
        group,
        timeout_ms,
        max_deliveries,
        dead_letter_topic,
        ordering,
        LIMITS.group_visibility_timeout_ms_min,
        LIMITS.group_visibility_timeout_ms_max,
        LIMITS.group_max_deliveries_max,
        groups_max,
    )


def _topics(*names: str) -> list[RegistryCommand]:
    commands: list[RegistryCommand] = [RegisterBroker(1, "http://b1", "h", 1, 999, 10)]
    for port, name in enumerate(names, start=1):
        assignment = ((BrokerId(1), f"h:{port}"),)
        commands.append(BeginTopic(name, (assignment,), 10, 10, 1, LIMITS.partition_limits()))
    return commands


def _state(*names: str) -> ManagerState:
    state = ManagerState()
    for command in _topics(*(names or ("orders", "dead"))):
        assert state.apply(command) is Outcome.CREATED
    return state


def _apply(state: ManagerState, command: DefineGroup) -> Outcome:
    return state.apply(from_wire(to_wire(command)))  # as the Raft log carries it


def test_a_group_is_defined_once_and_a_repeat_changes_nothing() -> None:
    state = _state()
    assert _apply(state, _group(max_deliveries=3, dead_letter_topic="dead")) is Outcome.CREATED
    revision, stored = state.revision, pickle.dumps(state)
    entry = state.groups.get("orders", "g")
    assert entry is not None and entry.version == revision
    assert entry.to_json() == {
        "topic": "orders",
        "group": "g",
        "visibility_timeout_ms": 30_000,
        "max_deliveries": 3,
        "dead_letter_topic": "dead",
        "ordering": "none",
    }
    # A retried command (or a client declaring its group again): nothing changes.
    assert _apply(state, _group(max_deliveries=3, dead_letter_topic="dead")) is Outcome.UNCHANGED
    assert pickle.dumps(state) == stored
    # The same name with other settings is refused, and the group keeps its own.
    for other in (
        _group(max_deliveries=4, dead_letter_topic="dead"),
        _group(max_deliveries=3),
        _group(max_deliveries=3, dead_letter_topic="dead", timeout_ms=1_000),
        _group(max_deliveries=3, dead_letter_topic="dead", ordering="key"),
    ):
        assert _apply(state, other) is Outcome.EXISTS
        assert pickle.dumps(state) == stored
    # The name is the group's within its topic: another topic may have its own "g".
    assert _apply(state, _group(topic="dead")) is Outcome.CREATED
    assert state.revision == revision + 1


def test_groups_per_topic_are_bounded() -> None:
    state = _state()
    assert _apply(state, _group("a", groups_max=2)) is Outcome.CREATED
    assert _apply(state, _group("b", groups_max=2)) is Outcome.CREATED
    stored = pickle.dumps(state)
    assert _apply(state, _group("c", groups_max=2)) is Outcome.TOO_MANY
    assert pickle.dumps(state) == stored
    assert _apply(state, _group("a", groups_max=2)) is Outcome.UNCHANGED  # a repeat at the bound
    assert _apply(state, _group("c", topic="dead", groups_max=2)) is Outcome.CREATED  # per topic
    assert len(state.groups) == 3


@pytest.mark.parametrize(
    ("command", "outcome"),
    [
        (_group(topic="nope"), Outcome.UNKNOWN_TOPIC),
        (_group(dead_letter_topic="nope", max_deliveries=1), Outcome.UNKNOWN_TOPIC),
        (replace(_group(), topic=["orders"]), Outcome.UNKNOWN_TOPIC),  # type: ignore[arg-type]
        (_group(dead_letter_topic="orders", max_deliveries=1), Outcome.INVALID),
        (_group(dead_letter_topic="dead", max_deliveries=0), Outcome.INVALID),
        (_group(timeout_ms=99), Outcome.INVALID),
        (_group(timeout_ms=HOURS_12_MS + 1), Outcome.INVALID),
        (replace(_group(), visibility_timeout_ms=True), Outcome.INVALID),
        (_group(max_deliveries=-1), Outcome.INVALID),
        (_group(max_deliveries=1_001), Outcome.INVALID),
        (_group(ordering="fifo"), Outcome.INVALID),
        (replace(_group(), ordering=["key"]), Outcome.INVALID),  # type: ignore[arg-type]
        (_group(""), Outcome.INVALID),
        (replace(_group(), group=7), Outcome.INVALID),  # type: ignore[arg-type]
        (_group(groups_max=0), Outcome.INVALID),
        (replace(_group(), visibility_timeout_ms_max="12h"), Outcome.INVALID),  # type: ignore[arg-type]
    ],
)
def test_a_definition_that_breaks_a_rule_changes_nothing(
    command: DefineGroup, outcome: Outcome
) -> None:
    state = _state()
    stored = pickle.dumps(state)
    assert state.apply(command) is outcome
    assert pickle.dumps(state) == stored


def test_the_bounds_themselves_are_accepted() -> None:
    state = _state()
    assert _apply(state, _group("short", timeout_ms=100)) is Outcome.CREATED
    long = _group("long", timeout_ms=HOURS_12_MS, max_deliveries=1_000)
    assert _apply(state, long) is Outcome.CREATED
    assert (
        _apply(state, _group("dl", max_deliveries=1, dead_letter_topic="dead")) is Outcome.CREATED
    )


def test_groups_are_listed_by_topic_then_name() -> None:
    state = _state("orders", "audit", "dead")
    for topic, group in (("orders", "b"), ("audit", "z"), ("orders", "a"), ("orders", "c")):
        assert _apply(state, _group(group, topic=topic)) is Outcome.CREATED
    assert [e.group for e in state.groups.of_topic("orders")] == ["a", "b", "c"]
    assert state.groups.of_topic("dead") == [] and state.groups.of_topic("nope") == []
    assert [(e.topic, e.group) for e in state.groups.all()] == [
        ("audit", "z"),
        ("orders", "a"),
        ("orders", "b"),
        ("orders", "c"),
    ]


def test_every_manager_applying_the_same_log_holds_the_same_groups() -> None:
    log = [
        *_topics("orders", "dead"),
        _group("b", ordering="key"),
        _group("a", max_deliveries=2, dead_letter_topic="dead"),
        _group("b", timeout_ms=500),  # refused: exists
        _group("c", groups_max=2),  # refused: too many
        _group("a", max_deliveries=2, dead_letter_topic="dead"),  # a repeat
    ]
    one, two = ManagerState(), ManagerState()
    outcomes = [one.apply(from_wire(to_wire(c))) for c in log]
    assert [two.apply(from_wire(to_wire(c))) for c in log] == outcomes
    assert outcomes[-5:] == [
        Outcome.CREATED,
        Outcome.CREATED,
        Outcome.EXISTS,
        Outcome.TOO_MANY,
        Outcome.UNCHANGED,
    ]
    assert pickle.dumps(one) == pickle.dumps(two)


def test_a_snapshot_from_before_groups_loads_with_none_and_snapshots_again() -> None:
    """A manager restarted on this code loads a dump written before groups existed: it has
    no groups, takes new ones, and its next dump (pickled in the tick thread) works and
    loads again. (A field left unset by an old dump made the next one raise and cost the
    managers their leader, with partition limits: ``test_limits``.)"""
    state = _state()
    del state.__dict__["groups"]  # as pickled before consumer groups
    restored: ManagerState = pickle.loads(pickle.dumps(state))
    assert len(restored.groups) == 0 and restored.groups.all() == []
    assert restored.topics.get("orders") is not None
    assert _apply(restored, _group(ordering="key")) is Outcome.CREATED
    again: ManagerState = pickle.loads(pickle.dumps(restored))
    assert again.groups.all() == restored.groups.all()
    # Not the pickles' bytes: a set's order after a round trip may differ (CI saw it).
    thrice: ManagerState = pickle.loads(pickle.dumps(again))
    assert thrice.groups.all() == restored.groups.all()
    assert thrice.topics.get("orders") == restored.topics.get("orders")


def test_a_group_entry_pickles_by_field_order() -> None:
    entry = GroupEntry("orders", "g", 30_000, 2, "dead", "key", 7)
    assert entry.__getstate__() == ["orders", "g", 30_000, 2, "dead", "key", 7]
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert entry.ordered_by_key and entry.same_settings(replace(entry, version=9))
    assert not entry.same_settings(replace(entry, max_deliveries=3))


def _redrive(state: ManagerState, command: PlanRedrive | FinishRedrive) -> Outcome:
    return state.apply(from_wire(to_wire(command)))


def test_a_redrive_plans_a_range_finishes_it_and_a_repeat_changes_nothing() -> None:
    """The recorded step of a redrive from a dead-letter topic: a range is planned, its
    letters reopened, then finished; a repeat of either (a retry, a new leader) changes
    nothing, and no other range is planned while one is."""
    state = _state()
    assert _apply(state, _group(max_deliveries=3, dead_letter_topic="dead")) is Outcome.CREATED
    plan = PlanRedrive("orders", "g", 0, 0, 100)
    assert _redrive(state, plan) is Outcome.UPDATED
    assert _redrive(state, plan) is Outcome.UNCHANGED
    assert state.groups.redrive_progress("orders", "g", 0) == RedriveProgress(0, (0, 100))
    assert _redrive(state, PlanRedrive("orders", "g", 0, 0, 50)) is Outcome.BUSY
    assert _redrive(state, FinishRedrive("orders", "g", 0, 50)) is Outcome.INVALID
    assert _redrive(state, FinishRedrive("orders", "g", 0, 100)) is Outcome.UPDATED
    assert _redrive(state, FinishRedrive("orders", "g", 0, 100)) is Outcome.UNCHANGED
    assert state.groups.redrive_progress("orders", "g", 0) == RedriveProgress(100)
    assert _redrive(state, PlanRedrive("orders", "g", 0, 0, 100)) is Outcome.BUSY  # stale
    assert _redrive(state, PlanRedrive("orders", "g", 1, 0, 5)) is Outcome.UPDATED
    assert state.groups.redrive_progress("orders", "g", 0) == RedriveProgress(100)
    assert _redrive(state, PlanRedrive("orders", "nobody", 0, 0, 5)) is Outcome.UNKNOWN_TOPIC
    assert _redrive(state, PlanRedrive("orders", "g", 2, 5, 5)) is Outcome.INVALID
    before = state.revision
    restored: ManagerState = pickle.loads(pickle.dumps(state))
    assert restored.groups.redrive_progress("orders", "g", 1) == RedriveProgress(0, (0, 5))
    assert restored.revision == before


def test_a_snapshot_from_before_redrives_loads_with_no_progress() -> None:
    state = _state()
    _apply(state, _group())
    del state.groups.__dict__["_redrives"]  # as pickled before redrives
    restored: ManagerState = pickle.loads(pickle.dumps(state))
    assert restored.groups.redrive_progress("orders", "g", 0) == RedriveProgress()
    assert _redrive(restored, PlanRedrive("orders", "g", 0, 0, 1)) is Outcome.UPDATED
