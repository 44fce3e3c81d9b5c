"""``AsyncProducer`` against a scripted load balancer (``direct=False``): futures, callbacks,
threads sharing one producer, order per partition, retries keeping the sequence, failures
reaching the futures, the bounded buffer, argument checks."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from raftq.async_producer import AsyncProducer
from raftq.client_limits import ClientLimits
from raftq.errors import ApiError, BufferFullError, UnavailableError
from raftq.records import PartitionOffset
from unit_tests.raftq.fake_service import FakeService, Reply

FAST = ClientLimits(
    connect_timeout_s=0.5,
    request_timeout_s=2.0,
    attempts_max=2,
    backoff_s_initial=0.001,
    backoff_s_max=0.01,
    retry_after_s_max=0.02,
    linger_ms=2.0,
)
UNAVAILABLE = Reply(503, {"error_code": 50304, "message": "timed out"})
WAIT_S = 30.0


class FakePartitions:
    """Stores each (partition, sequence) once, as the partitions do."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.logs: dict[int, list[str]] = {p: [] for p in range(count)}
        self.seen: dict[tuple[int, int], list[int]] = {}
        self.lock = threading.Lock()

    def produce(self, params: dict[str, object]) -> tuple[int, object]:
        partition, sequence, messages = (
            params["partition_id"],
            params["sequence"],
            params["messages"],
        )
        assert isinstance(partition, int) and isinstance(sequence, int)
        assert isinstance(messages, list)
        with self.lock:
            offsets = self.seen.get((partition, sequence))
            if offsets is None:
                log = self.logs[partition]
                offsets = list(range(len(log), len(log) + len(messages)))
                log.extend(str(m["message"]) for m in messages)
                self.seen[(partition, sequence)] = offsets
        answer = [{"partition_id": partition, "offset": o} for o in offsets]
        return 201, {"offsets": answer}


@pytest.fixture
def partitions(service: FakeService) -> Iterator[FakePartitions]:
    fake = FakePartitions(3)
    listed: list[dict[str, object]] = [
        {"partition_id": p, "leader": None, "replicas": []} for p in range(fake.count)
    ]
    service.default("GET", "/partitions", lambda _p: (200, {"partitions": listed}))
    service.default("POST", "/logs", fake.produce)
    yield fake


def producer(service: FakeService, **bounds: float) -> AsyncProducer:
    return AsyncProducer(service.url, "t", direct=False, limits=FAST, **bounds)  # type: ignore[arg-type]


