"""The benchmark: its pure parts (percentiles, rows, ratios, the table, confirm counting, peer
configs) in milliseconds, and one end-to-end run of the real command on a real cluster that
checks every row has a figure. No test asserts a speed: figures depend on the machine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from stress_tests import redelivery
from stress_tests.bench_load import Exhausted, Step, Tally, run_load
from stress_tests.bench_memory import group_members, snapshot
from stress_tests.bench_report import MemoryRow, Row, median, percentile, ratio_rows, render
from stress_tests.peers import nats_cluster, rabbitmq_cluster
from stress_tests.peers import run as peers_run
from stress_tests.peers.nats_cluster import node_config
from stress_tests.peers.rabbitmq_bench import Confirms
from stress_tests.polling import WaitTimeoutError, poll_until
from stress_tests.redelivery import Round, Taken
from unit_tests.ports import CLUSTER_BASE_PORTS

REPO = Path(__file__).resolve().parents[2]
SMOKE_BASE_PORT = CLUSTER_BASE_PORTS["benchmark_smoke"]
"""22500..22899: clear of the other cluster tests (17500, 18500, 19500, 20100, 21000) and of
the benchmark's default 22100."""


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.50) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile(values, 0.0) == 1.0
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0  # unsorted input


def test_percentile_of_nothing_is_none_and_bad_fraction_is_refused() -> None:
    assert percentile([], 0.5) is None
    assert median([]) is None
    assert median([1.0, 3.0]) == 2.0
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


def test_tally_row_reports_rates_over_elapsed_time_and_latency_in_ms() -> None:
    tally = Tally(elapsed_s=2.0)
    for latency_s in (0.010, 0.020, 0.030, 0.040):
        tally.add(latency_s, 100)
    tally.failed(RuntimeError("503"))
    row = tally.row("raftq", "produce", key="k")
    assert row.msgs_per_s == 200.0
    assert row.requests_per_s == 2.0
    assert row.p50_ms == pytest.approx(20.0)
    assert row.p99_ms == pytest.approx(40.0)
    assert (row.errors, row.key, row.ok) == (1, "k", True)


def test_tally_without_a_success_is_a_failed_row_with_the_last_error() -> None:
    tally = Tally(elapsed_s=1.0)
    tally.failed(ConnectionError("refused"))
    row = tally.row("nats", "publish")
    assert not row.ok
    assert row.error is not None and "refused" in row.error


def test_ratio_rows_divide_raftq_by_each_peer_per_shared_key() -> None:
    rows = [
        Row("raftq", "a via LB", 100.0, 100.0, 10.0, 20.0, key="k1"),
        Row("raftq", "a direct", 200.0, 200.0, 5.0, 10.0, key="k1"),
        Row("raftq", "only raftq", 1.0, 1.0, 1.0, 1.0),
        Row("nats", "b", 400.0, 50.0, 5.0, 40.0, key="k1"),
        Row("nats", "c", 1.0, 1.0, 1.0, 1.0, key="k2"),  # no RaftQ counterpart
        Row("rabbitmq", "d", 0.0, 0.0, None, None, key="k1"),
        Row("rabbitmq", "e", key="k1", error="could not run"),  # failed rows never compare
    ]
    ratios = {(row.system, row.scenario): row for row in ratio_rows(rows)}
    assert set(ratios) == {
        ("raftq/nats", "a via LB"),
        ("raftq/nats", "a direct"),
        ("raftq/rabbitmq", "a via LB"),
        ("raftq/rabbitmq", "a direct"),
    }
    via_lb = ratios[("raftq/nats", "a via LB")]
    assert (via_lb.msgs_per_s, via_lb.requests_per_s, via_lb.note) == (0.25, 2.0, "vs b")
    assert (via_lb.p50_ms, via_lb.p99_ms) == (2.0, 0.5)
    assert ratios[("raftq/nats", "a direct")].msgs_per_s == 0.5
    assert ratios[("raftq/rabbitmq", "a via LB")].msgs_per_s is None  # division by zero: "-"


