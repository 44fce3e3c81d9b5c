"""A manager's address proof (issue 23, hole 2) over real sockets: the leader's check
passes only for a manager that holds the cluster secret and was configured with the very
id and addresses it is added with; whatever else listens at the address (nothing, a
stranger, a relay to a real manager elsewhere, a manager of another cluster) is refused,
and the check never sends a credential. The start-up peer check's "being added" answer
(``check_peers_agree``) and ``listed_by_a_peer`` over a stub client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from manager.address_proof import PROOF_PATH, AddressCheck, AddressProver, add_proof_route
from manager.config import ConfigError, ManagerConfig, Peer
from manager.peer_check import check_peers_agree, listed_by_a_peer, peer_list
from protocol.access import Action
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.node_auth import NodeCredential, address_proof, proof_holds, valid_nonce
from protocol.requests import ManagerRef
from runtime.http_api import App, json_response, server_limits
from runtime.http_client import HttpAnswer, JsonHttpClient, PeerLink
from runtime.http_server import HttpRequest, HttpResponse, HttpServer

LIMITS = Limits()
SECRET = "the-cluster-secret-0123456789"
LINK = PeerLink(NodeCredential.of(SECRET, "manager-1"), None)
"""The leader's link: its credential must never reach the address it checks."""
WAIT_S = 10.0


@dataclass
class Served:
    server: HttpServer
    thread: threading.Thread
    seen: list[HttpRequest] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"


