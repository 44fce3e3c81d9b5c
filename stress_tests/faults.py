"""``FaultInjector``: carries out one ``FaultStep`` on a real ``LocalCluster`` and measures
failover: the time from the fault until a probe write to the step's partition is
acknowledged through the load balancer.

Runs on the runner's main thread only. Every wait is bounded; ``restore`` brings the cluster
back whole (resume paused nodes, heal the network, start stopped nodes) and is safe to call
at any time, also after an exception half way through a fault.

Credentials: leaders are asked of the nodes themselves, signed as a node (``node_session``);
the probe producers write with the cluster's admin API key, as a client does.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from ops.cluster import ClusterError, LocalCluster
from raftq import ClientLimits
from stress_tests.cluster_view import (
    broker_names,
    manager_leader,
    manager_names,
    partition_leader,
)
from stress_tests.credentials import node_session, require_admin_key
from stress_tests.history import FaultRecord, Recorder
from stress_tests.network_partition import NetworkPartitioner
from stress_tests.scheduler import FaultKind, FaultStep
from stress_tests.workload import ProducerWorker

PROBE_DEADLINE_S = 45.0
"""A fault after which no write is acknowledged for this long breaks availability."""
PROBE_PAUSE_S = 0.05
PROBE_LIMITS = ClientLimits(connect_timeout_s=0.5, request_timeout_s=2.0, attempts_max=1)
"""One short attempt per probe step, so the measured failover is not rounded up to a long
client timeout (the resend carries the same sequence, so nothing is duplicated)."""
LEADER_WAIT_S = 20.0
STOPPED_WAIT_S = 10.0
READY_WAIT_S = 90.0


class FaultError(RuntimeError):
    """A fault could not be injected (no leader to target, a node would not die)."""


class FaultInjector:
    def __init__(
        self,
        cluster: LocalCluster,
        topic: str,
        recorder: Recorder,
        probe_name: str,
        network: NetworkPartitioner | None,
        log: Callable[[str], None] = print,
    ) -> None:
        self._cluster, self._topic, self._recorder = cluster, topic, recorder
        self._probe_name = probe_name
        self._network = network
        self._log = log
        self._api_key = require_admin_key(cluster)
        self._session = node_session(cluster)
        self._probes: dict[int, ProducerWorker] = {}
        self.probe_timeouts = 0

    def close(self) -> None:
        for probe in self._probes.values():
            probe.give_up()
        self._session.close()

    def execute(self, step: FaultStep) -> FaultRecord:
        handlers: dict[FaultKind, Callable[[FaultStep, float], tuple[str, float | None]]] = {
            FaultKind.KILL_PARTITION_LEADER: self._kill_partition_leader,
            FaultKind.KILL_MANAGER_LEADER: self._kill_manager_leader,
            FaultKind.KILL_LOAD_BALANCER: lambda s, t0: self._kill_and_restart("lb", s, t0),
            FaultKind.KILL_NODE: lambda s, t0: self._kill_and_restart(s.node or "lb", s, t0),
            FaultKind.PAUSE_PARTITION_LEADER: self._pause_partition_leader,
            FaultKind.PAUSE_MANAGER_LEADER: self._pause_manager_leader,
            FaultKind.KILL_CLUSTER: self._kill_cluster,
            FaultKind.ISOLATE_PARTITION_LEADER: self._isolate_partition_leader,
            FaultKind.ISOLATE_MANAGER_LEADER: self._isolate_manager_leader,
        }
        start_s = time.monotonic()
        target, failover_s = handlers[step.kind](step, start_s)
        record = FaultRecord(step.kind.value, target, start_s, time.monotonic(), failover_s)
        self._recorder.fault(record)
        shown = "-" if failover_s is None else f"{failover_s:.2f} s"
        self._log(f"  fault {step.describe()}: target {target}, failover {shown}")
        return record

    # --- faults ------------------------------------------------------------------------------
    def _kill_partition_leader(self, step: FaultStep, _t0: float) -> tuple[str, float | None]:
        victim = self._partition_leader(step.partition_id)
        return victim, self._kill_and_restart(victim, step, time.monotonic())[1]

    def _kill_manager_leader(self, step: FaultStep, _t0: float) -> tuple[str, float | None]:
        victim = self._manager_leader()
        return victim, self._kill_and_restart(victim, step, time.monotonic())[1]

    def _kill_and_restart(self, node: str, step: FaultStep, _t0: float) -> tuple[str, float | None]:
        killed_s = time.monotonic()
        self._kill(node)
        # With the load balancer down nothing can be acknowledged: measure after it is back.
        failover_s = None if node == "lb" else self._probe(step.partition_id, killed_s)
        self._sleep_until(killed_s + step.hold_s)
        self._start(node)
        if node == "lb":
            failover_s = self._probe(step.partition_id, killed_s)
        return node, failover_s

    def _pause_partition_leader(self, step: FaultStep, _t0: float) -> tuple[str, float | None]:
        return self._pause(self._partition_leader(step.partition_id), step)

    def _pause_manager_leader(self, step: FaultStep, _t0: float) -> tuple[str, float | None]:
        return self._pause(self._manager_leader(), step)

    def _pause(self, node: str, step: FaultStep) -> tuple[str, float | None]:
        paused_s = time.monotonic()
        self._cluster.signal_node(node, signal.SIGSTOP)
        try:
            failover_s = self._probe(step.partition_id, paused_s)
            self._sleep_until(paused_s + step.hold_s)
        finally:
            self._cluster.signal_node(node, signal.SIGCONT)
        return node, failover_s

    def _kill_cluster(self, step: FaultStep, _t0: float) -> tuple[str, float | None]:
        killed_s = time.monotonic()
        for node in self._cluster.node_names:
            if self._cluster.is_running(node):
                self._cluster.signal_node(node, signal.SIGKILL)
        for node in self._cluster.node_names:
            self._wait_stopped(node)
        self._sleep_until(killed_s + step.hold_s)
        self._cluster.up(READY_WAIT_S)
        self._reapply_network()
        return "all", self._probe(step.partition_id, killed_s)

    def _isolate_partition_leader(self, step: FaultStep, _t0: float) -> tuple[str, float | None]:
        return self._isolate(
            self._partition_leader(step.partition_id), broker_names(self._cluster), step
        )

    def _isolate_manager_leader(self, step: FaultStep, _t0: float) -> tuple[str, float | None]:
        return self._isolate(self._manager_leader(), manager_names(self._cluster), step)

    def _isolate(
        self, node: str, peers: tuple[str, ...], step: FaultStep
    ) -> tuple[str, float | None]:
        if self._network is None:
            raise FaultError("network partitions are not available on this machine")
        cut_s = time.monotonic()
        self._network.isolate(node, peers)
        try:
            failover_s = self._probe(step.partition_id, cut_s)
            self._sleep_until(cut_s + step.hold_s)
        finally:
            self._network.heal()
        return node, failover_s

    # --- recovery ----------------------------------------------------------------------------
    def restore(self) -> None:
        """Resume, heal and restart whatever a fault left broken, then wait until ready."""
        for node in self._cluster.node_names:
            if self._cluster.is_running(node):
                self._cluster.signal_node(node, signal.SIGCONT)
        if self._network is not None:
            self._network.heal()
        self._cluster.up(READY_WAIT_S)

    # --- helpers -----------------------------------------------------------------------------
    def _probe(self, partition_id: int, since_s: float) -> float | None:
        """Seconds from ``since_s`` until a write to the partition is acknowledged."""
        probe = self._probes.get(partition_id)
        if probe is None:
            probe = ProducerWorker(
                f"{self._probe_name}-p{partition_id}",
                self._cluster.lb_url,
                self._topic,
                self._recorder,
                api_key=self._api_key,
                batch_messages=1,
                limits=PROBE_LIMITS,
                give_up_s=PROBE_DEADLINE_S * 4,
                partition_id=partition_id,
            )
            self._probes[partition_id] = probe
        deadline_s = time.monotonic() + PROBE_DEADLINE_S
        while time.monotonic() < deadline_s:
            if probe.step():
                return time.monotonic() - since_s
            time.sleep(PROBE_PAUSE_S)
        self.probe_timeouts += 1
        return None

    def _partition_leader(self, partition_id: int) -> str:
        return self._wait_for(
            lambda: partition_leader(self._cluster, self._session, self._topic, partition_id),
            f"a leader of partition {partition_id}",
        )

    def _manager_leader(self) -> str:
        return self._wait_for(
            lambda: manager_leader(self._cluster, self._session), "a manager leader"
        )

    def _wait_for(self, find: Callable[[], str | None], what: str) -> str:
        deadline_s = time.monotonic() + LEADER_WAIT_S
        while time.monotonic() < deadline_s:
            found = find()
            if found is not None:
                return found
            time.sleep(0.2)
        raise FaultError(f"no {what} within {LEADER_WAIT_S:g} s")

    def _kill(self, node: str) -> None:
        self._cluster.signal_node(node, signal.SIGKILL)
        self._wait_stopped(node)

    def _wait_stopped(self, node: str) -> None:
        deadline_s = time.monotonic() + STOPPED_WAIT_S
        while self._cluster.is_running(node):
            if time.monotonic() > deadline_s:
                raise FaultError(f"{node} still runs {STOPPED_WAIT_S:g} s after SIGKILL")
            time.sleep(0.05)

    def _start(self, node: str) -> None:
        self._cluster.start_node(node)
        self._reapply_network()
        try:
            self._cluster.wait_ready(READY_WAIT_S)
        except ClusterError as exc:
            raise FaultError(f"cluster not ready after restarting {node}: {exc}") from exc

    def _reapply_network(self) -> None:
        if self._network is not None and self._network.active:
            self._network.apply()

    @staticmethod
    def _sleep_until(when_s: float) -> None:
        time.sleep(max(0.0, when_s - time.monotonic()))
