"""The managers' replicated commands: one list, one wire form, one apply."""

from __future__ import annotations

import pickle
from typing import get_args

import pytest

from manager.registry import commands
from manager.registry.commands import RegistryCommand, command_name, from_wire, to_wire
from manager.registry.groups import RedriveProgress
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from protocol.limits import Limits
from protocol.types import BrokerId

EXAMPLES: list[RegistryCommand] = [
    commands.RegisterBroker(1, "http://b1", "127.0.0.1", 100, 199, 10),
    commands.BeginTopic(
        "t", (((BrokerId(1), "127.0.0.1:100"),),), 10, 10, 1, Limits().partition_limits()
    ),
    commands.FinishPartitions("t", (0,)),
    commands.BeginPartition("t", 1, ((BrokerId(1), "127.0.0.1:101"),), 10, 1),
    commands.SetBrokerAlive(1, False),
    commands.RegisterProducer("p", "t", 10, 1_000, 60_000),
    commands.RegisterConsumer("c", "t", None, 10, 1_000, 60_000),
    commands.ExpireIdleClients(2_000, 60_000, 10),
    commands.CreateKey("0123456789ab", "f" * 64, "producer", ("t",), "n", 3_000, 10),
    commands.RevokeKey("0123456789ab"),
    commands.DefineGroup("t", "g", 30_000, 0, None, "key", 100, 43_200_000, 1_000, 100),
    commands.PlanRedrive("t", "g", 0, 0, 10),
    commands.FinishRedrive("t", "g", 0, 10),
    commands.RegisterBroker(2, "http://b2", "127.0.0.2", 100, 199, 10),
    commands.BeginMove("t", 0, 0, 2, "127.0.0.2:100", 1),
    commands.RetargetMove("t", 0, 2, 2, "127.0.0.2:100"),  # already there: unchanged
    commands.FinishMove("t", 0),
    commands.DrainBroker(2),
    commands.RemoveBroker(2),  # busy: it holds t/0 now
    commands.CancelDrain(2),
    commands.DrainBroker(2),
    commands.RollBackPartitions("t", (1,)),  # partition 1 is forgotten
    commands.AddManager(4, "http://m4", "127.0.0.4:100"),
    commands.RemoveManager(4, "http://m4", "127.0.0.4:100"),
]


def test_every_command_is_in_the_examples_and_round_trips() -> None:
    assert {type(c) for c in EXAMPLES} == set(get_args(RegistryCommand))
    for command in EXAMPLES:
        wire = to_wire(command)
        assert wire[0] == command_name(command)
        assert from_wire(wire) == command


def test_applying_them_in_order_builds_the_state() -> None:
    state = ManagerState()
    outcomes = [state.apply(from_wire(to_wire(c))) for c in EXAMPLES]
    assert Outcome.FAILED not in outcomes and Outcome.INVALID not in outcomes, outcomes
    topic = state.topics.get("t")
    assert topic is not None and len(topic.partitions) == 1  # 1 was added, then rolled back
    assert topic.partition_limits == Limits().partition_limits()
    assert len(state.clients) == 2
    assert [r.broker_id for r in topic.partitions[0].replicas] == [2]
    assert outcomes[-6] is Outcome.BUSY and state.brokers.get(BrokerId(2)) is not None
    assert outcomes[-5] is Outcome.UPDATED and outcomes[-4] is Outcome.UPDATED  # undrained
    assert state.managers.changed and state.managers.effective([]) == []
    group = state.groups.get("t", "g")
    assert group is not None and group.ordered_by_key and group.dead_letter_topic is None
    assert state.groups.redrive_progress("t", "g", 0) == RedriveProgress(10)


@pytest.mark.parametrize(
    "wire",
    [
        None,
        (),
        ("nope", 1),
        ("set_broker_alive", 1),
        ("set_broker_alive", 1, True, 3),
        (7,),
        ("begin_topic", "t", (), 10, 10, 1, {"unflushed_messages_max": -1}),
        ("define_group", "t", "g", 30_000, 0, None, "none", 100, 43_200_000, 1_000),
    ],
)
def test_a_malformed_wire_command_changes_nothing(wire: object) -> None:
    state = ManagerState()
    assert state.apply(from_wire(wire)) is Outcome.INVALID
    assert state.revision == 0


def test_a_topic_record_from_an_older_snapshot_has_no_limits() -> None:
    state = ManagerState()
    for command in EXAMPLES[:2]:
        state.apply(command)
    topic = state.topics.get("t")
    assert topic is not None
    old_state = topic.__getstate__()[:3]  # as pickled before topics recorded their limits
    restored = type(topic).__new__(type(topic))
    restored.__setstate__(old_state)
    assert restored.partition_limits is None and restored.partitions == topic.partitions
    assert pickle.loads(pickle.dumps(topic)) == topic
