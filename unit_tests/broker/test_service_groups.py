"""``BrokerService.receive`` and ``settle`` in process (issue 20): leased delivery over the
real group commit, flusher and service code on the in-memory consensus and store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from broker.partition.group_leases import GroupSettings, Receipt
from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService, _runs
from protocol.group_requests import Outcome
from protocol.types import NewMessage, Offset
from unit_tests.broker.test_service import P0, WAIT_S, make_service

SETTINGS = GroupSettings(visibility_timeout_ms=60_000, max_deliveries=3)


@pytest.fixture
def service() -> Iterator[BrokerService]:
    instance = make_service(MemoryMessageStore(), replicas=1)
    instance.produce("orders", P0, tuple(NewMessage(value=f"v{i}") for i in range(6)), None, None)
    yield instance
    instance.close()


def _receive(
    service: BrokerService, n: int, request_id: str | None = None
) -> list[tuple[str, int]]:
    delivered = service.receive("orders", P0, "workers", SETTINGS, n, request_id)
    return [(m.value, count) for m, count in delivered]


def test_a_receive_hands_out_messages_with_their_delivery_counts(service: BrokerService) -> None:
    assert _receive(service, 2, "r1") == [("v0", 1), ("v1", 1)]
    assert _receive(service, 2, "r1") == [("v0", 1), ("v1", 1)]  # a repeat: the same leases
    assert _receive(service, 2, "r2") == [("v2", 1), ("v3", 1)]


def test_a_nacked_message_comes_first_again_and_an_acked_one_never(
    service: BrokerService,
) -> None:
    _receive(service, 3)
    outcomes = service.settle("orders", P0, "workers", "ack", [Receipt(Offset(0), 1)], 0)
    assert outcomes == [Outcome.DONE]
    assert service.settle("orders", P0, "workers", "nack", [Receipt(Offset(2), 1)], 0) == [
        Outcome.DONE
    ]
    assert _receive(service, 3) == [("v2", 2), ("v3", 1), ("v4", 1)]
    stale = service.settle("orders", P0, "workers", "ack", [Receipt(Offset(2), 1)], 0)
    assert stale == [Outcome.STALE]


def test_messages_that_left_memory_are_read_from_the_database(service: BrokerService) -> None:
    """One replica flushes at once; what it flushed leaves memory, so the receive reads
    the leased offsets (not contiguous: a nacked one first) from the store."""
    _wait_until(lambda: _evicted(service) == 6)
    _receive(service, 2)
    service.settle("orders", P0, "workers", "nack", [Receipt(Offset(0), 1)], 0)
    assert _receive(service, 3) == [("v0", 2), ("v2", 1), ("v3", 1)]


def _evicted(service: BrokerService) -> int:
    return service.statuses()[0].evicted_offset


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_runs_of_consecutive_offsets() -> None:
    assert _runs([Offset(o) for o in (0, 1, 2, 5, 7, 8)]) == [(0, 3), (5, 6), (7, 9)]
    assert _runs([]) == []


def test_a_receive_with_nothing_to_hand_out_proposes_no_entry(service: BrokerService) -> None:
    """(Issue 20: a long poll asks again and again; each empty receive was one entry.)"""
    held = service.receive("orders", P0, "workers", SETTINGS, 10, None)
    assert len(held) == 6
    before = _entries(service)
    assert service.receive("orders", P0, "workers", SETTINGS, 10, None) == []
    assert _entries(service) == before
    assert _receive(service, 1, "repeat") == []  # a new request id: nothing either
    assert _entries(service) == before
    service.settle("orders", P0, "workers", "nack", [Receipt(Offset(3), 1)], 0)
    assert _receive(service, 1) == [("v3", 2)]  # something again: proposed


def _entries(service: BrokerService) -> int:
    with service._lock:  # private: the test reads the hosted replica's Raft figures
        replica = next(iter(service._replicas.values()))
    return replica.partition.status().commit_index


def test_per_key_ordering_holds_for_messages_that_left_memory() -> None:
    """The log keeps keys only in memory: a key's second message was handed out beside
    its first once both had been flushed and evicted. The leader now supplies the keys it
    reads from its database with the receive."""
    service = make_service(MemoryMessageStore(), replicas=1)
    try:
        keyed = [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2"), (None, "n")]
        service.produce(
            "orders", P0, tuple(NewMessage(value=v, key=k) for k, v in keyed), None, None
        )
        _wait_until(lambda: _evicted(service) == 5)
        ordered = GroupSettings(visibility_timeout_ms=60_000, max_deliveries=0, ordered_by_key=True)
        first = service.receive("orders", P0, "ordered", ordered, 10, None)
        assert [m.value for m, _ in first] == ["a1", "b1", "n"]
        outcomes = service.settle(
            "orders", P0, "ordered", "ack", [Receipt(m.offset, 1) for m, _ in first], 0
        )
        assert outcomes == [Outcome.DONE] * 3
        second = service.receive("orders", P0, "ordered", ordered, 10, None)
        assert [m.value for m, _ in second] == ["a2", "b2"]
    finally:
        service.close()


def test_an_ordered_receive_carries_the_keys_of_messages_still_in_memory_too() -> None:
    """They may leave memory before the receive is applied, and a key the partition cannot
    see then stops the receive: the dashboard test's ordered group got an empty answer
    with 25 messages there (a flush evicted them between the read and the apply). Three
    replicas, one flushing: nothing leaves memory here."""
    service = make_service(MemoryMessageStore(), replicas=3)
    try:
        messages = tuple(NewMessage(value=f"v{i}", key=f"k{i}") for i in range(6))
        service.produce("orders", P0, messages, None, None)
        replica = service._replica("orders", P0)
        assert replica.partition.read(lambda log: log.evicted_offset) == 0
        keys = service._keys_ahead(replica, "ordered", 2)
        assert keys == tuple((offset, f"k{offset}") for offset in range(4))  # 2 x 2 asked
    finally:
        service.close()


def test_a_message_past_max_deliveries_is_reported_read_from_the_database_and_marked(
    service: BrokerService,
) -> None:
    tagged = NewMessage(value="poison", key="k", headers=(("trace", "t9"),))
    service.produce("orders", P0, (tagged,), None, None)
    _wait_until(lambda: _evicted(service) == 7)  # the letter is read from the store
    for count in (1, 2, 3):  # SETTINGS.max_deliveries
        delivered = service.receive("orders", P0, "workers", SETTINGS, 7, None)
        receipts = [Receipt(m.offset, n) for m, n in delivered if m.value == "poison"]
        assert [r.delivery_count for r in receipts] == [count]
        service.settle("orders", P0, "workers", "nack", receipts, 0)
    (letter,) = service.dead_letters(10)
    assert (letter.topic, letter.partition_id, letter.group) == ("orders", P0, "workers")
    assert (letter.delivery_count, letter.sequence) == (3, 1)
    assert (letter.message.offset, letter.message.key, letter.message.value) == (6, "k", "poison")
    assert letter.message.headers == (("trace", "t9"),)
    service.mark_dead_lettered("orders", P0, "workers", (Offset(6),))
    service.mark_dead_lettered("orders", P0, "workers", (Offset(6),))  # a repeat: no change
    assert service.dead_letters(10) == []
    (figures,) = [g for g in service.group_figures("orders")[0] if g["group"] == "workers"]
    assert (figures["dead_letters_pending"], figures["dead_lettered"]) == (0, 1)
