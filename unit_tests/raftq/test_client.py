"""Producer, Consumer and Admin against a scripted fake of the load balancer."""

from __future__ import annotations

import socket
from contextlib import closing

import pytest

from raftq import (
    Admin,
    ApiError,
    BufferFullError,
    ClientLimits,
    Consumer,
    PartitionOffset,
    ProduceError,
    Producer,
    UnavailableError,
)
from raftq.errors import ProtocolError
from raftq.records import parse_records
from unit_tests.raftq.fake_service import FakeService, Reply

FAST = ClientLimits(
    connect_timeout_s=0.5,
    request_timeout_s=0.5,
    attempts_max=4,
    backoff_s_initial=0.001,
    backoff_s_max=0.01,
    retry_after_s_max=0.02,
)
NO_LEADER = Reply(503, {"error_code": 50301, "message": "no manager leader"}, {"Retry-After": "1"})
UNAVAILABLE = Reply(503, {"error_code": 50304, "message": "timed out"})


def offsets_for(params: dict[str, object]) -> tuple[int, object]:
    """Offsets 10*sequence, 10*sequence+1, ... on partition 0."""
    messages = params["messages"]
    sequence = params["sequence"]
    assert isinstance(messages, list) and isinstance(sequence, int)
    base = 10 * sequence
    return 201, {"offsets": [{"partition_id": 0, "offset": base + i} for i in range(len(messages))]}


def test_batches_get_increasing_sequences_and_offsets_in_order(service: FakeService) -> None:
    service.default("POST", "/logs", offsets_for)
    with Producer(service.url, "t", batch_messages_max=2, limits=FAST) as producer:
        assert producer.producer_id == "p-1"
        for value in "abcde":
            producer.send(value, key="k" if value == "a" else None)
        acked = producer.flush()
    assert acked == [PartitionOffset(0, o) for o in (0, 1, 10, 11, 20)]
    calls = service.calls("POST", "/logs")
    assert [c["sequence"] for c in calls] == [0, 1, 2]
    assert calls[0]["messages"] == [{"message": "a", "key": "k"}, {"message": "b"}]
    assert all(c["producer_id"] == "p-1" and c["topic"] == "t" for c in calls)
    assert "partition_id" not in calls[0]


def test_a_batch_is_retried_with_the_same_sequence(service: FakeService) -> None:
    too_slow = Reply(201, {"offsets": [{"partition_id": 0, "offset": 0}]}, delay_s=1.0)
    service.script("POST", "/logs", NO_LEADER, too_slow, Reply(429, {"error_code": 42901}))
    service.default("POST", "/logs", offsets_for)
    with Producer(service.url, "t", partition_id=3, limits=FAST) as producer:
        assert producer.produce_batch(["x"]) == [PartitionOffset(0, 0)]
        assert producer.produce_batch([("y", "key")]) == [PartitionOffset(0, 10)]
    sequences = [c["sequence"] for c in service.calls("POST", "/logs")]
    assert sequences == [0, 0, 0, 0, 1]
    assert all(c["partition_id"] == 3 for c in service.calls("POST", "/logs"))


def test_spent_retries_keep_the_batch_for_the_next_flush(service: FakeService) -> None:
    service.script("POST", "/logs", *[UNAVAILABLE] * FAST.attempts_max)
    service.default("POST", "/logs", offsets_for)
    with Producer(service.url, "t", limits=FAST) as producer:
        producer.send("m")
        with pytest.raises(ProduceError, match="outcome is unknown") as failure:
            producer.flush()
        assert failure.value.retained and failure.value.outcome_unknown
        assert producer.pending_messages == 1
        producer.send("n")
        assert producer.flush() == [PartitionOffset(0, 0), PartitionOffset(0, 10)]
    assert [c["sequence"] for c in service.calls("POST", "/logs")] == [0] * 5 + [1]


