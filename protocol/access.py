"""Who may do what: API keys with roles for clients, a token from the cluster secret for
nodes, and the one rule that decides every request. Pure.

A client sends ``Authorization: Bearer rq_<key id>_<secret part>``. The manager keeps, per
key id, only the SHA-256 of the whole key with its grant (role and topic patterns) in its
replicated state; brokers ask the manager leader about a key they have not seen lately
(``broker.access``). A node signs each request with its own key, derived from the cluster
secret (``protocol.node_auth``): it proves which node sent it, for which node, when, and
may do anything.

Roles (Kafka's ACL operations folded into three, and one for monitoring): ``admin`` does
everything; ``producer`` writes to its topics; ``consumer`` reads its topics; ``metrics``
reads ``/metrics`` (as admins do). Every key may describe the cluster (topics, partitions,
brokers): clients need partition leaders for the direct path. A node may also be given a
scrape token (``--metrics-token-file``): a bearer that reads that node's ``/metrics`` and
nothing else, for a Prometheus that should not depend on the managers to be let in.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from protocol.errors import ErrorCode, RaftQError

AUTHORIZATION_HEADER = "Authorization"
KEY_PREFIX = "rq_"
KEY_ID_CHARS = 12
_KEY = re.compile(r"^rq_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})$")
TOPIC_PATTERNS_MAX = 100
"""Topic patterns per key: a grant is checked on every request, so it stays short."""


class Role(Enum):
    ADMIN = "admin"
    PRODUCER = "producer"
    CONSUMER = "consumer"
    METRICS = "metrics"
    """Reads ``/metrics`` (and describes the cluster, as every key may)."""


class Action(Enum):
    """What a route does, declared with the route (``runtime.http_api.App``)."""

    OPEN = "open"
    """Anyone: health, metrics, the API document."""
    DESCRIBE = "describe"
    """Any valid key: topics, partitions, brokers, the cluster."""
    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"
    """Topics, partitions and keys."""
    NODE = "node"
    """Only another node: broker registration, replica creation, checksums, internals."""
    METRICS = "metrics"
    """``/metrics``: admin and metrics keys, nodes, and the node's scrape token."""


_ROLES_FOR = {
    Action.DESCRIBE: frozenset(Role),
    Action.PRODUCE: frozenset({Role.ADMIN, Role.PRODUCER}),
    Action.CONSUME: frozenset({Role.ADMIN, Role.CONSUMER}),
    Action.ADMIN: frozenset({Role.ADMIN}),
    Action.NODE: frozenset[Role](),
    Action.METRICS: frozenset({Role.ADMIN, Role.METRICS}),
}


@dataclass(frozen=True, slots=True)
class Grant:
    """What one API key may do. ``topics``: exact names, or a prefix ending in ``*``
    (``*`` alone: every topic). An admin key's topics are not consulted."""

    key_id: str
    role: Role
    topics: tuple[str, ...] = ()

    def covers(self, topic: str) -> bool:
        if self.role is Role.ADMIN:
            return True
        return any(_matches(pattern, topic) for pattern in self.topics)


@dataclass(frozen=True, slots=True)
class Node:
    """Another node of the cluster: it signed the request with its own key, so it holds
    the cluster secret (``protocol.node_auth``)."""

    name: str = "node"
    """``manager-<id>``, ``broker-<id>`` or ``tool-<what>``."""

    @property
    def broker_id(self) -> int | None:
        """The id of the broker that signed, ``None`` for any other node."""
        kind, _, number = self.name.partition("-")
        return int(number) if kind == "broker" and number.isdigit() else None


@dataclass(frozen=True, slots=True)
class Scraper:
    """Whoever showed this node's scrape token: may read its ``/metrics``, nothing more."""


NODE = Node()
SCRAPER = Scraper()
Principal = Grant | Node | Scraper


def _matches(pattern: str, topic: str) -> bool:
    if pattern.endswith("*"):
        return topic.startswith(pattern[:-1])
    return topic == pattern


