"""The direct path against scripted fakes of the load balancer (LB) and of brokers: routing,
the fallback decisions, and the bounds of the partition map cache."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence

import pytest

from protocol.routing import group_messages, partition_for_key, pop_order, unkeyed_salt
from protocol.types import NewMessage, PartitionId
from raftq import ApiError, ClientLimits, Consumer, PartitionOffset, ProduceError, Producer
from raftq.cli import build_parser
from raftq.direct_path import classify_broker_reply
from raftq.errors import ProtocolError, UnavailableError
from raftq.http import Failure, Reply
from raftq.partition_map import PartitionMaps, build_map
from raftq.records import PartitionInfo, Replica
from unit_tests.raftq.fake_service import FakeService, Handler
from unit_tests.raftq.fake_service import Reply as Scripted

FAST = ClientLimits(
    connect_timeout_s=0.5,
    request_timeout_s=0.5,
    broker_request_timeout_s=0.3,
    attempts_max=3,
    backoff_s_initial=0.001,
    backoff_s_max=0.01,
    retry_after_s_max=0.02,
    partition_map_refresh_s_min=0.001,
)
NOT_LEADER = Scripted(503, {"error_code": 50302, "message": "not the leader"})


@pytest.fixture
def brokers() -> Iterator[list[FakeService]]:
    fakes = [FakeService() for _ in range(3)]
    yield fakes
    for fake in fakes:
        fake.stop()


def partitions_answer(leaders: Sequence[FakeService | None]) -> dict[str, object]:
    """``GET /partitions``: partition i led by ``leaders[i]`` (``None``: leader unknown)."""
    return {
        "topic": "t",
        "partitions": [
            {
                "partition_id": pid,
                "leader": None if leader is None else pid + 1,
                "replicas": [
                    {
                        "broker_id": pid + 1,
                        "address": None if leader is None else leader.url,
                        "raft_address": f"h:{pid}",
                        "is_leader": leader is not None,
                    }
                ],
            }
            for pid, leader in enumerate(leaders)
        ],
    }


def serve_map(service: FakeService, leaders: Sequence[FakeService | None]) -> None:
    service.default("GET", "/partitions", lambda _p: (200, partitions_answer(leaders)))


def broker_produce(params: dict[str, object]) -> tuple[int, object]:
    """A broker that stores at offsets 100*sequence + i."""
    messages, sequence = params["messages"], params["sequence"]
    assert isinstance(messages, list) and isinstance(sequence, int)
    offsets = [100 * sequence + i for i in range(len(messages))]
    return 201, {"partition_id": params["partition_id"], "offsets": offsets}


def lb_produce(params: dict[str, object]) -> tuple[int, object]:
    """The LB's answer for one partition's group (it has ``partition_id``)."""
    messages, sequence, pid = params["messages"], params["sequence"], params["partition_id"]
    assert isinstance(messages, list) and isinstance(sequence, int)
    offsets = [{"partition_id": pid, "offset": 100 * sequence + i} for i in range(len(messages))]
    return 201, {"offsets": offsets}


def record(pid: int, offset: int) -> dict[str, object]:
    return {
        "topic": "t",
        "partition_id": pid,
        "offset": offset,
        "key": None,
        "message": f"m{pid}-{offset}",
        "timestamp_ms": 1,
    }


def one_record(pid: int) -> Handler:
    return lambda _params: (200, {"messages": [record(pid, 0)]})


# --- the decisions ---------------------------------------------------------------------------


def test_broker_answers_are_classified() -> None:
    assert classify_broker_reply(Reply(201, {"offsets": []})) is None
    nothing_done = [Reply(503, {"error_code": code}) for code in (50301, 50302, 50307)] + [
        Reply(404, {"error_code": 40402}),
        Reply(429, {"error_code": 42901}),
    ]
    for reply in nothing_done:
        failure = classify_broker_reply(reply)
        assert failure is not None and not failure.outcome_unknown, reply
    unknown = [Reply(503, {"error_code": code}) for code in (50303, 50304)]
    for reply in (*unknown, Reply(500, None), Reply(502, None)):
        failure = classify_broker_reply(reply)
        assert failure is not None and failure.outcome_unknown, reply
    refused = Failure("could not connect", outcome_unknown=False)
    assert classify_broker_reply(refused) is refused
    with pytest.raises(ApiError) as final:
        classify_broker_reply(Reply(409, {"error_code": 40902, "message": "old sequence"}))
    assert final.value.error_code == 40902


def info(pid: int, address: str | None) -> PartitionInfo:
    replica = Replica(1, address, "h:1", is_leader=address is not None)
    return PartitionInfo(pid, 1 if address else None, (replica,))


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_partition_maps_are_bounded_in_age_rate_and_size() -> None:
    clock, fetched = Clock(), []
    answers: dict[str, list[PartitionInfo]] = {"t": [info(0, "http://b1"), info(1, None)]}

    def fetch(topic: str) -> list[PartitionInfo]:
        fetched.append(topic)
        if topic not in answers:
            raise UnavailableError("LB down", outcome_unknown=False, attempts=1)
        return answers[topic]

    limits = ClientLimits(
        partition_map_age_s_max=10.0,
        partition_map_refresh_s_min=1.0,
        partition_maps_max=2,
        broker_avoid_s=5.0,
    )
    maps = PartitionMaps(fetch, limits, clock)
    assert maps.leader("t", 0) == "http://b1" and maps.leader("t", 1) is None
    assert maps.leader("t", 2) is None and fetched == ["t"]
    assert maps.refresh("t") is not None and fetched == ["t"]  # rate-limited
    clock.now_s += 1.0
    answers["t"] = [info(0, "http://b2"), info(1, "http://b1"), info(2, "http://b2")]
    found = maps.refresh("t")
    assert found is not None and found.partition_count == 3 and fetched == ["t", "t"]
    clock.now_s += 5.0
    assert maps.get("t") is found  # young enough
    clock.now_s += 5.0
    del answers["t"]
    assert maps.get("t") is found and fetched[-1] == "t"  # too old, refetch failed: keep it
    assert len(fetched) == 3
    maps.avoid("http://b1")
    maps.avoid("http://not-in-any-map")
    assert maps.leader("t", 1) is None and maps.leader("t", 0) == "http://b2"
    clock.now_s += 5.0
    assert maps.leader("t", 1) == "http://b1"  # avoided for broker_avoid_s only
    answers.update({"u": [info(0, None)], "v": [info(0, None)]})
    maps.get("u")
    maps.get("v")
    assert maps.get("t") is None  # least recently used dropped; refetch fails now


def test_a_map_lacking_a_leader_is_fetched_again_rate_limited() -> None:
    """Right after a topic is created (or during an election) the managers may not know a
    leader yet: until the map was old, every request for that partition went around the
    direct path."""
    clock, fetched = Clock(), []
    answers = {"t": [info(0, None)]}

    def fetch(topic: str) -> list[PartitionInfo]:
        fetched.append(topic)
        return answers[topic]

    limits = ClientLimits(partition_map_age_s_max=10.0, partition_map_refresh_s_min=1.0)
    maps = PartitionMaps(fetch, limits, clock)
    assert maps.leader("t", 0) is None and len(fetched) == 1
    answers["t"] = [info(0, "http://b1")]
    assert maps.leader("t", 0) is None and len(fetched) == 1  # rate-limited
    clock.now_s += 1.0
    assert maps.leader("t", 0) == "http://b1" and len(fetched) == 2
    clock.now_s += 5.0
    assert maps.leader("t", 0) == "http://b1" and len(fetched) == 2  # complete: kept


def test_a_map_must_number_partitions_from_zero() -> None:
    with pytest.raises(ProtocolError):
        build_map("t", [info(1, None)], 0.0)
    assert build_map("t", [info(1, "b"), info(0, None)], 0.0).leaders == (None, "b")


# --- producing -------------------------------------------------------------------------------


def test_keyed_batch_goes_to_each_partitions_leader_in_the_managers_groups(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers[:2])
    for broker in brokers[:2]:
        broker.default("POST", "/logs", broker_produce)
    messages = [("a", "k1"), ("b", None), ("c", "k4"), ("d", "k3"), ("e", "k5")]
    with Producer(service.url, "t", limits=FAST) as producer:
        acked = producer.produce_batch(messages)
        assert producer.direct_path is not None and producer.direct_path.fallbacks == 0
    expected_groups = group_messages(
        [NewMessage(value=v, key=k) for v, k in messages],
        2,
        partition_id=None,
        unkeyed_salt=unkeyed_salt("p-1", 0),
        round_robin=0,
    )
    assert len(expected_groups) == 2  # the keys chosen spread over both partitions
    where = {i: g.partition_id for g in expected_groups for i in g.indexes}
    assert [o.partition_id for o in acked] == [where[i] for i in range(5)]
    for group in expected_groups:
        (call,) = brokers[group.partition_id].calls("POST", "/logs")
        assert call["partition_id"] == group.partition_id and call["sequence"] == 0
        assert call["producer_id"] == "p-1" and call["topic"] == "t"
        assert len(call["messages"]) == len(group.indexes)  # type: ignore[arg-type]
    assert service.calls("POST", "/logs") == []


def test_a_batchs_groups_are_sent_at_once_and_the_threads_stop_at_close(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers)
    all_three = threading.Barrier(3, timeout=5.0)  # sent one after another, it would break

    def together(params: dict[str, object]) -> tuple[int, object]:
        try:
            all_three.wait()
        except threading.BrokenBarrierError:
            return 500, {"error_code": 50001, "message": "not sent at once"}
        return broker_produce(params)

    for broker in brokers:
        broker.default("POST", "/logs", together)
    keys = ["k1", "k3", "k0"]  # one per partition of three
    assert sorted(partition_for_key(k, 3) for k in keys) == [0, 1, 2]
    slow = dataclasses.replace(FAST, broker_request_timeout_s=10.0)
    with Producer(service.url, "t", limits=slow) as producer:
        acked = producer.produce_batch([("v", k) for k in keys])
        assert producer.direct_path is not None and producer.direct_path.fallbacks == 0
        assert any(t.name.startswith("raftq-direct") for t in threading.enumerate())
    assert [o.partition_id for o in acked] == [partition_for_key(k, 3) for k in keys]
    assert not any(t.name.startswith("raftq-direct") for t in threading.enumerate())


def test_a_refusing_leader_sends_the_group_through_the_lb_with_the_same_sequence(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, [brokers[0]])
    brokers[0].script("POST", "/logs", NOT_LEADER)
    brokers[0].default("POST", "/logs", broker_produce)
    service.default("POST", "/logs", lb_produce)
    with Producer(service.url, "t", limits=FAST) as producer:
        assert producer.produce_batch(["a", "b"]) == [PartitionOffset(0, 0), PartitionOffset(0, 1)]
        (through_lb,) = service.calls("POST", "/logs")
        assert through_lb["partition_id"] == 0 and through_lb["sequence"] == 0
        assert len(service.calls("GET", "/partitions")) == 2  # refreshed after the refusal
        # The refusing broker is avoided for broker_avoid_s: the next batch goes to the LB.
        producer.produce_batch(["c"])
        assert [c["sequence"] for c in service.calls("POST", "/logs")] == [0, 1]
        assert len(brokers[0].calls("POST", "/logs")) == 1


@pytest.mark.parametrize(
    "failure",
    [
        Scripted(404, {"error_code": 40402, "message": "not hosted here"}),
        Scripted(503, {"error_code": 50303, "message": "commit timed out"}),
        Scripted(201, {"partition_id": 0, "offsets": [0]}, delay_s=1.0),  # timeout
    ],
)
def test_stale_maps_and_unknown_outcomes_fall_back_with_the_same_sequence(
    service: FakeService, brokers: list[FakeService], failure: Scripted
) -> None:
    serve_map(service, [brokers[0]])
    brokers[0].script("POST", "/logs", failure)
    service.default("POST", "/logs", lb_produce)
    with Producer(service.url, "t", limits=FAST, first_sequence=4) as producer:
        assert producer.produce_batch(["a"]) == [PartitionOffset(0, 400)]
    (through_lb,) = service.calls("POST", "/logs")
    assert (through_lb["partition_id"], through_lb["sequence"]) == (0, 4)


def test_a_failure_after_an_unknown_direct_attempt_is_reported_as_unknown(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, [brokers[0], brokers[1]])
    timeout = Scripted(201, {"partition_id": 0, "offsets": [0]}, delay_s=1.0)
    for broker in brokers[:2]:
        broker.script("POST", "/logs", timeout)
    service.default("POST", "/logs", lambda _p: (503, {"error_code": 50301}))
    producer = Producer(service.url, "t", partition_id=0, limits=FAST)
    with pytest.raises(ProduceError) as failed:
        producer.produce_batch(["a"])  # LB: "nothing done", but the broker may have
    assert failed.value.retained and failed.value.outcome_unknown
    producer.close()  # not flushed again
    service.default("POST", "/logs", lambda _p: (400, {"error_code": 40002}))
    with (
        Producer(service.url, "t", partition_id=1, limits=FAST) as producer,
        pytest.raises(ProduceError) as refused,
    ):
        producer.produce_batch(["b"])
    cause = refused.value.__cause__
    assert isinstance(cause, ApiError) and cause.after_unknown_outcome


def test_a_final_broker_answer_is_final(service: FakeService, brokers: list[FakeService]) -> None:
    serve_map(service, [brokers[0]])
    old = Scripted(409, {"error_code": 40902, "message": "sequence out of order"})
    brokers[0].script("POST", "/logs", old)
    with Producer(service.url, "t", limits=FAST) as producer:
        with pytest.raises(ProduceError) as failed:
            producer.produce_batch(["a"])
        assert not failed.value.retained and producer.pending_messages == 0
    assert service.calls("POST", "/logs") == []


def test_a_partly_stored_batch_is_resent_to_the_same_partitions_after_a_partition_is_added(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers[:2])
    brokers[0].default("POST", "/logs", broker_produce)
    brokers[1].default("POST", "/logs", lambda _p: (503, {"error_code": 50303}))
    service.default("POST", "/logs", lambda _p: (503, {"error_code": 50301}))
    keys = [f"k{i}" for i in range(8)]
    with Producer(service.url, "t", limits=FAST) as producer:
        with pytest.raises(ProduceError) as failed:
            producer.produce_batch([("v", k) for k in keys])
        assert failed.value.retained and failed.value.outcome_unknown
        serve_map(service, brokers)  # a third partition: the new map cuts keys differently
        service.default("POST", "/logs", lb_produce)  # broker 1 is avoided for a while
        brokers[1].default("POST", "/logs", broker_produce)
        brokers[2].default("POST", "/logs", broker_produce)
        acked = producer.flush()
    assert [o.partition_id for o in acked] == [
        group_messages(
            [NewMessage(value="v", key=k)], 2, partition_id=None, unkeyed_salt=None, round_robin=0
        )[0].partition_id
        for k in keys
    ]
    assert brokers[2].calls("POST", "/logs") == []
    resent = brokers[0].calls("POST", "/logs") + service.calls("POST", "/logs")
    assert {(c["partition_id"], c["sequence"]) for c in resent} == {(0, 0), (1, 0)}


def test_an_unknown_partition_or_no_map_goes_through_the_lb_whole(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, [brokers[0]])
    service.default("POST", "/logs", lb_produce)
    with Producer(service.url, "t", partition_id=1, limits=FAST) as producer:
        producer.produce_batch(["a"])
    assert len(service.calls("GET", "/partitions")) == 2  # refreshed: still no partition 1
    assert service.calls("POST", "/logs")[0]["partition_id"] == 1  # the LB answers it
    service.default("GET", "/partitions", lambda _p: (404, {"error_code": 40401}))
    service.default("POST", "/logs", lambda _p: (201, {"partition_id": 0, "offset": 7}))
    with Producer(service.url, "t", limits=FAST) as producer:
        assert producer.produce_batch(["b"]) == [PartitionOffset(0, 7)]
    assert "partition_id" not in service.calls("POST", "/logs")[-1]
    assert brokers[0].calls("POST", "/logs") == []


def test_direct_false_goes_through_the_lb_with_the_count_of_the_first_attempt(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers[:2])
    service.default("POST", "/logs", lambda _p: (201, {"partition_id": 0, "offset": 7}))
    service.default("GET", "/logs", lambda _p: (200, {"messages": []}))
    with Producer(service.url, "t", limits=FAST, direct=False) as producer:
        producer.produce_batch(["a"])
    with Consumer(service.url, "t", limits=FAST, direct=False) as consumer:
        consumer.poll(1)
        consumer.fetch("t", 0, 0)
    assert [c["partition_count"] for c in service.calls("POST", "/logs")] == [2]
    pops = [c for c in service.calls("GET", "/logs") if "consumer_id" in c]
    assert [c["partition_count"] for c in pops] == ["2"]
    assert all(b.calls("POST", "/logs") == b.calls("GET", "/logs") == [] for b in brokers)


def test_the_count_the_manager_pinned_for_the_id_wins_over_the_asked_and_the_map(
    service: FakeService, brokers: list[FakeService]
) -> None:
    """A replay after a partition was added: the job asks for 3 (its new view), the map has
    3, but the id was first registered with 2, so the batch is cut over 2 as before."""
    serve_map(service, brokers)
    service.default(
        "POST",
        "/producers",
        lambda p: (200, {"producer_id": p["producer_id"], "partition_count": 2}),
    )
    for broker in brokers:
        broker.default("POST", "/logs", broker_produce)
    with Producer(
        service.url, "t", producer_id="job-1", partition_count=3, limits=FAST
    ) as producer:
        producer.produce_batch([(f"v{i}", f"k{i}") for i in range(40)])
    assert service.calls("POST", "/producers")[0]["partition_count"] == 3
    assert brokers[2].calls("POST", "/logs") == []  # nothing cut to partition 2
    assert all(len(b.calls("POST", "/logs")) == 1 for b in brokers[:2])


# --- consuming -------------------------------------------------------------------------------


def test_fetch_goes_to_the_leader_and_falls_back(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, [brokers[0]])
    brokers[0].default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 5)]}))
    service.default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 5)]}))
    with Consumer(service.url, "t", consumer_id="reader", limits=FAST) as consumer:
        assert [r.offset for r in consumer.fetch("t", 0, 5, 1)] == [5]
        assert service.calls("GET", "/logs") == []
        (call,) = brokers[0].calls("GET", "/logs")
        assert (call["topic"], call["partition_id"], call["offset"]) == ("t", "0", "5")
        brokers[0].script("GET", "/logs", NOT_LEADER)
        assert [r.offset for r in consumer.fetch("t", 0, 5, 1)] == [5]
        assert service.calls("GET", "/logs")[0]["offset"] == "5"


def test_poll_visits_the_partitions_in_the_managers_order(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers)
    for pid, broker in enumerate(brokers):
        broker.default("GET", "/logs", one_record(pid))
    with Consumer(service.url, "t", limits=FAST) as consumer:
        records = consumer.poll(2)
    first = [(b, c) for b, broker in enumerate(brokers) for c in broker.calls("GET", "/logs")]
    request_id = str(first[0][1]["request_id"])
    order = pop_order([PartitionId(p) for p in range(3)], "c-1", request_id, 0)
    assert [r.partition_id for r in records] == order[:2]
    assert sorted(b for b, _ in first) == sorted(order[:2])
    assert all(c["request_id"] == request_id and c["consumer_id"] == "c-1" for _, c in first)
    assert service.calls("GET", "/logs") == []


def test_a_failed_pop_repeats_through_the_lb_with_the_same_request_id(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, [brokers[0]])
    brokers[0].script("GET", "/logs", Scripted(503, {"error_code": 50303}))
    service.default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 0)]}))
    with Consumer(service.url, "t", limits=FAST) as consumer:
        assert len(consumer.poll(5)) == 1
    (direct,) = brokers[0].calls("GET", "/logs")
    (through_lb,) = service.calls("GET", "/logs")
    assert through_lb["request_id"] == direct["request_id"]
    assert through_lb["consumer_id"] == "c-1" and "partition_id" not in through_lb


def test_a_pop_repeated_by_the_lb_visits_the_partitions_of_its_first_attempt(
    service: FakeService, brokers: list[FakeService]
) -> None:
    for broker in brokers:
        broker.default("GET", "/logs", lambda _p: (503, {"error_code": 50303, "message": "?"}))
    service.default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 0)]}))
    service.script("GET", "/partitions", Scripted(200, partitions_answer(brokers[:2])))
    serve_map(service, brokers)  # the refresh after the failure sees a third partition
    limits = dataclasses.replace(FAST, broker_avoid_s=1e-6)
    with Consumer(service.url, "t", limits=limits) as consumer:
        records = consumer.poll(5)
    (direct_call,) = [c for broker in brokers for c in broker.calls("GET", "/logs")]
    (lb_call,) = service.calls("GET", "/logs")
    assert lb_call["request_id"] == direct_call["request_id"]
    assert lb_call["partition_count"] == "2"
    assert [r.partition_id for r in records] == [0]


def test_a_resumed_consumer_confirms_its_registration_then_pops_as_a_registered_one(
    service: FakeService, brokers: list[FakeService]
) -> None:
    """Before, a consumer resumed by its id popped through the LB without a partition count,
    so a retry of its pop across an added partition could visit other partitions."""
    serve_map(service, brokers)
    for pid, broker in enumerate(brokers):
        broker.default("GET", "/logs", one_record(pid))
    with Consumer(service.url, "t", consumer_id="someone", limits=FAST) as consumer:
        assert service.calls("POST", "/consumers") == []  # nothing until it pops
        records = consumer.poll(2)
        consumer.poll(1)
    assert service.calls("POST", "/consumers") == [{"topic": "t", "consumer_id": "someone"}]
    pops = [c for broker in brokers for c in broker.calls("GET", "/logs")]
    assert len(records) == 2 and all(c["consumer_id"] == "someone" for c in pops)
    assert service.calls("GET", "/logs") == []  # straight to the brokers


def test_a_resumed_consumer_registered_for_something_else_is_refused_and_pops_nothing(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers)
    service.script("POST", "/consumers", Scripted(409, {"error_code": 40904, "message": "other"}))
    with (
        Consumer(service.url, "t", consumer_id="someone", limits=FAST) as consumer,
        pytest.raises(ApiError) as raised,
    ):
        consumer.poll(1)
    assert raised.value.status == 409
    assert service.calls("GET", "/logs") == []
    assert all(broker.calls("GET", "/logs") == [] for broker in brokers)


def test_cli_direct_flag() -> None:
    parser = build_parser()
    assert parser.parse_args(["produce", "--topic", "t", "x"]).direct is True
    assert parser.parse_args(["consume", "--topic", "t", "--no-direct"]).direct is False


def test_direct_path_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="partition_map_refresh_s_min"):
        ClientLimits(partition_map_refresh_s_min=20.0).validate()
    with pytest.raises(ValueError, match="direct_parallel_requests_max"):
        ClientLimits(direct_parallel_requests_max=0).validate()


def test_a_partition_still_being_created_is_not_routed_to() -> None:
    creating = PartitionInfo(2, None, (Replica(1, "c", "h:1", is_leader=True),), active=False)
    routed = build_map("t", [info(0, "a"), info(1, "b"), creating], 0.0)
    assert routed.leaders == ("a", "b"), "the manager routes over the active prefix only"
    with pytest.raises(ProtocolError):
        build_map("t", [PartitionInfo(0, None, (), active=False)], 0.0)


def test_the_producer_asks_for_its_durability_on_every_path(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers[:1])
    brokers[0].default("POST", "/logs", lambda _p: (201, {"partition_id": 0, "offsets": [0]}))
    service.default("POST", "/logs", lambda _p: (201, {"partition_id": 0, "offset": 1}))
    with Producer(service.url, "t", limits=FAST, durability="flushed") as producer:
        producer.produce_batch(["direct"])
    with Producer(service.url, "t", limits=FAST, direct=False, durability="replicated") as lb:
        lb.produce_batch(["via lb"])
    assert [c["durability"] for c in brokers[0].calls("POST", "/logs")] == ["flushed"]
    assert [c["durability"] for c in service.calls("POST", "/logs")] == ["replicated"]
    with pytest.raises(ValueError):
        Producer(service.url, "t", limits=FAST, durability="disk")
