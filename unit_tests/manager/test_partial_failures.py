"""The manager's router when part of a request fails (issue 19, items 6 and 9): only an
answer that proves nothing was done may end a pop or refuse a batch as a whole; a broker's
404 for a replica placed there but not hosted yet sends the request to the next replica."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from manager.broker_client import BrokerRefusalError
from manager.broker_monitor import BrokerMonitor
from manager.log_router import LogRouter
from manager.raft import registry_twin
from manager.services import ManagerServices, ServiceContext
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.requests import (
    CreateTopic,
    Pop,
    Produce,
    RegisterBroker,
    RegisterConsumer,
    RegisterProducer,
)
from protocol.routing import partition_for_key, pop_order
from protocol.types import BrokerId, PartitionId
from runtime.http_client import HttpAnswer, NoAnswerError
from unit_tests.manager.test_service import LIMITS, StubBrokers, executor

__all__ = ["executor"]  # a fixture

Scripted = HttpAnswer | NoAnswerError
Routed = tuple["ScriptedBrokers", ManagerServices, LogRouter]


def error(status: int, code: ErrorCode) -> HttpAnswer:
    return HttpAnswer(status, {"error_code": code.value, "message": code.name}, {})


TOO_MANY = error(409, ErrorCode.TOO_MANY)
NOT_HOSTED = error(404, ErrorCode.UNKNOWN_PARTITION)
REVOKED = error(401, ErrorCode.UNAUTHENTICATED)
OUT_OF_ORDER = error(409, ErrorCode.SEQUENCE_OUT_OF_ORDER)
TIMED_OUT = NoAnswerError("timed out", refused=False)


class ScriptedBrokers(StubBrokers):
    """Answers each partition's pops and produces from a script (one entry per call, to
    whichever broker), then as ``StubBrokers`` does; records which partition was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[int, deque[Scripted]] = {}
        self.produces: dict[int, deque[Scripted]] = {}
        self.asked: list[int] = []

    def read(
        self, address: str, params: dict[str, str], deadline: Deadline | None = None
    ) -> HttpAnswer:
        partition_id = int(params["partition_id"])
        self.asked.append(partition_id)
        return _answer(self.reads.get(partition_id)) or super().read(address, params, deadline)

    def produce(
        self, address: str, body: dict[str, object], deadline: Deadline | None = None
    ) -> HttpAnswer:
        partition_id = body["partition_id"]
        assert isinstance(partition_id, int)
        self.asked.append(partition_id)
        scripted = _answer(self.produces.get(partition_id))
        return scripted or super().produce(address, body, deadline)


def _answer(script: deque[Scripted] | None) -> HttpAnswer | None:
    if not script:
        return None
    answer = script.popleft()
    if isinstance(answer, NoAnswerError):
        raise answer
    return answer


@pytest.fixture
def routed(executor: ThreadPoolExecutor) -> Routed:
    registry = registry_twin()
    brokers = ScriptedBrokers()
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    service = ManagerServices.over(ServiceContext(LIMITS, registry, brokers, monitor, executor))
    router = LogRouter(registry, brokers, monitor, executor, poll_period_s=0.01)
    for broker_id in (1, 2, 3):
        request = RegisterBroker(BrokerId(broker_id), f"http://b{broker_id}", "h", 9000, 9099)
        service.brokers.register_broker(request)
    service.topics.create_topic(CreateTopic("t", 2, 3))
    return brokers, service, router


def _pop(service: ManagerServices) -> tuple[Pop, list[int]]:
    """A whole-topic pop of up to 10 messages, and the partitions it visits in order."""
    consumer = str(service.clients.register_consumer(RegisterConsumer("t", None))["consumer_id"])
    order = pop_order([PartitionId(0), PartitionId(1)], consumer, "r", 0)
    params = {"consumer_id": consumer, "max_messages": 10, "request_id": "r", "sequence": 7}
    return Pop.parse(params, LIMITS), [int(p) for p in order]


# --- pops ----------------------------------------------------------------------------------


@pytest.mark.parametrize("refusal", [TOO_MANY, REVOKED], ids=["full-consumer-table", "key-revoked"])
def test_a_partition_that_claimed_nothing_after_another_claimed_ends_the_pop_with_those(
    routed: Routed, refusal: HttpAnswer
) -> None:
    brokers, service, router = routed
    request, (first, second) = _pop(service)
    brokers.reads[second] = deque([refusal] * 3)  # every replica, for the 503
    answer = router.pop(request)
    messages = answer["messages"]
    assert isinstance(messages, list)
    assert [m["partition_id"] for m in messages] == [first]


def test_a_refusal_after_a_claim_fails_a_pop_that_repeats_an_unknown_attempt(
    routed: Routed,
) -> None:
    """The client says an earlier attempt of this pop had an unknown outcome: it may have
    claimed a range at the refusing partition, so the refusal fails the pop (unknown
    outcome) instead of ending it with the first partition's messages."""
    brokers, service, router = routed
    request, (_, second) = _pop(service)
    brokers.reads[second] = deque([TOO_MANY] * 3)
    with pytest.raises(RaftQError) as failed:
        router.pop(replace(request, after_unknown_outcome=True))
    assert failed.value.code is ErrorCode.UNAVAILABLE


def test_the_flag_of_a_repeat_after_an_unknown_outcome_is_true_or_false() -> None:
    params = {"consumer_id": "c", "after_unknown_outcome": "true"}
    assert Pop.parse(params, LIMITS).after_unknown_outcome
    assert not Pop.parse({"consumer_id": "c"}, LIMITS).after_unknown_outcome
    with pytest.raises(RaftQError) as invalid:
        Pop.parse({**params, "after_unknown_outcome": "yes"}, LIMITS)
    assert invalid.value.status == 400


