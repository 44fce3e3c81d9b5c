"""How a node proves what it is with the cluster secret, without sending it. Pure.

Signed node requests (issue 23, hole 1). Each node has its own key, derived from the
cluster secret and its name (``node_key``: ``manager-2``, ``broker-3``, ``tool-cli``), and
signs every request it sends to another node (``SIGNATURE_HEADER``): its name, the
authority it sends to (``host:port``), the time, a random nonce, the method, the path and
query as sent and the SHA-256 of the body. The receiver derives the sender's key from the
secret, checks the signature, refuses one made for another node (so a request to one
broker cannot be replayed at another, nor through the load balancer), one older or newer
than its window, and one it has seen before (``ReplayGuard``). Whoever reads a request on
the wire learns nothing that lets them send another; the static token of older versions
(``LEGACY_TOKEN_HEADER``, the same value in every request of every node) is refused.

A manager's address proof (issue 23, hole 2): before the managers record a new manager,
send it anything or count its Raft node, the leader sends a fresh random nonce to the
``http_url`` it was given (``POST /managers/proof``, no credential) and the manager there
answers with its own id, HTTP URL and Raft address and an HMAC of them and the nonce under
a key derived from the cluster secret. Only a process that holds the secret and was
configured with that very address can answer; a proof names the address of the manager
that made it, so relaying the challenge to a real manager elsewhere proves nothing.

Keys are derived per purpose (``_derived_key``): a proof or a signature cannot stand for
anything else, so a manager that answers anyone's challenge signs nothing else with it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from enum import Enum

NONCE_HEX_CHARS = 32
"""A challenge's nonce: 16 random bytes in hex (never repeats in practice)."""
_NONCE = re.compile(r"^[0-9a-f]{32,128}$")
_PROOF_LABEL = b"raftq manager address proof v1"


def _derived_key(secret: str, label: bytes) -> bytes:
    """A key for one purpose: the HMAC of ``label`` under the cluster secret."""
    return hmac.new(secret.encode("utf-8"), label, hashlib.sha256).digest()


def new_nonce() -> str:
    return secrets.token_hex(NONCE_HEX_CHARS // 2)


def valid_nonce(nonce: object) -> bool:
    """A nonce a manager answers: lowercase hex, 32 to 128 characters."""
    return isinstance(nonce, str) and _NONCE.match(nonce) is not None


def address_proof(
    secret: str, nonce: str, manager_id: int, http_url: str, raft_address: str
) -> str:
    """The proof that the manager ``manager_id`` at ``http_url`` / ``raft_address`` holds
    ``secret``, for the challenge ``nonce``: hex HMAC-SHA256."""
    message = "\n".join(("address", nonce, str(manager_id), http_url, raft_address))
    key = _derived_key(secret, _PROOF_LABEL)
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


def proof_holds(
    secret: str, nonce: str, manager_id: int, http_url: str, raft_address: str, proof: object
) -> bool:
    """Whether ``proof`` is the one ``address_proof`` gives (constant-time)."""
    if not isinstance(proof, str):
        return False
    expected = address_proof(secret, nonce, manager_id, http_url, raft_address)
    return hmac.compare_digest(proof.encode("utf-8"), expected.encode("utf-8"))


# --- signed node requests (issue 23, hole 1) ------------------------------------------------

SIGNATURE_HEADER = "X-RaftQ-Node-Auth"
"""``v1 node=<name> to=<host:port> ts=<epoch ms> nonce=<hex> sig=<hex>``: a node's request,
signed with that node's key (``node_key``) over ``signed_text``."""
LEGACY_TOKEN_HEADER = "X-RaftQ-Node"
"""The static node token of RaftQ before signed node requests: refused everywhere, with an
answer that says what to do (a node of an older version sends it)."""
NODE_REFUSAL = "node request refused: "
"""How every refusal of a node's credential starts (so a sender tells them from an older
node's answer, which does not know signed requests)."""
_SIGNATURE_VERSION = "v1"
_NODE_KEY_LABEL = b"raftq node key v1\x00"
_NODE_NAME = re.compile(r"^(?:manager-[1-9][0-9]{0,8}|broker-[0-9]{1,9}|tool-[a-z0-9-]{1,32})$")
_HEX = re.compile(r"^[0-9a-f]+$")
SIGNATURE_NONCE_HEX_CHARS = 16
"""8 random bytes: two signatures of one node in one millisecond still differ."""


def valid_node_name(name: str) -> bool:
    """``manager-<id>``, ``broker-<id>``, or ``tool-<what>`` (the operators' tools, the
    tests and the benchmark: whoever holds the cluster secret without being a node)."""
    return _NODE_NAME.match(name) is not None


def node_key(secret: str, name: str) -> bytes:
    """The key node ``name`` signs with: derived from the cluster secret and its name, so
    each node signs as itself, and every node can check any other's signature."""
    if not valid_node_name(name):
        raise ValueError(f"not a node name: {name!r}")
    return _derived_key(secret, _NODE_KEY_LABEL + name.encode("ascii"))


def authority(url: str) -> str:
    """``host:port`` of a URL, lowercased, the scheme's default port written out: what a
    node's request is signed for (``http://Node-1:80/x`` -> ``node-1:80``)."""
    scheme, _, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1].lower()
    if netloc.endswith("]") or ":" not in netloc.rsplit("]", 1)[-1]:
        netloc += ":443" if scheme.lower() == "https" else ":80"
    return netloc


