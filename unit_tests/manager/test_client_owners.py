"""A producer or consumer id belongs to the key that registered it (issue 23, hole 4):
in the registry (claims, refusals, snapshots and journals from before owners), at the
service (another key's registration refused before proposing), and in the id rule."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest

from manager.broker_monitor import BrokerMonitor
from manager.raft import registry_twin
from manager.registry.clients import ConsumerRecord
from manager.registry.commands import RegisterConsumer as RegisterConsumerCommand
from manager.registry.commands import from_wire, to_wire
from manager.registry.outcome import Outcome
from manager.services import ManagerServices, ServiceContext
from protocol.access import NODE, Grant, Role, require_owner
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import (
    CreateTopic,
    RegisterBroker,
    RegisterConsumer,
    RegisterProducer,
    VerifyClient,
)
from protocol.types import BrokerId, ConsumerId, PartitionId, ProducerId
from unit_tests.manager.in_memory_app import applied_names
from unit_tests.manager.test_client_leases import T0_MS, _state
from unit_tests.manager.test_service import StubBrokers

ALICE = Grant("a" * 12, Role.CONSUMER, ("t",))
MALLORY = Grant("b" * 12, Role.CONSUMER, ("t",))
ADMIN = Grant("c" * 12, Role.ADMIN)


def test_the_registry_records_claims_and_refuses_owners() -> None:
    state = _state()
    register = state.register_consumer
    assert register("c", "t", None, 10, T0_MS, 10**9, ALICE.key_id) is Outcome.CREATED
    assert register("c", "t", None, 10, T0_MS, 10**9, ALICE.key_id) is Outcome.UNCHANGED
    assert register("c", "t", None, 10, T0_MS, 10**9, MALLORY.key_id) is Outcome.EXISTS
    assert register("c", "t", None, 10, T0_MS, 10**9, None) is Outcome.UNCHANGED  # a node
    record = state.clients.consumer("c")
    assert record is not None and record.owner == ALICE.key_id
    # One without an owner (a node's, or from before owners) is claimed by the next key.
    assert register("old", "t", None, 10, T0_MS, 10**9) is Outcome.CREATED
    assert register("old", "t", None, 10, T0_MS, 10**9, MALLORY.key_id) is Outcome.UPDATED
    assert register("old", "t", None, 10, T0_MS, 10**9, ALICE.key_id) is Outcome.EXISTS
    produce = state.register_producer
    assert produce("p", "t", 10, T0_MS, 10**9, None, ALICE.key_id) is Outcome.CREATED
    assert produce("p", "t", 10, T0_MS, 10**9, 1, MALLORY.key_id) is Outcome.EXISTS
    assert produce("p", "t", 10, T0_MS, 10**9, 1, ALICE.key_id) is Outcome.UPDATED  # pinned
    producer = state.clients.producer("p")
    assert producer is not None and (producer.owner, producer.partition_count) == ("a" * 12, 1)


def test_snapshots_and_commands_from_before_owners_still_load() -> None:
    record = ConsumerRecord(ConsumerId("c"), "t", PartitionId(0), 3)
    old_state = record.__getstate__()[:4]  # what a snapshot of the old four fields holds
    restored = ConsumerRecord.__new__(ConsumerRecord)
    restored.__setstate__(old_state)
    assert restored == record and restored.owner is None
    assert pickle.loads(pickle.dumps(record)) == record
    # A command without an owner keeps its old wire form: an older manager applies it.
    command = RegisterConsumerCommand("c", "t", None, 10, T0_MS, 1000)
    assert to_wire(command) == ("register_consumer", "c", "t", None, 10, T0_MS, 1000)
    owned = RegisterConsumerCommand("c", "t", None, 10, T0_MS, 1000, ALICE.key_id)
    assert from_wire(to_wire(owned)) == owned and from_wire(to_wire(command)) == command


def test_the_id_rule() -> None:
    require_owner(ALICE, "consumer 'c'", ALICE.key_id)
    require_owner(MALLORY, "consumer 'c'", None)  # no owner recorded: as before
    require_owner(ADMIN, "consumer 'c'", ALICE.key_id)
    require_owner(NODE, "consumer 'c'", ALICE.key_id)
    with pytest.raises(RaftQError) as refused:
        require_owner(MALLORY, "consumer 'c'", ALICE.key_id)
    assert refused.value.code is ErrorCode.FORBIDDEN


def test_another_keys_registration_is_refused_before_anything_is_proposed() -> None:
    registry = registry_twin()
    with ThreadPoolExecutor(2) as executor:
        service = ManagerServices.over(
            ServiceContext(
                Limits(), registry, StubBrokers(), BrokerMonitor(3.0), executor, lambda: T0_MS
            )
        )
        for b in (1, 2, 3):
            service.brokers.register_broker(
                RegisterBroker(BrokerId(b), f"http://b{b}", "h", 9000, 9099)
            )
        service.topics.create_topic(CreateTopic("t", 1, 3))
        service.clients.register_consumer(RegisterConsumer("t", None, ConsumerId("c")), ALICE)
        service.clients.register_producer(RegisterProducer("t", ProducerId("p")), ALICE)
        before = registry.read(pickle.dumps), applied_names(registry)
        for refuse in (
            lambda: service.clients.register_consumer(
                RegisterConsumer("t", None, ConsumerId("c")), MALLORY
            ),
            lambda: service.clients.register_producer(
                RegisterProducer("t", ProducerId("p")), MALLORY
            ),
        ):
            with pytest.raises(RaftQError) as refused:
                refuse()
            assert refused.value.code is ErrorCode.ID_TAKEN
        assert (registry.read(pickle.dumps), applied_names(registry)) == before
        service.clients.register_consumer(RegisterConsumer("t", None, ConsumerId("c")), ADMIN)
        verified = service.clients.verify_client(VerifyClient("consumer", "c"))
        assert verified["owner"] == ALICE.key_id  # the admin renewed it, claimed nothing