def test_threads_share_one_producer_and_keep_the_order_per_key(
    service: FakeService, partitions: FakePartitions
) -> None:
    threads_count, per_thread = 4, 150
    futures: dict[str, list[object]] = {}
    with producer(service) as shared:

        def run(thread: int) -> None:
            key = f"k{thread}"
            futures[key] = [shared.send(f"{key}:{i}", key=key) for i in range(per_thread)]

        threads = [threading.Thread(target=run, args=(t,)) for t in range(threads_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
        shared.flush(timeout_s=WAIT_S)
        for key, sent in futures.items():
            acks = [f.result(0) for f in sent]  # type: ignore[attr-defined]
            assert len({a.partition_id for a in acks}) == 1
            assert [a.offset for a in acks] == sorted(a.offset for a in acks)
            log = partitions.logs[acks[0].partition_id]
            assert [log[a.offset] for a in acks] == [f"{key}:{i}" for i in range(per_thread)]
    stored = sum(len(log) for log in partitions.logs.values())
    assert stored == threads_count * per_thread


def test_a_callback_gets_the_acknowledgement(
    service: FakeService, partitions: FakePartitions
) -> None:
    got: list[tuple[PartitionOffset | None, BaseException | None]] = []
    done = threading.Event()

    def callback(ack: PartitionOffset | None, error: BaseException | None) -> None:
        got.append((ack, error))
        done.set()

    with producer(service) as shared:
        future = shared.send("v", key="a", callback=callback)
        assert done.wait(WAIT_S)
    assert got == [(future.result(0), None)]


def test_a_retry_keeps_the_sequence_and_partition(
    service: FakeService, partitions: FakePartitions
) -> None:
    service.script("POST", "/logs", UNAVAILABLE, UNAVAILABLE, UNAVAILABLE)
    with producer(service) as shared:
        future = shared.send("v", partition_id=2)
        assert future.result(WAIT_S) == PartitionOffset(2, 0)
    sent = service.calls("POST", "/logs")
    assert len(sent) >= 2
    assert {(c["partition_id"], c["sequence"]) for c in sent} == {(2, 0)}
    assert partitions.logs[2] == ["v"]


def test_a_refusal_fails_the_batch_futures(
    service: FakeService, partitions: FakePartitions
) -> None:
    refused = Reply(413, {"error_code": 41301, "message": "too large"})
    service.script("POST", "/logs", refused)
    with producer(service) as shared:
        first = shared.send("a", partition_id=0)
        with pytest.raises(ApiError) as raised:
            first.result(WAIT_S)
        assert raised.value.status == 413
        assert shared.send("b", partition_id=0).result(WAIT_S) == PartitionOffset(0, 0)
        assert (shared.records_acknowledged, shared.records_failed) == (1, 1)


def test_a_full_buffer_blocks_then_raises(service: FakeService, partitions: FakePartitions) -> None:
    slow = Reply(201, {"offsets": [{"partition_id": 0, "offset": 0}]}, delay_s=1.0)
    service.script("POST", "/logs", slow)
    limits_bytes = 200
    with producer(
        service,
        buffer_bytes_max=limits_bytes,
        batch_bytes_max=limits_bytes,
        max_block_ms=50,
    ) as shared:
        first = shared.send("x" * 100, partition_id=0)
        with pytest.raises(BufferFullError, match="max_block_ms"):
            shared.send("y" * 100, partition_id=0)
        with pytest.raises(BufferFullError, match="never fit"):
            shared.send("z" * 300, partition_id=0)
        assert first.result(WAIT_S) == PartitionOffset(0, 0)
        assert shared.send("y" * 100, partition_id=0).result(WAIT_S).partition_id == 0


@pytest.mark.parametrize(
    "bounds",
    [{"linger_ms": -1}, {"buffer_bytes_max": 0}, {"batch_messages_max": 0}, {"max_block_ms": -5}],
)
def test_invalid_bounds_are_refused(service: FakeService, bounds: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        producer(service, **bounds)


def test_send_after_close_is_refused(service: FakeService, partitions: FakePartitions) -> None:
    shared = producer(service)
    shared.close()
    with pytest.raises(RuntimeError):
        shared.send("v")


def test_a_dying_sender_fails_every_future(
    service: FakeService, partitions: FakePartitions, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = producer(service, linger_ms=60_000)

    def broken(_batches: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(shared._producer, "send_partition_batches", broken)
    futures = [shared.send("a", partition_id=0), shared.send("b", partition_id=0)]
    shared.flush(timeout_s=WAIT_S)  # sends the batch: the sender dies, the flush returns
    for future in futures:
        with pytest.raises(UnavailableError, match="sender thread stopped"):
            future.result(WAIT_S)
    with pytest.raises(RuntimeError, match="after close"):
        shared.send("c")
    shared.close(timeout_s=WAIT_S)


def test_a_flush_that_cannot_finish_in_time_raises(
    service: FakeService, partitions: FakePartitions
) -> None:
    slow = Reply(201, {"offsets": [{"partition_id": 0, "offset": 0}]}, delay_s=1.0)
    service.script("POST", "/logs", slow)
    with producer(service) as shared:
        future = shared.send("v", partition_id=0)
        with pytest.raises(TimeoutError):
            shared.flush(timeout_s=0.05)
        shared.flush(timeout_s=WAIT_S)
        assert future.result(0) == PartitionOffset(0, 0)


def test_a_partition_outside_the_topic_is_refused(
    service: FakeService, partitions: FakePartitions
) -> None:
    with producer(service) as shared, pytest.raises(ValueError, match="partition_id 3"):
        shared.send("v", partition_id=3)


@pytest.mark.parametrize(
    ("value", "key", "headers"),
    [(b"bytes", None, None), ("v", 7, None), ("v", None, {"n": 1})],
)
def test_values_keys_and_headers_of_the_wrong_type_are_refused(
    service: FakeService, partitions: FakePartitions, value: object, key: object, headers: object
) -> None:
    with producer(service) as shared, pytest.raises(TypeError):
        shared.send(value, key=key, headers=headers)  # type: ignore[arg-type]
