"""TLS on the nodes' HTTP (``runtime.tls``), in-process with certificates made by the test
(``ops.local_tls``, as ``raftq cluster up --tls`` makes them): the server, the nodes'
client, the client library, and what each does with a peer it must not talk to."""

from __future__ import annotations

import argparse
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import orjson
import pytest
from cryptography import x509

from ops.local_tls import TlsMaterial, ensure_certificates
from protocol.access import Action, Node
from protocol.limits import Limits
from raftq.client_limits import ClientLimits
from raftq.errors import UnavailableError
from raftq.http import HttpTransport
from runtime.http_api import App, json_response, server_limits
from runtime.http_auth import NodeVerifier, authenticator
from runtime.http_client import JsonHttpClient, NoAnswerError, PeerLink
from runtime.http_connection import HttpConnections, NoAnswerFromPeerError, NotSentError
from runtime.http_server import HttpRequest, HttpResponse, HttpServer
from runtime.tls import TlsFiles, client_context, server_context, tls_from
from unit_tests.runtime.test_http_connection import count_connects

WAIT_S = 10.0
LIMITS = replace(Limits(), http_keepalive_idle_s=0.3, http_request_read_timeout_s=0.5)


@dataclass(frozen=True)
class Certificates:
    ours: TlsMaterial
    stranger: TlsMaterial
    """Another CA's: trusted by nobody here."""


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    def made(name: str) -> TlsMaterial:
        root = tmp_path_factory.mktemp(name)
        material = TlsMaterial(root / "ca.pem", root / "node.pem", root / "node-key.pem")
        assert ensure_certificates(["127.0.0.1"], material)
        return material

    return Certificates(made("ours"), made("stranger"))


def files(material: TlsMaterial) -> TlsFiles:
    return TlsFiles(material.cert_file, material.key_file, material.ca_file)


@dataclass
class Served:
    server: HttpServer
    handled: list[str]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"


@pytest.fixture
def served(certificates: Certificates) -> Iterator[Served]:
    handled: list[str] = []
    app = App("echo", LIMITS)

    @app.post("/echo", Action.OPEN)
    def echo(http: HttpRequest) -> HttpResponse:
        handled.append(http.path)
        return json_response(orjson.loads(http.body), 201)

    tls = server_context(files(certificates.ours))
    server = HttpServer("127.0.0.1", 0, app.handle, server_limits(LIMITS), tls)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Served(server, handled)
    server.shutdown()
    thread.join(WAIT_S)


def trusting(material: TlsMaterial) -> HttpConnections:
    return HttpConnections(4, WAIT_S, client_context(TlsFiles(None, None, material.ca_file)))


def post(pool: HttpConnections, base: str, body: object) -> tuple[int, object]:
    answer = pool.request(
        "POST",
        base,
        "/echo",
        orjson.dumps(body),
        [("Content-Type", "application/json")],
        connect_timeout_s=WAIT_S,
        read_timeout_s=WAIT_S,
    )
    return answer.status, orjson.loads(answer.body)


def wait_for(condition: str, check: object) -> None:
    deadline = time.monotonic() + WAIT_S
    while not callable(check) or not check():
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        time.sleep(0.01)


def test_nodes_talk_over_tls_on_kept_connections(
    served: Served, certificates: Certificates
) -> None:
    pool = trusting(certificates.ours)
    connects = count_connects(pool)
    for i in range(5):
        assert post(pool, served.url, {"i": i}) == (201, {"i": i})
    assert connects() == 1
    # The server closes the idle connection (http_keepalive_idle_s); the next call sees
    # that and connects again instead of failing on the closed one.
    wait_for("the server to close the idle connection", lambda: not served.server.connection_count)
    assert post(pool, served.url, {"i": 5}) == (201, {"i": 5})
    assert connects() == 2
    pool.close()


def test_a_server_whose_certificate_is_not_trusted_is_sent_nothing(
    served: Served, certificates: Certificates
) -> None:
    for pool in (trusting(certificates.stranger), HttpConnections(4, WAIT_S)):
        with pytest.raises(NotSentError, match="CERTIFICATE_VERIFY_FAILED"):
            post(pool, served.url, {"x": 1})
    assert served.handled == []


def test_plain_http_to_a_tls_port_runs_nothing(served: Served) -> None:
    plain = served.url.replace("https://", "http://")
    with pytest.raises(NoAnswerFromPeerError):
        post(HttpConnections(4, WAIT_S), plain, {"x": 1})
    assert served.handled == []


def test_a_client_that_never_finishes_its_handshake_holds_nobody_up(
    served: Served, certificates: Certificates
) -> None:
    silent = socket.create_connection(("127.0.0.1", served.server.port))
    try:
        pool = trusting(certificates.ours)
        assert post(pool, served.url, {"y": 1}) == (201, {"y": 1})
        # ... and the server drops it after http_request_read_timeout_s.
        silent.settimeout(WAIT_S)
        assert silent.recv(1) == b""
        pool.close()
    finally:
        silent.close()


