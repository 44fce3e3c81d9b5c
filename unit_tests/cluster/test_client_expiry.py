"""Idle clients expire on a real cluster (``client_idle_expiry_s``, here a few seconds): a
partition at its consumer limit takes a new consumer once the idle ones expired, the managers
forget the idle registrations, and active clients (which renew their lease while they work)
keep their offsets, their dedup window and every acknowledged message."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from protocol.errors import ErrorCode
from raftq import ApiError, Consumer, Producer
from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import create_topic, pop, post_when_ready, produce
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

EXPIRY_S = 4.0
CONSUMERS_MAX = 4
LIMITS = {
    "client_idle_expiry_s": str(EXPIRY_S),
    "partition_consumers_max": str(CONSUMERS_MAX),
}
TOPIC = "expiry"
WAIT_S = 20 * EXPIRY_S
_CLIENTS = re.compile(r'^raftq_manager_registry_objects\{kind="clients"\} (\S+)$', re.MULTILINE)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["client_expiry"]
    yield from running_cluster(tmp_path_factory.mktemp("expiry"), port, LIMITS)


class ActiveClients:
    """A producer and a consumer that keep working while the others idle."""

    def __init__(self, cluster: Cluster) -> None:
        self.producer = Producer(cluster.lb_url, TOPIC, partition_id=0, api_key=cluster.admin_key)
        self.consumer = Consumer(cluster.lb_url, TOPIC, 0, api_key=cluster.admin_key)
        self.acked: list[str] = []
        self.popped: list[tuple[int, str]] = []

    def work(self) -> None:
        value = f"active-{len(self.acked)}"
        self.producer.send(value)
        assert len(self.producer.flush()) == 1
        self.acked.append(value)
        self.popped += [(r.offset, r.value) for r in self.consumer.poll(100)]

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


def test_idle_clients_expire_and_active_ones_lose_nothing(cluster: Cluster) -> None:
    create_topic(cluster, TOPIC)
    active = ActiveClients(cluster)
    active.work()
    idle_acked = _idle_producers(cluster, 3)
    for number in range(CONSUMERS_MAX - 1):  # with the active one: the partition is full
        idle = _register_consumer(cluster)
        assert len(pop(cluster, idle, 1, f"idle-{number}")) == 1
    idle_since_s = time.monotonic()
    newcomer = Consumer(cluster.lb_url, TOPIC, 0, api_key=cluster.admin_key)
    with pytest.raises(ApiError) as refused:
        newcomer.poll(100)
    assert refused.value.code is ErrorCode.TOO_MANY
    assert _registered_clients(cluster) == 9

    newcomer_got = poll_until(
        lambda: _newcomer_pops(newcomer, active), WAIT_S, "a new consumer in a full partition"
    )
    # Not before they idled for the expiry (less the duration of their last pop).
    assert time.monotonic() - idle_since_s >= EXPIRY_S - 1.0
    assert [value for _, value in newcomer_got][:1] == ["active-0"]  # a new one starts at 0
    poll_until(
        lambda: _forgotten_idle_registrations(cluster, active),
        WAIT_S,
        "the managers to forget the idle registrations",
    )

    _check_active_clients_kept_everything(cluster, active, idle_acked)
    newcomer.close()
    active.close()


def _newcomer_pops(newcomer: Consumer, active: ActiveClients) -> list[tuple[int, str]] | None:
    active.work()
    try:
        return [(r.offset, r.value) for r in newcomer.poll(100)]
    except ApiError as exc:
        if exc.code is not ErrorCode.TOO_MANY:
            raise
        return None


def _forgotten_idle_registrations(cluster: Cluster, active: ActiveClients) -> bool:
    """True once only the active producer and consumer and the newcomer are registered."""
    active.work()
    return _registered_clients(cluster) <= 3


def _check_active_clients_kept_everything(
    cluster: Cluster, active: ActiveClients, idle_acked: list[str]
) -> None:
    # Its dedup window survived: a retry of its last batch returns the original offset.
    last_sequence = active.producer._next_sequence - 1
    retried = produce(
        cluster, active.producer.producer_id, last_sequence, [(None, active.acked[-1])], topic=TOPIC
    )
    for _ in range(3):
        active.work()  # also pops what is left
    assert retried[0].offset == next(o for o, v in active.popped if v == retried[0].value)
    # Its offset survived: every acknowledged message exactly once, in order, from 0.
    offsets = [offset for offset, _ in active.popped]
    assert offsets == list(range(len(offsets)))
    assert sorted(v for _, v in active.popped) == sorted(active.acked + idle_acked)


def _idle_producers(cluster: Cluster, count: int) -> list[str]:
    acked = []
    for number in range(count):
        answer = post_when_ready(cluster, "/producers", {"topic": TOPIC})
        assert answer.status_code == 201 and answer.json()["idle_expiry_s"] == EXPIRY_S
        value = f"idle-{number}"
        produce(cluster, answer.json()["producer_id"], 0, [(None, value)], topic=TOPIC)
        acked.append(value)
    return acked


def _register_consumer(cluster: Cluster) -> str:
    answer = post_when_ready(cluster, "/consumers", {"topic": TOPIC, "partition_id": 0})
    assert answer.status_code == 201
    consumer_id: str = answer.json()["consumer_id"]
    return consumer_id


def _registered_clients(cluster: Cluster) -> int:
    """Producers plus consumers the managers remember, as the leader's metrics say."""
    url = cluster.node(cluster.manager_leader())["http_address"]
    found = _CLIENTS.search(cluster.http.get(f"{url}/metrics", timeout=10).text)
    assert found is not None, "no client count in the manager's metrics"
    return int(float(found.group(1)))
