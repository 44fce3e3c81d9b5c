"""Who leads what, asked of the nodes themselves (not of the managers' possibly stale view).

Functions of a ``LocalCluster`` and a ``requests.Session``; every call has a short timeout, so
a paused node makes an answer ``None``, never a hang. The session carries the credentials
(``credentials.py``): a node's signature or an API key both serve every call here (a broker's
``GET /partitions`` is for any key; a manager's ``/raft_status`` shows ``is_leader`` to all).
"""

from __future__ import annotations

from typing import Any

import requests
import requests.auth

from ops.cluster import LocalCluster

PROBE_TIMEOUT_S = 1.0


def broker_names(cluster: LocalCluster) -> tuple[str, ...]:
    """``broker-1`` .. ``broker-N``: every broker the cluster has (``cluster up --brokers``,
    ``broker add``)."""
    return _names_of(cluster, "broker")


def manager_names(cluster: LocalCluster) -> tuple[str, ...]:
    return _names_of(cluster, "manager")


def _names_of(cluster: LocalCluster, role: str) -> tuple[str, ...]:
    return tuple(name for name in cluster.node_names if cluster.node(name).role == role)


def get_json(
    session: requests.Session,
    url: str,
    timeout_s: float = PROBE_TIMEOUT_S,
    headers: dict[str, str] | None = None,
    auth: requests.auth.AuthBase | None = None,
) -> Any:
    """The JSON body of a 200 answer, or None (no answer, other status, not JSON).
    ``headers`` go with this request on top of the session's; ``auth`` signs it as a node
    (``LocalCluster.node_auth``) whatever the session's credentials."""
    try:
        with session.get(url, timeout=timeout_s, headers=headers, auth=auth) as response:
            return response.json() if response.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


def broker_partitions(
    cluster: LocalCluster, session: requests.Session, broker: str
) -> list[dict[str, Any]]:
    body = get_json(session, cluster.node(broker).http_address + "/partitions")
    parts = body.get("partitions") if isinstance(body, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def broker_replica(
    cluster: LocalCluster, session: requests.Session, broker: str, topic: str, partition_id: int
) -> dict[str, Any] | None:
    """The broker's status of its replica of the partition; None when it hosts none (or does
    not answer)."""
    for part in broker_partitions(cluster, session, broker):
        if (part.get("topic"), part.get("partition_id")) == (topic, partition_id):
            return part
    return None


def partition_leader(
    cluster: LocalCluster, session: requests.Session, topic: str, partition_id: int
) -> str | None:
    """Name of the broker whose replica says it leads the partition (running brokers only)."""
    for broker in broker_names(cluster):
        if not cluster.is_running(broker):
            continue
        for part in broker_partitions(cluster, session, broker):
            if (part.get("topic"), part.get("partition_id")) == (topic, partition_id) and part.get(
                "is_leader"
            ):
                return broker
    return None


def manager_leader(cluster: LocalCluster, session: requests.Session) -> str | None:
    for manager in manager_names(cluster):
        if not cluster.is_running(manager):
            continue
        body = get_json(session, cluster.node(manager).http_address + "/raft_status")
        if isinstance(body, dict) and body.get("is_leader") is True:
            return manager
    return None


def replica_status(
    cluster: LocalCluster, session: requests.Session, topic: str, partition_id: int
) -> dict[str, dict[str, Any]]:
    """broker name -> its replica's status (end offset, flushed offsets, leader), for the
    brokers that answer."""
    found = {}
    for broker in broker_names(cluster):
        part = broker_replica(cluster, session, broker, topic, partition_id)
        if part is not None:
            found[broker] = part
    return found
