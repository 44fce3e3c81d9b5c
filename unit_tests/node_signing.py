"""Signed node requests for in-process tests (``protocol.node_auth``): the headers of one
request to an ``App`` called directly, signed as the test's own node name."""

from __future__ import annotations

import time

from protocol.node_auth import SIGNATURE_HEADER, NodeCredential, new_signature_nonce

TEST_NODE = "tool-test"


def signed(
    secret: str, url: str, method: str, target: str, body: bytes = b""
) -> list[tuple[str, str]]:
    """The signature header of ``method target`` (path and query) with ``body``, sent to the
    node at ``url`` (its address: what the request is signed for)."""
    value = NodeCredential.of(secret, TEST_NODE).sign(
        method, url, target, body, now_ms=int(time.time() * 1000), nonce=new_signature_nonce()
    )
    return [(SIGNATURE_HEADER, value)]
