"""The access rule, keys and tokens (``protocol.access``), and the authenticator a node's
app uses (``runtime.http_auth``)."""

from __future__ import annotations

import pytest

from protocol.access import (
    NODE,
    SCRAPER,
    Action,
    Grant,
    Node,
    Role,
    bearer_key,
    check_topic_patterns,
    key_hash,
    make_key,
    parse_key,
    require,
    require_topic,
)
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from runtime.http_auth import NodeVerifier, authenticator, scrape_authenticator
from runtime.http_server import HttpRequest
from unit_tests.node_signing import TEST_NODE, signed

KEY = make_key("0123456789ab", "s" * 43)
PRODUCER = Grant("0123456789ab", Role.PRODUCER, ("orders", "logs.*"))
CONSUMER = Grant("0123456789ab", Role.CONSUMER, ("*",))
ADMIN = Grant("0123456789ab", Role.ADMIN)


def _code(call: object) -> ErrorCode | None:
    try:
        call()  # type: ignore[operator]
    except RaftQError as exc:
        return exc.code
    return None


@pytest.mark.parametrize(
    ("principal", "action", "expected"),
    [
        (None, Action.OPEN, None),
        (None, Action.DESCRIBE, ErrorCode.UNAUTHENTICATED),
        (None, Action.NODE, ErrorCode.UNAUTHENTICATED),
        (PRODUCER, Action.DESCRIBE, None),
        (PRODUCER, Action.PRODUCE, None),
        (PRODUCER, Action.CONSUME, ErrorCode.FORBIDDEN),
        (PRODUCER, Action.ADMIN, ErrorCode.FORBIDDEN),
        (CONSUMER, Action.CONSUME, None),
        (CONSUMER, Action.PRODUCE, ErrorCode.FORBIDDEN),
        (ADMIN, Action.ADMIN, None),
        (ADMIN, Action.PRODUCE, None),
        (ADMIN, Action.NODE, ErrorCode.FORBIDDEN),
        (NODE, Action.NODE, None),
        (NODE, Action.ADMIN, None),
    ],
)
def test_the_role_rule(principal: Grant | None, action: Action, expected: ErrorCode) -> None:
    assert _code(lambda: require(principal, action)) is expected


def test_the_topic_rule() -> None:
    assert _code(lambda: require_topic(PRODUCER, Action.PRODUCE, "orders")) is None
    assert _code(lambda: require_topic(PRODUCER, Action.PRODUCE, "logs.app")) is None
    assert _code(lambda: require_topic(PRODUCER, Action.PRODUCE, "orders2")) is ErrorCode.FORBIDDEN
    assert _code(lambda: require_topic(PRODUCER, Action.PRODUCE, "logs")) is ErrorCode.FORBIDDEN
    assert _code(lambda: require_topic(CONSUMER, Action.CONSUME, "any")) is None
    assert _code(lambda: require_topic(ADMIN, Action.CONSUME, "any")) is None


def test_keys_tokens_and_patterns() -> None:
    assert parse_key(KEY) == "0123456789ab"
    for bad in ("", "rq_0123456789ab", "rq_XYZ456789ab_" + "s" * 43, KEY + "!", "x" + KEY):
        assert parse_key(bad) is None
    assert key_hash(KEY) != key_hash(KEY + "x") and len(key_hash(KEY)) == 64
    assert bearer_key(f"Bearer {KEY}") == KEY and bearer_key(f"bearer  {KEY} ") == KEY
    assert bearer_key("Basic abc") is None and bearer_key("Bearer ") is None
    assert check_topic_patterns(["a", "b.*", "*"], 10) == ("a", "b.*", "*")
    refused: tuple[list[object], ...] = (["a/b"], [""], ["**"], [3], ["a*b"], ["x" * 12])
    for patterns in refused:
        with pytest.raises(ValueError):
            check_topic_patterns(patterns, 10)


def _request(headers: list[tuple[str, str]]) -> HttpRequest:
    return HttpRequest("GET", "/topics", headers)


def test_the_authenticator_refuses_credentials_nobody_issued() -> None:
    secret = "s" * 16
    verifier = NodeVerifier(secret, ["http://node:1"], Limits())
    authenticate = authenticator(verifier, lambda key: PRODUCER if key == KEY else None)
    assert authenticate(_request([])) is None
    signed_headers = signed(secret, "http://node:1", "GET", "/topics")
    assert authenticate(_request(signed_headers)) == Node(TEST_NODE)
    assert authenticate(_request([("Authorization", f"Bearer {KEY}")])) == PRODUCER
    for headers in (
        signed("another-secret-0123", "http://node:1", "GET", "/topics"),
        [("X-RaftQ-Node", "0" * 64)],
        [("X-RaftQ-Node-Auth", "v1 junk")],
        [("Authorization", f"Bearer {KEY}x")],
        [("Authorization", "Basic dXNlcjpwdw==")],
    ):
        with pytest.raises(RaftQError) as refused:
            authenticate(_request(headers))
        assert refused.value.code is ErrorCode.UNAUTHENTICATED
        assert KEY not in refused.value.message and secret not in refused.value.message


def test_metrics_need_a_metrics_or_admin_key_or_the_scrape_token() -> None:
    """Issue 23, hole 3: ``/metrics`` is not open; the scrape token reads it and no more."""
    metrics = Grant("0123456789ab", Role.METRICS)
    assert _code(lambda: require(None, Action.METRICS)) is ErrorCode.UNAUTHENTICATED
    for grant in (PRODUCER, CONSUMER):
        assert _code(lambda g=grant: require(g, Action.METRICS)) is ErrorCode.FORBIDDEN
    for allowed in (metrics, ADMIN, NODE, SCRAPER):
        assert _code(lambda a=allowed: require(a, Action.METRICS)) is None
    assert _code(lambda: require(metrics, Action.CONSUME)) is ErrorCode.FORBIDDEN
    for action in (Action.DESCRIBE, Action.CONSUME, Action.ADMIN, Action.NODE):
        assert _code(lambda a=action: require(SCRAPER, a)) is ErrorCode.FORBIDDEN
    verifier = NodeVerifier("n" * 64, ["http://node:1"], Limits())
    authenticate = authenticator(verifier, lambda key: None, scrape_token="t" * 32)
    shown = HttpRequest("GET", "/metrics", [("Authorization", "Bearer " + "t" * 32)], b"")
    assert authenticate(shown) is SCRAPER
    wrong = HttpRequest("GET", "/metrics", [("Authorization", "Bearer " + "u" * 32)], b"")
    assert _code(lambda: authenticate(wrong)) is ErrorCode.UNAUTHENTICATED
    lb = scrape_authenticator("t" * 32)
    assert lb(shown) is SCRAPER and lb(wrong) is None
