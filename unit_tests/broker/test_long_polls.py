"""Long polls and streams at a broker (issue 24), in process over the consensus twin: a
fetch or pop that waits returns once a message is applied, without a Raft entry while it
waits; ``if_ready`` proposes nothing when there is nothing; a stream sends each new message
as an event, heartbeats while idle, ends after ``stream_s_max`` saying where to go on, and
is bounded in number. Every wait here is bounded; none is a timing assertion."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker.partition.group_leases import GroupSettings
from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService, LongPoll
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.streams import END, ERROR, MESSAGES, Event, EventReader
from protocol.types import NewMessage
from unit_tests.broker.test_service import LIMITS, P0, make_service

WAIT_S = 5.0
"""A long poll's bound in these tests: far longer than a message takes to arrive."""


@pytest.fixture
def service() -> Iterator[BrokerService]:
    instance = make_service(MemoryMessageStore(), replicas=1)
    yield instance
    instance.close()


def produce_later(service: BrokerService, value: str, delay_s: float = 0.2) -> threading.Timer:
    timer = threading.Timer(
        delay_s, lambda: service.produce("orders", P0, (NewMessage(value=value),), None, None)
    )
    timer.start()
    return timer


def count_pops(service: BrokerService, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The request id of every pop the partition is asked to apply from now on."""
    replica = service._replica("orders", P0).partition
    proposed: list[str] = []
    consume = replica.consume

    def counted(
        consumer_id: str, max_messages: int, request_id: str | None, *rest: object
    ) -> object:
        proposed.append(str(request_id))
        return consume(consumer_id, max_messages, request_id, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(replica, "consume", counted)
    return proposed


def test_a_fetch_at_the_end_waits_for_the_next_message(service: BrokerService) -> None:
    produce_later(service, "late")
    found = service.fetch("orders", P0, 0, 10, wait_s=WAIT_S)
    assert [m.value for m in found] == ["late"]
    assert service.fetch("orders", P0, 1, 10, wait_s=0.05) == []  # the wait ends: empty


def test_a_waiting_pop_proposes_nothing_until_a_message_comes(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.produce("orders", P0, (NewMessage(value="first"),), None, None)
    assert [m.value for m in service.pop("orders", P0, "c", 10, "r1", 1)] == ["first"]
    proposed = count_pops(service, monkeypatch)
    timer = produce_later(service, "second", delay_s=0.3)
    found = service.pop("orders", P0, "c", 10, "r2", 2, wait=LongPoll(WAIT_S))
    timer.join()
    assert [m.value for m in found] == ["second"]
    assert proposed == ["r2"]  # once, when there was something to claim
    assert service.pop("orders", P0, "c", 10, "r3", 3, wait=LongPoll(0.05)) == []
    assert proposed == ["r2", "r3"]  # a wait that ends empty proposes the empty pop


def test_a_pop_if_ready_with_nothing_to_claim_proposes_nothing(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.produce("orders", P0, (NewMessage(value="only"),), None, None)
    service.pop("orders", P0, "c", 10, "r1", 1)
    proposed = count_pops(service, monkeypatch)
    assert service.pop("orders", P0, "c", 10, "r2", 2, wait=LongPoll(if_ready=True)) == []
    assert proposed == []
    # A repeat of the answered pop is answered again, ready or not (its range, not nothing).
    repeat = service.pop("orders", P0, "c", 10, "r1", 1, wait=LongPoll(if_ready=True))
    assert [m.value for m in repeat] == ["only"]


def test_a_waiting_receive_leases_a_message_whose_lease_ends_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A consumer group's long poll at the broker: a lease that ends during the wait is
    handed out again then (the wait wakes at the group's next change by time, not at a
    polling period), and no receive is proposed while nothing can be leased."""
    service = make_service(
        MemoryMessageStore(), replicas=1, clock_ms=lambda: int(time.time() * 1000)
    )
    try:
        service.produce("orders", P0, (NewMessage(value="job"),), None, None)
        settings = GroupSettings(visibility_timeout_ms=300, max_deliveries=0)
        first = service.receive("orders", P0, "workers", settings, 10, "r1")
        assert [(m.value, count) for m, count in first] == [("job", 1)]
        replica = service._replica("orders", P0).partition
        proposed: list[object] = []
        receive = replica.receive

        def counted(*args: Any) -> Any:
            proposed.append(args)
            return receive(*args)

        monkeypatch.setattr(replica, "receive", counted)
        again = service.receive("orders", P0, "workers", settings, 10, "r2", wait_s=WAIT_S)
        assert [(m.value, count) for m, count in again] == [("job", 2)]
        assert len(proposed) == 1  # only the receive that leased it
        assert replica.read(lambda log: log.groups.next_change_ms("workers", 0)) is not None
    finally:
        service.close()


def read(chunks: Iterator[bytes], count: int) -> list[Event]:
    """The next ``count`` events of a stream (heartbeats are comments: not events)."""
    reader, found = EventReader(), list[Event]()
    while len(found) < count:
        for line in next(chunks).split(b"\n"):
            found.extend(reader.feed(line))
    return found


def test_a_stream_sends_messages_as_they_come_then_ends_saying_where_to_go_on() -> None:
    limits = Limits(flush_period_s=0.01, stream_heartbeat_s=0.1, stream_s_max=1.0)
    service = make_service(MemoryMessageStore(), replicas=1, limits=limits)
    try:
        service.produce("orders", P0, (NewMessage(value="a", key="k"),), None, None)
        chunks = service.stream("orders", P0, 0, 100)
        (first,) = read(chunks, 1)
        assert (first.kind, first.event_id) == (MESSAGES, "1")
        assert isinstance(first.data, dict)
        assert [(m["key"], m["message"]) for m in first.data["messages"]] == [("k", "a")]
        produce_later(service, "b", delay_s=0.05)
        (second,) = read(chunks, 1)
        assert isinstance(second.data, dict) and second.data["messages"][0]["offset"] == 1
        (last,) = read(chunks, 1)  # idle: heartbeats, then the end after stream_s_max
        assert last.kind == END and last.data == {
            "next_offset": 2,
            "reason": "stream_s_max: reconnect from next_offset",
        }
        assert list(chunks) == []
    finally:
        service.close()


def test_streams_are_bounded_and_a_closed_one_frees_its_place() -> None:
    service = make_service(MemoryMessageStore(), replicas=1, limits=Limits(streams_max=1))
    try:
        chunks = service.stream("orders", P0, 0, 10)
        with pytest.raises(RaftQError) as full:
            service.stream("orders", P0, 0, 10)
        assert full.value.code is ErrorCode.REFUSED
        chunks.close()  # the reader went away before the first event
        service.stream("orders", P0, 0, 10).close()
    finally:
        service.close()


def test_a_stream_of_a_replica_no_longer_hosted_ends_with_an_error() -> None:
    service = make_service(MemoryMessageStore(), replicas=1, limits=LIMITS)
    try:
        with pytest.raises(RaftQError) as beyond:
            service.stream("orders", P0, 5, 10)  # past the end: refused before any event
        assert beyond.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
        chunks = service.stream("orders", P0, 0, 10)
        assert service.drop("orders", P0, "127.0.0.1:9000")  # this broker hosts it no more
        (event,) = read(chunks, 1)
        assert event.kind == ERROR
        assert isinstance(event.data, dict)
        assert event.data["error_code"] == ErrorCode.UNKNOWN_PARTITION.value
    finally:
        service.close()