def test_render_prints_every_row_ratios_failures_and_memory_per_process() -> None:
    rows = [
        Row("raftq", "produce 1/req", 1234.5, 1234.5, 1.5, 9.25, 2, key="k"),
        Row("nats", "publish 1/req", 2469.0, 2469.0, 0.5, 1.0, key="k"),
        Row("raftq", "failover", None, None, 850.0, 2030.0, note="n=3"),
        Row("rabbitmq", "consume", error="TimeoutError: no confirm"),
    ]
    memory = [
        MemoryRow("rabbit-1", "beam.smp", {"idle": (69.0, 69.0)}),
        MemoryRow("broker-1", "python", {"idle": (64.0, 64.0), "backlog": (90.0, 120.4)}),
    ]
    text = render("title", rows, memory, ("idle", "backlog"))
    lines = text.splitlines()
    assert lines[0] == "title"
    assert lines[1].split()[:4] == ["system", "scenario", "msgs/s", "req/s"]
    assert "1,234" in text and "9.2" in text and "FAILED: TimeoutError: no confirm" in text
    ratio_line = next(line for line in lines if line.startswith("raftq/nats"))
    assert "0.50x" in ratio_line and "3.00x" in ratio_line
    assert any(line.split()[:4] == ["broker-1", "python", "64", "/"] for line in lines)
    broker = next(line for line in lines if line.startswith("broker-1"))
    assert broker.rstrip().endswith("90 / 120")
    rabbit = next(line for line in lines if line.startswith("rabbit-1"))
    assert rabbit.rstrip().endswith("-")


def test_run_load_is_bounded_in_time_counts_errors_and_stops_when_exhausted() -> None:
    calls = [0]

    def make(_opened: contextlib.ExitStack) -> Step:
        def step() -> int:
            calls[0] += 1
            if calls[0] % 3 == 0:
                raise RuntimeError("every third fails")
            return 10

        return step

    started_s = time.monotonic()
    tally = run_load(2, 0.2, make)
    assert time.monotonic() - started_s < 5.0
    assert tally.errors > 0 and tally.messages == 10 * len(tally.latencies_s)

    def drained(_opened: contextlib.ExitStack) -> Step:
        def step() -> int:
            raise Exhausted

        return step

    started_s = time.monotonic()
    empty = run_load(1, 30.0, drained)
    assert time.monotonic() - started_s < 5.0 and empty.errors == 0 and not empty.latencies_s


def test_poll_until_returns_the_first_true_value_or_times_out() -> None:
    values = iter([None, False, 0, "found"])
    assert poll_until(lambda: next(values), 5.0, "value", period_s=0.001) == 0
    with pytest.raises(WaitTimeoutError, match="never"):
        poll_until(lambda: None, 0.05, "never", period_s=0.01)


def test_redelivery_rows_time_each_message_past_its_lease_and_from_the_kill() -> None:
    taken = Taken(("a", "b", "c"), sent_s=10.0)
    lost_one = Round(taken, killed_s=10.1, lease_end_s=11.0, redelivered_s={"a": 11.05})
    both = Round(Taken(("d",), 20.0), 20.1, 21.0, {"d": 21.02})
    scenario = redelivery.Scenario("raftq", "after a kill", "k-lease", "k-kill")
    past, from_kill = redelivery.rows(scenario, [lost_one, both])
    assert past.scenario == "after a kill: past the lease's end" and past.key == "k-lease"
    assert past.p50_ms == pytest.approx(20.0) and past.p99_ms == pytest.approx(50.0)
    assert from_kill.p50_ms == pytest.approx(920.0) and from_kill.p99_ms == pytest.approx(950.0)
    assert from_kill.key == "k-kill" and past.errors == from_kill.errors == 2  # b, c lost
    assert past.note.startswith("n=2 messages, 2 kills") and past.msgs_per_s is None


