"""How a node proves what it is with the cluster secret, without sending it. Pure.

A manager's address proof (issue 23, hole 2): before the managers record a new manager,
send it anything or count its Raft node, the leader sends a fresh random nonce to the
``http_url`` it was given (``POST /managers/proof``, no credential) and the manager there
answers with its own id, HTTP URL and Raft address and an HMAC of them and the nonce under
a key derived from the cluster secret. Only a process that holds the secret and was
configured with that very address can answer; a proof names the address of the manager
that made it, so relaying the challenge to a real manager elsewhere proves nothing.

Keys are derived per purpose (``_derived_key``): a proof cannot stand for anything else,
so a manager that answers anyone's challenge signs nothing else with it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

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
