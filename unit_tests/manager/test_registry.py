"""The pure registries: commands, bounds, idempotence and invalid input (no pysyncobj)."""

from __future__ import annotations

import pickle

import pytest

from manager.registry.brokers import BrokerRecord
from manager.registry.commands import (
    BeginMove,
    DrainBroker,
    FinishMove,
    RemoveBroker,
    RetargetMove,
    RollBackPartitions,
)
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.registry.topics import Assignment, PartitionRecord, PartitionState
from protocol.types import BrokerId, PartitionId

RF = 3


def _assignment(*brokers: int, port: int = 9000) -> Assignment:
    return tuple((BrokerId(b), f"127.0.0.1:{port + b}") for b in brokers)


def _state_with_brokers(count: int = 3) -> ManagerState:
    state = ManagerState()
    for broker_id in range(1, count + 1):
        outcome = state.register_broker(
            broker_id, f"http://127.0.0.1:{8000 + broker_id}", "127.0.0.1", 9000, 9099, 100
        )
        assert outcome is Outcome.CREATED
    return state


def _topic(state: ManagerState, name: str = "t", partitions: int = 1) -> None:
    assignments = tuple(_assignment(1, 2, 3, port=9000 + 10 * p) for p in range(partitions))
    assert state.begin_topic(name, assignments, 10, 8, RF) is Outcome.CREATED


def test_register_broker_is_idempotent_and_versioned() -> None:
    state = _state_with_brokers(1)
    revision = state.revision
    same = state.register_broker(1, "http://127.0.0.1:8001", "127.0.0.1", 9000, 9099, 100)
    assert same is Outcome.UNCHANGED
    assert state.revision == revision
    moved = state.register_broker(1, "http://127.0.0.1:8101", "127.0.0.1", 9000, 9099, 100)
    assert moved is Outcome.UPDATED
    broker = state.brokers.get(BrokerId(1))
    assert broker is not None and broker.address.endswith(":8101")
    assert broker.version == state.revision > revision


@pytest.mark.parametrize(
    "args",
    [
        ("1", "http://x", "h", 1, 2),
        (1, "", "h", 1, 2),
        (1, "http://x", "", 1, 2),
        (1, "http://x", "h", 5, 2),
        (1, "http://x", "h", 0, 2),
        (True, "http://x", "h", 1, 2),
        (1, None, "h", 1, 2),
    ],
)
def test_register_broker_rejects_invalid_input(args: tuple[object, ...]) -> None:
    state = ManagerState()
    assert state.register_broker(*args, 100) is Outcome.INVALID  # type: ignore[arg-type,call-arg]
    assert len(state.brokers) == 0 and state.revision == 0


def test_broker_bound_is_a_result() -> None:
    state = ManagerState()
    assert state.register_broker(1, "http://a", "h", 1, 2, 1) is Outcome.CREATED
    assert state.register_broker(2, "http://b", "h", 1, 2, 1) is Outcome.TOO_MANY


def test_set_broker_alive_changes_only_on_change() -> None:
    state = _state_with_brokers(1)
    assert state.set_broker_alive(1, True) is Outcome.UNCHANGED
    assert state.set_broker_alive(1, False) is Outcome.UPDATED
    assert state.set_broker_alive(7, False) is Outcome.UNKNOWN_BROKER
    assert state.set_broker_alive([1], False) is Outcome.INVALID  # type: ignore[arg-type]
    assert state.set_broker_alive(1, "no") is Outcome.INVALID  # type: ignore[arg-type]


def test_topic_lifecycle_creating_then_active() -> None:
    state = _state_with_brokers()
    _topic(state, partitions=2)
    topic = state.topics.get("t")
    assert topic is not None and not topic.is_active and len(topic.creating) == 2
    assert state.finish_partitions("t", (0, 1)) is Outcome.UPDATED
    assert state.finish_partitions("t", (0, 1)) is Outcome.UNCHANGED
    topic = state.topics.get("t")
    assert topic is not None and topic.is_active and topic.active_count == 2


def test_topic_exists_in_any_state() -> None:
    state = _state_with_brokers()
    _topic(state)
    again = state.begin_topic("t", (_assignment(1, 2, 3, port=9500),), 10, 8, RF)
    assert again is Outcome.EXISTS


