"""ManagerServices and LogRouter over the in-memory registry twin and a stub broker client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from manager.broker_client import BrokerClient, BrokerRefusalError
from manager.broker_monitor import BrokerMonitor
from manager.log_router import LogRouter
from manager.raft import RegistryTwin, registry_twin
from manager.registry.commands import DrainBroker, SetBrokerAlive
from manager.registry.topics import PartitionState
from manager.services import ManagerServices, ServiceContext
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import (
    CreateTopic,
    Pop,
    Produce,
    RegisterBroker,
    RegisterConsumer,
    RegisterProducer,
    TopicRef,
)
from protocol.routing import partition_for_key
from protocol.types import BrokerId, ProducerId, ReplicaSpec
from runtime.http_client import HttpAnswer, NoAnswerError, PeerLink
from unit_tests.manager.in_memory_app import applied_names

LIMITS = Limits()


class StubBrokers(BrokerClient):
    def __init__(self) -> None:
        super().__init__(LIMITS, PeerLink(None, None))
        self.down: set[str] = set()
        self.hosted: list[tuple[str, ReplicaSpec]] = []
        self.answers: dict[str, HttpAnswer] = {}
        self.produced: list[tuple[str, dict[str, object]]] = []

    def host_replica(self, address: str, spec: ReplicaSpec) -> None:
        if address in self.down:
            raise NoAnswerError(f"{address} down", refused=True)
        self.hosted.append((address, spec))

    def produce(
        self, address: str, body: dict[str, object], deadline: Deadline | None = None
    ) -> HttpAnswer:
        if address in self.down:
            raise NoAnswerError(f"{address} down", refused=True)
        self.produced.append((address, body))
        messages = body["messages"]
        assert isinstance(messages, list)
        ack = {"partition_id": body["partition_id"], "durability": body["durability"]}
        default = HttpAnswer(
            201,
            {
                "partition_id": body["partition_id"],
                "offsets": list(range(len(messages))),
                "ack": ack,
            },
            {},
        )
        return self.answers.get(address, default)

    def read(
        self, address: str, params: dict[str, str], deadline: Deadline | None = None
    ) -> HttpAnswer:
        message = {"partition_id": int(params["partition_id"]), "offset": 0, "message": "m"}
        return HttpAnswer(200, {"messages": [message]}, {})


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


@pytest.fixture
def setup(
    executor: ThreadPoolExecutor,
) -> tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter]:
    registry = registry_twin()
    brokers = StubBrokers()
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    service = ManagerServices.over(ServiceContext(LIMITS, registry, brokers, monitor, executor))
    router = LogRouter(registry, brokers, monitor, executor, poll_period_s=0.01)
    for broker_id in (1, 2, 3):
        request = RegisterBroker(BrokerId(broker_id), f"http://b{broker_id}", "h", 9000, 9099)
        assert service.brokers.register_broker(request) == ({"broker_id": broker_id}, True)
    return registry, brokers, service, router


def test_register_broker_again_proposes_nothing(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    registry, _, service, _ = setup
    before = list(applied_names(registry))
    request = RegisterBroker(BrokerId(1), "http://b1", "h", 9000, 9099)
    assert service.brokers.register_broker(request) == ({"broker_id": 1}, False)
    assert applied_names(registry) == before


def test_a_second_broker_with_a_live_brokers_id_is_refused(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    registry, _, service, _ = setup
    before = list(applied_names(registry))
    elsewhere = RegisterBroker(BrokerId(2), "http://b9", "h9", 9000, 9099)
    with pytest.raises(RaftQError) as refused:
        service.brokers.register_broker(elsewhere)
    assert refused.value.code is ErrorCode.ID_TAKEN
    assert "broker id 2 is registered at http://b2 and alive" in refused.value.message
    assert applied_names(registry) == before  # nothing stored changed
    # Once the managers hold the old one dead, the id may move (a broker that moved host).
    registry.propose(SetBrokerAlive(BrokerId(2), False))
    assert service.brokers.register_broker(elsewhere) == ({"broker_id": 2}, True)


def test_create_topic_records_then_hosts_then_finishes(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    registry, brokers, service, _ = setup
    body = service.topics.create_topic(CreateTopic("t", 2, 3))
    assert applied_names(registry)[-2:] == ["begin_topic", "finish_partitions"]
    assert len(brokers.hosted) == 6
    partitions = body["partitions"]
    assert isinstance(partitions, list) and len(partitions) == 2
    assert partitions[0] == {"partition_id": 0, "replicas": [1, 2, 3], "leader": None}
    with pytest.raises(RaftQError) as caught:
        service.topics.create_topic(CreateTopic("t", 1, 3))
    assert caught.value.code is ErrorCode.TOPIC_EXISTS


def test_failed_broker_call_leaves_creating_and_is_resumed(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    registry, brokers, service, _ = setup
    brokers.down.add("http://b2")
    with pytest.raises(RaftQError) as caught:
        service.topics.create_topic(CreateTopic("t", 1, 3))
    assert caught.value.code is ErrorCode.UNAVAILABLE
    topic = registry.read(lambda s: s.topics.get("t"))
    assert topic is not None and topic.partitions[0].state is PartitionState.CREATING
    service.topics.resume_pending()  # still down: stays CREATING, does not raise
    brokers.down.clear()
    service.topics.resume_pending()
    topic = registry.read(lambda s: s.topics.get("t"))
    assert topic is not None and topic.is_active


def test_a_leadership_lost_after_the_topic_was_recorded_is_an_unknown_outcome(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The placement is committed, then this manager loses leadership before it records the
    partitions active: NOT_LEADER would tell the client (and the load balancer, which
    repeats it at once) that nothing was done, and the repeat would get 409 (seen in the
    power-loss run). The answer is UNAVAILABLE, and the topic finishes in the background."""
    registry, _, service, _ = setup
    propose = registry.propose

    def leadership_lost_at_finish(command: object) -> object:
        if type(command).__name__ == "FinishPartitions":
            raise RaftQError(ErrorCode.NOT_LEADER, "no longer the leader")
        return propose(command)  # type: ignore[arg-type]

    monkeypatch.setattr(registry, "propose", leadership_lost_at_finish)
    with pytest.raises(RaftQError) as caught:
        service.topics.create_topic(CreateTopic("t", 1, 3))
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert not caught.value.code.proves_nothing_done
    monkeypatch.setattr(registry, "propose", propose)
    service.topics.resume_pending()
    topic = registry.read(lambda s: s.topics.get("t"))
    assert topic is not None and topic.is_active


