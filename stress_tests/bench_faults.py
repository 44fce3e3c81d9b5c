"""The benchmark's fault scenarios: failover after kill -9 of a partition leader, and a
replica that comes back to a large backlog (memory while it grows, time to catch up).

Both reuse the stress tests' tools: ``FaultInjector`` kills the leader (found by asking the
brokers themselves) and measures failover with its probe producer; ``LocalCluster`` signals
and restarts nodes; ``cluster_view`` reads each replica's end and flushed offsets. Runs on the
caller's thread; every wait is bounded. The calls here (the replicas' status included) carry
the cluster's admin API key; ``FaultInjector`` finds leaders as a node and probes with the key.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from ops.cluster import LocalCluster
from stress_tests.bench_http import VALUE, create_topic, end_offset, new_id, post
from stress_tests.bench_load import Exhausted, MakeStep, Step, run_load
from stress_tests.bench_memory import MemorySampler
from stress_tests.bench_report import RAFTQ, Row, median
from stress_tests.cluster_view import replica_status
from stress_tests.credentials import client_session, require_admin_key
from stress_tests.faults import FaultInjector
from stress_tests.history import Recorder
from stress_tests.polling import poll_until
from stress_tests.scheduler import FaultKind, FaultStep

FAILOVER_HOLD_S = 1.0
"""How long the killed leader stays down (failover is measured before it returns)."""
BACKLOG_BATCH = 1_000
BACKLOG_THREADS = 4
STOP_WAIT_S = 10.0
READY_WAIT_S = 90.0
CATCH_UP_POLL_S = 0.25


def failover_row(cluster: LocalCluster, topic: str, kills: int, log: Callable[[str], None]) -> Row:
    """kill -9 of the partition leader's broker, ``kills`` times: p50 and max of the time
    until a write to the partition is acknowledged again through the load balancer."""
    name = "failover: kill -9 partition leader -> write acked"
    injector = FaultInjector(cluster, topic, Recorder(), f"bench-{new_id()[:6]}", None, log)
    times_s: list[float] = []
    errors = 0
    try:
        for index in range(kills):
            step = FaultStep(index, FaultKind.KILL_PARTITION_LEADER, 0.0, FAILOVER_HOLD_S, 0)
            record = injector.execute(step)
            if record.failover_s is None:
                errors += 1
            else:
                times_s.append(record.failover_s)
    except Exception as exc:  # the row reports it; the benchmark goes on
        return Row(RAFTQ, name, errors=errors + 1, error=f"{type(exc).__name__}: {exc}"[:160])
    finally:
        injector.close()
        injector.restore()
    if not times_s:
        return Row(RAFTQ, name, errors=errors, error="no write was acknowledged after a kill")
    p50 = median(times_s)
    note = f"n={len(times_s)}; p99 column: max"
    return Row(RAFTQ, name, None, None, (p50 or 0.0) * 1000, max(times_s) * 1000, errors, note)


class _Budget:
    """How many backlog messages are still to be sent; shared by the producer threads."""

    def __init__(self, messages: int) -> None:
        self._left, self._lock = messages, threading.Lock()

    def take(self, wanted: int) -> int:
        with self._lock:
            taken = min(wanted, self._left)
            self._left -= taken
            return taken

    def give_back(self, count: int) -> None:
        with self._lock:
            self._left += count


def _backlog_step(lb: str, api_key: str, topic: str, budget: _Budget) -> MakeStep:
    def make(opened: contextlib.ExitStack) -> Step:
        session = opened.enter_context(client_session(api_key))
        producer = post(session, f"{lb}/producers", {"topic": topic})["producer_id"]

        def step() -> int:
            count = budget.take(BACKLOG_BATCH)
            if count == 0:
                raise Exhausted
            body = {
                "producer_id": producer,
                "topic": topic,
                "messages": [{"message": VALUE, "key": None}] * count,
            }
            try:
                post(session, f"{lb}/logs", body)
            except Exception:
                budget.give_back(count)  # a refused batch (429, 503) is sent again later
                raise
            return count

        return step

    return make


def backlog_rows(
    cluster: LocalCluster,
    sampler: MemorySampler,
    messages: int,
    timeout_s: float,
    log: Callable[[str], None],
) -> list[Row]:
    """Kill one follower's broker, produce ``messages`` in batches while memory is sampled
    (phase "backlog"), restart it and time until its flushed offset reaches the end offset
    (phase "catch-up"). Two rows: the backlog's produce rate, and the catch-up."""
    lb, topic = cluster.lb_url, f"backlog-{new_id()[:6]}"
    api_key = require_admin_key(cluster)
    with client_session(api_key) as session:
        create_topic(session, lb, topic, 1)
        victim, replica_id = _a_follower(cluster, session, topic)
    log(f"  backlog: kill -9 {victim}, produce {messages:,} messages ...")
    sampler.set_phase("backlog")
    cluster.signal_node(victim, signal.SIGKILL)
    poll_until(lambda: not cluster.is_running(victim), STOP_WAIT_S, f"{victim} to die")
    backlog = _backlog_step(lb, api_key, topic, _Budget(messages))
    tally = run_load(BACKLOG_THREADS, timeout_s, backlog)
    scenario = f"produce {messages:,} backlog, 1000/req, 1 of 3 replicas down, 4 threads"
    short = tally.messages < messages
    note = f"only {tally.messages:,} within {timeout_s:g} s (--backlog-timeout)" if short else ""
    produced = tally.row(RAFTQ, scenario, note=note)
    log(f"  backlog: restart {victim}, wait for it to catch up ...")
    sampler.set_phase("catch-up")
    return [produced, _catch_up_row(cluster, api_key, victim, topic, replica_id, timeout_s)]


