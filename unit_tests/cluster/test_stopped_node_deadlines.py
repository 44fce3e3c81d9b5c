"""Requests that waited in a stopped node's socket past their caller's deadline (issue 19,
item 7).

A node stopped (SIGSTOP) with a request in its socket buffer reads it only on resuming. A
relative budget (``X-RaftQ-Timeout-Ms``) starts counting then, so the request got its full
budget although its caller was long gone, and a pop claimed a range nobody received: the
consumer skipped it. The absolute deadline (``X-RaftQ-Deadline-Ms``, epoch ms) counts the
stop too, so the resumed node refuses the request before anything is claimed.

Each test stops a node, sends it a pop (a raw request: ``request_id``, no ``sequence``, so
only the deadline can stop a late copy), waits until the caller has given up and the node's
clock-skew allowance has passed, resumes the node, waits for its answer to that pop (its
request counter) and checks that the consumer's next pop starts where it would have.

* Straight to the partition's only broker, with the client library's headers
  (``raftq.http.deadline_headers``): the client now sends the absolute deadline too.
* Through the load balancer to the stopped manager leader, with the relative header only
  (an older client, or curl): the load balancer now sends the absolute deadline onward.

The cluster's Raft election timeouts are longer than a stop, so that the resumed node is
still the leader and nothing but the deadline refuses the late pop.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from protocol.deadline import EPOCH_HEADER, HEADER
from raftq.client_limits import ClientLimits
from raftq.http import Failure, HttpTransport
from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import (
    create_topic,
    create_topic_answer,
    partition_leader,
    pop,
    produce,
    register_consumer,
    register_producer,
)
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

SKEW_S = 0.5
"""The cluster's ``deadline_clock_skew_s_max``: how long past the absolute deadline a node
still works (shorter than the default, to keep the stops short)."""
LIMITS = {
    "deadline_clock_skew_s_max": str(SKEW_S),
    # A stop (about 2 s) must not cost a leader its leadership: the resumed node must be the
    # one that decides about the late pop.
    "raft_election_timeout_min_s": "4.0",
    "raft_election_timeout_max_s": "5.0",
    "raft_leader_fallback_timeout_s": "7.0",
}
BUDGET_S = 1.0
"""How long the caller waits for the late pop."""
PAST_SKEW_S = 0.2
"""How long past ``SKEW_S`` the node stays stopped (same host: one clock)."""
WAIT_S = 60.0
PATIENT_S = 30.0
MESSAGES = 30
POP_MESSAGES = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["stopped_node_deadlines"]
    yield from running_cluster(tmp_path_factory.mktemp("stopped"), port, LIMITS)


def _filled_topic(cluster: Cluster, topic: str, replication_factor: int | None = None) -> str:
    """A topic of one partition holding ``MESSAGES`` messages; a consumer of it."""
    if replication_factor is None:
        create_topic(cluster, topic)
    else:
        body = {"name": topic, "partitions": 1, "replication_factor": replication_factor}
        create_topic_answer(cluster, body)
        poll_until(lambda: _leads(cluster, topic), WAIT_S, f"{topic} to have a leader")
    producer = register_producer(cluster, topic)
    produce(cluster, producer, 1, [(None, f"m{i}") for i in range(MESSAGES)], topic=topic)
    return register_consumer(cluster, topic)


def _leads(cluster: Cluster, topic: str) -> bool:
    try:
        return partition_leader(cluster, topic, 0) > 0
    except AssertionError:
        return False


def _pops_answered(cluster: Cluster, url: str) -> dict[str, float]:
    """status -> ``GET /logs`` answers the node at ``url`` has given (its request counter)."""
    text = cluster.http.get(f"{url}/metrics", timeout=PATIENT_S).text
    found: dict[str, float] = {}
    for line in text.splitlines():
        if "_http_requests_total{" in line and 'route="/logs"' in line and 'method="GET"' in line:
            labels, value = line.rsplit(" ", 1)
            status = labels.split('status="', 1)[1].split('"', 1)[0]
            found[status] = found.get(status, 0.0) + float(value)
    return found


def _late_pop_answered(
    cluster: Cluster, name: str, url: str, send: Callable[[], None], before: dict[str, float]
) -> dict[str, float]:
    """Stop node ``name``, ``send`` it the pop (returns once its caller gave up), keep the
    node stopped past the absolute deadline plus the skew allowance, resume it, and wait for
    its answer: the statuses it answered since ``before``. The deadline is at most the send
    plus its budget, not "when the caller gave up": an answer that came early would end the
    stop too soon (CI saw the manager case answer 200 once, the late pop having claimed
    [0, 10): resumed, it seems, before the deadline the load balancer sent onward; what
    answered the caller early is not known yet)."""
    cluster.kill(name, signal.SIGSTOP)
    try:
        sent_s = time.time()
        send()
        gave_up_s = max(time.time(), sent_s + BUDGET_S)
        poll_until(
            lambda: time.time() > gave_up_s + SKEW_S + PAST_SKEW_S,
            WAIT_S,
            "the skew allowance to pass",
            period_s=0.05,
        )
    finally:
        cluster.kill(name, signal.SIGCONT)

    def answered() -> dict[str, float] | None:
        now = _pops_answered(cluster, url)
        new = {s: now[s] - before.get(s, 0.0) for s in now if now[s] > before.get(s, 0.0)}
        return new or None

    return poll_until(answered, WAIT_S, f"{name} to answer the late pop")


def _offsets(messages: list[dict[str, Any]]) -> list[int]:
    return [m["offset"] for m in messages]


def test_a_broker_stopped_past_the_clients_deadline_claims_nothing(cluster: Cluster) -> None:
    consumer = _filled_topic(cluster, "stopped-broker", replication_factor=1)
    broker_id = partition_leader(cluster, "stopped-broker", 0)
    url = cluster.broker_url(broker_id)
    transport = HttpTransport(url, ClientLimits(), api_key=cluster.admin_key)
    params: dict[str, str | int] = {
        "topic": "stopped-broker",
        "partition_id": 0,
        "consumer_id": consumer,
        "max_messages": POP_MESSAGES,
        "request_id": "late",
    }

    def send() -> None:
        reply = transport.send_once(url, "GET", "/logs", params=params, read_timeout_s=BUDGET_S)
        assert isinstance(reply, Failure) and reply.outcome_unknown, reply

    try:
        new = _late_pop_answered(
            cluster, cluster.broker_name(broker_id), url, send, _pops_answered(cluster, url)
        )
    finally:
        transport.close()
    after = _offsets(pop(cluster, consumer, POP_MESSAGES, "after"))
    assert after == list(range(POP_MESSAGES)), f"the late pop ({new}) claimed before {after}"
    assert new == {"503": 1.0}, f"the late pop was answered {new}: it was not refused"


def test_a_manager_stopped_past_the_callers_deadline_claims_nothing(cluster: Cluster) -> None:
    """The client sends the relative budget only; the load balancer turns it into an
    absolute deadline on its way to the stopped manager."""
    consumer = _filled_topic(cluster, "stopped-manager")
    leader = cluster.manager_leader()
    url = str(cluster.node(leader)["http_address"])
    params: dict[str, str | int] = {
        "consumer_id": consumer,
        "max_messages": POP_MESSAGES,
        "request_id": "late",
    }
    budget = {HEADER: str(int(BUDGET_S * 1000))}

    def send() -> None:
        try:
            answer = cluster.http.get(
                f"{cluster.lb_url}/logs", params=params, headers=budget, timeout=PATIENT_S
            )
        except requests.RequestException as exc:
            raise AssertionError(f"the load balancer did not answer: {exc}") from exc
        assert answer.status_code == 503, answer.text  # it gave up at the deadline
        assert EPOCH_HEADER not in answer.request.headers

    new = _late_pop_answered(cluster, leader, url, send, _pops_answered(cluster, url))
    after = _offsets(pop(cluster, consumer, POP_MESSAGES, "after"))
    assert after == list(range(POP_MESSAGES)), f"the late pop ({new}) claimed before {after}"
    assert new == {"503": 1.0}, f"the late pop was answered {new}: it was not refused"