def test_a_rejected_batch_is_dropped(service: FakeService) -> None:
    service.script("POST", "/logs", Reply(404, {"error_code": 40401, "message": "no topic"}))
    with Producer(service.url, "t", limits=FAST) as producer:
        producer.send("m")
        with pytest.raises(ProduceError, match="rejected") as failure:
            producer.flush()
        assert not failure.value.retained
        assert isinstance(failure.value.__cause__, ApiError)
        assert failure.value.__cause__.status == 404
        assert producer.pending_messages == 0


def test_the_buffer_is_bounded(service: FakeService) -> None:
    limits = ClientLimits(batch_messages_max=2, buffer_messages_max=3)
    producer = Producer(service.url, "t", limits=limits)
    try:
        for value in "abc":
            producer.send(value)
        with pytest.raises(BufferFullError):
            producer.send("d")
    finally:
        producer.close()


def test_produce_batch_flushes_a_full_buffer_as_it_goes(service: FakeService) -> None:
    service.default("POST", "/logs", offsets_for)
    limits = ClientLimits(batch_messages_max=2, buffer_messages_max=3)
    with Producer(service.url, "t", limits=limits) as producer:
        acked = producer.produce_batch(str(i) for i in range(7))
    assert len(acked) == 7
    assert len(service.calls("POST", "/logs")) == 4


def test_headers_are_sent_with_their_message_and_bad_ones_named(service: FakeService) -> None:
    service.default("POST", "/logs", offsets_for)
    with Producer(service.url, "t", limits=ClientLimits(batch_messages_max=2)) as producer:
        producer.send("v", "k", headers={"b": "2", "a": "1"})
        producer.send("w")
        producer.flush()
    (sent,) = service.calls("POST", "/logs")
    assert sent["messages"] == [
        {"message": "v", "key": "k", "headers": {"a": "1", "b": "2"}},
        {"message": "w"},
    ]
    broken = {"topic": "t", "partition_id": 0, "offset": 0, "key": None, "message": "m"}
    with pytest.raises(ProtocolError, match="'headers' must be an object of strings"):
        parse_records({"messages": [{**broken, "timestamp_ms": 1, "headers": {"h": 1}}]})


def test_poll_retries_with_the_same_request_id(service: FakeService) -> None:
    message = {
        "topic": "t",
        "partition_id": 1,
        "offset": 5,
        "key": None,
        "message": "hello",
        "headers": {"trace": "t1"},
        "timestamp_ms": 123,
    }
    service.script("GET", "/logs", Reply(503, {"error_code": 50303, "message": "commit timeout"}))
    service.default("GET", "/logs", lambda _p: (200, {"messages": [message]}))
    with Consumer(service.url, "t", 1, limits=FAST) as consumer:
        records = consumer.poll(max_messages=5)
        assert [(r.partition_id, r.offset, r.value, r.key, r.headers) for r in records] == [
            (1, 5, "hello", None, {"trace": "t1"})
        ]
        consumer.poll()
    polls = service.calls("GET", "/logs")
    assert polls[0]["request_id"] == polls[1]["request_id"] != polls[2]["request_id"]
    assert polls[0]["consumer_id"] == "c-1" and polls[0]["max_messages"] == "5"
    assert service.calls("POST", "/consumers") == [{"topic": "t", "partition_id": 1}]


def test_a_failed_poll_is_repeated_by_the_next_one(service: FakeService) -> None:
    service.script("GET", "/logs", *[UNAVAILABLE] * FAST.attempts_max)
    service.default("GET", "/logs", lambda _p: (200, {"messages": []}))
    with Consumer(service.url, "t", consumer_id="mine", limits=FAST) as consumer:
        with pytest.raises(UnavailableError):
            consumer.poll(7)
        assert consumer.poll(1) == []
    polls = service.calls("GET", "/logs")
    assert len({p["request_id"] for p in polls}) == 1
    assert polls[-1]["max_messages"] == "7"  # the repeat asks for the same range
    # Resumed: its first poll confirmed what it is registered for, once.
    assert service.calls("POST", "/consumers") == [{"topic": "t", "consumer_id": "mine"}]