def test_redelivery_without_a_lease_is_one_row_and_a_round_with_nothing_back_fails() -> None:
    requeued = Round(Taken(("a",), 1.0), killed_s=1.5, lease_end_s=None, redelivered_s={"a": 1.51})
    scenario = redelivery.Scenario("rabbitmq", "after a kill", None, None, "no lease")
    (row,) = redelivery.rows(scenario, [requeued])
    assert row.scenario == "after a kill: from the kill" and row.key is None
    assert row.p50_ms == pytest.approx(10.0) and row.note.endswith("; no lease")
    (failed,) = redelivery.rows(scenario, [Round(Taken(("a",), 1.0), 1.5, None)])
    assert not failed.ok and failed.errors == 1


def test_a_doomed_members_report_survives_its_line() -> None:
    taken = Taken(("x-1", "x-2"), sent_s=123.5)
    assert Taken.from_line(taken.to_line()) == taken


@dataclass
class _Method:
    delivery_tag: int
    multiple: bool


class Ack(_Method):
    pass


class Nack(_Method):
    pass


@dataclass
class _Frame:
    method: _Method


def test_confirms_handle_single_multiple_and_negative_acknowledgements() -> None:
    confirms = Confirms()
    confirms.outstanding = {1, 2, 3, 4, 5}
    confirms.on_frame(_Frame(Ack(2, multiple=True)))
    assert confirms.outstanding == {3, 4, 5}
    confirms.on_frame(_Frame(Ack(4, multiple=False)))
    assert confirms.outstanding == {3, 5}
    confirms.on_frame(_Frame(Nack(5, multiple=True)))
    assert confirms.outstanding == set() and confirms.nacked == 2


def test_nats_node_config_binds_loopback_and_routes_to_all_three(tmp_path: Path) -> None:
    config = node_config(2, 24000, tmp_path)
    assert "port: 24002" in config and 'http: "127.0.0.1:24202"' in config
    assert 'host: "127.0.0.1"' in config and "port: 24102" in config
    for route_port in (24101, 24102, 24103):
        assert f"nats-route://127.0.0.1:{route_port}" in config
    assert str(tmp_path / "nats-2") in config


EXPECTED_ROWS = (
    "8 threads sharing one asynchronous producer, 100-byte messages",
    "produce 1/req via LB, 1 thread",
    "produce 1/req via LB, 8 threads",
    "produce 1/req to leader broker, 1 thread",
    "produce 1/req to leader broker, 8 threads",
    "produce 100/req via LB, 3 partitions, 4 threads",
    "produce 1000/req via LB, 3 partitions, 4 threads",
    "4 producers with sequences, 100/req, 4 threads",
    "pop 1000/req via LB, 3 partitions, 1 thread",
    "receive 100 + ack via LB, 3 partitions, 1 thread",
    "receive 100 + ack via LB, 3 partitions, 1 thread, per-key ordering",
    "fetch 1000/req by offset via LB, 1 partition, 2 threads",
    "end-to-end: produce 1 via LB -> seen by offset poll",
    "end-to-end: produce 1 to the leader -> seen by a stream (SSE)",
    "redelivery after kill -9 of a member, 1 s lease, long poll via LB: past the lease's end",
    "redelivery after kill -9 of a member, 1 s lease, long poll via LB: from the kill",
    "failover: kill -9 partition leader -> write acked",
    "produce 3,000 backlog, 1000/req, 1 of 3 replicas down, 4 threads",
    "catch-up: restarted replica flushes the backlog",
)


def run_benchmark(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """The command's output; past ``timeout_s`` it gets SIGTERM, which it takes as Ctrl-C
    and stops every node it started (a SIGKILL, ``subprocess.run``'s, left its cluster
    running on the test's ports), and the test fails with what it printed."""
    child = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.terminate()
        stdout, stderr = child.communicate(timeout=60)
        pytest.fail(f"not done within {timeout_s:g} s; it printed:\n{stdout}{stderr[-3000:]}")
    return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)


