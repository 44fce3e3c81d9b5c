"""A retried Spark write task whose batches span partitions (issue 19, item 9): replayed,
one partition recognises its part of a batch while another has forgotten the sequence and
answers 409 SEQUENCE_OUT_OF_ORDER (it has seen later ones). Every part was stored by the
first attempt, so the task skips that batch and stores the rest, through the load balancer
(the manager's real router over stand-in brokers) and on the direct path."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from manager.broker_client import BrokerRefusalError
from manager.broker_monitor import BrokerMonitor
from manager.log_router import LogRouter
from manager.raft import registry_twin
from manager.services import ManagerServices, ServiceContext
from protocol.deadline import Deadline
from protocol.errors import RaftQError
from protocol.limits import Limits
from protocol.requests import CreateTopic, Produce, RegisterBroker, RegisterProducer
from protocol.routing import partition_for_key
from protocol.types import BrokerId, NewMessage, ProducerId
from runtime.http_client import HttpAnswer
from spark_jobs.cluster_io import write_batches
from spark_jobs.options import Endpoint
from spark_jobs.rows import TopicBatch, cut_batches
from unit_tests.manager.test_service import StubBrokers
from unit_tests.raftq.fake_service import FakeService
from unit_tests.raftq.test_direct_path import serve_map
from unit_tests.spark_jobs.test_rows_and_writes import FAST, RememberingPartition

LIMITS = Limits()
ROWS = 20
FAIL_AFTER_ROWS = 12
KEYS = {int(partition_for_key(f"k{i}", 2)): f"k{i}" for i in range(20)}
COUNTS = {"t": 2}


def attempt(fail_after: int | None) -> Iterator[TopicBatch]:
    """A task's batches of 2 messages, one for each partition; the first attempt dies."""
    messages = (("t", NewMessage(value=str(i), key=KEYS[i % 2])) for i in range(ROWS))
    for count, batch in enumerate(cut_batches(messages, 2, 1_000)):
        if fail_after is not None and count * 2 >= fail_after:
            raise RuntimeError("executor lost")
        yield batch


def partitions() -> list[RememberingPartition]:
    # Partition 1 remembers only its last batch: a replay of older ones gets 409 there.
    return [RememberingPartition(100, partition_id=0), RememberingPartition(1, partition_id=1)]


def run_task_twice(url: str, stored: list[RememberingPartition], *, direct: bool) -> int:
    """The first attempt dies part way, the retry runs to the end: batches it skipped."""
    with pytest.raises(RuntimeError, match="executor lost"):
        write_batches(
            Endpoint(url), attempt(FAIL_AFTER_ROWS), lambda _t: "spark-j-0", FAST,
            direct=direct, partition_counts=COUNTS,
        )  # fmt: skip
    summary = write_batches(
        Endpoint(url), attempt(None), lambda _t: "spark-j-0", FAST,
        direct=direct, partition_counts=COUNTS,
    )  # fmt: skip
    assert sorted(int(v) for p in stored for v in p.log) == list(range(ROWS))
    assert summary.batches_acknowledged + summary.batches_skipped == ROWS // 2
    return summary.batches_skipped


def test_a_replayed_task_on_the_direct_path_skips_batches_stored_before() -> None:
    service, brokers = FakeService(), [FakeService(), FakeService()]
    stored = partitions()
    serve_map(service, brokers)
    service.default("POST", "/producers", lambda p: (201, {"producer_id": p["producer_id"]}))
    for broker, partition in zip(brokers, stored, strict=True):
        broker.default("POST", "/logs", partition.store)
    try:
        skipped = run_task_twice(service.url, stored, direct=True)
    finally:
        for fake in (service, *brokers):
            fake.stop()
    assert skipped == FAIL_AFTER_ROWS // 2 - 1  # its last batch partition 1 still knows


class PartitionBrokers(StubBrokers):
    """The manager's broker client, answered by the partitions themselves."""

    def __init__(self, stored: list[RememberingPartition]) -> None:
        super().__init__()
        self.stored = stored

    def produce(
        self, address: str, body: dict[str, object], deadline: Deadline | None = None
    ) -> HttpAnswer:
        partition_id = body["partition_id"]
        assert isinstance(partition_id, int)
        status, answer = self.stored[partition_id].store(body)
        return HttpAnswer(status, answer, {})


def router_as_load_balancer(
    service: FakeService, stored: list[RememberingPartition]
) -> ThreadPoolExecutor:
    """``service`` answers ``/producers`` and ``/logs`` with the manager's real router."""
    executor = ThreadPoolExecutor(2)
    registry, brokers = registry_twin(), PartitionBrokers(stored)
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    manager = ManagerServices.over(ServiceContext(LIMITS, registry, brokers, monitor, executor))
    router = LogRouter(registry, brokers, monitor, executor, poll_period_s=0.01)
    for broker_id in (1, 2, 3):
        manager.brokers.register_broker(
            RegisterBroker(BrokerId(broker_id), f"http://b{broker_id}", "h", 9000, 9099)
        )
    manager.topics.create_topic(CreateTopic("t", 2, 3))

    def register(params: dict[str, object]) -> tuple[int, object]:
        count = params.get("partition_count")
        request = RegisterProducer(
            "t", ProducerId(str(params["producer_id"])), count if isinstance(count, int) else None
        )
        body, created = manager.clients.register_producer(request)
        return (201 if created else 200), body

    def produce(params: dict[str, object]) -> tuple[int, object]:
        try:
            return 201, router.produce(Produce.parse(params, LIMITS))
        except RaftQError as exc:
            return exc.status, exc.to_json()
        except BrokerRefusalError as exc:
            return exc.answer.status, exc.answer.body

    service.default("POST", "/producers", register)
    service.default("POST", "/logs", produce)
    return executor


def test_a_replayed_task_through_the_load_balancer_skips_batches_stored_before() -> None:
    service, stored = FakeService(), partitions()
    executor = router_as_load_balancer(service, stored)
    try:
        skipped = run_task_twice(service.url, stored, direct=False)
    finally:
        service.stop()
        executor.shutdown()
    assert skipped == FAIL_AFTER_ROWS // 2 - 1
