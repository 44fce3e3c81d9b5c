"""A producer id pins the partition count its batches are cut with: the first registration
that brings one records it, and every later registration answers it, so a job replayed after
a partition was added routes its batches as its first attempt did."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest

from manager.broker_monitor import BrokerMonitor
from manager.raft import registry_twin
from manager.registry import commands
from manager.registry.clients import ProducerRecord
from manager.registry.commands import from_wire, to_wire
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.services import ManagerServices, ServiceContext
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import CreateTopic, RegisterBroker, RegisterProducer, TopicRef
from protocol.types import BrokerId, ProducerId
from unit_tests.manager.test_client_leases import EXPIRY_MS, T0_MS, _state
from unit_tests.manager.test_service import StubBrokers


def _pinned(state: ManagerState, producer_id: str) -> int | None:
    record = state.clients.producer(producer_id)
    assert record is not None
    return record.partition_count


def test_the_first_count_is_kept_and_later_ones_are_ignored() -> None:
    state = _state()  # topic "t" with one partition (still being created); give it a second
    assignment = tuple((BrokerId(b), f"h:{9010 + b}") for b in (1, 2, 3))
    assert state.finish_partitions("t", (0,)) is Outcome.UPDATED
    assert state.begin_partition("t", 1, assignment, 8, 3) is Outcome.CREATED
    assert state.register_producer("p", "t", 10, T0_MS, EXPIRY_MS, 1) is Outcome.CREATED
    assert state.register_producer("p", "t", 10, T0_MS, EXPIRY_MS, 2) is Outcome.UNCHANGED
    assert _pinned(state, "p") == 1


def test_a_producer_without_a_pin_gets_one_once() -> None:
    state = _state()
    assert state.register_producer("p", "t", 10, T0_MS, EXPIRY_MS) is Outcome.CREATED
    assert _pinned(state, "p") is None
    assert state.register_producer("p", "t", 10, T0_MS, EXPIRY_MS, 1) is Outcome.UPDATED
    assert state.register_producer("p", "t", 10, T0_MS, EXPIRY_MS) is Outcome.UNCHANGED
    assert _pinned(state, "p") == 1


@pytest.mark.parametrize("count", [0, -1, 2, True, "1", 1.0])
def test_a_count_the_topic_cannot_have_changes_nothing(count: object) -> None:
    state = _state()  # one partition
    revision = state.revision
    outcome = state.register_producer("p", "t", 10, T0_MS, EXPIRY_MS, count)  # type: ignore[arg-type]
    assert outcome is Outcome.INVALID
    assert state.revision == revision and state.clients.producer("p") is None


def test_a_command_and_a_record_from_before_pins_still_load() -> None:
    old_wire = ("register_producer", "p", "t", 10, T0_MS, EXPIRY_MS)  # journaled before pins
    command = from_wire(old_wire)
    assert command == commands.RegisterProducer("p", "t", 10, T0_MS, EXPIRY_MS, None)
    assert command is not None and from_wire(to_wire(command)) == command
    assert from_wire(("register_producer", "p", "t", 10, T0_MS)) is None  # one too few
    record = ProducerRecord.__new__(ProducerRecord)
    record.__setstate__([ProducerId("p"), "t", 3])  # pickled before pins
    assert record == ProducerRecord(ProducerId("p"), "t", 3, None)
    assert pickle.loads(pickle.dumps(record)) == record


def test_the_service_answers_the_pinned_count_and_refuses_one_above_the_active() -> None:
    limits = Limits()
    registry = registry_twin()
    with ThreadPoolExecutor(2) as executor:
        monitor = BrokerMonitor(limits.broker_dead_after_s)
        service = ManagerServices.over(
            ServiceContext(limits, registry, StubBrokers(), monitor, executor)
        )
        for b in (1, 2, 3):
            service.brokers.register_broker(
                RegisterBroker(BrokerId(b), f"http://b{b}", "h", 9000, 9099)
            )
        service.topics.create_topic(CreateTopic("t", 2, 3))
        body, created = service.clients.register_producer(RegisterProducer("t", ProducerId("p"), 2))
        assert created and body["partition_count"] == 2
        plain, _ = service.clients.register_producer(RegisterProducer("t", None))
        assert "partition_count" not in plain
        with pytest.raises(RaftQError) as info:
            service.clients.register_producer(RegisterProducer("t", ProducerId("q"), 3))
        assert info.value.code is ErrorCode.REFUSED
        service.topics.add_partition(
            TopicRef("t")
        )  # now 3 active: a replay still gets its first count
        again, created = service.clients.register_producer(
            RegisterProducer("t", ProducerId("p"), 3)
        )
        assert not created and again["partition_count"] == 2
