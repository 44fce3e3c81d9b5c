"""The client when an answer does not prove nothing was done (issue 19, items 6 and 9): a
poll is dropped only on an answer proving no partition claimed anything; a producer reports
"nothing done" only when that is proved; a forgotten lease is registered again under the
same id and the same poll or batch repeated."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from protocol.errors import ErrorCode
from protocol.routing import partition_for_key
from raftq import ApiError, Consumer, PartitionOffset, ProduceError, Producer
from raftq.consumer import PendingPoll
from raftq.errors import UnavailableError
from raftq.producer import with_earlier_acks
from raftq.records import PartitionOffset as Offset
from unit_tests.raftq.fake_service import FakeService, Handler
from unit_tests.raftq.fake_service import Reply as Scripted
from unit_tests.raftq.test_direct_path import FAST, broker_produce, lb_produce, record, serve_map

UNAVAILABLE = Scripted(503, {"error_code": 50304, "message": "timed out"})


def error(status: int, code: ErrorCode) -> Scripted:
    return Scripted(status, {"error_code": code.value, "message": code.name})


TOO_MANY = error(409, ErrorCode.TOO_MANY)
REVOKED = error(401, ErrorCode.UNAUTHENTICATED)
UNKNOWN_PRODUCER = error(404, ErrorCode.UNKNOWN_PRODUCER)
UNKNOWN_CONSUMER = error(404, ErrorCode.UNKNOWN_CONSUMER)


@pytest.fixture
def brokers() -> Iterator[list[FakeService]]:
    fakes = [FakeService() for _ in range(2)]
    yield fakes
    for fake in fakes:
        fake.stop()


def first_claims_then(refusal: Scripted) -> Iterator[Handler]:
    """Pop handlers for two brokers: whichever is asked first in a poll answers a record,
    the other ``refusal``."""
    asked = itertools.count()

    def handler(pid: int) -> Handler:
        def answer(_params: dict[str, object]) -> tuple[int, object]:
            if next(asked) % 2 == 0:
                return 200, {"messages": [record(pid, 0)]}
            return refusal.status, refusal.body

        return answer

    return (handler(pid) for pid in range(2))


def pops(*fakes: FakeService) -> list[dict[str, object]]:
    return [c for fake in fakes for c in fake.calls("GET", "/logs")]


# --- pops ----------------------------------------------------------------------------------


@pytest.mark.parametrize("refusal", [TOO_MANY, REVOKED], ids=["full-table", "key-revoked"])
def test_a_direct_pop_refused_after_a_claim_answers_what_was_claimed(
    service: FakeService, brokers: list[FakeService], refusal: Scripted
) -> None:
    serve_map(service, brokers)
    for broker, handler in zip(brokers, first_claims_then(refusal), strict=True):
        broker.default("GET", "/logs", handler)
    with Consumer(service.url, "t", limits=FAST) as consumer:
        records = consumer.poll(5)
    assert len(records) == 1
    assert len(pops(*brokers)) == 2 and service.calls("GET", "/logs") == []


def test_a_direct_pop_refused_after_a_claim_but_after_an_unknown_attempt_keeps_the_poll(
    service: FakeService, brokers: list[FakeService]
) -> None:
    """An earlier attempt of this poll had an unknown outcome (it may have claimed at every
    partition). Now the first partition gives its range again and the second refuses
    (409): that proves only that *this* attempt did nothing there. Ending the poll with
    the first partition's records would skip what the earlier attempt may have claimed at
    the second; the poll is kept, and the next poll() repeats it."""
    serve_map(service, brokers)
    for broker, handler in zip(brokers, first_claims_then(TOO_MANY), strict=True):
        broker.default("GET", "/logs", handler)
    with Consumer(service.url, "t", limits=FAST) as consumer:
        sequence = consumer._next_sequence()
        consumer._pending = PendingPoll("earlier", 5, sequence, outcome_unknown=True)
        with pytest.raises(ApiError) as kept:
            consumer.poll(5)
        assert kept.value.after_unknown_outcome
        assert consumer._pending is not None and consumer._pending.sequence == sequence
    assert {p["sequence"] for p in pops(*brokers)} == {str(sequence)}


def test_a_direct_pop_refused_before_any_claim_ends_the_poll(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers)
    for broker in brokers:
        broker.default("GET", "/logs", lambda _p: (TOO_MANY.status, TOO_MANY.body))
    with Consumer(service.url, "t", limits=FAST) as consumer:
        with pytest.raises(ApiError):
            consumer.poll(5)
        with pytest.raises(ApiError):
            consumer.poll(5)
    first, second = pops(*brokers)
    assert first["sequence"] != second["sequence"]  # nothing claimed: a new poll


def test_a_direct_pop_whose_later_partition_is_not_hosted_repeats_through_the_lb(
    service: FakeService, brokers: list[FakeService]
) -> None:
    """404 from a replica placed but not hosted yet: the manager's router tries the next
    replica, with the same request id and sequence, so the claimed range comes back."""
    serve_map(service, brokers)
    not_hosted = error(404, ErrorCode.UNKNOWN_PARTITION)
    for broker, handler in zip(brokers, first_claims_then(not_hosted), strict=True):
        broker.default("GET", "/logs", handler)
    service.default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 0), record(1, 0)]}))
    with Consumer(service.url, "t", limits=FAST) as consumer:
        assert len(consumer.poll(5)) == 2
    (through_lb,) = service.calls("GET", "/logs")
    direct = pops(*brokers)[0]
    assert (through_lb["request_id"], through_lb["sequence"]) == (
        direct["request_id"],
        str(direct["sequence"]),
    )


def test_a_refusal_after_an_unknown_attempt_keeps_the_poll(service: FakeService) -> None:
    """Through the LB: the first attempt's outcome is unknown (it may have claimed), the
    second is refused (the key was revoked meanwhile): the next poll repeats the same one."""
    service.script("GET", "/logs", UNAVAILABLE, REVOKED)
    service.default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 0)]}))
    with Consumer(service.url, "t", direct=False, limits=FAST) as consumer:
        with pytest.raises(ApiError) as refused:
            consumer.poll(5)
        assert refused.value.after_unknown_outcome
        assert len(consumer.poll(9)) == 1
    polls = service.calls("GET", "/logs")
    assert len({(p["request_id"], p["sequence"], p["max_messages"]) for p in polls}) == 1


def test_a_pop_through_the_lb_after_an_unknown_attempt_says_so(service: FakeService) -> None:
    """The router must not end such a pop with some partitions' messages (an earlier
    attempt may have claimed at the others): the client flags every retry after an unknown
    outcome, within one poll() and in the next one."""
    service.script("GET", "/logs", *[UNAVAILABLE] * FAST.attempts_max, UNAVAILABLE)
    service.default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 0)]}))
    with Consumer(service.url, "t", direct=False, limits=FAST) as consumer:
        with pytest.raises(UnavailableError):
            consumer.poll(5)
        assert len(consumer.poll(5)) == 1
    flags = [p.get("after_unknown_outcome") for p in service.calls("GET", "/logs")]
    assert flags == [None] + ["true"] * (FAST.attempts_max + 1)


def test_a_poll_whose_outcome_was_unknown_is_kept_past_a_later_refusal(
    service: FakeService,
) -> None:
    """One poll() ends with an unknown outcome (its entry may be committed later, by the
    next leader); the next poll() of it is refused with an answer proving only that *this*
    attempt claimed nothing. The poll must stay pending (same sequence), or the range the
    first attempt claims once its entry commits is skipped (found by the membership
    nemesis, seed 202: 14 messages)."""
    service.script("GET", "/logs", *[UNAVAILABLE] * FAST.attempts_max, TOO_MANY)
    service.default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 0)]}))
    with Consumer(service.url, "t", direct=False, limits=FAST) as consumer:
        with pytest.raises(UnavailableError):
            consumer.poll(5)
        with pytest.raises(ApiError):
            consumer.poll(5)
        assert len(consumer.poll(5)) == 1
    polls = service.calls("GET", "/logs")
    assert len({(p["request_id"], p["sequence"]) for p in polls}) == 1


def test_a_batch_whose_outcome_was_unknown_is_not_reported_rejected_by_a_later_refusal(
    service: FakeService,
) -> None:
    service.script("POST", "/logs", *[UNAVAILABLE] * FAST.attempts_max, REVOKED)
    with Producer(service.url, "t", direct=False, limits=FAST) as producer:
        with pytest.raises(ProduceError) as retained:
            producer.produce_batch(["m"])
        assert retained.value.retained and retained.value.outcome_unknown
        with pytest.raises(ProduceError, match="maybe stored") as dropped:
            producer.flush()
        assert dropped.value.outcome_unknown and not dropped.value.retained


def test_a_consumer_the_managers_forgot_registers_again_and_repeats_the_poll(
    service: FakeService,
) -> None:
    service.script("GET", "/logs", UNAVAILABLE, UNKNOWN_CONSUMER)
    service.default("GET", "/logs", lambda _p: (200, {"messages": [record(0, 0)]}))
    with Consumer(service.url, "t", direct=False, limits=FAST) as consumer:
        assert len(consumer.poll(5)) == 1
    assert service.calls("POST", "/consumers") == [
        {"topic": "t"},
        {"topic": "t", "consumer_id": "c-1"},
    ]
    polls = service.calls("GET", "/logs")
    assert len(polls) == 3 and len({(p["request_id"], p["sequence"]) for p in polls}) == 1


# --- produces ------------------------------------------------------------------------------


@pytest.mark.parametrize("refusal", [REVOKED, error(404, ErrorCode.UNKNOWN_TOPIC)])
def test_a_batch_refused_after_an_unknown_attempt_is_dropped_with_its_outcome_unknown(
    service: FakeService, refusal: Scripted
) -> None:
    service.script("POST", "/logs", UNAVAILABLE, refusal)
    with Producer(service.url, "t", direct=False, limits=FAST) as producer:
        with pytest.raises(ProduceError, match="maybe stored") as failed:
            producer.produce_batch(["m"])
        assert failed.value.outcome_unknown and not failed.value.retained
    service.script("POST", "/logs", refusal)  # refused at once: nothing was done
    with Producer(service.url, "t", direct=False, limits=FAST) as producer:
        with pytest.raises(ProduceError, match="rejected and dropped") as refused:
            producer.produce_batch(["m"])
        assert not refused.value.outcome_unknown


def test_a_producer_the_managers_forgot_registers_again_and_resends_the_same_sequence(
    service: FakeService,
) -> None:
    lb_offsets = (201, {"offsets": [{"partition_id": 0, "offset": 4}]})
    service.script("POST", "/logs", UNAVAILABLE, UNKNOWN_PRODUCER)
    service.default("POST", "/logs", lambda _p: lb_offsets)
    with Producer(service.url, "t", direct=False, limits=FAST, first_sequence=9) as producer:
        assert producer.produce_batch(["m"]) == [PartitionOffset(0, 4)]
    assert service.calls("POST", "/producers") == [
        {"topic": "t"},
        {"topic": "t", "producer_id": "p-1"},
    ]
    assert [c["sequence"] for c in service.calls("POST", "/logs")] == [9, 9, 9]
    # Forgotten again after the renewal, and refused: the first attempt may have stored it.
    service.script("POST", "/logs", UNAVAILABLE, UNKNOWN_PRODUCER, REVOKED)
    with (
        Producer(service.url, "t", direct=False, limits=FAST) as producer,
        pytest.raises(ProduceError) as failed,
    ):
        producer.produce_batch(["m"])
    assert failed.value.outcome_unknown and not failed.value.retained


def test_a_direct_group_the_lb_refuses_for_an_unknown_producer_resends_the_batch(
    service: FakeService, brokers: list[FakeService]
) -> None:
    """One partition stored its group at its broker; the other's broker is not the leader
    and the LB answers 404 UNKNOWN_PRODUCER: registered again, the whole batch goes again
    with the same sequence (the stored group comes back as a duplicate)."""
    serve_map(service, brokers)
    brokers[0].default("POST", "/logs", broker_produce)
    brokers[1].script("POST", "/logs", error(503, ErrorCode.NOT_LEADER))
    brokers[1].default("POST", "/logs", broker_produce)
    service.script("POST", "/logs", UNKNOWN_PRODUCER)
    service.default("POST", "/logs", lb_produce)
    keys = {int(partition_for_key(f"k{i}", 2)): f"k{i}" for i in range(20)}
    with Producer(service.url, "t", limits=FAST, first_sequence=2) as producer:
        acked = producer.produce_batch([("a", keys[0]), ("b", keys[1])])
    assert [a.partition_id for a in acked] == [0, 1]
    assert len(service.calls("POST", "/producers")) == 2
    assert [c["sequence"] for c in brokers[0].calls("POST", "/logs")] == [2, 2]
    # The second attempt avoids the broker that refused: the LB takes the group.
    assert [c["sequence"] for c in service.calls("POST", "/logs")] == [2, 2]


def _lb_stores_only(pid: int) -> Handler:
    """The LB's answer to a group: stored for partition ``pid``, nothing done for others."""

    def answer(params: dict[str, object]) -> tuple[int, object]:
        if params.get("partition_id") == pid:
            return lb_produce(params)
        return 503, {"error_code": ErrorCode.NO_LEADER.value, "message": "no leader"}

    return answer


