"""The cluster's API fuzzed with schemathesis against running processes (issues 9 and 23):
3 managers, 3 brokers and the load balancer as real processes. The load balancer's
document with every request through it and the admin key ``cluster up`` made; a broker's
own document with every request straight to that broker, signed as a node (issue 23).

Every generated request, valid and invalid, must get an answer the document describes; no
5xx but the refusals that prove nothing was done (a real cluster may answer those: 503
NO_LEADER, NOT_LEADER, REFUSED, NOT_ENOUGH_BROKERS and 429 are temporary and safe to
repeat; a 500, a commit timeout or an unknown outcome is a failure); and after every answer
that proves nothing was done, nothing stored: the topics and their partition counts, every
partition's end offset, the API keys and the brokers are as before, and for the broker's
run also the replicas the broker hosts (their specs). (Consumers' positions and producers'
sequences are compared in the in-process broker fuzzing, which reads the state machine
itself; the cluster exposes no view of them.)

The load balancer's document holds no operation for nodes only (it forwards no node
request). A broker's holds them all, and a node may call them: a valid ``POST /partitions``
is refused unless it names a Raft address in the broker's own range (which no generated
one does), ``DELETE /partitions`` and ``POST /partitions/members`` change only a replica
whose Raft address they name (none of the cluster's), so the run cannot take a real
replica away. Bounded: ``EXAMPLES_PER_OPERATION`` derandomized examples per operation
(~500 requests per document), topics of at most 2 partitions (a topic made by a valid
request costs Raft groups on every broker). The membership operations (draining or
removing a broker, adding or removing a manager) are fuzzed in process only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, settings
from schemathesis import Case

from protocol.errors import proves_nothing_done
from protocol.openapi import Node
from raftq import Admin, Producer
from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import create_topic_answer
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.node_signing import TEST_NODE
from unit_tests.openapi_fuzzing import fuzz_schema, judge
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

EXAMPLES_PER_OPERATION = 25
REQUEST_TIMEOUT_S = 30.0
LIMITS = {"topic_partitions_max": "2", "stream_s_max": "1.0", "stream_heartbeat_s": "0.2"}
"""Small partition counts (each costs Raft groups); streams that end within a second (a
generated valid stream would otherwise stay open for ``stream_s_max``, 300 s by default)."""
SCHEMA = (
    fuzz_schema(Node.LOAD_BALANCER, EXAMPLES_PER_OPERATION)
    .exclude(path_regex="^/(managers|brokers/drain)$")
    .exclude(path="/brokers", method="DELETE")
)
"""Membership operations are fuzzed in process only (``unit_tests/manager``): a valid one
would drain a real broker or add a made-up member to the managers' Raft group."""
BROKER_SCHEMA = fuzz_schema(Node.BROKER, EXAMPLES_PER_OPERATION)


class Fuzzed:
    def __init__(self, cluster: Cluster, broker_url: str) -> None:
        self.cluster = cluster
        self.broker_url = broker_url
        """The broker whose own document is fuzzed (it led ``orders`` partition 0)."""
        self.node = cluster.local.node_auth(TEST_NODE)
        self.last_state = self.stored()
        self.last_hosted = self.hosted()
        self.broker_statuses: list[int] = []

    def hosted(self) -> list[tuple[str, int, object]]:
        """The replicas the broker hosts, with their specs (asked as a node)."""
        answer = requests.get(
            f"{self.broker_url}/partitions", auth=self.node, timeout=REQUEST_TIMEOUT_S
        )
        assert answer.status_code == 200, answer.text
        replicas = answer.json()["partitions"]
        return sorted(
            (r["topic"], r["partition_id"], (r["replica_id"], r["raft_address"], r["replicas"]))
            for r in replicas
        )

    def stored(self) -> tuple[Any, ...]:
        """What a request that did nothing must leave as it was."""
        with Admin(self.cluster.lb_url, api_key=self.cluster.admin_key) as admin:
            topics = sorted((t.name, t.partition_count) for t in admin.list_topics())
            ends = {name: admin.end_offsets(name) for name, _ in topics}
            keys = sorted((k.key_id, k.role, tuple(k.topics)) for k in admin.list_keys())
            brokers = sorted((b.broker_id, b.address) for b in admin.brokers())
        return topics, ends, keys, brokers


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    port = CLUSTER_BASE_PORTS["openapi_fuzz"]
    clusters = running_cluster(tmp_path_factory.mktemp("fuzz"), port, LIMITS)
    cluster = next(clusters)
    try:  # down also when seeding fails (a loop over the generator would leave it up)
        _seed(cluster)
        yield Fuzzed(cluster, _leader_broker(cluster, "orders", 0))
    finally:
        clusters.close()


