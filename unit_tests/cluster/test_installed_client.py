"""The client as an application installs it (issue 11): a wheel built from this checkout,
installed into a fresh virtualenv with only the client's dependencies, produces and
consumes against a running cluster, from Python and from the ``raftq`` command; the
server's dependencies are not there."""

from __future__ import annotations

import subprocess
import sys
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


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv with the wheel of this checkout installed, and nothing else."""
    root = tmp_path_factory.mktemp("wheel")
    dist, venv = root / "dist", root / "venv"
    _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
        "-w", dist, REPO, timeout_s=INSTALL_TIMEOUT_S,
    )  # fmt: skip
    (wheel,) = dist.glob("raftq-*.whl")
    _run(sys.executable, "-m", "venv", venv, timeout_s=INSTALL_TIMEOUT_S)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", wheel, timeout_s=INSTALL_TIMEOUT_S)
    return python


def test_the_wheel_brings_the_client_and_not_the_server(fresh_python: Path) -> None:
    for server_only in ("pysyncobj", "sqlalchemy", "psycopg2", "pyspark", "prometheus_client"):
        probe = subprocess.run(
            [fresh_python, "-c", f"import {server_only}"], capture_output=True, check=False
        )
        assert probe.returncode != 0, f"{server_only} was installed with the client"


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
