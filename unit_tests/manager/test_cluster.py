"""Three real manager processes (``python -m manager``) on loopback, with fake brokers in this
process: election, registration, topic creation, routing, and failover after kill -9.

The tests of this module run in order and share one cluster; the failover test comes last.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import requests

from raftq.node_signing import NodeSigning
from stress_tests.polling import poll_until
from unit_tests.manager.fake_broker import FakeBroker, SharedLogs

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
ELECTION_WAIT_S = 15.0
REQUEST_WAIT_S = 10.0
"""Bound on one HTTP answer: generous, as a loaded machine may be slow to answer."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Manager:
    manager_id: int
    url: str
    args: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None

    def start(self) -> None:
        self.log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "manager", *self.args],
            cwd=REPO,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait()
        if self.log is not None:
            self.log.close()
        self.process, self.log = None, None


SECRET = "test-cluster-secret"
AS_NODE = NodeSigning.of(SECRET, "tool-test")
"""This module plays the brokers and the operator: it calls as a node (keys: test_access)."""


def _get(url: str, timeout_s: float = 2.0) -> tuple[int, Any]:
    response = requests.get(url, timeout=timeout_s, auth=AS_NODE)
    return response.status_code, response.json()


def _post(url: str, body: dict[str, object], timeout_s: float = 10.0) -> tuple[int, Any]:
    response = requests.post(url, json=body, timeout=timeout_s, auth=AS_NODE)
    return response.status_code, response.json()


def _leader(managers: list[Manager], wait_s: float = ELECTION_WAIT_S) -> Manager:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for manager in managers:
            try:
                status, body = _get(f"{manager.url}/raft_status", timeout_s=0.5)
            except requests.RequestException:
                continue
            if status == 200 and body["is_leader"]:
                return manager
        time.sleep(0.1)
    logs = "\n".join(m.log_path.read_text(errors="replace")[-2000:] for m in managers)
    raise AssertionError(f"no manager leader within {wait_s} s\n{logs}")


def _answers(manager: Manager) -> bool:
    try:
        return _get(f"{manager.url}/", timeout_s=REQUEST_WAIT_S)[0] == 200
    except requests.RequestException:
        return False


@pytest.fixture(scope="module")
def managers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Manager]]:
    root = tmp_path_factory.mktemp("managers")
    secret = root / "secret"
    secret.write_text(SECRET + "\n")
    ports = [(_free_port(), _free_port()) for _ in range(3)]
    peers = ",".join(
        f"{i}=http://127.0.0.1:{http}@127.0.0.1:{raft}" for i, (http, raft) in enumerate(ports, 1)
    )
    cluster = []
    for i, (http, raft) in enumerate(ports, 1):
        args = ["--id", str(i), "--host", "127.0.0.1", "--port", str(http)]
        args += ["--raft-port", str(raft), "--peers", peers, "--data-dir", str(root / f"m{i}")]
        args += ["--secret-file", str(secret), "--limit", "broker_dead_after_s=2.0"]
        cluster.append(Manager(i, f"http://127.0.0.1:{http}", args, root / f"m{i}.log"))
    try:
        for manager in cluster:
            manager.start()
        for manager in cluster:  # each checks its peers before it listens (peer_check)
            poll_until(functools.partial(_answers, manager), ELECTION_WAIT_S, manager.url)
        yield cluster
    finally:
        for manager in cluster:
            manager.kill()


@pytest.fixture(scope="module")
def brokers() -> Iterator[list[FakeBroker]]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logs = SharedLogs()
    fakes = [FakeBroker(i, logs) for i in (1, 2, 3)]
    try:
        yield fakes
    finally:
        for fake in fakes:
            fake.close()


def _register(url: str, broker: FakeBroker, raft_port_min: int) -> tuple[int, Any]:
    return _post(
        f"{url}/brokers",
        {
            "broker_id": broker.broker_id,
            "address": broker.address,
            "raft_host": "127.0.0.1",
            "raft_port_min": raft_port_min,
            "raft_port_max": raft_port_min + 99,
        },
    )


