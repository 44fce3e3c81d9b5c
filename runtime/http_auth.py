"""Who sent a request: the ``Authenticator`` a manager's or broker's ``App`` uses.

A node token (``X-RaftQ-Node``) must be the cluster's; a bearer key must be one the
``lookup`` knows (the manager reads its replicated state, a broker asks the manager
leader). Credentials that are present but wrong are refused with 401 at once, even for a
route that would not need them: a client with a broken key should learn it on its first
call. Nothing here logs or echoes a key or a token.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol.access import (
    AUTHORIZATION_HEADER,
    NODE,
    NODE_HEADER,
    SCRAPER,
    Grant,
    Principal,
    bearer_key,
    same_secret,
)
from protocol.errors import ErrorCode, RaftQError
from runtime.http_api import Authenticator
from runtime.http_server import HttpRequest

KeyLookup = Callable[[str], Grant | None]
"""The grant of a well-formed key, or ``None`` when nobody issued it (or it was revoked)."""


def authenticator(
    node_token: str, lookup: KeyLookup, scrape_token: str | None = None
) -> Authenticator:
    """``scrape_token``: this node's opt-in bearer for ``/metrics`` only (``Scraper``)."""

    def authenticate(request: HttpRequest) -> Principal | None:
        token = request.header(NODE_HEADER)
        if token is not None:
            if same_secret(token, node_token):
                return NODE
            raise RaftQError(ErrorCode.UNAUTHENTICATED, "wrong cluster node token")
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


def node_headers(node_token: str) -> dict[str, str]:
    """What a node sends with every call to another node."""
    return {NODE_HEADER: node_token}


def scrape_authenticator(scrape_token: str) -> Authenticator:
    """The load balancer's: it holds no cluster secret and checks no API key (the managers
    do, for what it forwards); its own ``/metrics`` takes its scrape token."""

    def authenticate(request: HttpRequest) -> Principal | None:
        key = bearer_key(request.header(AUTHORIZATION_HEADER))
        return SCRAPER if key is not None and same_secret(key, scrape_token) else None

    return authenticate
