"""Partition scaling (issue 22): what an idle cluster costs per partition it holds.

One cluster of three brokers, every partition replicated three ways (so each broker hosts a
replica of every partition), no traffic. Partitions are added in steps (one new topic per
step, e.g. 3, then 27 more for 30, ...) and at each step, once the managers name a leader for
every partition (a bounded wait, never a blind sleep):

- idle CPU per broker: utime + stime of its process (/proc/<pid>/stat) over a fixed window,
  as a share of one core;
- RSS and threads per broker (/proc/<pid>/status) at the window's end;
- one message's produce p50: ``produces`` single-message produces to partition 0 of the
  first topic, one after the other, through the client library's ``Producer`` (its direct
  path to the leader broker, as a user's), after one untimed produce that opens the
  connections. Measured after the window, so the window stays idle.

Each figure is the brokers' mean. The /proc readers are ``bench_memory``'s; the table is
``bench_report.render_scaling``.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import requests

from ops.cluster import LocalCluster
from ops.cluster_layout import broker_ports
from raftq import Producer
from stress_tests.bench_http import (
    VALUE,
    RequestFailedError,
    create_topic,
    leader_address,
    new_id,
)
from stress_tests.bench_memory import cpu_ticks, rss_mib, thread_count
from stress_tests.bench_report import ScalingRow, percentile
from stress_tests.cluster_view import broker_names
from stress_tests.credentials import client_session, require_admin_key
from stress_tests.polling import poll_until

PARTITIONS_MAX = broker_ports(0, 1)[2] - broker_ports(0, 1)[1] + 1
"""Today's cap, 100: a broker has that many Raft ports (``cluster_layout``), one per replica
it hosts, and with three brokers every broker hosts every partition."""
PARTITION_COUNTS = (3, 30, 60, PARTITIONS_MAX)
IDLE_WINDOW_S = 10.0
PRODUCES = 50
LEADERS_WAIT_S = 120.0
"""Bound on every partition having a leader after a step's topic is created."""
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class BrokerSample:
    """One broker process's figures at one moment."""

    cpu_ticks: int
    rss_mib: float
    threads: int


def sample(pid: int) -> BrokerSample | None:
    """The process's figures, or None when it is gone."""
    ticks, rss, threads = cpu_ticks(pid), rss_mib(pid), thread_count(pid)
    if ticks is None or rss is None or threads is None:
        return None
    return BrokerSample(ticks, rss, threads)


def cpu_percent(ticks_used: int, window_s: float, ticks_per_s: int = TICKS_PER_S) -> float:
    """CPU used over a window as a share of one core (%): 100 is one core busy throughout."""
    if window_s <= 0:
        raise ValueError(f"window_s must be positive, not {window_s}")
    return 100.0 * ticks_used / ticks_per_s / window_s


def scaling_row(
    partitions: int,
    before: Mapping[str, BrokerSample],
    after: Mapping[str, BrokerSample],
    window_s: float,
    p50_ms: float | None,
    ticks_per_s: int = TICKS_PER_S,
) -> ScalingRow:
    """The row of ``partitions`` from each broker's samples at the window's start and end
    (only brokers sampled at both count: a broker that restarted in between is left out)."""
    both = sorted(set(before) & set(after))
    if not both:
        return ScalingRow(partitions, error="no broker was sampled at both ends of the window")
    cpu = [
        cpu_percent(after[b].cpu_ticks - before[b].cpu_ticks, window_s, ticks_per_s) for b in both
    ]
    return ScalingRow(
        partitions,
        statistics.fmean(cpu),
        statistics.fmean(after[b].rss_mib for b in both),
        statistics.fmean(after[b].threads for b in both),
        p50_ms,
    )


def topic_steps(counts: Sequence[int], partitions_max: int = PARTITIONS_MAX) -> list[int]:
    """Partitions each step's new topic adds so the totals are ``counts`` (increasing, at
    most ``partitions_max``)."""
    if not counts or counts[0] <= 0 or any(b <= a for a, b in itertools.pairwise(counts)):
        raise ValueError(f"partition counts must be positive and increasing, not {counts}")
    if counts[-1] > partitions_max:
        raise ValueError(f"a broker holds at most {partitions_max} partitions, not {counts[-1]}")
    return [counts[0], *(b - a for a, b in itertools.pairwise(counts))]


def sample_brokers(cluster: LocalCluster) -> dict[str, BrokerSample]:
    found: dict[str, BrokerSample] = {}
    for name in broker_names(cluster):
        pid = cluster.pid(name)
        figures = None if pid is None else sample(pid)
        if figures is not None:
            found[name] = figures
    return found


def every_partition_led(session: requests.Session, lb: str, topics: Mapping[str, int]) -> bool:
    """The managers name a leader for every partition of every topic."""
    try:
        return all(
            leader_address(session, lb, topic, p) is not None
            for topic, count in topics.items()
            for p in range(count)
        )
    except (requests.RequestException, ValueError, RequestFailedError):
        return False


def produce_p50_ms(lb: str, api_key: str, topic: str, produces: int) -> float | None:
    """p50 of ``produces`` single-message produces to ``topic``'s partition 0, in turn."""
    latencies_s: list[float] = []
    with Producer(lb, topic, partition_id=0, api_key=api_key) as producer:
        producer.produce_batch([VALUE])  # untimed: opens the connections, fetches the map
        for _ in range(produces):
            started_s = time.monotonic()
            producer.produce_batch([VALUE])
            latencies_s.append(time.monotonic() - started_s)
    p50 = percentile(latencies_s, 0.5)
    return None if p50 is None else p50 * 1000


@dataclass(frozen=True, slots=True)
class Plan:
    """What ``measure`` runs: the rows' partition counts, the idle window, the produces."""

    counts: tuple[int, ...] = PARTITION_COUNTS
    window_s: float = IDLE_WINDOW_S
    produces: int = PRODUCES


def measure(cluster: LocalCluster, plan: Plan, log: Log) -> list[ScalingRow]:
    """One row per partition count, adding a topic per step to the running ``cluster``.
    A step that fails ends the table with its FAILED row (the later steps need its topic)."""
    lb, api_key = cluster.lb_url, require_admin_key(cluster)
    suffix, topics, rows = new_id()[:6], dict[str, int](), list[ScalingRow]()
    with client_session(api_key) as session:
        steps = zip(plan.counts, topic_steps(plan.counts), strict=True)
        for step, (total, added) in enumerate(steps):
            topic = f"scale{step}-{suffix}"
            log(f"  partition scaling: {total} partitions ({added} more in {topic}) ...")
            try:
                create_topic(session, lb, topic, added)
                topics[topic] = added
                poll_until(
                    lambda: every_partition_led(session, lb, topics),
                    LEADERS_WAIT_S,
                    f"a leader for each of {total} partitions",
                    period_s=0.5,
                )
                rows.append(_idle_row(cluster, total, plan, next(iter(topics))))
            except Exception as exc:
                rows.append(ScalingRow(total, error=f"{type(exc).__name__}: {exc}"[:160]))
                break
    return rows


def _idle_row(cluster: LocalCluster, total: int, plan: Plan, first_topic: str) -> ScalingRow:
    before = sample_brokers(cluster)
    started_s = time.monotonic()
    time.sleep(plan.window_s)  # the measuring window itself: a fixed duration
    after = sample_brokers(cluster)
    window_s = time.monotonic() - started_s
    api_key = require_admin_key(cluster)
    p50_ms = produce_p50_ms(cluster.lb_url, api_key, first_topic, plan.produces)
    return scaling_row(total, before, after, window_s, p50_ms)
