"""Producers and consumers renew their registration lease (``raftq.lease``) while active, and a
failed renewal never fails the produce or pop. A fake clock, and the scripted fake service."""

from __future__ import annotations

from raftq import ClientLimits, Consumer, Producer
from raftq.lease import Lease
from unit_tests.raftq.fake_service import FakeService, Reply

FAST = ClientLimits(
    connect_timeout_s=0.5,
    request_timeout_s=0.5,
    attempts_max=2,
    backoff_s_initial=0.001,
    backoff_s_max=0.01,
)
LEASE = {"idle_expiry_s": 30.0}


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_a_lease_is_due_after_a_third_and_retried_after_a_sixth_when_renewal_failed() -> None:
    clock = FakeClock()
    lease = Lease(clock)
    lease.renewed({"producer_id": "p"})  # an older server: no lease, never due
    clock.now_s += 1e6
    assert not lease.due()
    lease.renewed(LEASE)
    clock.now_s += 9.9
    assert not lease.due()
    clock.now_s += 0.1
    assert lease.due()
    lease.failed()
    clock.now_s += 4.9
    assert not lease.due()
    clock.now_s += 0.1
    assert lease.due()
    for bad in ({"idle_expiry_s": True}, {"idle_expiry_s": -1}, {"idle_expiry_s": "1"}, None):
        Lease(clock).renewed(bad)
        assert not Lease(clock).due()


def test_an_active_producer_renews_with_its_id_and_a_failed_renewal_fails_nothing(
    service: FakeService,
) -> None:
    service.default("POST", "/logs", lambda _p: (201, {"partition_id": 0, "offset": 0}))
    clock = FakeClock()
    with Producer(service.url, "t", limits=FAST, direct=False) as producer:
        producer._lease = Lease(clock)
        producer._lease.renewed(LEASE)
        producer.send("a")
        producer.flush()
        assert len(service.calls("POST", "/producers")) == 1  # not due yet
        clock.now_s += 10
        service.script("POST", "/producers", *[Reply(503, {"error_code": 50301})] * 2)
        producer.send("b")
        producer.flush()  # the renewal failed, the batch went
        assert len(service.calls("POST", "/logs")) == 2
        clock.now_s += 5
        producer.send("c")
        producer.flush()
    renewals = service.calls("POST", "/producers")
    assert len(renewals) == 4 and renewals[-1] == {"topic": "t", "producer_id": "p-1"}


def test_a_consumer_registered_here_renews_with_its_id(service: FakeService) -> None:
    service.default("GET", "/logs", lambda _p: (200, {"messages": []}))
    clock = FakeClock()
    with Consumer(service.url, "t", 1, limits=FAST, direct=False) as consumer:
        consumer._lease = Lease(clock)
        consumer._lease.renewed(LEASE)
        consumer.poll()
        clock.now_s += 10
        consumer.poll()
        consumer.poll()
    assert service.calls("POST", "/consumers") == [
        {"topic": "t", "partition_id": 1},
        {"topic": "t", "partition_id": 1, "consumer_id": "c-1"},
    ]