def test_topic_bounds_are_results() -> None:
    state = _state_with_brokers()
    _topic(state, "a")
    too_many_topics = state.begin_topic("b", (_assignment(1, 2, 3, port=9500),), 1, 8, RF)
    assert too_many_topics is Outcome.TOO_MANY
    nine = tuple(_assignment(1, 2, 3, port=9100 + 10 * p) for p in range(9))
    assert state.begin_topic("c", nine, 10, 8, RF) is Outcome.INVALID


@pytest.mark.parametrize(
    "assignments",
    [
        (),
        ((),),
        (((1, "127.0.0.1:9001"), (1, "127.0.0.1:9002")),),
        (((1, "127.0.0.1:9001"), (2, "127.0.0.1:9001")),),
        (((1, "no-port"),),),
        ([(1, "127.0.0.1:9001")],),
        "t",
        (((1, "h:1"), (2, "h:2"), (3, "h:3"), (3, "h:4")),),
    ],
)
def test_begin_topic_rejects_malformed_assignments(assignments: object) -> None:
    state = _state_with_brokers()
    outcome = state.begin_topic("t", assignments, 10, 8, RF)  # type: ignore[arg-type]
    assert outcome in (Outcome.INVALID, Outcome.UNKNOWN_BROKER)
    assert state.topics.get("t") is None


def test_begin_topic_refuses_unknown_brokers_and_taken_addresses() -> None:
    state = _state_with_brokers()
    unknown = state.begin_topic("u", (_assignment(1, 2, 9),), 10, 8, RF)
    assert unknown is Outcome.UNKNOWN_BROKER
    _topic(state, "a")
    taken = state.begin_topic("b", (_assignment(1, 2, 3),), 10, 8, RF)
    assert taken is Outcome.ADDRESS_TAKEN


def test_begin_partition_appends_only_the_next_one() -> None:
    state = _state_with_brokers()
    _topic(state)
    new = _assignment(1, 2, 3, port=9200)
    assert state.begin_partition("t", 1, new, 8, RF) is Outcome.BUSY  # topic still creating
    state.finish_partitions("t", (0,))
    assert state.begin_partition("t", 5, new, 8, RF) is Outcome.INVALID
    assert state.begin_partition("t", 0, new, 8, RF) is Outcome.EXISTS
    assert state.begin_partition("nope", 1, new, 8, RF) is Outcome.UNKNOWN_TOPIC
    assert state.begin_partition("t", 1, new, 1, RF) is Outcome.TOO_MANY
    assert state.begin_partition("t", 1, new, 8, RF) is Outcome.CREATED
    topic = state.topics.get("t")
    assert topic is not None and topic.active_count == 1 and topic.is_active
    assert topic.partitions[1].state is PartitionState.CREATING


def test_finish_partitions_names_partitions_explicitly() -> None:
    state = _state_with_brokers()
    _topic(state, partitions=2)
    assert state.finish_partitions("t", (0,)) is Outcome.UPDATED
    topic = state.topics.get("t")
    assert topic is not None and [p.partition_id for p in topic.creating] == [PartitionId(1)]
    assert state.finish_partitions("t", (4,)) is Outcome.UNKNOWN_PARTITION
    assert state.finish_partitions("x", (0,)) is Outcome.UNKNOWN_TOPIC
    assert state.finish_partitions("t", [1]) is Outcome.INVALID  # type: ignore[arg-type]


def test_versions_only_grow() -> None:
    state = _state_with_brokers()
    _topic(state)
    before = state.topics.get("t")
    state.finish_partitions("t", (0,))
    after = state.topics.get("t")
    assert before is not None and after is not None
    assert after.version > before.version
    assert after.partitions[0].version > before.partitions[0].version


def test_clients_need_a_topic_and_are_bounded() -> None:
    state = _state_with_brokers()
    assert state.register_producer("p", "t", 10) is Outcome.UNKNOWN_TOPIC
    _topic(state, partitions=2)
    assert state.register_producer("p", "t", 10) is Outcome.CREATED
    assert state.register_producer("p", "t", 10) is Outcome.UNCHANGED
    assert state.register_consumer("c", "t", 2, 10) is Outcome.UNKNOWN_PARTITION
    assert state.register_consumer("c", "t", 1, 10) is Outcome.CREATED
    assert state.register_consumer("c", "t", None, 10) is Outcome.EXISTS
    assert state.register_consumer("d", "t", None, 2) is Outcome.TOO_MANY
    assert state.register_producer("", "t", 10) is Outcome.INVALID
    consumer = state.clients.consumer("c")
    assert consumer is not None and consumer.partition_id == 1


