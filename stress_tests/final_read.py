"""The final full read: every partition through every broker, directly (not through the
managers), once the replicas have caught up and flushed. Produces the ``FinalRead`` the
checker compares with the history.

Reads as a node (``node_session``). The database checksums (``/checksum``) are for nodes
only, so those calls sign as a node themselves, whatever the caller's session carries
(a session with an API key also serves ``wait_converged`` and ``read_replica``).
``membership_read`` reads its moving replicas with the same functions, from their log start.
"""

from __future__ import annotations

import functools
import time
from http import HTTPStatus
from typing import Any

import requests

from ops.cluster import LocalCluster
from stress_tests.cluster_view import broker_names, get_json, replica_status
from stress_tests.credentials import STRESS_NODE, node_session
from stress_tests.history import Entry, FinalRead, RangeSum, ReplicaLog
from stress_tests.polling import poll_until

FETCH_PAGE_MESSAGES = 10_000
"""The broker's fetch limit (``fetch_messages_max``)."""
CHECKSUM_RANGE_MESSAGES = 5_000
READ_TIMEOUT_S = 30.0
CONVERGE_TIMEOUT_S = 90.0
CONVERGE_POLL_S = 0.5
PAGES_MAX = 1_000
REPLICAS = 3
"""Every partition's replicas: the final read waits for all three to answer."""


def wait_converged(
    cluster: LocalCluster, session: requests.Session, topic: str, partition_id: int
) -> int | None:
    """The partition's end offset once all three replicas report it, each caught up (its
    state holds every committed entry: right after a restart of every node they may all
    agree on a stale one) and have flushed it; None if that does not happen within
    ``CONVERGE_TIMEOUT_S`` (the checker will then see the difference)."""
    deadline_s = time.monotonic() + CONVERGE_TIMEOUT_S
    while time.monotonic() < deadline_s:
        status = replica_status(cluster, session, topic, partition_id)
        ends = {int(s.get("end_offset", -1)) for s in status.values()}
        caught_up = all(s.get("caught_up") is True for s in status.values())
        if len(status) == REPLICAS and len(ends) == 1 and caught_up:
            end = ends.pop()
            flushed = [flushed_offset(cluster, session, b, topic, partition_id) for b in status]
            if all(f is not None and f >= end for f in flushed):
                return end
        time.sleep(CONVERGE_POLL_S)
    return None


def flushed_offset(
    cluster: LocalCluster, session: requests.Session, broker: str, topic: str, partition_id: int
) -> int | None:
    """How far the broker's replica has flushed to its database; None without an answer."""
    url = cluster.node(broker).http_address + "/checksum"
    query = f"topic={topic}&partition_id={partition_id}&start=0&end=0"
    body = get_json(session, f"{url}?{query}", auth=cluster.node_auth(STRESS_NODE))
    return int(body["flushed_offset"]) if isinstance(body, dict) else None


def read_replica(
    cluster: LocalCluster,
    session: requests.Session,
    broker: str,
    topic: str,
    partition_id: int,
    start: int = 0,
) -> tuple[Entry, ...]:
    """Every message the replica serves from offset ``start`` (its log start, once retention
    dropped a prefix) until it returns an empty page."""
    entries: list[Entry] = []
    url = cluster.node(broker).http_address + "/logs"
    for _ in range(PAGES_MAX):
        params: dict[str, str | int] = {
            "topic": topic,
            "partition_id": partition_id,
            "offset": start + len(entries),
            "max_messages": FETCH_PAGE_MESSAGES,
        }
        page = poll_until(
            functools.partial(_page, session, url, params),
            CONVERGE_TIMEOUT_S,
            f"{broker} {topic}/{partition_id} to serve offset {params['offset']}",
        )
        if not page:
            return tuple(entries)
        entries += [
            Entry(int(m["offset"]), m.get("key"), str(m["message"]), int(m["timestamp_ms"]))
            for m in page
        ]
    raise RuntimeError(f"{broker} {topic}/{partition_id}: more than {PAGES_MAX} pages")


def _page(
    session: requests.Session, url: str, params: dict[str, str | int]
) -> list[dict[str, Any]] | None:
    """One fetch; None while the replica answers 503 (it has not applied an entry of its
    current term yet: an election, even one after the caller saw it converge)."""
    with session.get(url, params=params, timeout=READ_TIMEOUT_S) as response:
        if response.status_code == HTTPStatus.SERVICE_UNAVAILABLE:
            return None
        response.raise_for_status()
        page: list[dict[str, Any]] = response.json()["messages"]
        return page


def database_sums(
    cluster: LocalCluster,
    session: requests.Session,
    broker: str,
    topic: str,
    partition_id: int,
    end: int,
    start: int = 0,
) -> tuple[RangeSum, ...]:
    """``GET /checksum`` over ``[start, end)`` in ranges of ``CHECKSUM_RANGE_MESSAGES``."""
    url = cluster.node(broker).http_address + "/checksum"
    auth = cluster.node_auth(STRESS_NODE)
    sums = []
    for low in range(start, end, CHECKSUM_RANGE_MESSAGES):
        params: dict[str, str | int] = {
            "topic": topic,
            "partition_id": partition_id,
            "start": low,
            "end": min(end, low + CHECKSUM_RANGE_MESSAGES),
        }
        with session.get(url, params=params, auth=auth, timeout=READ_TIMEOUT_S) as response:
            response.raise_for_status()
            body = response.json()
        sums.append(
            RangeSum(int(body["start"]), int(body["end"]), int(body["count"]), str(body["sha256"]))
        )
    return tuple(sums)


def final_read(cluster: LocalCluster, topic: str, partition_count: int) -> tuple[FinalRead, bool]:
    """(every replica's log and database sums, whether all partitions converged in time)."""
    replicas = []
    converged = True
    with node_session(cluster) as session:
        for partition_id in range(partition_count):
            end = wait_converged(cluster, session, topic, partition_id)
            converged = converged and end is not None
            for broker in broker_names(cluster):  # the tiers' three brokers host every partition
                entries = read_replica(cluster, session, broker, topic, partition_id)
                sums = database_sums(cluster, session, broker, topic, partition_id, len(entries))
                broker_id = int(broker.rsplit("-", 1)[1])
                replicas.append(ReplicaLog(broker_id, partition_id, entries, sums))
    return FinalRead(tuple(replicas), partition_count), converged
