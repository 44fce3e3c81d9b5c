"""Who sent a request: the ``Authenticator`` a manager's or broker's ``App`` uses.

A node signs each request with its own key (``protocol.node_auth``; ``NodeVerifier``
checks it: for this node, recent, not seen before); a bearer key must be one the
``lookup`` knows (the manager reads its replicated state, a broker asks the manager
leader). Credentials that are present but wrong are refused with 401 at once, even for a
route that would not need them: a client with a broken key should learn it on its first
call. The static node token of older versions is refused with an answer saying what to
do. Nothing here logs or echoes a key, a token or a signature.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from protocol.access import (
    AUTHORIZATION_HEADER,
    SCRAPER,
    Grant,
    Node,
    Principal,
    bearer_key,
    same_secret,
)
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.node_auth import (
    LEGACY_TOKEN_HEADER,
    NODE_REFUSAL,
    SIGNATURE_HEADER,
    Admission,
    ReplayGuard,
    authority,
    node_key,
    parse_signature,
    signature_holds,
)
from runtime.http_api import Authenticator
from runtime.http_server import HttpRequest

KeyLookup = Callable[[str], Grant | None]
"""The grant of a well-formed key, or ``None`` when nobody issued it (or it was revoked)."""

LEGACY_TOKEN_REFUSAL = (
    f"{NODE_REFUSAL}the static node token ({LEGACY_TOKEN_HEADER}) of older RaftQ versions is "
    "no longer taken: nodes sign each request (X-RaftQ-Node-Auth). The calling node runs an "
    "older RaftQ: upgrade it (ARCHITECTURE.md, 'Upgrading to signed node requests'); a "
    "broker then lists the managers' own URLs in --managers"
)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class NodeVerifier:
    """Checks the signed requests sent to one node. Thread-safe (connection threads)."""

    def __init__(
        self,
        secret: str,
        addresses: Iterable[str],
        limits: Limits,
        clock_ms: Callable[[], int] = _wall_ms,
        *,
        certified_only: bool = False,
    ) -> None:
        """``addresses``: the URLs other nodes reach this node at (its advertised address):
        a request signed for any other authority is refused. ``certified_only`` (mutual
        TLS): a signed request is taken only from a caller that showed a certificate of
        this node's CA."""
        self._certified_only = certified_only
        self._secret = secret
        self._authorities = frozenset(authority(address) for address in addresses)
        self._window_ms = int(limits.node_signature_age_s_max * 1000)
        self._remembered_max = limits.node_signatures_remembered_max
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._guard = ReplayGuard(self._window_ms, limits.node_signatures_remembered_max)

    def verify(self, request: HttpRequest, value: str) -> Node:
        """The node that signed ``request`` (``value``: its signature header); 401 when the
        signature is malformed, for another node, stale, wrong or replayed."""
        if self._certified_only and not request.peer_certified:
            raise _refused(
                "this node takes node requests over mutual TLS only, and the caller showed "
                "no certificate of the cluster's CA (a node's --tls-cert)"
            )
        signature = parse_signature(value)
        if signature is None:
            raise _refused("malformed node signature")
        if signature.to not in self._authorities:
            mine = ", ".join(sorted(self._authorities))
            raise _refused(
                f"signed for {signature.to}, and this node is {mine}: a node's request goes "
                "straight to the node it is for, never through the load balancer or another "
                "node"
            )
        key = node_key(self._secret, signature.node)
        if not signature_holds(key, signature, request.method, request.target, request.body):
            raise _refused(
                f"the signature of {signature.node} does not hold: another cluster's secret, "
                "or the request was changed on its way"
            )
        now_ms = self._clock_ms()
        age_ms = now_ms - signature.timestamp_ms
        if abs(age_ms) > self._window_ms:
            when = "old" if age_ms > 0 else "ahead of this node's clock"
            raise _refused(
                f"signed {abs(age_ms) / 1000:.1f} s {when}, more than node_signature_age_s_max "
                f"({self._window_ms / 1000:g} s): a replay, or the hosts' clocks disagree"
            )
        with self._lock:
            admission = self._guard.admit(signature.sig, signature.timestamp_ms, now_ms)
        if admission is Admission.REPEATED:
            raise _refused("this signature was taken before: a replay")
        if admission is Admission.FORGOTTEN:
            raise RaftQError(
                ErrorCode.REFUSED,
                f"{NODE_REFUSAL}this node had to forget signatures as old as this one (it "
                f"remembers {self._remembered_max}, node_signatures_remembered_max): sign "
                "anew and retry",
            )
        return Node(signature.node)


def _refused(reason: str) -> RaftQError:
    return RaftQError(ErrorCode.UNAUTHENTICATED, NODE_REFUSAL + reason)


def authenticator(
    nodes: NodeVerifier, lookup: KeyLookup, scrape_token: str | None = None
) -> Authenticator:
    """``scrape_token``: this node's opt-in bearer for ``/metrics`` only (``Scraper``)."""

    def authenticate(request: HttpRequest) -> Principal | None:
        if request.header(LEGACY_TOKEN_HEADER) is not None:
            raise RaftQError(ErrorCode.UNAUTHENTICATED, LEGACY_TOKEN_REFUSAL)
        signature = request.header(SIGNATURE_HEADER)
        if signature is not None:
            return nodes.verify(request, signature)
        authorization = request.header(AUTHORIZATION_HEADER)
        if authorization is None:
            return None
        key = bearer_key(authorization)
        if key is None:
            raise RaftQError(
                ErrorCode.UNAUTHENTICATED, "expected 'Authorization: Bearer <API key>'"
            )
        if scrape_token is not None and same_secret(key, scrape_token):
            return SCRAPER
        grant = lookup(key)
        if grant is None:
            raise RaftQError(ErrorCode.UNAUTHENTICATED, "unknown or revoked API key")
        return grant

    return authenticate


def scrape_authenticator(scrape_token: str) -> Authenticator:
    """The load balancer's: it holds no cluster secret and checks no API key (the managers
    do, for what it forwards); its own ``/metrics`` takes its scrape token."""

    def authenticate(request: HttpRequest) -> Principal | None:
        key = bearer_key(request.header(AUTHORIZATION_HEADER))
        return SCRAPER if key is not None and same_secret(key, scrape_token) else None

    return authenticate