def test_the_client_library_checks_the_given_ca_whatever_the_environment_says(
    served: Served, certificates: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    # requests lets $REQUESTS_CA_BUNDLE override a session's CA: the given CA must win.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ssl.get_default_verify_paths().openssl_cafile)
    limits = replace(ClientLimits(), attempts_max=1)
    ca = str(certificates.ours.ca_file)
    transport = HttpTransport(served.url, limits, tls_ca=ca)
    assert transport.call("POST", "/echo", body={"z": 1}, idempotent=False) == {"z": 1}
    transport.close()
    transport = HttpTransport(served.url, limits, tls_ca=str(certificates.stranger.ca_file))
    with pytest.raises(UnavailableError, match="not trusted") as refused:
        transport.call("POST", "/echo", body={"z": 2}, idempotent=False)
    transport.close()
    assert refused.value.outcome_unknown is False
    assert served.handled == ["/echo"]


def _args(cert: Path | None, key: Path | None, ca: Path | None) -> argparse.Namespace:
    return argparse.Namespace(tls_cert=cert, tls_key=key, tls_ca=ca)


def test_unusable_tls_files_are_refused_at_start(
    certificates: Certificates, tmp_path: Path
) -> None:
    ours, stranger = certificates.ours, certificates.stranger
    assert tls_from(_args(ours.cert_file, ours.key_file, ours.ca_file)).scheme == "https"
    assert tls_from(_args(None, None, None)).scheme == "http"
    with pytest.raises(ValueError, match="go together"):
        tls_from(_args(ours.cert_file, None, None))
    with pytest.raises(ValueError, match="cannot use --tls-cert"):
        tls_from(_args(ours.cert_file, stranger.key_file, None))  # not its key
    with pytest.raises(ValueError, match="cannot use --tls-cert"):
        tls_from(_args(tmp_path / "missing.pem", ours.key_file, None))
    with pytest.raises(ValueError, match="cannot use --tls-ca"):
        tls_from(_args(None, None, tmp_path / "missing-ca.pem"))


def test_a_cluster_on_several_hosts_gets_one_certificate_naming_each(tmp_path: Path) -> None:
    material = TlsMaterial(tmp_path / "ca.pem", tmp_path / "node.pem", tmp_path / "key.pem")
    assert ensure_certificates(["127.0.0.2", "127.0.0.3", "queue.example"], material)
    cert = x509.load_pem_x509_certificate(material.cert_file.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    addresses = {str(a) for a in names.get_values_for_type(x509.IPAddress)}
    assert addresses == {"127.0.0.2", "127.0.0.3", "127.0.0.1"}
    assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "queue.example"}
    assert not ensure_certificates(["127.0.0.9"], material)  # made once; a restart keeps them


def test_mutual_tls_takes_node_requests_only_from_a_caller_with_a_certificate(
    certificates: Certificates,
) -> None:
    """``--mutual-tls`` (issue 23): a node's signed request is taken only over a connection
    whose caller showed a certificate of the node's CA; a client without one still reaches
    what it may (API keys need no certificate); another CA's certificate ends the
    handshake."""
    secret = "mutual-tls-cluster-secret"
    mutual = replace(files(certificates.ours), mutual=True)
    built: list[App] = []
    server = HttpServer(
        "127.0.0.1", 0, lambda r: built[0].handle(r), server_limits(LIMITS), server_context(mutual)
    )
    url = f"https://127.0.0.1:{server.port}"
    verifier = NodeVerifier(secret, [url], LIMITS, certified_only=True)
    app = App("node", LIMITS, authenticator(verifier, lambda _key: None))

    @app.get("/internal", Action.NODE)
    def internal(http: HttpRequest) -> HttpResponse:
        assert isinstance(http.principal, Node)
        return json_response({"node": http.principal.name})

    @app.get("/open", Action.OPEN)
    def open_route(_http: HttpRequest) -> HttpResponse:
        return json_response({})

    built.append(app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        shown = JsonHttpClient(LIMITS, PeerLink.of(secret, mutual, "manager-1"))
        assert shown.call("GET", f"{url}/internal").body == {"node": "manager-1"}
        without = JsonHttpClient(LIMITS, PeerLink.of(secret, files(certificates.ours), "manager-1"))
        refused = without.call("GET", f"{url}/internal")
        assert refused.status == 401 and "mutual TLS" in str(refused.body)
        anyone = JsonHttpClient(LIMITS, PeerLink(None, client_context(files(certificates.ours))))
        assert anyone.call("GET", f"{url}/open").status == 200  # no certificate, no signature
        stranger = replace(files(certificates.stranger), ca_path=certificates.ours.ca_file)
        other_ca = JsonHttpClient(
            replace(LIMITS, http_retries_max=1),
            PeerLink.of(secret, replace(stranger, mutual=True), "manager-1"),
        )
        with pytest.raises(NoAnswerError):
            other_ca.call("GET", f"{url}/internal")
        for client in (shown, without, anyone, other_ca):
            client.close()
    finally:
        server.shutdown()
        thread.join(WAIT_S)
    with pytest.raises(ValueError, match="--mutual-tls needs"):
        tls_from(argparse.Namespace(tls_cert=None, tls_key=None, tls_ca=None, mutual_tls=True))