@dataclass(frozen=True, slots=True)
class Signature:
    """A parsed ``SIGNATURE_HEADER``."""

    node: str
    to: str
    """The authority (``authority``) the request was sent to."""
    timestamp_ms: int
    nonce: str
    sig: str


def signed_text(
    node: str, to: str, timestamp_ms: int, nonce: str, method: str, target: str, body: bytes
) -> bytes:
    """What a signature covers: who, for whom, when, and the request itself (method, path
    and query as sent, and the SHA-256 of the body)."""
    digest = hashlib.sha256(body).hexdigest()
    fields = ("raftq node request v1", node, to, str(timestamp_ms), nonce, method, target, digest)
    return "\n".join(fields).encode("utf-8")


def sign(
    key: bytes,
    node: str,
    to: str,
    method: str,
    target: str,
    body: bytes,
    *,
    now_ms: int,
    nonce: str,
) -> str:
    """The ``SIGNATURE_HEADER`` value of one request."""
    text = signed_text(node, to, now_ms, nonce, method, target, body)
    sig = hmac.new(key, text, hashlib.sha256).hexdigest()
    return f"{_SIGNATURE_VERSION} node={node} to={to} ts={now_ms} nonce={nonce} sig={sig}"


def parse_signature(value: str) -> Signature | None:
    """The signature in a header value; ``None`` when it is not one of this version."""
    version, _, rest = value.strip().partition(" ")
    if version != _SIGNATURE_VERSION:
        return None
    fields: dict[str, str] = {}
    for item in rest.split():
        name, sep, text = item.partition("=")
        if not sep or name in fields:
            return None
        fields[name] = text
    if set(fields) != {"node", "to", "ts", "nonce", "sig"} or not fields["ts"].isdigit():
        return None
    if len(fields["ts"]) > 16 or not valid_node_name(fields["node"]) or not fields["to"]:
        return None
    nonce, sig = fields["nonce"], fields["sig"]
    if len(nonce) != SIGNATURE_NONCE_HEX_CHARS or not _HEX.match(nonce):
        return None
    if len(sig) != 64 or not _HEX.match(sig):
        return None
    return Signature(fields["node"], fields["to"], int(fields["ts"]), nonce, sig)


