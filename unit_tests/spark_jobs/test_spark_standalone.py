"""The Spark jobs on a real cluster manager (issue 11): a Spark standalone master and two
workers started from the installed PySpark on 127.0.0.1, whose executors run a Python that
lacks RaftQ (``.venv-spark-executor``, made by scripts/setup.sh: the client's and the data
source's third-party packages only). RaftQ reaches them as users ship it: the zip of
``python -m spark_jobs.package`` given to ``spark-submit --py-files``. ``bulk_produce`` and
``bulk_consume`` run through ``spark-submit --master spark://...``; the Parquet output holds
every produced message exactly once. A Structured Streaming query (raftq -> raftq, values
upper-cased) whose driver is killed (kill -9 of spark-submit's process group) and started
again on the same checkpoint leaves each input in the output topic exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest
import requests

from raftq.admin import Admin
from raftq.producer import Producer
from spark_jobs.package import build
from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import (
    create_topic,
    partition_brokers,
    partition_leader,
    read_replica,
)
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

ROOT = Path(__file__).resolve().parents[2]
EXECUTOR_PYTHON = ROOT / ".venv-spark-executor" / "bin" / "python"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER_PORT, MASTER_UI_PORT = 30800, 30801
WORKER_PORTS = ((30810, 30811), (30812, 30813))
DRIVER_PORT, BLOCK_MANAGER_PORT = 30820, 30821
MESSAGES = 400
STREAM_MESSAGES = 500
FIRST_PART = 300
KILL_AFTER = 100
STREAM_WAIT_S = 180.0
START_WAIT_S = 120.0
SUBMIT_TIMEOUT_S = 300
SPARK_ENV = {
    "SPARK_HOME": str(SPARK_HOME),
    # No lookup of this machine's name (it may not resolve); nothing beyond loopback.
    "SPARK_LOCAL_IP": "127.0.0.1",
    "SPARK_LOCAL_HOSTNAME": "localhost",
    "PYSPARK_DRIVER_PYTHON": sys.executable,
}


@pytest.fixture(scope="module")
def raftq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["spark_standalone"]
    yield from running_cluster(tmp_path_factory.mktemp("standalone-raftq"), port)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` once the master lists both workers alive."""
    assert EXECUTOR_PYTHON.exists(), f"{EXECUTOR_PYTHON} is missing: run scripts/setup.sh"
    logs = tmp_path_factory.mktemp("spark-standalone")
    url = f"spark://127.0.0.1:{MASTER_PORT}"
    master_args = ["--host", "127.0.0.1", "--port", str(MASTER_PORT)]
    processes = [_spark_class(logs / "master.log", "master.Master", *master_args,
                              "--webui-port", str(MASTER_UI_PORT))]  # fmt: skip
    for number, (port, ui_port) in enumerate(WORKER_PORTS, 1):
        work = logs / f"work-{number}"
        processes.append(
            _spark_class(
                logs / f"worker-{number}.log",
                "worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(work),
            )
        )
    try:
        poll_until(_two_workers_alive, START_WAIT_S, "a Spark master with two alive workers")
        yield url
    finally:
        for process in processes:
            with_group_killed(process)