def test_fetch_by_offset(service: FakeService) -> None:
    service.default("GET", "/logs", lambda _p: (200, {"messages": []}))
    with Consumer(service.url, "t", limits=FAST) as consumer:
        assert consumer.fetch("t", 2, 40, max_messages=3) == []
    assert service.calls("GET", "/logs") == [
        {"topic": "t", "partition_id": "2", "offset": "40", "max_messages": "3"}
    ]


def test_admin_calls_and_parsing(service: FakeService) -> None:
    created = {"name": "t", "partitions": [{"partition_id": 0, "replicas": [1, 2, 3], "leader": 2}]}
    replica = {"broker_id": 1, "address": "http://b1", "raft_address": "h:1", "is_leader": True}
    partition = {"partition_id": 0, "leader": 1, "replicas": [replica]}
    service.default("POST", "/topics", lambda _p: (201, created))
    service.default(
        "GET",
        "/topics",
        lambda _p: (200, {"topics": [{"name": "t", "partitions": 2, "active_partitions": 1}]}),
    )
    service.default(
        "GET", "/partitions", lambda _p: (200, {"topic": "t", "partitions": [partition]})
    )
    service.default("POST", "/partitions", lambda _p: (201, partition))
    brokers = [{"broker_id": 1, "address": "http://b1", "alive": True, "partitions": 4}]
    service.default("GET", "/brokers", lambda _p: (200, {"brokers": brokers}))
    with Admin(service.url, limits=FAST) as admin:
        topic = admin.create_topic("t", partitions=1)
        assert topic.partitions[0].replicas == (1, 2, 3) and topic.partitions[0].leader == 2
        listed = [
            (s.name, s.partition_count, s.active_partition_count) for s in admin.list_topics()
        ]
        assert listed == [("t", 2, 1)]
        assert admin.partitions("t")[0].replicas[0].is_leader
        assert admin.add_partition("t").partition_id == 0
        assert admin.brokers()[0].partition_count == 4
    assert service.calls("POST", "/topics")[0] == {
        "name": "t",
        "partitions": 1,
        "replication_factor": 3,
        "retention_ms": 0,
        "retention_bytes": 0,
    }


def test_create_topic_after_an_unknown_outcome_returns_the_existing_topic(
    service: FakeService,
) -> None:
    exists = Reply(409, {"error_code": 40901, "message": "exists"})
    service.script("POST", "/topics", UNAVAILABLE, exists)
    replica = {"broker_id": 2, "address": None, "raft_address": "h:1", "is_leader": False}
    partition = {"partition_id": 0, "leader": None, "replicas": [replica]}
    service.default("GET", "/partitions", lambda _p: (200, {"partitions": [partition]}))
    with Admin(service.url, limits=FAST) as admin:
        topic = admin.create_topic("t")
        assert topic.partitions[0].replicas == (2,)
        service.script("POST", "/topics", exists)
        with pytest.raises(ApiError) as conflict:
            admin.create_topic("t")
        assert conflict.value.status == 409


def test_add_partition_is_not_retried_after_an_unknown_outcome(service: FakeService) -> None:
    service.script("POST", "/partitions", UNAVAILABLE)
    with Admin(service.url, limits=FAST) as admin, pytest.raises(UnavailableError) as failure:
        admin.add_partition("t")
    assert failure.value.outcome_unknown and failure.value.attempts == 1


def test_nothing_listening_is_unavailable_with_a_known_outcome() -> None:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    limits = ClientLimits(attempts_max=2, backoff_s_initial=0.001, backoff_s_max=0.001)
    with pytest.raises(UnavailableError) as failure:
        Admin(f"http://127.0.0.1:{port}", limits=limits).list_topics()
    assert not failure.value.outcome_unknown
    assert "connection refused" in str(failure.value)
