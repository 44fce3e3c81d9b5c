"""A cluster started with ``raftq cluster up --tls --mutual-tls`` (issues 9, 23): every HTTP
listener speaks only TLS with a certificate of the cluster's own CA, nodes reach each other
over https showing their own certificate, and clients (library, CLI) that are given the CA
produce and consume on both paths; a client that does not trust the CA, or speaks plain
HTTP, changes nothing; a node's signed request without a certificate of the CA is refused.
Nodes refuse to start with unusable TLS settings."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from ops.cluster_layout import broker_ports
from raftq import Admin, Consumer, Producer
from stress_tests.polling import poll_until
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS, free_port

pytestmark = pytest.mark.cluster

WAIT_S = 30.0
NODE_START_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["tls"]
    directory = tmp_path_factory.mktemp("tls")
    yield from running_cluster(directory, port, tls=True, up_args=["--mutual-tls"])


def _ca(cluster: Cluster) -> str:
    ca = cluster.info["tls_ca"]
    assert isinstance(ca, str) and Path(ca).is_file()
    return ca


def _state(cluster: Cluster) -> tuple[Any, ...]:
    with Admin(cluster.lb_url, api_key=cluster.admin_key, tls_ca=_ca(cluster)) as admin:
        topics = sorted((t.name, t.partition_count) for t in admin.list_topics())
        ends = {name: admin.end_offsets(name) for name, _ in topics}
    return topics, ends


def test_every_node_serves_https_with_the_clusters_certificate(cluster: Cluster) -> None:
    with requests.Session() as session:
        session.trust_env = False  # requests would prefer $REQUESTS_CA_BUNDLE to the CA
        for node in cluster.info["nodes"]:
            address = node["http_address"]
            assert address.startswith("https://"), node["name"]
            answer = session.get(address + "/", timeout=WAIT_S, verify=_ca(cluster))
            assert answer.status_code == 200, (node["name"], answer.text)


def test_clients_with_the_ca_produce_and_consume_on_both_paths(cluster: Cluster) -> None:
    ca = _ca(cluster)
    with Admin(cluster.lb_url, api_key=cluster.admin_key, tls_ca=ca) as admin:
        admin.create_topic("secured", partitions=2)
    values = [f"v{i}" for i in range(40)]
    sent = []
    for direct, half in ((True, values[:20]), (False, values[20:])):
        with Producer(
            cluster.lb_url, "secured", api_key=cluster.admin_key, tls_ca=ca, direct=direct
        ) as producer:
            sent += producer.produce_batch((v, v) for v in half)
    assert len(sent) == len(values)
    got: list[str] = []
    with Consumer(cluster.lb_url, "secured", api_key=cluster.admin_key, tls_ca=ca) as consumer:

        def all_popped() -> bool:
            got.extend(record.value for record in consumer.poll(100))
            return len(got) >= len(values)

        poll_until(all_popped, WAIT_S, "every message popped over TLS")
        first = consumer.fetch("secured", sent[0].partition_id, 0, 100)
    assert sorted(got) == sorted(values)
    assert first and first[0].offset == 0
    # The CLI finds the URL, the admin key and the CA in cluster.json.
    out = cluster._cli("produce", "--dir", str(cluster.directory), "--topic", "secured", "cli")
    assert '"offset"' in out, out


def test_a_client_without_the_ca_or_without_tls_changes_nothing(cluster: Cluster) -> None:
    before = _state(cluster)
    body = {"name": "made-without-tls", "partitions": 1}
    headers = {"Authorization": f"Bearer {cluster.admin_key}"}
    with requests.Session() as session:
        session.trust_env = False  # the system's CAs, not a bundle from the environment
        with pytest.raises(requests.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
            session.post(cluster.lb_url + "/topics", json=body, headers=headers, timeout=WAIT_S)
        for node in cluster.info["nodes"]:
            plain = node["http_address"].replace("https://", "http://")
            with pytest.raises(requests.exceptions.ConnectionError):
                session.post(plain + "/topics", json=body, headers=headers, timeout=WAIT_S)
    assert _state(cluster) == before


def _start(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=NODE_START_TIMEOUT_S,
        check=False,
    )


def test_nodes_refuse_to_start_with_unusable_tls_settings(cluster: Cluster, tmp_path: Path) -> None:
    tls_dir = Path(_ca(cluster)).parent
    cert, key, ca = tls_dir / "node.pem", tls_dir / "node-key.pem", tls_dir / "ca.pem"
    secret = cluster.info["secret_file"]
    http_port, raft_min, raft_max = (free_port(), *broker_ports(CLUSTER_BASE_PORTS["tls"], 9)[1:])
    broker = [
        *("--id", "9", "--host", "127.0.0.1", "--port", str(http_port)),
        *("--raft-port-min", str(raft_min), "--raft-port-max", str(raft_max)),
        *("--data-dir", str(tmp_path / "b9")),
        *("--managers", str(cluster.node("manager-1")["http_address"])),
        *("--secret-file", secret),
    ]
    for extra, reason in (
        (["--tls-cert", str(cert)], "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(ca), "--tls-key", str(key)], "cannot use --tls-cert"),
        (["--tls-ca", str(tmp_path / "none.pem")], "cannot use --tls-ca"),
    ):
        done = _start("broker", *broker, *extra)
        assert done.returncode == 2 and reason in done.stderr, (extra, done.stderr)
    http_port, raft_port = free_port(), free_port()
    manager = [
        *("--id", "1", "--host", "127.0.0.1", "--port", str(http_port)),
        *("--raft-port", str(raft_port), "--data-dir", str(tmp_path / "m1")),
        # With a certificate, a peer list of http:// URLs is a mistake.
        *("--peers", f"1=http://127.0.0.1:{http_port}@127.0.0.1:{raft_port}"),
        *("--secret-file", secret, "--tls-cert", str(cert), "--tls-key", str(key)),
    ]
    done = _start("manager", *manager)
    assert done.returncode == 2 and "https://" in done.stderr, done.stderr
    assert not (tmp_path / "b9").exists() and not (tmp_path / "m1").exists()


def test_with_mutual_tls_a_signature_alone_is_not_a_node(cluster: Cluster) -> None:
    """Issue 23: the cluster secret without a node certificate of the cluster's CA no longer
    makes a node. A request signed with the secret's key but sent without a certificate is
    refused by every manager and broker (401); with the certificate it is taken; API keys
    need none."""
    ca = _ca(cluster)
    before = _state(cluster)
    with requests.Session() as signed_only:
        signed_only.trust_env = False
        signed_only.verify = ca
        signed_only.auth = cluster.local.node_auth("tool-test")
        for node in cluster.info["nodes"]:
            if node["role"] == "load_balancer":
                continue
            url = node["http_address"] + "/raft_status"
            refused = signed_only.get(url, timeout=WAIT_S)
            assert refused.status_code == 401 and "mutual TLS" in refused.text, (url, refused.text)
            taken = cluster.internal.get(url, timeout=WAIT_S)  # signed, with the certificate
            assert taken.status_code == 200, (url, taken.text)
    assert cluster.local.node_cert is not None
    headers = {"Authorization": f"Bearer {cluster.admin_key}"}
    leader = cluster.node(cluster.manager_leader())["http_address"]
    listed = requests.get(f"{leader}/topics", headers=headers, verify=ca, timeout=WAIT_S)
    assert listed.status_code == 200, listed.text
    assert _state(cluster) == before
