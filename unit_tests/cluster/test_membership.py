"""Membership with real processes: a broker added to a running cluster (``raftq broker add``)
registers, is listed alive, takes new partitions' replicas (placement takes the least loaded
brokers first) and serves them; a manager added (``raftq manager add``) counts in the Raft
group, and a dead one is removed (``raftq manager remove``); the cluster remembers both
across a restart of every node. (Re-replication and ``raftq broker remove``:
``test_rereplication.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from unit_tests.cluster.client_ops import (
    create_topic,
    partition_brokers,
    pop_all,
    produce,
    read_replica,
    register_consumer,
    register_producer,
)
from unit_tests.cluster.harness import (
    Cluster,
    broker_file_copy,
    run_node_file,
    running_cluster,
    wait_until,
)
from unit_tests.ports import CLUSTER_BASE_PORTS

MESSAGES = 30
WAIT_S = 60.0
DEAD_AFTER_S = 4.0
DUPLICATE_HTTP_PORT = 29490
DUPLICATE_RAFT_PORT = 29491
"""In the module's block, used by no node of its cluster."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["membership"]
    directory = tmp_path_factory.mktemp("membership")
    up_args = ["--dead-broker-timeout-s", str(DEAD_AFTER_S)]
    yield from running_cluster(directory, port, up_args=up_args)