def signature_holds(
    key: bytes, signature: Signature, method: str, target: str, body: bytes
) -> bool:
    """Whether ``signature`` is the one ``key`` gives this request (constant-time)."""
    text = signed_text(
        signature.node, signature.to, signature.timestamp_ms, signature.nonce, method, target, body
    )
    expected = hmac.new(key, text, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode("ascii"), signature.sig.encode("ascii"))


def new_signature_nonce() -> str:
    return secrets.token_hex(SIGNATURE_NONCE_HEX_CHARS // 2)


@dataclass(frozen=True, slots=True)
class NodeCredential:
    """What one node signs its requests with: its name and key (never the secret itself,
    which the node keeps for its Raft groups)."""

    name: str
    key: bytes = field(repr=False)

    @classmethod
    def of(cls, secret: str, name: str) -> NodeCredential:
        return cls(name, node_key(secret, name))

    def sign(
        self, method: str, url: str, target: str, body: bytes, *, now_ms: int, nonce: str
    ) -> str:
        """The ``SIGNATURE_HEADER`` value for ``method`` of ``target`` (path and query as
        sent) at ``url`` (its ``authority`` is what the request is for)."""
        return sign(
            self.key, self.name, authority(url), method, target, body, now_ms=now_ms, nonce=nonce
        )


class Admission(Enum):
    NEW = "new"
    REPEATED = "repeated"
    """Seen before within the window: a replay (or a resend of the very same bytes)."""
    FORGOTTEN = "forgotten"
    """Older than what the guard still remembers after it had to forget (it was full):
    refused, as it cannot tell a replay; the sender signs anew and retries."""


class ReplayGuard:
    """Remembers every signature it admitted until its timestamp leaves the window (it is
    refused as stale then anyway), at most ``entries_max`` of them: when full, it forgets
    the oldest second and refuses every timestamp up to it from then on (``FORGOTTEN``),
    so memory is bounded and no replay is ever admitted. Pure (the caller gives the time);
    not thread-safe (``runtime.http_auth`` holds a lock around it)."""

    def __init__(self, window_ms: int, entries_max: int) -> None:
        if window_ms <= 0 or entries_max <= 0:
            raise ValueError("a replay guard needs a positive window and size")
        self._window_ms = window_ms
        self._entries_max = entries_max
        self._seconds: dict[int, set[str]] = {}
        """Second of the timestamp -> signatures admitted with a timestamp in it."""
        self._count = 0
        self._floor_ms = 0
        """Timestamps below this are refused (``FORGOTTEN``): their second was forgotten."""
        self._swept_second = -1

    def __len__(self) -> int:
        return self._count

    def admit(self, signature: str, timestamp_ms: int, now_ms: int) -> Admission:
        """Whether a signature whose timestamp is within the window is new (then it is
        remembered), a repeat, or too old for what the guard still remembers."""
        self._expire(now_ms)
        if timestamp_ms < self._floor_ms:
            return Admission.FORGOTTEN
        second = timestamp_ms // 1000
        seen = self._seconds.get(second)
        if seen is not None and signature in seen:
            return Admission.REPEATED
        while self._count >= self._entries_max:
            oldest = min(self._seconds)
            self._count -= len(self._seconds.pop(oldest))
            self._floor_ms = max(self._floor_ms, (oldest + 1) * 1000)
            if timestamp_ms < self._floor_ms:
                return Admission.FORGOTTEN
        self._seconds.setdefault(second, set()).add(signature)
        self._count += 1
        return Admission.NEW

    def _expire(self, now_ms: int) -> None:
        """Forget the seconds whose every timestamp is older than the window (looked at
        once per second of ``now_ms``)."""
        if now_ms // 1000 == self._swept_second:
            return
        self._swept_second = now_ms // 1000
        oldest_kept = (now_ms - self._window_ms) // 1000
        for second in [s for s in self._seconds if s < oldest_kept]:
            self._count -= len(self._seconds.pop(second))