def test_a_failed_batch_reports_the_groups_acknowledged_on_any_attempt(
    service: FakeService, brokers: list[FakeService]
) -> None:
    """Partition 0 stores its group, partition 1 fails: the failure carries partition 0's
    offsets at its messages' places. The resend stores partition 1 and fails partition 0
    (its acknowledgement still holds); the third attempt finds partition 0's group stored."""
    serve_map(service, brokers)
    keys = {int(partition_for_key(f"k{i}", 2)): f"k{i}" for i in range(20)}
    brokers[0].default("POST", "/logs", broker_produce)
    brokers[1].default("POST", "/logs", lambda _p: (503, {"error_code": 50303}))
    service.default("POST", "/logs", _lb_stores_only(pid=0))  # p1 through the LB: no leader
    messages = [("a", keys[0]), ("b", keys[1]), ("c", keys[0])]
    producer = Producer(service.url, "t", limits=FAST, first_sequence=3)
    with pytest.raises(ProduceError) as first:
        producer.produce_batch(messages)
    stored = (Offset(0, 300), None, Offset(0, 301))
    assert first.value.retained and first.value.outcome_unknown
    assert first.value.completed == () and first.value.acked_in_batch == stored
    brokers[0].default("POST", "/logs", lambda _p: (503, {"error_code": 50303}))
    service.default("POST", "/logs", _lb_stores_only(pid=1))
    with pytest.raises(ProduceError) as second:
        producer.flush()
    assert second.value.acked_in_batch == (Offset(0, 300), Offset(1, 300), Offset(0, 301))
    brokers[0].default("POST", "/logs", broker_produce)
    service.default("POST", "/logs", lb_produce)
    assert producer.flush() == [Offset(0, 300), Offset(1, 300), Offset(0, 301)]
    producer.close()
    sent = brokers[0].calls("POST", "/logs") + service.calls("POST", "/logs")
    assert {(c["partition_id"], c["sequence"]) for c in sent} == {(0, 3), (1, 3)}


