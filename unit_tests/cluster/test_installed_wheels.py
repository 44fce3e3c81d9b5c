"""RaftQ as people install it (issues 11 and 21): the two wheels built from this checkout,
each in a fresh virtualenv.

- The client's (``pip install .``): it holds only the client's packages, brings only the
  client's dependencies, produces and consumes against a running cluster from Python and
  from the ``raftq`` command, and its ``raftq cluster`` says how to get the server.
- The server's (``pip install . ./server``): ``raftq cluster up`` from it starts a cluster
  that the client then reaches through the profile ``cluster up`` wrote, and ``cluster down``
  stops it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 120
SCRIPT = """
import sys
from raftq import Admin, Consumer, Producer

url, key = sys.argv[1], sys.argv[2]
with Admin(url, api_key=key) as admin:
    admin.create_topic("installed", partitions=2)
with Producer(url, "installed", api_key=key) as producer:
    producer.produce_batch((f"m{i}", f"k{i}") for i in range(30))
got = []
with Consumer(url, "installed", api_key=key) as consumer:
    for _ in range(100):
        got += [r.value for r in consumer.poll(30)]
        if len(got) >= 30:
            break
assert sorted(got) == sorted(f"m{i}" for i in range(30)), got
print("round trip ok")
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["installed_client"]
    yield from running_cluster(tmp_path_factory.mktemp("installed"), port)


def _run(*argv: str | Path, timeout_s: float = RUN_TIMEOUT_S) -> str:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


SERVER_PACKAGES = ("runtime", "broker", "manager", "load_balancer", "ops")
SERVER_DEPENDENCIES = ("pysyncobj", "sqlalchemy", "psycopg2", "prometheus_client", "cryptography")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The client's wheel and the server's, built from this checkout."""
    dist = tmp_path_factory.mktemp("dist")
    for project in (REPO, REPO / "server"):
        _run(
            sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
            "-w", dist, project, timeout_s=INSTALL_TIMEOUT_S,
        )  # fmt: skip
    (client,) = dist.glob("raftq-*.whl")
    (server,) = dist.glob("raftq_server-*.whl")
    return client, server


def _fresh_venv(root: Path, *wheels: Path) -> Path:
    """A new virtualenv with these wheels (and what they depend on) installed."""
    _run(sys.executable, "-m", "venv", root, timeout_s=INSTALL_TIMEOUT_S)
    python = root / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", *wheels, timeout_s=INSTALL_TIMEOUT_S)
    return python


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory: pytest.TempPathFactory, wheels: tuple[Path, Path]) -> Path:
    """A new virtualenv with the client's wheel installed, and nothing else."""
    return _fresh_venv(tmp_path_factory.mktemp("client") / "venv", wheels[0])


def _top_level(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = {n.split("/", 1)[0] for n in archive.namelist() if "/" in n}
    return {n for n in names if not n.endswith((".dist-info", ".data"))}


def test_each_wheel_holds_its_own_packages(wheels: tuple[Path, Path]) -> None:
    client, server = wheels
    assert _top_level(client) == {"raftq", "protocol", "spark_jobs"}
    assert _top_level(server) == set(SERVER_PACKAGES)


def test_the_client_wheel_brings_the_client_and_not_the_server(fresh_python: Path) -> None:
    for server_only in (*SERVER_PACKAGES, *SERVER_DEPENDENCIES, "pyspark"):
        probe = subprocess.run(
            [fresh_python, "-c", f"import {server_only}"], capture_output=True, check=False
        )
        assert probe.returncode != 0, f"{server_only} was installed with the client"


def test_the_client_says_how_to_get_the_operations_commands(fresh_python: Path) -> None:
    raftq = fresh_python.parent / "raftq"
    done = subprocess.run(
        [raftq, "cluster", "up"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert "it comes with the server distribution, raftq-server" in done.stderr
    assert "pip install ./server" in done.stderr
    assert "(not installed: cluster is the server's)" in _run(raftq, "--help")


def test_an_installed_client_produces_and_consumes(
    cluster: Cluster, fresh_python: Path, tmp_path: Path
) -> None:
    out = _run(fresh_python, "-c", SCRIPT, cluster.lb_url, cluster.admin_key)
    assert "round trip ok" in out
    key_file = tmp_path / "key"
    key_file.write_text(cluster.admin_key)
    raftq = fresh_python.parent / "raftq"
    where = ("--url", cluster.lb_url, "--api-key-file", key_file)
    _run(raftq, "produce", *where, "--topic", "installed", "from-the-cli")
    listed = _run(raftq, "topic", "list", *where)
    assert "installed\t2 partitions" in listed


@pytest.fixture(scope="module")
def server_python(tmp_path_factory: pytest.TempPathFactory, wheels: tuple[Path, Path]) -> Path:
    """A new virtualenv with both wheels: what `pip install . ./server` makes."""
    return _fresh_venv(tmp_path_factory.mktemp("server") / "venv", *wheels)


def test_the_server_wheel_runs_a_cluster_that_the_client_reaches(
    server_python: Path, tmp_path: Path
) -> None:
    raftq = server_python.parent / "raftq"
    directory = tmp_path / "cluster"
    port = str(CLUSTER_BASE_PORTS["installed_server"])
    try:
        _run(raftq, "cluster", "up", "--dir", directory, "--base-port", port, "--timeout-s", "120")
        where = ("--dir", directory)
        _run(raftq, "topic", "create", "wheel", "--partitions", "1", *where)
        _run(raftq, "produce", "--topic", "wheel", *where, "one", "two")
        consumed = _run(
            raftq, "consume", "--topic", "wheel", "--max-messages", "2", "--output", "table", *where
        )
        assert [line.split("\t")[-1] for line in consumed.splitlines()] == ["one", "two"]
    finally:
        subprocess.run(
            [raftq, "cluster", "down", "--dir", directory],
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    status = subprocess.run(
        [raftq, "cluster", "status", "--dir", directory, "--json"],
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert status.returncode == 1  # every node stopped
