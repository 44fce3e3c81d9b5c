"""Pops repeated after retention, and late copies from raw clients (issue 19 items 5, 7).

* A pop whose answer was lost, repeated with the same sequence after retention moved the log
  start into its range, answers what retention left of it. It used to answer 503 REFUSED
  forever (the range's first rows were deleted on every replica), wedging the consumer; a
  consumer resumed with a new sequence then skipped the retained rest of the range.
* A raw client (a request id, no sequence) whose old pop is forwarded late, after newer
  pops, by a manager that was stalled: the copy claimed a fresh range nobody received.
  The partition now remembers the consumer's recent request ids: the copy gets its own
  range again and claims nothing. (Sent here as a stalled manager would send it on
  resuming: straight to the partition leader's broker.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stress_tests.cluster_view import replica_status
from stress_tests.polling import WaitTimeoutError, poll_until
from unit_tests.cluster.client_ops import (
    checksums,
    create_topic_answer,
    partition_leader,
    produce,
    register_consumer,
    register_producer,
)
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

WAIT_S = 60.0
REPLAY_WAIT_S = 20.0
"""How long the repeated pop may be refused: retention's deletes are done by then."""
LIMITS = {"retention_check_period_s": "0.2"}
VALUE_CHARS = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["pop_replays"]
    yield from running_cluster(tmp_path_factory.mktemp("pop-replays"), port, LIMITS)


def _values(first: int, count: int) -> list[tuple[str | None, str]]:
    return [(None, f"{i:0{VALUE_CHARS}d}") for i in range(first, first + count)]


def _pop(
    cluster: Cluster, consumer: str, request_id: str, sequence: int | None, wait_s: float = WAIT_S
) -> list[int]:
    """One pop through the load balancer, repeated (same request id and sequence) while
    the outcome is unknown or refused, as a client following the contract does."""
    params: dict[str, str | int] = {
        "consumer_id": consumer,
        "max_messages": 10,
        "request_id": request_id,
    }
    if sequence is not None:
        params["sequence"] = sequence

    def attempt() -> list[int] | None:
        response = cluster.get("/logs", **params)
        if response.status_code in (429, 503):
            return None
        assert response.status_code == 200, response.text
        return [m["offset"] for m in response.json()["messages"]] or None

    return poll_until(attempt, wait_s, f"pop {request_id}")


def _wait_for_log_start_everywhere(cluster: Cluster, topic: str, log_start: int) -> None:
    """Until every replica's log starts at ``log_start`` and holds no row below it. On a
    timeout the failure shows what each replica said last (CI once saw it not within 60 s
    on a loaded machine, with nothing to tell which replica lagged)."""
    seen: dict[str, object] = {}

    def everywhere() -> bool:
        statuses = replica_status(cluster.local, cluster.http, topic, 0)
        seen["log starts"] = {b: s["log_start_offset"] for b, s in statuses.items()}
        if len(statuses) != 3 or any(s["log_start_offset"] != log_start for s in statuses.values()):
            return False
        rows = checksums(cluster, topic, 0, log_start)
        seen["rows below"] = {b: count for b, (count, _, _) in rows.items()}
        return {count for count, _, _ in rows.values()} == {0}

    try:
        poll_until(everywhere, WAIT_S, "retention")
    except WaitTimeoutError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}") from exc


def test_a_pop_repeated_after_retention_answers_the_retained_part(cluster: Cluster) -> None:
    create_topic_answer(
        cluster, {"name": "replayed", "partitions": 1, "retention_bytes": 20 * VALUE_CHARS}
    )
    register_producer(cluster, "replayed", "p")
    produce(cluster, "p", 1, _values(0, 20), topic="replayed")
    consumer = register_consumer(cluster, "replayed")
    assert _pop(cluster, consumer, "lost", 100) == list(range(10))  # its answer is lost
    produce(cluster, "p", 2, _values(20, 5), topic="replayed")  # retention: keep 20
    _wait_for_log_start_everywhere(cluster, "replayed", 5)

    replayed = _pop(cluster, consumer, "lost", 100, REPLAY_WAIT_S)
    assert replayed == list(range(5, 10)), "the retained part of the claimed range"
    resumed = _pop(cluster, consumer, "next", 101) + _pop(cluster, consumer, "last", 102)
    assert replayed + resumed == list(range(5, 25)), "nothing retained was skipped"


def test_a_raw_clients_old_request_id_replayed_late_claims_nothing(cluster: Cluster) -> None:
    create_topic_answer(cluster, {"name": "raw-late", "partitions": 1})
    register_producer(cluster, "raw-late", "q")
    produce(cluster, "q", 1, _values(0, 30), topic="raw-late")
    consumer = register_consumer(cluster, "raw-late")
    assert _pop(cluster, consumer, "a", None) == list(range(10))
    assert _pop(cluster, consumer, "b", None) == list(range(10, 20))

    leader = cluster.broker_url(partition_leader(cluster, "raw-late", 0))
    late = cluster.http.get(
        f"{leader}/logs",
        params={
            "topic": "raw-late",
            "partition_id": "0",
            "consumer_id": consumer,
            "max_messages": "10",
            "request_id": "a",
        },
        timeout=WAIT_S,
    )
    assert late.status_code == 200, late.text
    assert [m["offset"] for m in late.json()["messages"]] == list(range(10)), "its own range"
    assert _pop(cluster, consumer, "c", None) == list(range(20, 30)), "nothing skipped"
