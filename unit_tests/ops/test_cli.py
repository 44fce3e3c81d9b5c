"""The operations commands (``raftq cluster|node``), which the server's distribution adds to
the client's CLI: their parsing and the node files' checks."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from ops.cluster_layout import ClusterSettings, plan_nodes
from raftq.cli import DEFAULT_DIR, Context, build_parser, run


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(build_parser().parse_args(argv), Context(None, None, None, io.StringIO(), out, err))
    return code, out.getvalue(), err.getvalue()


def test_cluster_up_arguments() -> None:
    args = build_parser().parse_args(
        ["cluster", "up", "--dir", "d", "--base-port", "18000", "--limit", "a=1", "--limit", "b=2"]
    )
    assert (args.command, args.cluster_command, args.dir, args.base_port) == (
        "cluster",
        "up",
        "d",
        18000,
    )
    assert args.limit == [("a", "1"), ("b", "2")]
    assert args.db_url is None and args.host is None and args.timeout_s == 90.0
    assert args.brokers is None  # the cluster's own count, or 3 for a new one
    assert build_parser().parse_args(["cluster", "up", "--brokers", "5"]).brokers == 5
    timeout = ["cluster", "up", "--dead-broker-timeout-s", "7.5"]
    assert build_parser().parse_args(timeout).dead_broker_timeout_s == 7.5
    assert build_parser().parse_args(["cluster", "down"]).dir == DEFAULT_DIR


def test_status_of_a_directory_without_a_cluster(tmp_path: Path) -> None:
    code, out, _ = _run(["cluster", "status", "--dir", str(tmp_path / "none"), "--json"])
    assert code == 1
    status = json.loads(out)
    assert [n["name"] for n in status["nodes"]][:2] == ["lb", "manager-1"]
    assert not any(n["process_alive"] for n in status["nodes"])


def _node_files(directory: Path) -> list[str]:
    """The seven node files ``cluster up`` would write for a cluster in ``directory``."""
    settings = ClusterSettings(directory, limits=(("flush_period_s", "0.2"),)).validate()
    paths = []
    for node in plan_nodes(settings, sys.executable):
        node.config_file.parent.mkdir(parents=True)
        node.config_file.write_text(node.config_text)
        paths.append(str(node.config_file))
    return paths


def test_node_check_says_whether_a_deployments_files_agree(tmp_path: Path) -> None:
    files = _node_files(tmp_path)
    code, out, err = _run(["node", "check", *files])
    assert (code, err) == (0, "")
    assert out.startswith("7 node files agree: load_balancer, manager 1,"), out
    broker = Path(files[-1])
    changed = tmp_path / "broker-3-elsewhere.toml"
    changed.write_text(broker.read_text().replace("flush_period_s = 0.2", "flush_period_s = 1"))
    code, out, err = _run(["node", "check", *files, str(changed)])
    assert code == 1 and out == ""
    assert f"raftq: broker id 3 is in both {broker} and {changed}\n" in err
    assert "raftq: broker limits differ: flush_period_s is 0.2 in" in err


def test_node_run_refuses_a_bad_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "node.toml"
    bad.write_text('role = "broker"\nid = 1\ncolour = "red"\n')
    assert _run(["node", "run", "--config", str(bad)]) == (
        1,
        "",
        f"raftq: {bad}: unknown key 'colour' for a broker (known: role, id, host, port, "
        "raft_port_min, raft_port_max, data_dir, db_url, managers, managers_url, secret_file, "
        "limits_may_differ, metrics_token_file, mutual_tls, limits, tls)\n",
    )
    missing = tmp_path / "missing.toml"
    code, _, err = _run(["node", "run", "--config", str(missing)])
    assert (code, err) == (2, f"raftq: cannot read {missing}: No such file or directory\n")


def test_node_run_becomes_the_node_its_file_describes(tmp_path: Path) -> None:
    broker = Path(_node_files(tmp_path)[-1])  # its secret file does not exist yet
    done = subprocess.run(
        [sys.executable, "-m", "raftq.cli", "node", "run", "--config", str(broker)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # The broker itself read the file and refused to start without the cluster secret.
    assert done.returncode == 2, done
    assert done.stderr.startswith(f"broker: cannot read the cluster secret from {tmp_path}")
