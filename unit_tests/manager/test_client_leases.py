"""Client registrations are leases: renewed by registering again, forgotten when not renewed
for ``client_idle_expiry_s``, measured in the times the commands carry; dumps and journals
from before leases still load. Pure state, then the service over the in-memory twin."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from manager.broker_monitor import BrokerMonitor
from manager.log_router import LogRouter
from manager.raft import REGISTRY_METHODS, registry_twin
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.services import ManagerServices, ServiceContext
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import CreateTopic, Pop, RegisterBroker, RegisterConsumer, RegisterProducer
from protocol.types import BrokerId, ConsumerId, PartitionId, ProducerId, RequestId
from runtime.replication.machine import method_numbers
from unit_tests.manager.in_memory_app import applied_names
from unit_tests.manager.test_service import StubBrokers

EXPIRY_MS = 1_000
T0_MS = 1_700_000_000_000


def _state() -> ManagerState:
    state = ManagerState()
    for broker_id in (1, 2, 3):
        state.register_broker(broker_id, f"http://b{broker_id}", "h", 9000, 9099, 10)
    assignment = tuple((BrokerId(b), f"h:{9000 + b}") for b in (1, 2, 3))
    assert state.begin_topic("t", (assignment,), 10, 8, 3) is Outcome.CREATED
    return state


def test_a_lease_not_renewed_for_longer_than_the_expiry_is_forgotten() -> None:
    state = _state()
    assert state.register_producer("p", "t", 10, T0_MS, EXPIRY_MS) is Outcome.CREATED
    assert state.register_consumer("c", "t", None, 10, T0_MS, EXPIRY_MS) is Outcome.CREATED
    renewed = state.register_consumer("c", "t", None, 10, T0_MS + EXPIRY_MS, EXPIRY_MS)
    assert renewed is Outcome.UNCHANGED
    assert state.expire_idle_clients(T0_MS + EXPIRY_MS, EXPIRY_MS, 100) is Outcome.UNCHANGED
    assert state.expire_idle_clients(T0_MS + EXPIRY_MS + 1, EXPIRY_MS, 100) is Outcome.UPDATED
    assert state.clients.producer("p") is None and state.clients.consumer("c") is not None
    assert state.clients.oldest_seen_ms() == T0_MS + EXPIRY_MS
    # Back after expiry: it registers again under its id, as a new client.
    assert state.register_producer("p", "t", 10, T0_MS + EXPIRY_MS + 2, EXPIRY_MS) is (
        Outcome.CREATED
    )


def test_a_sweep_is_bounded_and_registrations_forget_a_few_on_their_way() -> None:
    state = _state()
    for i in range(10):
        state.register_consumer(f"c{i}", "t", None, 10, T0_MS, EXPIRY_MS)
    later_ms = T0_MS + EXPIRY_MS + 1
    # Full (10 of 10), but a registration first forgets up to two idle ones.
    assert state.register_consumer("new", "t", None, 10, later_ms, EXPIRY_MS) is Outcome.CREATED
    assert len(state.clients) == 9
    assert state.expire_idle_clients(later_ms, EXPIRY_MS, 3) is Outcome.UPDATED
    assert len(state.clients) == 6
    state.expire_idle_clients(later_ms, EXPIRY_MS, 100)
    assert len(state.clients) == 1 and state.clients.consumer("new") is not None


def test_registry_time_never_goes_back_and_bad_times_change_nothing() -> None:
    state = _state()
    state.register_consumer("c", "t", None, 10, T0_MS + 5 * EXPIRY_MS, EXPIRY_MS)
    state.register_consumer("d", "t", None, 10, T0_MS, EXPIRY_MS)  # a slower clock
    assert state.clients.oldest_seen_ms() == T0_MS + 5 * EXPIRY_MS
    revision = state.revision
    assert state.expire_idle_clients(0, EXPIRY_MS, 10) is Outcome.INVALID
    assert state.expire_idle_clients(T0_MS, EXPIRY_MS, True) is Outcome.INVALID
    assert state.register_producer("p", "t", 10, T0_MS, -1) is Outcome.INVALID
    assert state.revision == revision and len(state.clients) == 2


def test_two_managers_applying_the_same_commands_agree() -> None:
    one, two = _state(), _state()
    for state in (one, two):
        for i in range(50):
            at_ms = T0_MS + 37 * i
            state.register_consumer(f"c{i % 7}", "t", None, 100, at_ms, EXPIRY_MS)
            state.register_producer(f"p{i}", "t", 100, at_ms, EXPIRY_MS)
            state.expire_idle_clients(at_ms + 11, EXPIRY_MS, 3)
    assert pickle.dumps(one) == pickle.dumps(two)
    assert len(one.clients) < 50


def test_a_dump_and_commands_from_before_leases_still_load() -> None:
    state = _state()
    assert state.register_producer("old-p", "t", 10) is Outcome.CREATED  # journaled form
    assert state.register_consumer("old-c", "t", None, 10) is Outcome.CREATED
    del state.clients.__dict__["_last_seen_ms"], state.clients.__dict__["_clock_ms"]
    restored: ManagerState = pickle.loads(pickle.dumps(state))
    # The first timed command starts their lease; they are not idle since the epoch.
    restored.register_producer("new", "t", 10, T0_MS, EXPIRY_MS)
    assert len(restored.clients) == 3
    restored.expire_idle_clients(T0_MS + EXPIRY_MS + 1, EXPIRY_MS, 10)
    assert len(restored.clients) == 0


def test_new_commands_renumber_none_of_the_old_ones() -> None:
    """pysyncobj numbers replicated methods by sorted name: old journals name the old ones
    by these numbers."""
    assert method_numbers(REGISTRY_METHODS) == {
        "begin_partition": 0,
        "begin_topic": 1,
        "finish_partitions": 2,
        "register_broker": 3,
        "register_consumer": 4,
        "register_producer": 5,
        "set_broker_alive": 6,
        "sweep_idle_clients": 7,
        "upsert_consumer": 8,
        "upsert_producer": 9,
        "write_command": 10,
    }


class _Clock:
    def __init__(self) -> None:
        self.now_ms = T0_MS

    def __call__(self) -> int:
        return self.now_ms


def test_the_service_renews_expires_and_tells_clients_the_lease() -> None:
    limits = Limits(client_idle_expiry_s=EXPIRY_MS / 1000)
    registry, clock = registry_twin(), _Clock()
    brokers = StubBrokers()
    with ThreadPoolExecutor(2) as executor:
        monitor = BrokerMonitor(limits.broker_dead_after_s)
        service = ManagerServices.over(
            ServiceContext(limits, registry, brokers, monitor, executor, clock)
        )
        router = LogRouter(registry, brokers, monitor, executor, poll_period_s=0.01)
        for b in (1, 2, 3):
            service.brokers.register_broker(
                RegisterBroker(BrokerId(b), f"http://b{b}", "h", 9000, 9099)
            )
        service.topics.create_topic(CreateTopic("t", 1, 3))
        consumer = service.clients.register_consumer(RegisterConsumer("t", None))
        consumer_id = ConsumerId(str(consumer["consumer_id"]))
        assert consumer["idle_expiry_s"] == 1.0
        service.clients.register_producer(RegisterProducer("t", ProducerId("p")))

        clock.now_ms += EXPIRY_MS  # not yet idle for longer: nothing proposed
        before = len(applied_names(registry))
        assert service.clients.expire_idle_clients() == 2 and len(applied_names(registry)) == before
        renewed = service.clients.register_consumer(RegisterConsumer("t", None, consumer_id))
        assert renewed["consumer_id"] == consumer_id

        clock.now_ms += 1
        assert service.clients.expire_idle_clients() == 1
        assert applied_names(registry)[-1] == "expire_idle_clients"
        assert router.pop(Pop(consumer_id, 1, RequestId("r1"))) == {
            "messages": [{"partition_id": 0, "offset": 0, "message": "m"}]
        }
        clock.now_ms += EXPIRY_MS + 1
        assert service.clients.expire_idle_clients() == 0
        with pytest.raises(RaftQError) as info:
            router.pop(Pop(consumer_id, 1, RequestId("r2")))
        assert info.value.code is ErrorCode.UNKNOWN_CONSUMER


def test_a_registration_refused_for_an_id_of_another_topic_changes_nothing() -> None:
    """409 proves nothing was done: a client id still held under another topic (or
    partition) is refused before anything is proposed. Apply refuses it too, but only after
    moving registry time and forgetting idle clients. (Found by the API fuzz test.)"""
    now_ms = [T0_MS]
    registry = registry_twin()
    with ThreadPoolExecutor(2) as executor:
        service = ManagerServices.over(
            ServiceContext(
                Limits(client_idle_expiry_s=EXPIRY_MS / 1000),
                registry,
                StubBrokers(),
                BrokerMonitor(3.0),
                executor,
                clock_ms=lambda: now_ms[0],
            )
        )
        for broker_id in (1, 2, 3):
            broker = RegisterBroker(BrokerId(broker_id), f"http://b{broker_id}", "h", 9000, 9099)
            service.brokers.register_broker(broker)
        service.topics.create_topic(CreateTopic("t", 2, 3))
        service.topics.create_topic(CreateTopic("u", 1, 3))
        service.clients.register_consumer(RegisterConsumer("t", None, ConsumerId("idle")))
        now_ms[0] += EXPIRY_MS
        service.clients.register_producer(RegisterProducer("t", ProducerId("p")))
        service.clients.register_consumer(RegisterConsumer("t", None, ConsumerId("c")))
        now_ms[0] += 1  # "idle" has run out, "p" and "c" hold their ids
        before = registry.read(pickle.dumps), list(applied_names(registry))
        refusals: list[Callable[[], object]] = [
            lambda: service.clients.register_producer(RegisterProducer("u", ProducerId("p"))),
            lambda: service.clients.register_consumer(RegisterConsumer("u", None, ConsumerId("c"))),
            lambda: service.clients.register_consumer(
                RegisterConsumer("t", PartitionId(1), ConsumerId("c"))
            ),
        ]
        for refuse in refusals:
            with pytest.raises(RaftQError) as caught:
                refuse()
            assert caught.value.code is ErrorCode.ID_TAKEN
            assert (registry.read(pickle.dumps), applied_names(registry)) == before
        # An id whose lease ran out is free: apply forgets it and registers it anew.
        now_ms[0] += 2 * EXPIRY_MS
        assert service.clients.register_producer(RegisterProducer("u", ProducerId("p")))[1] is True
