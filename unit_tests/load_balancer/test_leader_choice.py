"""Pure tests of the leader choice, the no-leader reason and header filtering."""

from __future__ import annotations

import json

import pytest

from load_balancer.forwarder import (
    ForwardedAnswer,
    is_not_leader_answer,
    request_headers_to_forward,
    response_headers_to_return,
)
from load_balancer.leader_tracker import (
    ManagerView,
    choose_leader,
    describe_no_leader,
    parse_raft_status,
)

A, B, C = "http://a:1", "http://b:2", "http://c:3"


def test_the_only_claimant_leads() -> None:
    views = [
        ManagerView(A, reachable=True, is_leader=False, term=4),
        ManagerView(B, reachable=True, is_leader=True, term=4),
        ManagerView(C, reachable=False, error="connection refused"),
    ]
    assert choose_leader(views) == B


def test_highest_term_wins_when_a_deposed_leader_still_claims() -> None:
    views = [
        ManagerView(A, reachable=True, is_leader=True, term=3),
        ManagerView(B, reachable=True, is_leader=True, term=5),
        ManagerView(C, reachable=True, is_leader=False, term=5),
    ]
    assert choose_leader(views) == B


def test_no_claimant_means_no_leader() -> None:
    views = [
        ManagerView(A, reachable=True, is_leader=False, term=2, leader_address=B),
        ManagerView(B, reachable=False, error="timed out"),
    ]
    assert choose_leader(views) is None
    reason = describe_no_leader(views)
    assert f"{B} unreachable (timed out)" in reason
    assert f"{A} is not the leader (term 2, leader {B})" in reason


def test_unreachable_claims_are_ignored() -> None:
    assert choose_leader([ManagerView(A, reachable=False, is_leader=True, term=9)]) is None
    assert choose_leader([]) is None


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"is_leader": "yes", "term": 1},
        {"is_leader": True},
        {"is_leader": True, "term": True},
    ],
)
def test_malformed_raft_status_is_not_a_leader(body: object) -> None:
    view = parse_raft_status(A, body)
    assert view.reachable and not view.is_leader and view.error is not None


def test_raft_status_is_parsed() -> None:
    view = parse_raft_status(A, {"id": 1, "is_leader": True, "term": 7, "leader_address": A})
    assert view == ManagerView(A, reachable=True, is_leader=True, term=7, leader_address=A)


def test_request_headers_drop_hop_by_hop_host_length_and_connection_tokens() -> None:
    headers = [
        ("Host", "lb:1"),
        ("Content-Length", "3"),
        ("Connection", "keep-alive, X-Private"),
        ("X-Private", "secret"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Type", "application/json"),
        ("X-Request", "1"),
    ]
    assert request_headers_to_forward(headers) == {
        "Content-Type": "application/json",
        "X-Request": "1",
    }


def test_response_headers_keep_everything_end_to_end() -> None:
    headers = [
        ("Content-Length", "3"),
        ("Transfer-Encoding", "chunked"),
        ("Keep-Alive", "timeout=5"),
        ("Retry-After", "1"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
    ]
    assert response_headers_to_return(headers) == (
        ("Retry-After", "1"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
    )


def test_only_503_with_not_leader_code_is_not_leader() -> None:
    body = json.dumps({"error_code": 50302, "message": "not leader"}).encode()
    assert is_not_leader_answer(ForwardedAnswer(503, (), body))
    assert not is_not_leader_answer(ForwardedAnswer(500, (), body))
    other = json.dumps({"error_code": 50303, "message": "commit timeout"}).encode()
    assert not is_not_leader_answer(ForwardedAnswer(503, (), other))
    assert not is_not_leader_answer(ForwardedAnswer(503, (), b"<html>"))