def _spark_class(log: Path, main_class: str, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), f"org.apache.spark.deploy.{main_class}",
             *args],
            env={**os.environ, **SPARK_ENV},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def with_group_killed(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _two_workers_alive() -> bool:
    try:
        state = requests.get(f"http://127.0.0.1:{MASTER_UI_PORT}/json/", timeout=2).json()
    except (requests.RequestException, ValueError):
        return False
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") == 2


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zip users pass with --py-files."""
    out = tmp_path_factory.mktemp("dist") / "raftq-spark.zip"
    build(out)
    return out


def _submit(master: str, shipped: Path, app: Path, *args: str) -> str:
    """``spark-submit`` of ``app`` to the standalone master; its output (stdout and stderr)."""
    done = subprocess.run(
        _submit_argv(master, shipped, app, *args),
        env={**os.environ, **SPARK_ENV},
        cwd=shipped.parent,  # not the repository: nothing of RaftQ on the path but the zip
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"spark-submit {app.name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _submit_argv(master: str, shipped: Path, app: Path, *args: str) -> list[str]:
    return [
        str(SPARK_HOME / "bin" / "spark-submit"), "--master", master,
        "--py-files", str(shipped),
        "--conf", f"spark.pyspark.python={EXECUTOR_PYTHON}",
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", f"spark.driver.port={DRIVER_PORT}",
        "--conf", f"spark.blockManager.port={BLOCK_MANAGER_PORT}",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m",
        "--conf", "spark.cores.max=2",
        str(app), *args,
    ]  # fmt: skip


def test_the_executors_python_lacks_raftq_and_takes_it_from_the_zip(
    master: str, shipped: Path
) -> None:
    alone = subprocess.run(
        [str(EXECUTOR_PYTHON), "-c", "import raftq"], cwd="/", capture_output=True, check=False
    )
    assert alone.returncode != 0 and b"No module named 'raftq'" in alone.stderr
    out = _submit(master, shipped, ROOT / "unit_tests" / "spark_jobs" / "standalone_probe.py")
    line = next(li for li in out.splitlines() if li.startswith("PROBE "))
    found = json.loads(line.removeprefix("PROBE "))
    assert len(found) == 2
    for executable, raftq_file in found:
        assert executable == str(EXECUTOR_PYTHON)
        assert "raftq-spark.zip" in raftq_file, raftq_file


def test_bulk_produce_then_bulk_consume_through_spark_submit_exactly_once(
    raftq_cluster: Cluster, master: str, shipped: Path, tmp_path: Path
) -> None:
    create_topic(raftq_cluster, "standalone", 2)
    key_file = tmp_path / "admin.key"
    key_file.write_text(raftq_cluster.admin_key)
    source = tmp_path / "input.csv"
    values = [f"standalone-{i}" for i in range(MESSAGES)]
    source.write_text("value\n" + "\n".join(values) + "\n")
    url = ["--url", raftq_cluster.lb_url, "--api-key-file", str(key_file)]
    produced = _submit(
        master, shipped, ROOT / "spark_jobs" / "bulk_produce.py", *url,
        "--topic", "standalone", "--input", str(source), "--job-id", "standalone-1",
    )  # fmt: skip
    assert f"bulk_produce: {MESSAGES} messages to standalone" in produced, produced
    output = tmp_path / "out"
    consumed = _submit(
        master, shipped, ROOT / "spark_jobs" / "bulk_consume.py", *url,
        "--topic", "standalone", "--output", str(output),
    )  # fmt: skip
    assert f"bulk_consume: run 1: {MESSAGES} rows" in consumed, consumed
    read = pq.read_table(output / "run=000001").column("value").to_pylist()
    assert sorted(read) == sorted(values)  # every message, each once


def _stream(master: str, shipped: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """The streaming app's driver (spark-submit), in a process group of its own."""
    app = ROOT / "unit_tests" / "spark_jobs" / "standalone_stream.py"
    with log.open("ab") as out:
        return subprocess.Popen(
            _submit_argv(master, shipped, app, *args),
            # The driver's own Python workers (they plan a streaming source) do not get
            # --py-files on their path; they inherit the driver's PYTHONPATH.
            env={**os.environ, **SPARK_ENV, "PYTHONPATH": str(shipped)},
            cwd=shipped.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _total(cluster: Cluster, topic: str) -> int:
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        return sum(admin.end_offsets(topic).values())


def _values(cluster: Cluster, topic: str) -> list[str]:
    """Every message of ``topic``, read by offset from each partition's leader."""
    values = []
    for partition_id in partition_brokers(cluster, topic):
        leader = partition_leader(cluster, topic, partition_id)
        values += [e.value for e in read_replica(cluster, leader, topic, partition_id)]
    return values


@pytest.mark.long  # 90 s; the same exactly-once rule is run locally by test_spark_end_to_end
def test_a_streaming_query_survives_a_kill_of_its_driver_without_duplicates(
    raftq_cluster: Cluster, master: str, shipped: Path, tmp_path: Path
) -> None:
    cluster = raftq_cluster
    create_topic(cluster, "stream-in", 2)
    create_topic(cluster, "stream-out", 2)
    sent = [f"event-{i}" for i in range(STREAM_MESSAGES)]
    with Producer(cluster.lb_url, "stream-in", api_key=cluster.admin_key) as producer:
        producer.produce_batch([(v, f"k{i % 7}") for i, v in enumerate(sent[:FIRST_PART])])
    args = (cluster.lb_url, cluster.admin_key, "stream-in", "stream-out", str(tmp_path / "ck"))
    log = tmp_path / "driver.log"
    driver = _stream(master, shipped, log, *args)
    try:
        # Killed with a few micro-batches done, most of the input still to go.
        poll_until(
            lambda: _total(cluster, "stream-out") >= KILL_AFTER,
            STREAM_WAIT_S,
            f"{KILL_AFTER} transformed messages before the kill ({log})",
        )
    finally:
        with_group_killed(driver)
    with Producer(cluster.lb_url, "stream-in", api_key=cluster.admin_key) as producer:
        producer.produce_batch([(v, f"k{i % 7}") for i, v in enumerate(sent[FIRST_PART:])])
    driver = _stream(master, shipped, log, *args)  # the same checkpoint
    try:
        poll_until(
            lambda: _total(cluster, "stream-out") >= STREAM_MESSAGES,
            STREAM_WAIT_S,
            f"all {STREAM_MESSAGES} transformed messages after the restart ({log})",
        )
    finally:
        with_group_killed(driver)
    # Each input once, transformed: none lost at the kill, none written twice by the replay.
    assert sorted(_values(cluster, "stream-out")) == sorted(v.upper() for v in sent)
