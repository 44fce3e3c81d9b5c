"""Asking the cluster as a node, with the cluster secret instead of an API key (``raftq key
create --secret-file``: a deployment's first admin key; the server's operations commands):
the secret, the certificate shown with it, and the node to ask."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import requests

from raftq.cli.context import UsageError, local_profile
from raftq.client_limits import ClientLimits
from raftq.node_signing import manager_leader


def node_cert(args: argparse.Namespace) -> tuple[str, str] | None:
    """``--node-cert CERT KEY``, else a ``--dir`` cluster's own (its profile names it when
    the cluster runs with ``--mutual-tls``)."""
    if args.node_cert:
        return str(args.node_cert[0]), str(args.node_cert[1])
    if args.url is not None:
        return None
    with contextlib.suppress(UsageError):
        return local_profile(args.dir).node_cert
    return None


def leader_of(url: str, tls_ca: str | None) -> str:
    """The manager leader's own URL, asked of ``url`` (the load balancer or a manager):
    a node's request goes straight to it, never through the load balancer."""
    with requests.Session() as session:
        session.trust_env = False  # no proxy between this host's nodes; our CA, not the env's
        session.verify = tls_ca or True
        leader = manager_leader(session, url, ClientLimits().request_timeout_s)
    if leader is None:
        raise UsageError(f"{url}/raft_status names no manager leader: is the cluster up?")
    return leader


def read_secret(path: str) -> str:
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    if not secret:
        raise UsageError(f"{path} is empty")
    return secret