def test_state_pickles_for_the_raft_dump() -> None:
    state = _state_with_brokers()
    _topic(state)
    state.register_producer("p", "t", 10)
    copy = pickle.loads(pickle.dumps(state))
    assert copy.topics.all() == state.topics.all()
    assert copy.clients.producer("p") == state.clients.producer("p")
    assert copy.revision == state.revision


def _active_topic(state: ManagerState) -> None:
    _topic(state)
    assert state.finish_partitions("t", (0,)) is Outcome.UPDATED


def test_a_move_replaces_one_replica_until_it_is_finished() -> None:
    state = _state_with_brokers(4)
    _active_topic(state)
    assert state.begin_move("t", 0, 1, 4, "127.0.0.1:9104", 1) is Outcome.UPDATED
    partition = state.topics.get("t").partitions[0]  # type: ignore[union-attr]
    assert [r.broker_id for r in partition.replicas] == [1, 4, 3]
    assert partition.moving is not None and partition.moving.removed.broker_id == 2
    # A repeat is a success; another move of the partition, or a second at once, waits.
    assert state.begin_move("t", 0, 1, 4, "127.0.0.1:9104", 1) is Outcome.UNCHANGED
    assert state.begin_move("t", 0, 2, 4, "127.0.0.1:9105", 1) is Outcome.BUSY
    assert state.apply(FinishMove("t", 0)) is Outcome.UPDATED
    assert state.apply(FinishMove("t", 0)) is Outcome.UNCHANGED
    partition = state.topics.get("t").partitions[0]  # type: ignore[union-attr]
    assert partition.moving is None and [r.broker_id for r in partition.replicas] == [1, 4, 3]


@pytest.mark.parametrize(
    ("args", "outcome"),
    [
        (("t", 0, 1, 9, "127.0.0.1:9104", 1), Outcome.UNKNOWN_BROKER),
        (("t", 0, 1, 3, "127.0.0.1:9104", 1), Outcome.INVALID),  # 3 holds a replica already
        (("t", 0, 1, 4, "127.0.0.1:9001", 1), Outcome.ADDRESS_TAKEN),
        (("t", 0, 5, 4, "127.0.0.1:9104", 1), Outcome.INVALID),
        (("t", 0, 1, 4, "no-port", 1), Outcome.INVALID),
        (("t", 1, 1, 4, "127.0.0.1:9104", 1), Outcome.UNKNOWN_PARTITION),
        (("u", 0, 1, 4, "127.0.0.1:9104", 1), Outcome.UNKNOWN_PARTITION),
        (("t", 0, 1, 4, "127.0.0.1:9104", 0), Outcome.INVALID),
    ],
)
def test_a_move_refuses_what_would_break_the_placement(
    args: tuple[object, ...], outcome: Outcome
) -> None:
    state = _state_with_brokers(4)
    _active_topic(state)
    before = pickle.dumps(state)
    assert state.apply(BeginMove(*args)) is outcome  # type: ignore[arg-type]
    assert pickle.dumps(state) == before


def test_a_creating_partition_does_not_move() -> None:
    state = _state_with_brokers(4)
    _topic(state)
    assert state.begin_move("t", 0, 1, 4, "127.0.0.1:9104", 1) is Outcome.UNKNOWN_PARTITION


def test_a_partition_record_from_an_older_snapshot_is_not_moving() -> None:
    record = PartitionRecord.__new__(PartitionRecord)
    record.__setstate__([PartitionId(0), (), PartitionState.ACTIVE, 3])
    assert record.moving is None and record.version == 3


def test_a_broker_is_removed_only_once_drained_and_empty_and_its_id_is_never_taken_again() -> None:
    state = _state_with_brokers(4)
    _active_topic(state)  # on brokers 1, 2, 3
    assert state.apply(RemoveBroker(4)) is Outcome.INVALID  # not draining
    assert state.apply(DrainBroker(4)) is Outcome.UPDATED
    assert state.apply(DrainBroker(4)) is Outcome.UNCHANGED
    assert state.apply(DrainBroker(2)) is Outcome.UPDATED
    assert state.apply(RemoveBroker(2)) is Outcome.BUSY  # holds t/0
    assert state.apply(RemoveBroker(4)) is Outcome.UPDATED
    assert state.apply(RemoveBroker(4)) is Outcome.UNCHANGED
    assert [b.broker_id for b in state.brokers.all()] == [1, 2, 3]
    assert state.brokers.get(BrokerId(4)) is None and state.brokers.is_removed(BrokerId(4))
    again = state.register_broker(4, "http://127.0.0.1:8004", "127.0.0.1", 9000, 9099, 100)
    assert again is Outcome.EXISTS
    assert state.apply(DrainBroker(9)) is Outcome.UNKNOWN_BROKER


