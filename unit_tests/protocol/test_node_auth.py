"""Signed node requests (issue 23, hole 1): the signature binds the node, the address it is
for, the time, the method, path, query and body; ``NodeVerifier`` refuses every change of
those, a stale or future timestamp, a repeat and the static token of older versions; the
replay guard's memory stays bounded without ever admitting a repeat. Pure and in process
(the attack on real processes: ``unit_tests/cluster/test_access.py``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from protocol.access import Node
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits, LimitsError
from protocol.node_auth import (
    SIGNATURE_HEADER,
    Admission,
    NodeCredential,
    ReplayGuard,
    authority,
    node_key,
    parse_signature,
    valid_node_name,
)
from runtime.http_auth import LEGACY_TOKEN_REFUSAL, NodeVerifier, authenticator
from runtime.http_server import HttpRequest

SECRET = "the-cluster-secret-0123456789"
BROKER_1 = "http://10.0.0.1:17131"
NOW_MS = 1_800_000_000_000
LIMITS = Limits()
WINDOW_MS = int(LIMITS.node_signature_age_s_max * 1000)


def _signed(
    method: str = "POST",
    target: str = "/partitions",
    body: bytes = b'{"topic": "t"}',
    *,
    url: str = BROKER_1,
    now_ms: int = NOW_MS,
    node: str = "manager-1",
    secret: str = SECRET,
    nonce: str = "0123456789abcdef",
) -> HttpRequest:
    value = NodeCredential.of(secret, node).sign(
        method, url, target, body, now_ms=now_ms, nonce=nonce
    )
    return HttpRequest(method, target, [(SIGNATURE_HEADER, value)], body)


class Clock:
    def __init__(self) -> None:
        self.now_ms = NOW_MS

    def __call__(self) -> int:
        return self.now_ms


def _verifier(clock: Clock, limits: Limits = LIMITS) -> NodeVerifier:
    return NodeVerifier(SECRET, [BROKER_1], limits, clock)


def _refusal(verifier: NodeVerifier, request: HttpRequest) -> RaftQError:
    with pytest.raises(RaftQError) as refused:
        verifier.verify(request, request.header(SIGNATURE_HEADER) or "")
    return refused.value


def test_a_signed_request_names_its_node_once() -> None:
    clock = Clock()
    verifier = _verifier(clock)
    request = _signed()
    assert verifier.verify(request, request.header(SIGNATURE_HEADER) or "") == Node("manager-1")
    assert Node("broker-7").broker_id == 7 and Node("manager-1").broker_id is None
    replayed = _refusal(verifier, _signed())  # the very same bytes again
    assert replayed.code is ErrorCode.UNAUTHENTICATED and "replay" in replayed.message
    # The same request signed anew (another nonce) is another request.
    again = _signed(nonce="fedcba9876543210")
    assert verifier.verify(again, again.header(SIGNATURE_HEADER) or "") == Node("manager-1")


def test_every_change_of_what_was_signed_is_refused() -> None:
    verifier = _verifier(Clock())
    good = _signed()
    value = good.header(SIGNATURE_HEADER) or ""
    for method, target, body in (
        ("DELETE", "/partitions", good.body),
        ("POST", "/partitions?topic=other", good.body),
        ("POST", "/logs", good.body),
        ("POST", "/partitions", b'{"topic": "u"}'),
        ("POST", "/partitions", b""),
    ):
        changed = HttpRequest(method, target, [(SIGNATURE_HEADER, value)], body)
        refused = _refusal(verifier, changed)
        assert refused.code is ErrorCode.UNAUTHENTICATED and "does not hold" in refused.message
    for field, text in (("node=manager-1", "node=manager-2"), ("ts=", "ts=1")):
        forged = HttpRequest(
            "POST", "/partitions", [(SIGNATURE_HEADER, value.replace(field, text, 1))], good.body
        )
        assert _refusal(verifier, forged).code is ErrorCode.UNAUTHENTICATED
    other_cluster = _refusal(verifier, _signed(secret="another-clusters-secret-0"))
    assert "does not hold" in other_cluster.message


def test_a_request_signed_for_another_node_or_the_load_balancer_is_refused() -> None:
    verifier = _verifier(Clock())
    for url in ("http://10.0.0.2:17131", "http://10.0.0.1:17100", "http://broker-1:17131"):
        refused = _refusal(verifier, _signed(url=url))
        assert refused.code is ErrorCode.UNAUTHENTICATED
        assert f"signed for {authority(url)}" in refused.message
        assert "never through the load balancer" in refused.message
    # The same node under its name in another case, with its port written out: the same.
    same = _signed(url="HTTP://10.0.0.1:17131/")
    assert _verifier(Clock()).verify(same, same.header(SIGNATURE_HEADER) or "")


def test_stale_and_future_timestamps_are_refused() -> None:
    clock = Clock()
    verifier = _verifier(clock)
    for skew_ms, word in ((WINDOW_MS + 1, "old"), (-WINDOW_MS - 1, "ahead")):
        refused = _refusal(verifier, _signed(now_ms=NOW_MS - skew_ms))
        assert refused.code is ErrorCode.UNAUTHENTICATED and word in refused.message
    at_the_edge = _signed(now_ms=NOW_MS - WINDOW_MS, nonce="1" * 16)
    assert verifier.verify(at_the_edge, at_the_edge.header(SIGNATURE_HEADER) or "")
    # Once its window has passed, the remembered signature is forgotten, and a replay of
    # it is refused as stale.
    clock.now_ms += WINDOW_MS + 1
    assert "old" in _refusal(verifier, at_the_edge).message


def test_malformed_signatures_and_the_static_token_are_refused_saying_what_to_do() -> None:
    verifier = _verifier(Clock())
    good = _signed().header(SIGNATURE_HEADER) or ""
    for value in (
        "",
        "v2" + good[2:],
        good.replace("node=manager-1", "node=root"),
        good.replace(" sig=", " sig=zz"),
        good + " extra=1",
        good.replace("nonce=0123456789abcdef", "nonce=01"),
    ):
        assert parse_signature(value) is None, value
        request = HttpRequest("POST", "/partitions", [(SIGNATURE_HEADER, value)], b"")
        assert "malformed" in _refusal(verifier, request).message
    authenticate = authenticator(verifier, lambda key: None)
    legacy = HttpRequest("POST", "/partitions", [("X-RaftQ-Node", "0" * 64)], b"")
    with pytest.raises(RaftQError) as refused:
        authenticate(legacy)
    assert refused.value.code is ErrorCode.UNAUTHENTICATED
    assert refused.value.message == LEGACY_TOKEN_REFUSAL and "upgrade it" in LEGACY_TOKEN_REFUSAL


def test_node_names_and_keys() -> None:
    for name in ("manager-1", "broker-0", "broker-123", "tool-cli", "tool-stress-2"):
        assert valid_node_name(name), name
    for name in ("manager-0", "manager-", "broker-x", "tool-", "root", "tool-A", "manager-1 "):
        assert not valid_node_name(name), name
    keys = {node_key(SECRET, name) for name in ("manager-1", "manager-2", "broker-1")}
    assert len(keys) == 3 and node_key(SECRET, "broker-1") != node_key("x" * 20, "broker-1")
    assert SECRET.encode() not in b"".join(keys)
    with pytest.raises(ValueError):
        node_key(SECRET, "root")
    assert "key" not in repr(NodeCredential.of(SECRET, "broker-1")).replace("key=", "")
    assert authority("http://Node:80/x") == "node:80" == authority("http://node")
    assert authority("https://node") == "node:443" and authority("http://[::1]:5") == "[::1]:5"
    assert authority("http://[::1]") == "[::1]:80"


def test_the_replay_guard_is_bounded_and_never_admits_a_repeat() -> None:
    guard = ReplayGuard(window_ms=2_000, entries_max=3)
    assert guard.admit("a", 10_000, 10_000) is Admission.NEW
    assert guard.admit("a", 10_000, 10_500) is Admission.REPEATED
    assert guard.admit("b", 11_000, 11_000) is Admission.NEW
    assert guard.admit("c", 12_000, 12_000) is Admission.NEW
    # Full: the oldest second (10) is forgotten, and so is everything signed in it.
    assert guard.admit("d", 12_100, 12_100) is Admission.NEW
    assert len(guard) == 3
    assert guard.admit("a", 10_000, 12_100) is Admission.FORGOTTEN
    assert guard.admit("e", 10_999, 12_100) is Admission.FORGOTTEN
    assert guard.admit("b", 11_000, 12_100) is Admission.REPEATED
    # Seconds older than the window are let go as time passes.
    assert guard.admit("f", 15_000, 15_000) is Admission.NEW
    assert len(guard) == 1
    with pytest.raises(ValueError):
        ReplayGuard(0, 1)


def test_a_full_memory_refuses_with_a_retryable_answer() -> None:
    clock = Clock()
    verifier = _verifier(clock, replace(LIMITS, node_signatures_remembered_max=2))
    for nonce in ("1" * 16, "2" * 16):
        request = _signed(nonce=nonce, now_ms=NOW_MS - 5_000)
        verifier.verify(request, request.header(SIGNATURE_HEADER) or "")
    newer = _signed(nonce="3" * 16)
    assert verifier.verify(newer, newer.header(SIGNATURE_HEADER) or "")  # forgets second -5
    late = _refusal(verifier, _signed(nonce="4" * 16, now_ms=NOW_MS - 5_000))
    assert late.code is ErrorCode.REFUSED and "sign anew and retry" in late.message


def test_the_limits_bound_each_other() -> None:
    with pytest.raises(LimitsError, match="node_signature_age_s_max"):
        Limits(node_signature_age_s_max=0.5, deadline_clock_skew_s_max=1.0).validate()
