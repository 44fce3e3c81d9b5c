"""Calling nodes as a node, for whoever holds the cluster secret without being one: the
first admin key of a deployment (``raftq key create --secret-file``), the local cluster
tooling, the tests, the stress tools and the benchmark (issue 23).

Each request is signed as ``protocol.node_auth`` says (its own timestamp and nonce), for
the node it is sent to: a node's request goes straight to that node, never through the load
balancer (which refuses it), so callers first find the node to ask (``manager_leader``).
"""

from __future__ import annotations

import time

import requests
from requests.auth import AuthBase

from protocol.node_auth import SIGNATURE_HEADER, NodeCredential, new_signature_nonce

TOOL_NODE = "tool-cli"
"""The name the CLI and the local cluster tooling sign as."""


class NodeSigning(AuthBase):
    """A requests auth hook (``session.auth = NodeSigning(...)``, or ``auth=`` per call)
    that signs each request as it is sent."""

    def __init__(self, credential: NodeCredential) -> None:
        self.credential = credential

    @classmethod
    def of(cls, secret: str, name: str = TOOL_NODE) -> NodeSigning:
        return cls(NodeCredential.of(secret, name))

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        body = request.body or b""
        data = body.encode("utf-8") if isinstance(body, str) else body
        if not isinstance(data, bytes):
            raise TypeError("a node's request is signed over a body of bytes, not a stream")
        request.headers[SIGNATURE_HEADER] = self.credential.sign(
            str(request.method),
            str(request.url),
            request.path_url,
            data,
            now_ms=int(time.time() * 1000),
            nonce=new_signature_nonce(),
        )
        return request


def manager_leader(session: requests.Session, url: str, timeout_s: float) -> str | None:
    """The HTTP URL of the manager leader, asked of ``url`` (a load balancer or any
    manager) at its open ``/raft_status``, with no credential; ``None`` when none is known
    or nothing answered. ``session``: its ``verify`` checks ``https://`` answers."""
    try:
        with session.get(f"{url.rstrip('/')}/raft_status", timeout=timeout_s) as r:
            body = r.json() if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    if body.get("is_leader") is True:
        return url.rstrip("/")
    leader = body.get("leader_address")
    return leader.rstrip("/") if isinstance(leader, str) and leader else None