def _serve(app: App) -> Served:
    seen: list[HttpRequest] = []

    def handle(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return app.handle(request)

    server = HttpServer("127.0.0.1", 0, handle, server_limits(LIMITS))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return Served(server, thread, seen)


@pytest.fixture
def servers() -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for served in started:
        served.server.shutdown()
        served.thread.join(WAIT_S)


def _manager(servers: list[Served], secret: str = SECRET, manager_id: int = 4) -> Served:
    """A manager's proof route on a port of its own, configured with that port as its URL
    (the route is added once the port is known, before any request can reach it)."""
    app = App("manager", LIMITS)
    served = _serve(app)
    servers.append(served)
    config = _config(manager_id, served.url, f"127.0.0.1:{served.server.port + 1}", secret)
    add_proof_route(app, AddressProver(config), LIMITS)
    return served


def _config(manager_id: int, url: str, raft: str, secret: str = SECRET) -> ManagerConfig:
    host, _, raft_port = raft.rpartition(":")
    peers = (Peer(1, "http://127.0.0.1:1", "127.0.0.1:2"), Peer(manager_id, url, raft))
    return ManagerConfig(manager_id, host, 1, int(raft_port), peers, Path("."), secret, LIMITS)


def _ref(served: Served, manager_id: int = 4) -> ManagerRef:
    return ManagerRef(manager_id, served.url, f"127.0.0.1:{served.server.port + 1}")


def _refusal(ref: ManagerRef) -> str:
    with pytest.raises(RaftQError) as refused:
        AddressCheck(SECRET, LIMITS, LINK).check(ref)
    assert refused.value.code is ErrorCode.INVALID_FIELD
    return refused.value.message


def _no_credential(served: Served) -> None:
    for request in served.seen:
        names = {name.lower() for name, _ in request.headers}
        assert not any(name.startswith("x-raftq-node") for name in names), request.headers
        assert "authorization" not in names, request.headers


def test_the_proof_binds_the_secret_the_nonce_and_the_addresses() -> None:
    args = ("ab" * 16, 4, "http://h:1", "h:2")
    proof = address_proof(SECRET, *args)
    assert proof_holds(SECRET, *args, proof)
    assert not proof_holds("another-secret-0123456789", *args, proof)
    for changed in (("cd" * 16, 4, "http://h:1", "h:2"), ("ab" * 16, 5, "http://h:1", "h:2")):
        assert not proof_holds(SECRET, *changed, proof)
    for changed in (("ab" * 16, 4, "http://h:9", "h:2"), ("ab" * 16, 4, "http://h:1", "h:9")):
        assert not proof_holds(SECRET, *changed, proof)
    assert not proof_holds(SECRET, *args, None) and not proof_holds(SECRET, *args, proof[:-1])
    assert SECRET not in proof
    assert valid_nonce("ab" * 16) and valid_nonce("0" * 128)
    assert not any(map(valid_nonce, ("ab" * 15, "0" * 129, "AB" * 16, "zz" * 16, 7, None)))


def test_a_manager_that_holds_the_secret_and_its_addresses_passes(servers: list[Served]) -> None:
    manager = _manager(servers)
    AddressCheck(SECRET, LIMITS, LINK).check(_ref(manager))
    assert [r.path for r in manager.seen] == [PROOF_PATH]
    _no_credential(manager)


def test_wrong_ids_addresses_and_secrets_are_refused(servers: list[Served]) -> None:
    manager = _manager(servers)
    other_id = _ref(manager, manager_id=5)
    assert "says it is manager 4" in _refusal(other_id)
    ref = _ref(manager)
    other_raft = ManagerRef(4, ref.http_url, "127.0.0.1:1")
    assert "says it is manager 4" in _refusal(other_raft)
    stranger = _manager(servers, secret="another-clusters-secret-0123")
    assert "did not prove that it holds the cluster secret" in _refusal(_ref(stranger))
    for served in (manager, stranger):
        _no_credential(served)


def test_a_relay_to_a_real_manager_elsewhere_proves_nothing(servers: list[Served]) -> None:
    """A listener of an admin's that hands the challenge to a real manager and returns its
    answer: the proof names the real manager's address, not the listener's."""
    real = _manager(servers)
    relay = App("relay", LIMITS)

    @relay.post(PROOF_PATH, Action.OPEN)
    def forward(http: HttpRequest) -> HttpResponse:
        answer = requests.post(real.url + PROOF_PATH, data=http.body, timeout=WAIT_S)
        return json_response(answer.json(), answer.status_code)

    listener = _serve(relay)
    servers.append(listener)
    message = _refusal(ManagerRef(4, listener.url, f"127.0.0.1:{real.server.port + 1}"))
    assert f"says it is manager 4 at '{real.url}'" in message
    _no_credential(listener)


def test_nothing_listening_or_no_manager_there_is_refused_not_an_error(
    servers: list[Served],
) -> None:
    silent = App("not a manager", LIMITS)

    @silent.post(PROOF_PATH, Action.OPEN)
    def other(_http: HttpRequest) -> HttpResponse:
        return json_response({"hello": "world"})

    stranger = _serve(silent)
    servers.append(stranger)
    assert "did not answer the address check as a manager does" in _refusal(_ref(stranger))
    nobody = ManagerRef(4, "http://127.0.0.1:1", "127.0.0.1:2")
    assert "start the new manager first" in _refusal(nobody)
    # Host names that IDNA refuses and ports out of range: refused, not a 500.
    for url in ("http://\x80", "http://h:99999"):
        assert "did not answer" in _refusal(ManagerRef(4, url, "h:2"))
    _no_credential(stranger)


# --- the start-up peer check: a manager being added ---------------------------------------


class _Peers(JsonHttpClient):
    """Answers ``/raft_status`` with each peer's list, as nodes see it."""

    def __init__(self, lists: dict[str, list[str] | None], changed: bool = False) -> None:
        super().__init__(LIMITS, LINK)
        self._lists = lists
        self._changed = changed

    def call(self, method: str, url: str, body: object | None = None, **_: object) -> HttpAnswer:
        theirs = self._lists[url.removesuffix("/raft_status")]
        if theirs is None:
            raise RaftQError(ErrorCode.REFUSED, "connection refused")
        return HttpAnswer(200, {"peers": theirs, "peers_changed": self._changed}, {})


FOUR = tuple(Peer(i, f"http://m{i}", f"m{i}:1") for i in (1, 2, 3, 4))


def _fourth() -> ManagerConfig:
    return ManagerConfig(4, "m4", 2, 1, FOUR, Path("."), SECRET, LIMITS)


def test_a_manager_no_running_peer_lists_is_being_added() -> None:
    three = peer_list(FOUR[:3])
    config = _fourth()
    client = _Peers({"http://m1": three, "http://m2": three, "http://m3": None})
    assert check_peers_agree(config, client) is True
    assert not listed_by_a_peer(config, client)
    added = _Peers({"http://m1": three, "http://m2": peer_list(FOUR), "http://m3": None}, True)
    assert check_peers_agree(config, added) is False and listed_by_a_peer(config, added)
    nobody = _Peers({"http://m1": None, "http://m2": None, "http://m3": None})
    assert check_peers_agree(config, nobody) is False  # a fresh cluster starting
    other = peer_list((*FOUR[:2], Peer(3, "http://elsewhere", "m3:1")))
    differs = _Peers({"http://m1": other, "http://m2": None, "http://m3": None})
    with pytest.raises(ConfigError, match="lists other managers"):
        check_peers_agree(config, differs)