def _a_follower(cluster: LocalCluster, session: requests.Session, topic: str) -> tuple[str, int]:
    """(broker name, replica id) of a replica of ``topic``/0 that does not lead it."""

    def find() -> tuple[str, int] | None:
        for broker, status in sorted(replica_status(cluster, session, topic, 0).items()):
            if status.get("is_leader") is False and isinstance(status.get("replica_id"), int):
                return broker, int(status["replica_id"])
        return None

    return poll_until(find, READY_WAIT_S, f"a follower of {topic}/0")


def _catch_up_row(
    cluster: LocalCluster,
    api_key: str,
    victim: str,
    topic: str,
    replica_id: int,
    timeout_s: float,
) -> Row:
    name = "catch-up: restarted replica flushes the backlog"
    with client_session(api_key) as session:
        target = end_offset(session, cluster.lb_url, topic, 0)
        started_s = time.monotonic()
        try:
            cluster.start_node(victim)
            cluster.wait_ready(READY_WAIT_S)
            poll_until(
                lambda: _flushed(cluster, session, topic, replica_id) >= target,
                timeout_s,
                f"{victim}'s replica of {topic}/0 to flush up to {target}",
                CATCH_UP_POLL_S,
            )
        except Exception as exc:
            return Row(RAFTQ, name, errors=1, error=f"{type(exc).__name__}: {exc}"[:160])
    took_s = time.monotonic() - started_s
    note = f"{took_s:.1f} s from restart to flushed offset = end offset {target:,}"
    return Row(RAFTQ, name, target / took_s, None, took_s * 1000, None, 0, note)


def _flushed(cluster: LocalCluster, session: requests.Session, topic: str, replica_id: int) -> int:
    """The replica's flushed offset as the running brokers see it (the most advanced view:
    ``flushed_offsets`` only grow)."""
    seen = [-1]
    for status in replica_status(cluster, session, topic, 0).values():
        flushed: Any = status.get("flushed_offsets")
        if isinstance(flushed, list) and replica_id < len(flushed):
            seen.append(int(flushed[replica_id]))
    return max(seen)