def test_refuses_to_start_without_secret(tmp_path: Path) -> None:
    empty = tmp_path / "secret"
    empty.write_text("")
    args = ["--id", "1", "--host", "127.0.0.1", "--port", "1", "--raft-port", "2"]
    args += ["--peers", "1=http://127.0.0.1:1@127.0.0.1:2", "--data-dir", str(tmp_path)]
    for secret_file in (empty, tmp_path / "missing"):
        done = subprocess.run(
            [sys.executable, "-m", "manager", *args, "--secret-file", str(secret_file)],
            cwd=REPO,
            capture_output=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 2 and b"secret" in done.stderr


def test_a_leader_is_elected_and_followers_redirect(managers: list[Manager]) -> None:
    leader = _leader(managers)
    status, body = _get(f"{leader.url}/raft_status", timeout_s=REQUEST_WAIT_S)
    assert status == 200 and body["id"] == leader.manager_id and body["state"] == "leader"
    assert body["leader_address"] == leader.url and body["has_quorum"] is True
    follower = next(m for m in managers if m is not leader)

    def redirect() -> dict[str, Any] | None:
        # A follower learns the leader's address from its heartbeats: under load the first
        # one may come late, and until then it answers NOT_LEADER without a hint.
        status, body = _get(f"{follower.url}/topics", timeout_s=REQUEST_WAIT_S)
        assert status == 503 and body["error_code"] == 50302
        return body if "leader_hint" in body else None

    body = poll_until(redirect, ELECTION_WAIT_S, "the follower to name the leader")
    assert body["leader_hint"] == _leader(managers).url
    status, body = _get(f"{follower.url}/")
    assert body == {"status": "ok", "role": "manager", "id": follower.manager_id}


def test_register_brokers_and_too_few_for_a_topic(
    managers: list[Manager], brokers: list[FakeBroker]
) -> None:
    leader = _leader(managers)
    assert _register(leader.url, brokers[0], 31000) == (201, {"broker_id": 1})
    assert _register(leader.url, brokers[0], 31000) == (200, {"broker_id": 1})
    status, body = _post(f"{leader.url}/topics", {"name": "t", "replication_factor": 3})
    assert status == 503 and body["error_code"] == 50305
    for index, broker in enumerate(brokers[1:], 2):
        assert _register(leader.url, broker, 31000 + 100 * index)[0] == 201
    status, body = _get(f"{leader.url}/brokers")
    assert [b["broker_id"] for b in body["brokers"]] == [1, 2, 3]
    assert all(b["alive"] for b in body["brokers"])


def test_topic_creation_and_routing_end_to_end(
    managers: list[Manager], brokers: list[FakeBroker]
) -> None:
    url = _leader(managers).url
    status, body = _post(f"{url}/topics", {"name": "orders", "partitions": 2})
    assert status == 201, body
    assert [p["replicas"] for p in body["partitions"]] == [[1, 2, 3], [2, 3, 1]]
    assert all(len(b.specs) == 2 for b in brokers)
    assert _post(f"{url}/topics", {"name": "orders"})[1]["error_code"] == 40901
    status, body = _get(f"{url}/partitions?topic=orders")
    replica = body["partitions"][0]["replicas"][0]
    assert replica["raft_address"] == "127.0.0.1:31000" and replica["address"] == brokers[0].address
    producer = _post(f"{url}/producers", {"topic": "orders"})[1]["producer_id"]
    batch = {"topic": "orders", "producer_id": producer, "sequence": 1}
    batch["messages"] = [{"message": f"m{i}", "key": f"k{i}"} for i in range(6)]
    status, first = _post(f"{url}/logs", batch)
    assert status == 201 and len(first["offsets"]) == 6
    assert _post(f"{url}/logs", batch) == (201, first)  # a retry is de-duplicated
    consumer = _post(f"{url}/consumers", {"topic": "orders"})[1]["consumer_id"]
    status, popped = _get(f"{url}/logs?consumer_id={consumer}&max_messages=10&request_id=r1")
    assert status == 200 and sorted(m["message"] for m in popped["messages"]) == [
        f"m{i}" for i in range(6)
    ]
    status, fetched = _get(f"{url}/logs?topic=orders&partition_id=0&offset=0")
    assert status == 200 and all(m["partition_id"] == 0 for m in fetched["messages"])
    assert _get(f"{url}/logs?topic=orders")[0] == 400


def test_cluster_summary_from_any_manager(managers: list[Manager]) -> None:
    status, body = _get(f"{managers[0].url}/cluster", timeout_s=5.0)
    assert status == 200
    assert [m["id"] for m in body["managers"]] == [1, 2, 3]
    assert sum(m["is_leader"] for m in body["managers"]) == 1
    assert {"name": "orders", "partitions": 2, "active_partitions": 2} in body["topics"]


def test_kill_the_leader_and_the_registry_survives(
    managers: list[Manager], brokers: list[FakeBroker]
) -> None:
    old = _leader(managers)
    producer = _post(f"{old.url}/producers", {"topic": "orders"})[1]["producer_id"]
    old.kill()
    killed_at = time.monotonic()
    new = _leader([m for m in managers if m is not old], wait_s=10.0)
    assert new is not old and time.monotonic() - killed_at < 10.0
    message = {"topic": "orders", "producer_id": producer, "message": "after", "partition_id": 1}
    deadline = time.monotonic() + 5.0
    status, body = _post(f"{new.url}/logs", message)
    while status == 503 and time.monotonic() < deadline:  # leader still catching up
        time.sleep(0.2)
        status, body = _post(f"{new.url}/logs", message)
    assert status == 201 and body["partition_id"] == 1, body
    status, body = _get(f"{new.url}/cluster", timeout_s=5.0)
    dead = next(m for m in body["managers"] if m["id"] == old.manager_id)
    assert dead["alive"] is False


def test_whole_cluster_restart_keeps_the_registry(
    managers: list[Manager], brokers: list[FakeBroker]
) -> None:
    url = _leader(managers).url
    producer = _post(f"{url}/producers", {"topic": "orders"})[1]["producer_id"]
    for manager in managers:
        manager.kill()
    for manager in managers:
        manager.start()
    url = _leader(managers).url
    message = {"topic": "orders", "producer_id": producer, "message": "again", "partition_id": 0}
    deadline = time.monotonic() + 5.0
    status, body = _post(f"{url}/logs", message)
    while status == 503 and time.monotonic() < deadline:
        time.sleep(0.2)
        status, body = _post(f"{url}/logs", message)
    assert status == 201, body
    topics = {"topics": [{"name": "orders", "partitions": 2, "active_partitions": 2}]}
    assert _get(f"{url}/topics")[1] == topics


def test_a_silent_broker_is_marked_dead(managers: list[Manager]) -> None:
    url = _leader(managers).url
    silent = {"broker_id": 9, "address": f"http://127.0.0.1:{_free_port()}"}
    silent |= {"raft_host": "127.0.0.1", "raft_port_min": 39000, "raft_port_max": 39099}
    assert _post(f"{url}/brokers", silent)[0] == 201
    deadline = time.monotonic() + 10.0
    answer: Any = None
    while time.monotonic() < deadline:
        # Asked of whoever leads now: on a loaded machine leadership may move meanwhile,
        # and a manager that no longer leads answers 503 NOT_LEADER (CI saw it).
        status, answer = _get(f"{_leader(managers).url}/brokers")
        listed = answer["brokers"] if status == 200 else []
        if listed and not next(b for b in listed if b["broker_id"] == 9)["alive"]:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"broker 9 is still alive after 10 s without answering: {answer}")
    assert all(b["alive"] for b in listed if b["broker_id"] != 9)