def test_not_enough_brokers(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    registry, _, service, _ = setup
    registry.propose(SetBrokerAlive(3, False))
    with pytest.raises(RaftQError) as caught:
        service.topics.create_topic(CreateTopic("t", 1, 3))
    assert caught.value.code is ErrorCode.NOT_ENOUGH_BROKERS


def test_add_partition(setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter]) -> None:
    _, _, service, _ = setup
    service.topics.create_topic(CreateTopic("t", 1, 3))
    added = service.topics.add_partition(TopicRef("t"))
    assert added["partition_id"] == 1
    listed = service.topics.partitions(TopicRef("t"))["partitions"]
    assert isinstance(listed, list) and len(listed) == 2


def _produce(producer_id: str, params: dict[str, object]) -> Produce:
    return Produce.parse({"topic": "t", "producer_id": producer_id, **params}, LIMITS)


def test_produce_routes_batches_and_keeps_request_order(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    _, brokers, service, router = setup
    service.topics.create_topic(CreateTopic("t", 4, 3))
    producer = service.clients.register_producer(RegisterProducer("t", None))[0]["producer_id"]
    assert isinstance(producer, str)
    batch = [{"message": f"m{i}", "key": f"k{i}"} for i in range(10)]
    body = router.produce(_produce(producer, {"messages": batch, "sequence": 3}))
    offsets = body["offsets"]
    assert isinstance(offsets, list) and len(offsets) == 10
    assert all(b["sequence"] == 3 and b["producer_id"] == producer for _, b in brokers.produced)
    one = router.produce(_produce(producer, {"message": "x", "partition_id": 1}))
    assert one == {
        "partition_id": 1,
        "offset": 0,
        "ack": {"partition_id": 1, "durability": "fsync"},
    }
    acks = body["acks"]
    assert isinstance(acks, list) and len(acks) == len(
        {b["partition_id"] for _, b in brokers.produced[:-1]}
    )
    with pytest.raises(RaftQError) as caught:
        router.produce(_produce(producer, {"message": "x", "partition_id": 9}))
    assert caught.value.code is ErrorCode.UNKNOWN_PARTITION
    with pytest.raises(RaftQError) as caught:
        router.produce(_produce("nobody", {"message": "x"}))
    assert caught.value.code is ErrorCode.UNKNOWN_PRODUCER


def test_produce_tries_next_replica_only_when_safe(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    _, brokers, service, router = setup
    service.topics.create_topic(CreateTopic("t", 1, 3))
    producer = str(service.clients.register_producer(RegisterProducer("t", None))[0]["producer_id"])
    brokers.answers["http://b1"] = HttpAnswer(
        503, {"error_code": ErrorCode.NOT_LEADER.value, "message": "x"}, {}
    )
    answer = router.produce(_produce(producer, {"message": "x", "durability": "replicated"}))
    assert (answer["partition_id"], answer["offset"]) == (0, 0)
    assert answer["ack"] == {"partition_id": 0, "durability": "replicated"}
    assert [a for a, _ in brokers.produced] == ["http://b1", "http://b2"]
    brokers.answers["http://b1"] = HttpAnswer(
        429, {"error_code": ErrorCode.BACKPRESSURE.value, "message": "full"}, {"Retry-After": "1"}
    )
    with pytest.raises(BrokerRefusalError) as refused:
        router.produce(_produce(producer, {"message": "x"}))
    assert refused.value.answer.status == 429


def test_pop_collects_across_partitions(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    _, _, service, router = setup
    service.topics.create_topic(CreateTopic("t", 3, 3))
    consumer = str(service.clients.register_consumer(RegisterConsumer("t", None))["consumer_id"])
    body = router.pop(Pop.parse({"consumer_id": consumer, "max_messages": 2}, LIMITS))
    messages = body["messages"]
    assert isinstance(messages, list) and len(messages) == 2
    with pytest.raises(RaftQError) as caught:
        router.pop(Pop.parse({"consumer_id": "nobody"}, LIMITS))
    assert caught.value.code is ErrorCode.UNKNOWN_CONSUMER


def test_a_client_chosen_producer_id_registers_idempotently(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    _, _, service, _ = setup
    service.topics.create_topic(CreateTopic("t", 1, 3))
    service.topics.create_topic(CreateTopic("u", 1, 3))
    body, created = service.clients.register_producer(
        RegisterProducer("t", ProducerId("job-7-task-2"))
    )
    expiry_s = LIMITS.client_idle_expiry_s
    assert body == {"producer_id": "job-7-task-2", "idle_expiry_s": expiry_s} and created
    assert (
        service.clients.register_producer(RegisterProducer("t", ProducerId("job-7-task-2")))[1]
        is False
    )
    with pytest.raises(RaftQError) as info:
        service.clients.register_producer(RegisterProducer("u", ProducerId("job-7-task-2")))
    assert info.value.code is ErrorCode.ID_TAKEN  # not TOPIC_EXISTS: the id is what clashes


def test_a_batch_stored_in_some_partitions_only_is_never_reported_as_not_done(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    _, brokers, service, router = setup
    body = service.topics.create_topic(CreateTopic("t", 2, 3))
    partitions = body["partitions"]
    assert isinstance(partitions, list)
    first_of_p1 = partitions[1]["replicas"][0]
    producer = str(service.clients.register_producer(RegisterProducer("t", None))[0]["producer_id"])
    keys = {int(partition_for_key(f"k{i}", 2)): f"k{i}" for i in range(20)}
    batch = [{"message": "a", "key": keys[0]}, {"message": "b", "key": keys[1]}]
    # Partition 1's brokers all push back (429: "nothing done" there); partition 0 stores.
    for broker_id in (1, 2, 3):
        if broker_id != partitions[0]["replicas"][0]:
            brokers.answers[f"http://b{broker_id}"] = HttpAnswer(
                429, {"error_code": ErrorCode.BACKPRESSURE.value, "message": "full"}, {}
            )
    assert first_of_p1 != partitions[0]["replicas"][0]
    with pytest.raises(RaftQError) as caught:
        router.produce(_produce(producer, {"messages": batch, "sequence": 1}))
    assert caught.value.code is ErrorCode.PARTIALLY_WRITTEN
    assert caught.value.status == 503


def test_a_request_routed_for_fewer_partitions_keeps_its_routing_after_one_is_added(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    _, brokers, service, router = setup
    service.topics.create_topic(CreateTopic("t", 2, 3))
    producer = str(service.clients.register_producer(RegisterProducer("t", None))[0]["producer_id"])
    batch = [{"message": f"m{i}", "key": f"k{i}"} for i in range(40)]
    request = {"messages": batch, "sequence": 1, "partition_count": 2}
    first = router.produce(_produce(producer, request))
    service.topics.add_partition(TopicRef("t"))
    again = router.produce(_produce(producer, request))
    assert again == first
    assert {b["partition_id"] for _, b in brokers.produced} == {0, 1}
    unpinned = router.produce(_produce(producer, {"messages": batch, "sequence": 2}))
    offsets = unpinned["offsets"]
    assert isinstance(offsets, list)
    assert {o["partition_id"] for o in offsets} == {0, 1, 2}
    with pytest.raises(RaftQError) as caught:
        router.produce(_produce(producer, {**request, "partition_count": 4}))
    assert caught.value.code is ErrorCode.REFUSED


def test_a_pop_routed_for_fewer_partitions_visits_only_those(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    _, _, service, router = setup
    service.topics.create_topic(CreateTopic("t", 2, 3))
    consumer = str(service.clients.register_consumer(RegisterConsumer("t", None))["consumer_id"])
    service.topics.add_partition(TopicRef("t"))
    params = {"consumer_id": consumer, "max_messages": 10, "request_id": "r", "partition_count": 2}
    messages = router.pop(Pop.parse(params, LIMITS))["messages"]
    assert isinstance(messages, list)
    assert sorted(m["partition_id"] for m in messages) == [0, 1]
    with pytest.raises(RaftQError) as caught:
        router.pop(Pop.parse({**params, "partition_count": 3 + 1}, LIMITS))
    assert caught.value.code is ErrorCode.REFUSED


class LagBrokers(StubBrokers):
    """Answers ``GET /lag`` for the partitions each address leads now."""

    def __init__(self) -> None:
        super().__init__()
        self.leads: dict[str, set[int]] = {}

    def consumer_lag(
        self, address: str, topic: str
    ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        led = sorted(self.leads.get(address, set()))
        figures: dict[str, object] = {"topic": topic, "offset": 0, "end_offset": 5}
        consumers = [{**figures, "partition_id": p, "consumer_id": "c"} for p in led]
        partitions = [{**figures, "partition_id": p, "consumer_id": None} for p in led]
        return consumers, partitions


def test_lag_lists_a_partition_whose_leader_moved_since_the_last_poll_as_unavailable(
    executor: ThreadPoolExecutor,
) -> None:
    registry, brokers = registry_twin(), LagBrokers()
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    service = ManagerServices.over(ServiceContext(LIMITS, registry, brokers, monitor, executor))
    for broker_id in (1, 2, 3):
        request = RegisterBroker(BrokerId(broker_id), f"http://b{broker_id}", "h", 9000, 9099)
        service.brokers.register_broker(request)
    service.topics.create_topic(CreateTopic("t", 2, 3))
    # The manager's last poll: broker 1 leads both partitions.
    led = [{"topic": "t", "partition_id": p, "is_leader": True} for p in (0, 1)]
    monitor.record_answer(BrokerId(1), led, now_s=0.0)
    brokers.leads = {"http://b1": {0}, "http://b2": {1}}  # partition 1's leader moved since

    answer = service.lag.consumer_lag(TopicRef("t"))

    assert answer["unavailable_partitions"] == [1]
    consumers = answer["consumers"]
    assert isinstance(consumers, list)
    assert [(c["consumer_id"], c["partition_id"]) for c in consumers] == [("c", 0)]


def test_a_creation_placed_on_a_gone_broker_is_rolled_back(executor: ThreadPoolExecutor) -> None:
    """Broker 2 died after the topic's placement was recorded: while it may come back the
    creation is retried; once it has been silent for ``broker_replace_after_s`` the
    creation is rolled back (not retried forever), and the name can be created anew."""
    registry, brokers = registry_twin(), StubBrokers()
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    service = ManagerServices.over(ServiceContext(LIMITS, registry, brokers, monitor, executor))
    for broker_id in (1, 2, 3, 4):
        request = RegisterBroker(BrokerId(broker_id), f"http://b{broker_id}", "h", 9000, 9099)
        service.brokers.register_broker(request)
    brokers.down.add("http://b2")
    with pytest.raises(RaftQError):
        service.topics.create_topic(CreateTopic("t", 1, 3))
    placed = registry.read(lambda s: s.topics.get("t"))
    assert placed is not None and 2 in [r.broker_id for r in placed.partitions[0].replicas]
    registry.propose(SetBrokerAlive(BrokerId(2), False))
    now_s = time.monotonic()
    monitor.record_answer(BrokerId(2), [], now_s - LIMITS.broker_replace_after_s / 2)
    monitor.record_silence(BrokerId(2), now_s)
    service.topics.resume_pending()  # silent for less than broker_replace_after_s: kept
    assert registry.read(lambda s: s.topics.get("t")) is not None
    monitor.record_answer(BrokerId(2), [], now_s - LIMITS.broker_replace_after_s - 1)
    monitor.record_silence(BrokerId(2), now_s)
    service.topics.resume_pending()
    assert registry.read(lambda s: s.topics.get("t")) is None
    assert applied_names(registry)[-1] == "roll_back_partitions"
    body = service.topics.create_topic(CreateTopic("t", 1, 3))  # anew, on live brokers
    assert body["partitions"][0]["replicas"] == [1, 3, 4]  # type: ignore[index]


def test_a_partition_addition_placed_on_a_draining_broker_is_rolled_back(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    registry, brokers, service, _ = setup
    service.topics.create_topic(CreateTopic("t", 1, 3))
    brokers.down.add("http://b3")
    with pytest.raises(RaftQError):
        service.topics.add_partition(TopicRef("t"))
    registry.propose(DrainBroker(BrokerId(3)))
    service.topics.resume_pending()
    topic = registry.read(lambda s: s.topics.get("t"))
    assert topic is not None and len(topic.partitions) == 1 and topic.is_active


def test_a_drain_that_could_not_finish_is_refused_and_proposes_nothing(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    registry, _, service, _ = setup
    service.topics.create_topic(CreateTopic("t", 1, 3))  # on brokers 1, 2, 3: nowhere else to go
    before = list(applied_names(registry))
    with pytest.raises(RaftQError) as nowhere:
        service.brokers.drain_broker(BrokerId(1))
    assert nowhere.value.code is ErrorCode.CANNOT_MOVE
    assert "no other live broker can take" in nowhere.value.message
    service.brokers.register_broker(RegisterBroker(BrokerId(4), "http://b4", "h", 9000, 9099))
    registry.propose(SetBrokerAlive(BrokerId(2), False))
    with pytest.raises(RaftQError) as down:
        service.brokers.drain_broker(BrokerId(1))
    assert "on broker 2, which is down" in down.value.message
    registry.propose(SetBrokerAlive(BrokerId(2), True))
    service.topics.create_topic(CreateTopic("solo", 1, 1))
    lone = registry.read(lambda s: s.topics.get("solo"))
    assert lone is not None
    holder = lone.partitions[0].replicas[0].broker_id
    with pytest.raises(RaftQError) as only:
        service.brokers.drain_broker(holder)
    assert "replication factor 1" in only.value.message
    assert not any(b.draining for b in registry.read(lambda s: s.brokers.all()))
    assert "drain_broker" not in applied_names(registry)[len(before) :]


def test_a_drain_is_cancelled_and_the_broker_takes_replicas_again(
    setup: tuple[RegistryTwin, StubBrokers, ManagerServices, LogRouter],
) -> None:
    registry, _, service, _ = setup
    service.brokers.register_broker(RegisterBroker(BrokerId(4), "http://b4", "h", 9000, 9099))
    service.topics.create_topic(CreateTopic("t", 1, 3))
    service.brokers.drain_broker(BrokerId(4))
    assert service.brokers.cancel_drain(BrokerId(4))["draining"] is False
    assert service.brokers.cancel_drain(BrokerId(4))["draining"] is False  # idempotent
    assert applied_names(registry)[-2:] == ["cancel_drain", "cancel_drain"]
    with pytest.raises(RaftQError) as unknown:
        service.brokers.cancel_drain(BrokerId(9))
    assert unknown.value.code is ErrorCode.NOT_FOUND
