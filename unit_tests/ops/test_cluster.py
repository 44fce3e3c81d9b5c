"""The local cluster launcher: port layout, cluster.json, and LocalCluster driving stand-in
processes (real processes, real signals; no RaftQ servers)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from ops.cluster import ClusterError, LocalCluster
from ops.cluster_layout import (
    ClusterSettings,
    LayoutError,
    NodeSpec,
    broker_db_url,
    broker_ports,
    cluster_json,
    manager_ports,
    parse_cluster_json,
    plan_nodes,
)
from raftq.profile import ClientProfile, profile_path, read_profile
from runtime.node_config import parse_node_file

STANDIN = Path(__file__).with_name("standin_node.py")


def test_port_layout() -> None:
    assert manager_ports(17100, 1) == (17111, 17121)
    assert manager_ports(17100, 3) == (17113, 17123)
    assert broker_ports(17100, 1) == (17131, 17200, 17299)
    assert broker_ports(17100, 3) == (17133, 17400, 17499)


def test_node_command_lines(tmp_path: Path) -> None:
    settings = ClusterSettings(tmp_path, db_url="postgresql://u:p@h:5432/raftq").validate()
    nodes = {n.name: n for n in plan_nodes(settings, "py")}
    assert list(nodes) == ["lb", "manager-1", "manager-2", "manager-3"] + [
        f"broker-{i}" for i in (1, 2, 3)
    ]
    for node in nodes.values():
        assert node.argv == ("py", "-m", node.role, "--config", str(node.config_file))
        assert node.config_file == tmp_path / node.name / "node.toml"
    lb = nodes["lb"]
    assert _options(lb) == (
        "py", "-m", "load_balancer", "--host", "127.0.0.1", "--port", "17100", "--managers",
        "http://127.0.0.1:17111,http://127.0.0.1:17112,http://127.0.0.1:17113",
    )  # fmt: skip
    manager = nodes["manager-2"]
    assert _options(manager) == (
        "py", "-m", "manager", "--id", "2", "--host", "127.0.0.1", "--port", "17112",
        "--raft-port", "17122", "--peers",
        "1=http://127.0.0.1:17111@127.0.0.1:17121,2=http://127.0.0.1:17112@127.0.0.1:17122,"
        "3=http://127.0.0.1:17113@127.0.0.1:17123",
        "--data-dir", str(tmp_path / "manager-2"), "--secret-file", str(tmp_path / "secret"),
    )  # fmt: skip
    assert manager.raft_address == "127.0.0.1:17122"
    broker = nodes["broker-3"]
    assert _options(broker) == (
        "py", "-m", "broker", "--id", "3", "--host", "127.0.0.1", "--port", "17133",
        "--raft-port-min", "17400", "--raft-port-max", "17499",
        "--data-dir", str(tmp_path / "broker-3"),
        "--db-url", "postgresql://u:p@h:5432/raftq_broker_3",
        "--managers", "http://127.0.0.1:17111,http://127.0.0.1:17112,http://127.0.0.1:17113",
        "--secret-file", str(tmp_path / "secret"),
    )  # fmt: skip
    assert broker.log_file == tmp_path / "broker-3" / "node.log"
    assert nodes["lb"].log_file == tmp_path / "lb" / "node.log"


def test_without_db_url_brokers_use_their_default_and_limits_reach_every_node(
    tmp_path: Path,
) -> None:
    settings = ClusterSettings(tmp_path, limits=(("flush_period_s", "0.1"),))
    for node in plan_nodes(settings, "py"):
        assert "--db-url" not in _options(node)
        assert _options(node)[-2:] == ("--limit", "flush_period_s=0.1")


def _options(node: NodeSpec) -> tuple[str, ...]:
    """The command line the node's file stands for (``python -m <role> --config FILE``
    runs the role with these options)."""
    parsed = parse_node_file(node.config_text, str(node.config_file))
    assert parsed.role == node.role
    return (*node.argv[:3], *parsed.argv)


def test_broker_db_url() -> None:
    url = "postgresql://raftq:raftq@127.0.0.1:5432/raftq?sslmode=disable"
    assert broker_db_url(url, 2) == (
        "postgresql://raftq:raftq@127.0.0.1:5432/raftq_broker_2?sslmode=disable"
    )
    with pytest.raises(LayoutError, match="postgresql"):
        broker_db_url("sqlite:///x.db", 1)
    with pytest.raises(LayoutError, match="name a database"):
        broker_db_url("postgresql://h:5432/", 1)
    with pytest.raises(LayoutError, match="name a database") as refused:  # issue 23 hole 5
        broker_db_url("postgresql://raftq:Pa55word@h:5432/", 1)
    assert "Pa55word" not in str(refused.value) and "raftq:***@h" in str(refused.value)


def test_settings_are_validated(tmp_path: Path) -> None:
    with pytest.raises(LayoutError, match="base-port"):
        ClusterSettings(tmp_path, base_port=65300).validate()
    with pytest.raises(LayoutError, match="absolute"):
        ClusterSettings(Path("rel")).validate()
    with pytest.raises(LayoutError, match="--brokers must be between 3"):
        ClusterSettings(tmp_path, brokers=2).validate()
    ClusterSettings(tmp_path, base_port=65535 - 399).validate()
    with pytest.raises(LayoutError, match="base-port"):  # a fifth broker's Raft ports do not fit
        ClusterSettings(tmp_path, base_port=65535 - 399, brokers=5).validate()


def test_brokers_beyond_three_get_their_own_ports_and_directories(tmp_path: Path) -> None:
    settings = ClusterSettings(tmp_path, base_port=18000, brokers=5).validate()
    nodes = {n.name: n for n in plan_nodes(settings, "py")}
    assert sorted(nodes) == [
        "broker-1", "broker-2", "broker-3", "broker-4", "broker-5",
        "lb", "manager-1", "manager-2", "manager-3",
    ]  # fmt: skip
    fifth = nodes["broker-5"]
    assert (fifth.http_address, fifth.raft_port_min, fifth.raft_port_max) == (
        "http://127.0.0.1:18035",
        18500,
        18599,
    )
    assert fifth.data_dir == tmp_path / "broker-5"
    body = json.loads(json.dumps(cluster_json(settings, tuple(nodes.values()), {})))
    assert body["brokers"] == 5 and parse_cluster_json(tmp_path, body)[0] == settings
    del body["brokers"]  # a cluster.json written before --brokers existed
    assert parse_cluster_json(tmp_path, body)[0].brokers == 3


def test_cluster_json_round_trip(tmp_path: Path) -> None:
    settings = ClusterSettings(tmp_path, "127.0.0.2", 18000, None, (("a", "1"),))
    nodes = plan_nodes(settings, "py")
    body = cluster_json(settings, nodes, {"lb": 42})
    assert body["load_balancer_url"] == "http://127.0.0.2:18000"
    assert body["secret_file"] == str(tmp_path / "secret")
    entries = body["nodes"]
    assert isinstance(entries, list)
    assert entries[0]["pid"] == 42 and entries[1]["pid"] is None
    assert entries[1]["raft_address"] == "127.0.0.2:18021"
    assert (entries[4]["raft_port_min"], entries[4]["raft_port_max"]) == (18100, 18199)
    assert set(entries[4]) == {
        "name", "role", "id", "pid", "http_address", "raft_port_min", "raft_port_max",
        "data_dir", "log_file", "argv", "config_file",
    }  # fmt: skip
    parsed, pids = parse_cluster_json(tmp_path, json.loads(json.dumps(body)))
    assert parsed == settings and pids == {"lb": 42}


def free_base_port() -> int:
    """A base port whose 400-port span looks free (best effort, like any test port)."""
    for _ in range(50):
        with closing(socket.socket()) as sock:
            sock.bind(("127.0.0.1", 0))
            base = int(sock.getsockname()[1]) // 1000 * 1000
        if 20000 <= base <= 60000 and all(_free(base + o) for o in (0, 11, 12, 13, 31, 32, 33)):
            return base
    raise AssertionError("no free port range")


def _free(port: int) -> bool:
    with closing(socket.socket()) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture
def standins(tmp_path: Path) -> Path:
    code_dir = tmp_path / "code"
    for role in ("manager", "broker", "load_balancer"):
        (code_dir / role).mkdir(parents=True)
        (code_dir / role / "__init__.py").write_text("")
        (code_dir / role / "__main__.py").write_text(STANDIN.read_text())
    return code_dir


@pytest.fixture
def open_cluster(tmp_path: Path, standins: Path) -> Iterator[Callable[..., LocalCluster]]:
    opened: list[LocalCluster] = []
    base_port = free_base_port()

    def make(**kwargs: object) -> LocalCluster:
        kwargs.setdefault("base_port", base_port if not opened else None)
        cluster = LocalCluster(tmp_path / "c", code_dir=standins, **kwargs)  # type: ignore[arg-type]
        opened.append(cluster)
        return cluster

    yield make
    for cluster in reversed(opened):
        cluster.down(timeout_s=5.0)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_up_status_signal_restart_and_down(open_cluster: Callable[..., LocalCluster]) -> None:
    cluster = open_cluster()
    cluster.up(timeout_s=30)
    secret = cluster.directory / "secret"
    assert secret.stat().st_mode & 0o777 == 0o600 and len(secret.read_text().strip()) == 64
    status = cluster.status()
    assert status.manager_leader == cluster.lb_url  # what the stand-in LB says
    assert all(n.process_alive and n.http_ok for n in status.nodes)
    recorded = json.loads((cluster.directory / "cluster.json").read_text())
    pids = {n["name"]: n["pid"] for n in recorded["nodes"]}
    assert pids == {name: cluster.pid(name) for name in cluster.node_names}
    # The admin key `up` asked for (as a node) is kept where only the owner reads it.
    assert recorded["admin_key"] == cluster.admin_key == "rq_standin_admin_key"
    assert (cluster.directory / "cluster.json").stat().st_mode & 0o777 == 0o600
    # The client finds the cluster by its profile alone, which holds the same key.
    profile = read_profile(cluster.directory)
    assert profile == ClientProfile(cluster.lb_url, "rq_standin_admin_key", None, None)
    assert profile_path(cluster.directory).stat().st_mode & 0o777 == 0o600

    cluster.signal_node("broker-2", signal.SIGSTOP)
    assert not {n.name: n for n in cluster.status().nodes}["broker-2"].http_ok
    cluster.signal_node("broker-2", signal.SIGCONT)

    worker = int((cluster.directory / "manager-1" / "worker.pid").read_text())
    cluster.signal_node("manager-1", signal.SIGKILL)
    _wait(lambda: not cluster.is_running("manager-1") and not _alive(worker))
    before = {name: cluster.pid(name) for name in cluster.node_names}
    cluster.up(timeout_s=30)
    after = {name: cluster.pid(name) for name in cluster.node_names}
    assert [n for n in cluster.node_names if before[n] != after[n]] == ["manager-1"]

    again = open_cluster()  # another process's view: finds the same nodes by pid
    assert all(again.is_running(name) for name in again.node_names)
    workers = [int((again.directory / n / "worker.pid").read_text()) for n in ("broker-1",)]
    again.down(timeout_s=5)
    assert not any(again.is_running(name) for name in again.node_names)
    assert not any(_alive(pid) for pid in workers)
    assert not any(_alive(pid) for pid in after.values() if pid is not None)


def test_a_node_that_exits_fails_up_with_its_log(
    open_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    (tmp_path / "c" / "manager-2").mkdir(parents=True)
    (tmp_path / "c" / "manager-2" / "fail-on-start").write_text("")
    cluster = open_cluster()
    with pytest.raises(ClusterError, match="manager-2 is not running") as failure:
        cluster.up(timeout_s=30)
    assert "failing on purpose" in str(failure.value)


def test_existing_settings_win_and_conflicts_are_refused(
    open_cluster: Callable[..., LocalCluster],
) -> None:
    first = open_cluster()
    first.save()
    assert open_cluster().settings == first.settings
    with pytest.raises(ClusterError, match="keeps its settings"):
        open_cluster(host="127.0.0.9")


def _wait(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline_s = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline_s:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_nodes_run_this_interpreter() -> None:
    settings = ClusterSettings(Path("/x").resolve())
    assert all(n.argv[0] == sys.executable for n in plan_nodes(settings, sys.executable))
    assert os.path.isabs(sys.executable)