def _brokers(cluster: Cluster) -> dict[int, dict[str, Any]]:
    """``raftq broker list --output json``, as a user reads it: broker id -> its row."""
    argv = ["broker", "list", "--dir", str(cluster.directory), "--output", "json"]
    done = subprocess.run(
        [sys.executable, "-m", "raftq.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {int(row["broker_id"]): row for row in rows}


def test_an_added_broker_takes_new_partitions_and_serves_them(cluster: Cluster) -> None:
    create_topic(cluster, "before", 3)  # brokers 1-3 now hold three replicas each
    out = cluster.add_broker()
    assert "broker-4 is up" in out, out
    assert cluster.info["brokers"] == 4
    listed = _brokers(cluster)
    assert sorted(listed) == [1, 2, 3, 4] and all(b["alive"] for b in listed.values()), listed
    assert listed[4]["partition_count"] == 0

    create_topic(cluster, "after", 3)
    placed = partition_brokers(cluster, "after")
    on_new = [p for p, brokers in placed.items() if 4 in brokers]
    # Broker 4 held nothing, so every new partition takes a replica there first.
    assert sorted(on_new) == [0, 1, 2], placed
    producer = register_producer(cluster, "after")
    sent = [(None, f"m{i}") for i in range(MESSAGES)]
    acks = produce(cluster, producer, 0, sent, topic="after", partition_id=0)
    assert [a.offset for a in acks] == list(range(MESSAGES))
    # Broker 4's replica applies them as the others do, and a consumer gets each once.
    wait_until(
        lambda: len(read_replica(cluster, 4, "after", 0)) == MESSAGES,
        WAIT_S,
        "broker 4's replica to apply every message",
    )
    stored = [entry.value for entry in read_replica(cluster, 4, "after", 0)]
    assert stored == [value for _, value in sent]
    consumer = register_consumer(cluster, "after", 0)
    popped = [m["message"] for m in pop_all(cluster, consumer)]
    assert popped == [value for _, value in sent]


def test_the_added_broker_is_held_dead_after_the_timeout_it_was_given(cluster: Cluster) -> None:
    node_file = Path(cluster.node("broker-4")["config_file"]).read_text()
    assert f"broker_dead_after_s = {DEAD_AFTER_S}" in node_file  # the cluster's, also its
    cluster.kill("broker-4")
    wait_until(lambda: not _brokers(cluster)[4]["alive"], WAIT_S, "broker 4 to be held dead")
    cluster.up()
    wait_until(lambda: _brokers(cluster)[4]["alive"], WAIT_S, "broker 4 to be alive again")


def test_a_second_broker_with_a_taken_id_is_refused_and_stops(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two node files with one broker id (a copy-paste slip): the second broker to start
    is refused by the managers, says why, and stops; the first keeps its id and address."""
    original = cluster.node("broker-2")
    copy = broker_file_copy(original, tmp_path / "copy", DUPLICATE_HTTP_PORT, DUPLICATE_RAFT_PORT)
    node_file = tmp_path / "broker-2-copy.toml"
    node_file.write_text(copy)
    log_path = tmp_path / "copy.log"
    with log_path.open("wb") as log:
        copy_process = subprocess.Popen(
            [sys.executable, "-m", "raftq.cli", "node", "run", "--config", str(node_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            copy_process.wait(timeout=WAIT_S)
        finally:
            copy_process.kill()
    said = log_path.read_text()
    assert f"broker id 2 is registered at {original['http_address']} and alive" in said, said
    assert _brokers(cluster)[2]["address"] == original["http_address"]


def test_a_broker_whose_limits_differ_from_the_running_ones_refuses_to_start(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A node file whose [limits] differ from the running brokers' (edited on one host
    only): the broker says which limit differs and exits, before it registers."""
    copy = broker_file_copy(
        cluster.node("broker-2"),
        tmp_path / "other-limits",
        DUPLICATE_HTTP_PORT,
        DUPLICATE_RAFT_PORT,
    )
    copy = copy.replace("id = 2", "id = 9")
    copy = copy.replace("[limits]", "[limits]\nflush_batch_messages_max = 777")
    node_file = tmp_path / "broker-9.toml"
    node_file.write_text(copy)
    done = run_node_file(node_file, WAIT_S)
    assert done.returncode == 2, done
    assert "runs with other limits (flush_batch_messages_max: " in done.stderr, done.stderr
    assert "777 here" in done.stderr and "raftq node check" in done.stderr
    assert 9 not in _brokers(cluster)


def test_a_manager_whose_peers_differ_from_the_running_ones_refuses_to_start(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A manager file whose [[peers]] name another manager 1 (say, a host that was
    replaced in one file only) must not join: it says which peer disagrees and exits."""
    manager_1 = cluster.node("manager-1")
    old_http, old_raft = str(manager_1["http_address"]), str(manager_1["raft_address"])
    new_http = f"http://127.0.0.1:{DUPLICATE_HTTP_PORT}"
    new_raft = f"127.0.0.1:{DUPLICATE_RAFT_PORT}"
    text = Path(manager_1["config_file"]).read_text().replace(old_http, new_http)
    text = text.replace(old_raft, new_raft)
    text = text.replace(f"port = {old_http.rsplit(':', 1)[1]}", f"port = {DUPLICATE_HTTP_PORT}")
    text = text.replace(
        f"raft_port = {old_raft.rsplit(':', 1)[1]}", f"raft_port = {DUPLICATE_RAFT_PORT}"
    )
    text = text.replace(str(manager_1["data_dir"]), str(tmp_path / "other-manager"))
    node_file = tmp_path / "manager-elsewhere.toml"
    node_file.write_text(text)
    done = run_node_file(node_file, WAIT_S)
    assert done.returncode == 2, done
    assert "lists other managers than this one" in done.stderr, done.stderr
    assert "every manager's file must list the same [[peers]]" in done.stderr


def _managers(cluster: Cluster) -> dict[int, bool]:
    """``GET /cluster`` through the load balancer: manager id -> alive."""
    body = cluster.get("/cluster").json()
    return {int(m["id"]): bool(m["alive"]) for m in body["managers"]}


def test_a_manager_added_to_the_group_counts_and_a_dead_one_is_removed(
    cluster: Cluster,
) -> None:
    """``raftq manager add``: a fourth manager joins the Raft group (dynamic membership)
    and is listed; the group then outlives a kill -9 of its leader (three of four) and
    takes writes; ``raftq manager remove`` of the dead one leaves three members."""
    out = cluster.cli("manager", "add", "--dir", str(cluster.directory))
    assert "manager-4 joined the managers" in out, out
    wait_until(
        lambda: _managers(cluster) == {1: True, 2: True, 3: True, 4: True},
        WAIT_S,
        "four managers alive",
    )
    leader = cluster.manager_leader()
    cluster.kill(leader)
    create_topic(cluster, "after-a-manager-died", 1)  # a leader among the other three
    gone = int(leader.removeprefix("manager-"))
    out = cluster.cli("manager", "remove", str(gone), "--dir", str(cluster.directory))
    assert f"manager-{gone} left the managers" in out, out
    left = {1, 2, 3, 4} - {gone}
    wait_until(lambda: _managers(cluster) == dict.fromkeys(left, True), WAIT_S, "three managers")
    listed = json.loads((cluster.directory / "cluster.json").read_text())
    assert listed["managers"] == 4 and listed["removed_managers"] == [gone]
    create_topic(cluster, "after-a-manager-left", 1)


def test_a_restarted_cluster_starts_the_added_broker_too(cluster: Cluster) -> None:
    cluster.down()
    cluster.up()  # cluster.json says four brokers; up waits until all four are alive
    listed = {broker_id: row["alive"] for broker_id, row in _brokers(cluster).items()}
    assert listed == {1: True, 2: True, 3: True, 4: True}
    # The managers as the last test left them: three members, the removed one not started.
    managers = json.loads((cluster.directory / "cluster.json").read_text())
    members = set(range(1, managers["managers"] + 1)) - set(managers["removed_managers"])
    wait_until(lambda: _managers(cluster) == dict.fromkeys(members, True), WAIT_S, "the managers")
    wait_until(
        lambda: len(read_replica(cluster, 4, "after", 0)) == MESSAGES,
        WAIT_S,
        "broker 4's replica to serve its messages again",
    )