def test_a_partition_without_a_leader_after_another_claimed_fails_the_whole_pop(
    routed: Routed,
) -> None:
    """503 NOT_LEADER from every replica proves this attempt claimed nothing there, not
    that an earlier attempt of the same pop (its answer lost) did not: answering the others'
    messages would end the poll and skip that range (the multi-host network-partition tier
    found 52 messages skipped so). The client repeats the whole pop instead."""
    brokers, service, router = routed
    request, (_, second) = _pop(service)
    brokers.reads[second] = deque([error(503, ErrorCode.NOT_LEADER)] * 3)
    with pytest.raises(RaftQError) as failed:
        router.pop(request)
    # Not "nothing done": the first partition claimed a range for this pop. Told REFUSED,
    # the client ended its poll and that range was skipped (long tier, seed 61637).
    assert failed.value.code is ErrorCode.UNAVAILABLE
    assert not failed.value.code.proves_nothing_done


def test_a_refusal_before_anything_was_claimed_is_final(
    routed: Routed,
) -> None:
    brokers, service, router = routed
    request, (first, _) = _pop(service)
    brokers.reads[first] = deque([TOO_MANY])
    with pytest.raises(BrokerRefusalError) as refused:
        router.pop(request)
    assert refused.value.answer.status == 409
    assert brokers.asked == [first]  # nothing after it was asked, so nothing claimed


def test_an_unknown_outcome_after_a_claim_fails_the_whole_pop(
    routed: Routed,
) -> None:
    brokers, service, router = routed
    request, (_, second) = _pop(service)
    brokers.reads[second] = deque([TIMED_OUT] * 3)
    with pytest.raises(RaftQError) as failed:
        router.pop(request)
    assert failed.value.code is ErrorCode.UNAVAILABLE


def test_a_refusal_after_an_unknown_attempt_at_the_same_partition_is_an_unknown_outcome(
    routed: Routed,
) -> None:
    """The first replica's attempt timed out (it may have claimed); the next one refuses:
    that proves nothing about the first, so the pop must not end with a 4xx."""
    brokers, service, router = routed
    request, (_, second) = _pop(service)
    brokers.reads[second] = deque([TIMED_OUT, TOO_MANY])
    with pytest.raises(RaftQError) as failed:
        router.pop(request)
    assert failed.value.code is ErrorCode.UNAVAILABLE and failed.value.status == 503


def test_a_replica_placed_but_not_hosted_yet_sends_the_request_to_the_next(
    routed: Routed,
) -> None:
    brokers, service, router = routed
    request, (first, second) = _pop(service)
    brokers.reads[second] = deque([NOT_HOSTED])
    messages = router.pop(request)["messages"]
    assert isinstance(messages, list) and len(messages) == 2
    assert brokers.asked == [first, second, second]
    # Every replica not hosting it: "nothing done, retry", never a final 404.
    brokers.asked.clear()
    brokers.reads[first] = deque([NOT_HOSTED] * 3)
    with pytest.raises(RaftQError) as refused:
        router.pop(request)
    assert refused.value.code is ErrorCode.REFUSED


# --- produces ------------------------------------------------------------------------------


def _producer(service: ManagerServices) -> str:
    return str(service.clients.register_producer(RegisterProducer("t", None))[0]["producer_id"])


def _two_partition_batch(producer: str) -> Produce:
    keys = {int(partition_for_key(f"k{i}", 2)): f"k{i}" for i in range(20)}
    batch = [{"message": "a", "key": keys[0]}, {"message": "b", "key": keys[1]}]
    params = {"topic": "t", "producer_id": producer, "messages": batch, "sequence": 3}
    return Produce.parse(params, LIMITS)


def test_a_produce_refused_after_an_unknown_attempt_is_an_unknown_outcome(
    routed: Routed,
) -> None:
    brokers, service, router = routed
    producer = _producer(service)
    brokers.produces[0] = deque([TIMED_OUT, NOT_HOSTED, REVOKED])
    params = {"topic": "t", "producer_id": producer, "message": "x", "partition_id": 0}
    with pytest.raises(RaftQError) as failed:
        router.produce(Produce.parse({**params, "sequence": 1}, LIMITS))
    assert failed.value.code is ErrorCode.UNAVAILABLE


def test_a_replayed_batch_whose_parts_are_all_stored_is_refused_as_out_of_order(
    routed: Routed,
) -> None:
    """One partition recognises its part (201), the other has seen a later sequence (409
    40902): every part was stored before, so the batch's answer is the 409 a replayed Spark
    task skips, not 503 PARTIALLY_WRITTEN forever."""
    brokers, service, router = routed
    producer = _producer(service)
    brokers.produces[1] = deque([OUT_OF_ORDER])
    with pytest.raises(BrokerRefusalError) as refused:
        router.produce(_two_partition_batch(producer))
    assert refused.value.answer.body["error_code"] == 40902  # type: ignore[index]
    # With any other failure beside it, the batch stays "partially written" (retry it).
    brokers.produces[1] = deque([error(503, ErrorCode.COMMIT_TIMEOUT)] * 3)
    with pytest.raises(RaftQError) as partial:
        router.produce(_two_partition_batch(producer))
    assert partial.value.code is ErrorCode.PARTIALLY_WRITTEN