@pytest.mark.cluster
@pytest.mark.tier  # a benchmark run (40 s): CI runs it, the default test command leaves it out
def test_benchmark_command_prints_every_row_with_a_figure() -> None:
    argv = [sys.executable, "-m", "stress_tests.benchmark", "--seconds", "0.5"]
    argv += ["--backlog", "3000", "--failovers", "1", "--base-port", str(SMOKE_BASE_PORT)]
    argv += ["--scaling-partitions", "3", "--idle-window", "1", "--scaling-produces", "3"]
    done = run_benchmark(argv, 270.0)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for scenario in EXPECTED_ROWS:
        line = next((line for line in lines if scenario in line), None)
        assert line is not None, f"no row {scenario!r} in:\n{done.stdout}"
        assert "FAILED" not in line, line
        figures = line.split(scenario, 1)[1].split()[:4]  # msgs/s, req/s, p50, p99
        assert any(figure != "-" for figure in figures), line
    memory = [line.split() for line in lines if line.startswith(("broker-", "manager-", "lb "))]
    nodes = {(cells[0], cells[1]) for cells in memory}
    for node in ("lb", "manager-1", "manager-2", "manager-3", "broker-1", "broker-2", "broker-3"):
        assert (node, "python") in nodes, done.stdout
    assert any(line.startswith("| 3 |") for line in lines), "no partition-scaling row"


SCALING_BASE_PORT = CLUSTER_BASE_PORTS["partition_scaling"]


@pytest.mark.cluster
def test_partition_scaling_prints_a_row_with_every_figure_per_partition_count() -> None:
    """``--only partition-scaling`` alone, kept small: 3 and 6 partitions, 1 s windows."""
    argv = [sys.executable, "-m", "stress_tests.benchmark", "--only", "partition-scaling"]
    argv += ["--scaling-partitions", "3,6", "--idle-window", "1", "--scaling-produces", "5"]
    done = run_benchmark([*argv, "--base-port", str(SCALING_BASE_PORT)], 120.0)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| 3 |", "| 6 |"))]
    assert len(rows) == 2, done.stdout
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1].endswith("%") and cells[2].endswith(" MiB"), row
        assert int(cells[3]) > 0 and cells[4].endswith(" ms"), row


def test_a_peer_that_cannot_run_is_named_and_the_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers_run, "missing_client", lambda module, package: f"{package} missing")
    rows, memory, lines = peers_run.run_peers(0.1, tmp_path, lambda _line: None)
    assert (rows, memory) == ([], [])
    assert lines == ["NATS: not run (nats-py missing)", "RabbitMQ: not run (pika missing)"]


def test_a_missing_server_binary_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nats_cluster, "find_binary", lambda *_args: None)
    monkeypatch.setattr(rabbitmq_cluster, "find_binary", lambda *_args: None)
    nats, rabbit = nats_cluster.NatsCluster(tmp_path), rabbitmq_cluster.RabbitCluster(tmp_path)
    assert not nats.start() and "nats-server not found" in nats.status
    assert not rabbit.start() and "rabbitmq-server not found" in rabbit.status
    nats.stop()
    rabbit.stop()  # nothing started: nothing to stop, no error


def test_memory_snapshot_reports_the_group_leader_and_each_child_apart() -> None:
    """A node of several processes (a leader with a child): each is its own row."""
    node = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        poll_until(lambda: len(group_members({node.pid})[node.pid]) == 2, 10.0, "the child")
        found = snapshot({"peer-1": node.pid, "peer-2": None})
        assert set(found) == {("peer-1", "sh"), ("peer-1", "sleep")}
        assert all(mib > 0 for mib in found.values())
    finally:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait(10)