_DOING = {
    Action.OPEN: "do that",
    Action.DESCRIBE: "describe the cluster",
    Action.PRODUCE: "produce",
    Action.CONSUME: "consume",
    Action.ADMIN: "administer topics, partitions and keys",
    Action.NODE: "call an endpoint for nodes only",
    Action.METRICS: "read metrics",
}
"""For the 403's message."""


def require(principal: Principal | None, action: Action) -> None:
    """The role rule: raise 401 without a principal (for anything but OPEN), 403 when the
    principal's role may not do ``action``."""
    if action is Action.OPEN or isinstance(principal, Node):
        return
    if principal is None:
        raise RaftQError(
            ErrorCode.UNAUTHENTICATED,
            "this needs an API key: send 'Authorization: Bearer <key>'"
            if action is not Action.NODE
            else "this endpoint is for cluster nodes only",
        )
    if isinstance(principal, Scraper):
        if action is not Action.METRICS:
            raise RaftQError(ErrorCode.FORBIDDEN, "the scrape token may only read /metrics")
        return
    if principal.role not in _ROLES_FOR[action]:
        raise RaftQError(
            ErrorCode.FORBIDDEN,
            f"key {principal.key_id} ({principal.role.value}) may not {_DOING[action]}",
        )


def require_topic(principal: Principal | None, action: Action, topic: str) -> None:
    """The role rule, then the topic rule: the key's patterns must cover ``topic``."""
    require(principal, action)
    if isinstance(principal, Grant) and not principal.covers(topic):
        raise RaftQError(
            ErrorCode.FORBIDDEN,
            f"key {principal.key_id} may not {action.value} topic {topic!r}",
        )


def require_owner(principal: Principal | None, what: str, owner: str | None) -> None:
    """The id rule (issue 23): a producer or consumer id belongs to the key that registered
    it (``owner``, a key id; ``None``: registered by a node or before owners were kept).
    Another key may not act as it (403); admins and nodes may (super-users)."""
    if not isinstance(principal, Grant) or principal.role is Role.ADMIN:
        return
    if owner is not None and owner != principal.key_id:
        raise RaftQError(
            ErrorCode.FORBIDDEN,
            f"{what} belongs to another API key than {principal.key_id}",
        )


# --- keys and tokens -----------------------------------------------------------------------


def key_hash(key: str) -> str:
    """What is stored of a key: its SHA-256, hex. Keys are random (not passwords), so a
    fast hash is enough: guessing one is as hard as guessing the key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_key(key: str) -> str | None:
    """The key id of a well-formed key, else ``None``."""
    match = _KEY.match(key)
    return None if match is None else match.group(1)


def make_key(key_id: str, secret_part: str) -> str:
    key = f"{KEY_PREFIX}{key_id}_{secret_part}"
    if parse_key(key) != key_id:
        raise ValueError("not a key id and secret part")
    return key


def bearer_key(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header (``None`` without one)."""
    if authorization is None:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison (a timing difference would leak the token byte by byte)."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def check_topic_patterns(patterns: Iterable[object], name_chars_max: int) -> tuple[str, ...]:
    """Valid topic patterns, or ``ValueError`` saying which is not."""
    found: list[str] = []
    for pattern in patterns:
        if len(found) == TOPIC_PATTERNS_MAX:
            raise ValueError(f"at most {TOPIC_PATTERNS_MAX} topic patterns per key")
        if not isinstance(pattern, str) or not _PATTERN.match(pattern):
            raise ValueError(
                f"topic pattern {pattern!r}: a topic name, a prefix ending in '*', or '*'"
            )
        if len(pattern) > name_chars_max + 1:
            raise ValueError(f"topic pattern {pattern!r} is longer than a topic name")
        found.append(pattern)
    return tuple(found)


_PATTERN = re.compile(r"^(?:[A-Za-z0-9._-]+\*?|\*)$")