def _seed(cluster: Cluster) -> None:
    """The topic, producer and consumer the document's examples name, so that generated
    requests also reach the paths behind a successful lookup. Made as the client library
    makes them, so that an unknown outcome on a loaded machine is repeated safely (the ids
    are the client's: registering one again answers 200; the batch carries a sequence)."""
    create_topic_answer(cluster, {"name": "orders", "partitions": 2})
    key = cluster.admin_key
    with Producer(cluster.lb_url, "orders", producer_id="producer-1", api_key=key) as producer:
        producer.produce_batch([("m", None)] * 3)
    poll_until(lambda: _registered(cluster, "consumer-1"), 60.0, "consumer-1 registered")


def _registered(cluster: Cluster, consumer_id: str) -> bool:
    """Register (a client-chosen id: again answers 200), repeated while the answer is a 503."""
    answer = cluster.post("/consumers", {"topic": "orders", "consumer_id": consumer_id})
    assert answer.status_code in (200, 201, 503), answer.text
    return answer.status_code != 503


def _leader_broker(cluster: Cluster, topic: str, partition_id: int) -> str:
    def known() -> str | None:
        with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
            part = admin.partitions(topic)[partition_id]
        found = [r.address for r in part.replicas if r.broker_id == part.leader and r.address]
        return found[0] if found else None

    return poll_until(known, 60.0, f"a leader of {topic}/{partition_id}")


def _refusal(status: int, body: object) -> bool:
    return proves_nothing_done(status, body)


@SCHEMA.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,  # real processes on a shared machine: each request is bounded instead
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_cluster_holds_to_its_document(case: Case[Any], fuzzed: Fuzzed) -> None:
    response = case.call(
        base_url=fuzzed.cluster.lb_url,
        timeout=REQUEST_TIMEOUT_S,
        headers={"Authorization": f"Bearer {fuzzed.cluster.admin_key}"},
    )
    did_nothing = judge(case, response, _refusal)
    now = fuzzed.stored()
    if did_nothing:
        assert now == fuzzed.last_state, f"{response.status_code} {response.text} changed state"
    fuzzed.last_state = now


@BROKER_SCHEMA.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_a_broker_holds_to_its_own_document(case: Case[Any], fuzzed: Fuzzed) -> None:
    """Straight to a real broker, each request signed as a node (a fresh signature each:
    the broker takes each once), as the managers and the other brokers call it."""
    response = case.call(base_url=fuzzed.broker_url, timeout=REQUEST_TIMEOUT_S, auth=fuzzed.node)
    fuzzed.broker_statuses.append(response.status_code)
    did_nothing = judge(case, response, _refusal)
    now, hosted = fuzzed.stored(), fuzzed.hosted()
    if did_nothing:
        assert now == fuzzed.last_state, f"{response.status_code} {response.text} changed state"
        assert hosted == fuzzed.last_hosted, f"{response.status_code} {response.text} hosted"
    fuzzed.last_state, fuzzed.last_hosted = now, hosted


def test_the_broker_took_the_signed_requests(fuzzed: Fuzzed) -> None:
    """After the run above: the signatures opened the broker's operations (an answer of
    401 to every request would have passed each check above)."""
    statuses = fuzzed.broker_statuses
    assert len(statuses) >= EXAMPLES_PER_OPERATION, statuses
    assert 401 not in statuses, sorted(set(statuses))
    assert sum(200 <= s < 300 for s in statuses) >= len(statuses) // 10, sorted(set(statuses))
