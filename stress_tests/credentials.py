"""How the stress tools and the benchmark authenticate to a RaftQ cluster.

As a client: an API key in ``Authorization: Bearer`` (the admin key ``cluster up`` made, from
``require_admin_key``), for everything a client does through the load balancer or straight
to a broker. As a node (``node_session``, ``STRESS_NODE``): each request signed with a key
from the cluster secret (``raftq.node_signing``), for internals (``/checksum``, a broker's
``/raft_status``), sent straight to the node (the load balancer refuses node requests); it
may call every client endpoint of a node too, but skips the key check, so nothing measured
uses it.
"""

from __future__ import annotations

import requests

from ops.cluster import ClusterError, LocalCluster
from protocol.access import AUTHORIZATION_HEADER


def require_admin_key(cluster: LocalCluster) -> str:
    """The admin API key ``up`` made; ``ClusterError`` when there is none (not up yet)."""
    key = cluster.admin_key
    if key is None:
        raise ClusterError(
            f"the cluster in {cluster.directory} has no admin API key in its cluster.json: "
            "start it first (LocalCluster.up or raftq cluster up)"
        )
    return key


def bearer(api_key: str) -> dict[str, str]:
    """The header that carries an API key."""
    return {AUTHORIZATION_HEADER: f"Bearer {api_key}"}


def client_session(api_key: str) -> requests.Session:
    """A session that sends the API key with every request."""
    session = requests.Session()
    session.headers.update(bearer(api_key))
    return session


STRESS_NODE = "tool-stress"
"""The name the stress tools sign as."""


def node_session(cluster: LocalCluster) -> requests.Session:
    """A session that signs each request as a node of the cluster (to nodes only)."""
    session = requests.Session()
    session.auth = cluster.node_auth(STRESS_NODE)
    session.cert = cluster.node_cert  # with --mutual-tls
    return session