def test_a_broker_with_a_replica_moving_away_is_not_removed_yet() -> None:
    state = _state_with_brokers(4)
    _active_topic(state)
    assert state.apply(DrainBroker(2)) is Outcome.UPDATED
    assert state.begin_move("t", 0, 1, 4, "127.0.0.1:9104", 1) is Outcome.UPDATED
    assert state.apply(RemoveBroker(2)) is Outcome.BUSY  # its replica has not left yet
    assert state.apply(FinishMove("t", 0)) is Outcome.UPDATED
    assert state.apply(RemoveBroker(2)) is Outcome.UPDATED


def test_a_broker_record_from_an_older_snapshot_is_neither_draining_nor_removed() -> None:
    record = BrokerRecord.__new__(BrokerRecord)
    record.__setstate__([BrokerId(1), "http://b1", "h", 1, 2, True, 5])
    assert not record.draining and not record.removed and record.version == 5


def test_an_address_a_replica_moved_away_from_stays_taken() -> None:
    state = _state_with_brokers(4)
    _active_topic(state)
    assert state.begin_move("t", 0, 1, 4, "127.0.0.1:9104", 1) is Outcome.UPDATED
    assert state.apply(FinishMove("t", 0)) is Outcome.UPDATED
    assert 9002 in state.topics.raft_ports_by_host()["127.0.0.1"]  # broker 2's old replica


def test_a_roll_back_forgets_the_creating_partitions_and_a_topic_left_without_any() -> None:
    state = _state_with_brokers()
    _topic(state, partitions=2)
    assert state.apply(RollBackPartitions("t", (0,))) is Outcome.INVALID  # not every one
    assert state.apply(RollBackPartitions("t", (0, 1))) is Outcome.UPDATED
    assert state.topics.get("t") is None
    assert state.apply(RollBackPartitions("t", (0, 1))) is Outcome.UNKNOWN_TOPIC
    again = (_assignment(1, 2, 3, port=9600),)  # the name is free again, at new addresses
    assert state.begin_topic("t", again, 10, 8, RF) is Outcome.CREATED
    assert state.finish_partitions("t", (0,)) is Outcome.UPDATED
    added = _assignment(1, 2, 3, port=9500)
    assert state.begin_partition("t", 1, added, 8, RF) is Outcome.CREATED
    assert state.apply(RollBackPartitions("t", (1,))) is Outcome.UPDATED
    topic = state.topics.get("t")
    assert topic is not None and len(topic.partitions) == 1 and topic.is_active
    assert state.apply(RollBackPartitions("t", ())) is Outcome.UNCHANGED
    assert 9501 in state.topics.raft_ports_by_host()["127.0.0.1"]  # stays taken


def test_a_move_can_go_elsewhere_only_from_its_current_new_broker() -> None:
    state = _state_with_brokers(5)
    _active_topic(state)
    assert state.begin_move("t", 0, 1, 4, "127.0.0.1:9104", 1) is Outcome.UPDATED
    retarget = RetargetMove("t", 0, 4, 5, "127.0.0.1:9105")
    assert state.apply(RetargetMove("t", 0, 3, 5, "127.0.0.1:9105")) is Outcome.INVALID
    assert state.apply(RetargetMove("t", 0, 4, 2, "127.0.0.1:9106")) is Outcome.INVALID
    assert state.apply(retarget) is Outcome.UPDATED
    assert state.apply(retarget) is Outcome.UNCHANGED
    partition = state.topics.get("t").partitions[0]  # type: ignore[union-attr]
    assert [r.broker_id for r in partition.replicas] == [1, 5, 3]
    assert partition.moving is not None and partition.moving.removed.broker_id == 2
    assert 9104 in state.topics.raft_ports_by_host()["127.0.0.1"]  # the abandoned address