def test_a_dropped_batch_reports_its_acknowledged_groups_and_a_clean_one_none(
    service: FakeService, brokers: list[FakeService]
) -> None:
    serve_map(service, brokers)
    keys = {int(partition_for_key(f"k{i}", 2)): f"k{i}" for i in range(20)}
    brokers[0].default("POST", "/logs", broker_produce)
    brokers[1].script("POST", "/logs", error(409, ErrorCode.SEQUENCE_OUT_OF_ORDER))
    with Producer(service.url, "t", limits=FAST) as producer:
        with pytest.raises(ProduceError) as dropped:
            producer.produce_batch([("a", keys[1]), ("b", keys[0])])
        assert not dropped.value.retained and producer.pending_messages == 0
        assert dropped.value.acked_in_batch == (None, Offset(0, 0))
        brokers[0].script("POST", "/logs", error(409, ErrorCode.SEQUENCE_OUT_OF_ORDER))
        with pytest.raises(ProduceError) as refused:
            producer.produce_batch([("c", keys[0])])
        assert refused.value.acked_in_batch == ()


def test_a_resend_refused_after_the_managers_forgot_the_producer_may_have_been_stored(
    service: FakeService, brokers: list[FakeService]
) -> None:
    """Partition 0's broker stores its group; partition 1's is not the leader and the LB
    answers 404 UNKNOWN_PRODUCER. The producer registers again and resends; every group is
    then refused (401). The first attempt stored part of the batch, so it is dropped as
    maybe stored, not "rejected"."""
    serve_map(service, brokers)
    keys = {int(partition_for_key(f"k{i}", 2)): f"k{i}" for i in range(20)}
    brokers[0].script("POST", "/logs", Scripted(201, {"partition_id": 0, "offsets": [200]}))
    brokers[0].default("POST", "/logs", lambda _p: (401, REVOKED.body))
    brokers[1].default("POST", "/logs", lambda _p: (503, {"error_code": 50302}))
    service.script("POST", "/logs", UNKNOWN_PRODUCER, REVOKED)
    producer = Producer(service.url, "t", limits=FAST, first_sequence=2)
    with pytest.raises(ProduceError) as dropped:
        producer.produce_batch([("a", keys[0]), ("b", keys[1])])
    producer.close()
    assert dropped.value.outcome_unknown and not dropped.value.retained
    assert dropped.value.acked_in_batch == (Offset(0, 200), None)
    assert len(service.calls("POST", "/producers")) == 2


def test_two_attempts_keep_every_acknowledgement() -> None:
    later = (None, Offset(1, 4), Offset(0, 9))
    assert with_earlier_acks((), later) == later
    earlier = (Offset(0, 7), None, Offset(0, 8))
    assert with_earlier_acks(earlier, later) == (Offset(0, 7), Offset(1, 4), Offset(0, 8))
