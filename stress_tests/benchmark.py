"""Benchmark: throughput, latency percentiles and memory of a real local cluster.

    .venv/bin/python -m stress_tests.benchmark [--seconds 10] [--db-url URL] [--url LB_URL]

Starts its own 7-process cluster in a temporary directory (unless ``--url`` names a running
one), then runs each scenario for a bounded time and prints one line per scenario: messages
per second, request latency p50/p95/p99/max, and the resident memory of every node. Figures
from one run are comparable with each other (same machine, same moment); across runs the
machine's noise dominates, so compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from raftq.cluster import LocalCluster

REQUEST_TIMEOUT_S = 30.0
BASE_PORT = 22100
VALUE = "x" * 100


@dataclass
class Sample:
    """What one scenario measured: per-request latencies and messages moved."""

    latencies_s: list[float] = field(default_factory=list)
    messages: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, latency_s: float, messages: int) -> None:
        with self.lock:
            self.latencies_s.append(latency_s)
            self.messages += messages

    def failed(self) -> None:
        with self.lock:
            self.errors += 1


def percentile_ms(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, int(fraction * len(ordered)))
    return ordered[index] * 1000


def report(name: str, sample: Sample, elapsed_s: float) -> str:
    lat = sample.latencies_s
    return (
        f"{name:<34} {sample.messages / elapsed_s:>9.0f} msg/s {len(lat) / elapsed_s:>7.0f} req/s"
        f"  p50 {percentile_ms(lat, 0.50):6.1f} ms  p95 {percentile_ms(lat, 0.95):6.1f} ms"
        f"  p99 {percentile_ms(lat, 0.99):6.1f} ms  max {max(lat, default=0) * 1000:7.1f} ms"
        f"  errors {sample.errors}"
    )


def run_threads(threads: int, seconds: float, step: Callable[[requests.Session], int]) -> Sample:
    """Run ``step`` in a loop on ``threads`` threads for ``seconds``; each call returns how
    many messages it moved."""
    sample = Sample()
    deadline = time.monotonic() + seconds

    def worker() -> None:
        with requests.Session() as session:
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    moved = step(session)
                except (requests.RequestException, AssertionError):
                    sample.failed()
                    continue
                sample.add(time.monotonic() - started, moved)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(seconds + REQUEST_TIMEOUT_S)
    return sample


def produce_step(url: str, topic: str, batch: int) -> Callable[[requests.Session], int]:
    # No sequence: the benchmark measures plain produce; retries are not its concern.
    producer = requests.post(f"{url}/producers", json={"topic": topic}, timeout=10).json()

    def step(session: requests.Session) -> int:
        body = {
            "producer_id": producer["producer_id"],
            "topic": topic,
            "messages": [{"message": VALUE, "key": uuid.uuid4().hex[:8]} for _ in range(batch)],
        }
        response = session.post(f"{url}/logs", json=body, timeout=REQUEST_TIMEOUT_S)
        assert response.status_code == 201, response.text
        return batch

    return step


def pop_step(url: str, topic: str, batch: int) -> Callable[[requests.Session], int]:
    consumer = requests.post(f"{url}/consumers", json={"topic": topic}, timeout=10).json()

    def step(session: requests.Session) -> int:
        params = {
            "consumer_id": consumer["consumer_id"],
            "max_messages": str(batch),
            "request_id": uuid.uuid4().hex,
        }
        response = session.get(f"{url}/logs", params=params, timeout=REQUEST_TIMEOUT_S)
        assert response.status_code == 200, response.text
        return len(response.json()["messages"])

    return step


def fetch_step(url: str, topic: str, batch: int, end: int) -> Callable[[requests.Session], int]:
    position = {"offset": 0}

    def step(session: requests.Session) -> int:
        offset = position["offset"] % max(end, 1)
        position["offset"] += batch
        params = {"topic": topic, "partition_id": "0", "offset": str(offset)}
        params["max_messages"] = str(batch)
        response = session.get(f"{url}/logs", params=params, timeout=REQUEST_TIMEOUT_S)
        assert response.status_code == 200, response.text
        return len(response.json()["messages"])

    return step


def rss_mib(pid: int | None) -> float:
    """Resident memory of a process and its children (gunicorn master and worker)."""
    if pid is None:
        return float("nan")
    total_kib = 0
    for status in [Path(f"/proc/{pid}/status"), *Path("/proc").glob("[0-9]*/status")]:
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if status.parent.name != str(pid) and fields.get("PPid", "").strip() != str(pid):
            continue
        total_kib += int(fields.get("VmRSS", "0 kB").split()[0])
    return total_kib / 1024


def memory_line(cluster: LocalCluster | None) -> str:
    if cluster is None:
        return "memory: not measured (cluster not started by the benchmark)"
    parts = [f"{name} {rss_mib(cluster.pid(name)):.0f}" for name in cluster.node_names]
    return "resident memory MiB: " + ", ".join(parts)


def create_topic(url: str, name: str, partitions: int) -> None:
    response = requests.post(
        f"{url}/topics", json={"name": name, "partitions": partitions}, timeout=30
    )
    assert response.status_code == 201, response.text
    time.sleep(2)  # let every partition elect its leader before measuring


Step = Callable[[requests.Session], int]


def scenarios(url: str) -> list[tuple[str, int, Callable[[], Step]]]:
    """(name, threads, step factory): each step factory registers what it needs first."""
    suffix = uuid.uuid4().hex[:6]
    one, three = f"bench1-{suffix}", f"bench3-{suffix}"
    create_topic(url, one, 1)
    create_topic(url, three, 3)
    return [
        ("produce 1 msg/req, 1 partition", 8, lambda: produce_step(url, one, 1)),
        ("produce 100/req, 1 partition", 4, lambda: produce_step(url, one, 100)),
        ("produce 1000/req, 3 partitions", 4, lambda: produce_step(url, three, 1000)),
        ("pop 1000/req, 3 partitions", 2, lambda: pop_step(url, three, 1000)),
        ("fetch 1000/req, 1 partition", 2, lambda: fetch_step(url, one, 1000, 10_000)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stress_tests.benchmark")
    parser.add_argument("--seconds", type=float, default=10.0, help="per scenario")
    parser.add_argument("--url", help="a running cluster's load balancer (default: start one)")
    parser.add_argument("--db-url", help="PostgreSQL URL for the brokers (default SQLite)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="raftq-bench-") as directory:
        cluster = None
        if args.url is None:
            cluster = LocalCluster(Path(directory), base_port=BASE_PORT, db_url=args.db_url)
            cluster.up()
        url = args.url or cluster.lb_url  # type: ignore[union-attr]
        try:
            print(f"RaftQ benchmark: {args.seconds:g} s per scenario, db {args.db_url or 'sqlite'}")
            print(memory_line(cluster) + "  (idle)")
            for name, threads, make_step in scenarios(url):
                step = make_step()
                started = time.monotonic()
                sample = run_threads(threads, args.seconds, step)
                label = f"{name}, {threads} threads"
                print(report(label, sample, time.monotonic() - started), flush=True)
            print(memory_line(cluster) + "  (after)")
        finally:
            if cluster is not None:
                cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
