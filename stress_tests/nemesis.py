"""``MembershipNemesis``: carries out one ``OpStep`` of a membership schedule on a real
``LocalCluster`` while the workload runs (issue 19), the way Jepsen's membership nemeses
drive etcd and Redpanda: brokers killed and replaced by re-replication, drained and
removed, added; managers added and removed; partitions added; and, through
``FaultInjector``, pauses, isolations and kills of leaders.

Targets are drawn from the step's ``pick`` over what the cluster then holds, in a stable
order (sorted ids), so a seed replays the same choices when the cluster is in the same
state. Every operation waits for a quiet cluster first (every broker alive, no move in
progress: bounded), so one operation's consequences do not blur into the next and a drain
is judged against the state it was asked in. Every wait is bounded; an operation that
cannot finish raises ``NemesisError`` (the run records it as a problem).

Runs on the run's main thread only. Broker and manager changes go through the same
``LocalCluster`` object the rest of the run uses (``add_broker``, ``forget_broker``,
``add_manager``, ``remove_manager``), so its node list and ``cluster.json`` stay one; drains
and removals are ``POST /brokers/drain`` and ``DELETE /brokers`` with the admin API key, as
``raftq broker remove`` does them.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import requests

from ops.cluster import ClusterError, LocalCluster
from protocol.errors import proves_nothing_done
from stress_tests.cluster_view import get_json
from stress_tests.credentials import client_session, require_admin_key
from stress_tests.faults import FaultError, FaultInjector
from stress_tests.membership_checks import (
    ClusterState,
    DrainAttempt,
    drain_attempt,
    drainable,
)
from stress_tests.membership_plan import FAULT_KINDS, OpKind, OpStep, pick_of
from stress_tests.membership_read import overview
from stress_tests.polling import WaitTimeoutError, poll_until
from stress_tests.scheduler import FaultStep

QUIET_WAIT_S = 120.0
"""Every broker alive and no move in progress, before an operation starts."""
REPLACE_WAIT_S = 150.0
"""A killed broker's replicas (replication factor 3) moved to live brokers."""
DRAIN_WAIT_S = 150.0
CALL_WAIT_S = 60.0
"""Repeating an idempotent call while it is refused for now (503, no manager leader)."""
READY_WAIT_S = 90.0
MANAGERS_WAIT_S = 60.0
"""Every manager answering the managers' leader, before one is added or removed: a
restarted manager answers HTTP at once, its leader's Raft only after pysyncobj reconnects
(its retry pause is 5 s)."""
MANAGERS_AWAY = ("do not answer the leader", "would answer the leader")
"""The managers' refusals of a change while a manager does not answer the leader (yet):
an operator waits and asks again (``manager/cluster.py``)."""
MANAGERS_RETRY_PAUSE_S = 1.0
STOPPED_WAIT_S = 10.0
CALL_TIMEOUT_S = 15.0
T = TypeVar("T")


class NemesisError(RuntimeError):
    """An operation could not be carried out or did not finish in its bound."""


@dataclass(frozen=True, slots=True)
class OpRecord:
    index: int
    kind: str
    target: str
    outcome: str
    """done, refused (a drain the service refused: judged by ``check_drains``) or
    unknown (a partition addition whose answer was lost)."""
    seconds: float
    detail: str = ""

    def describe(self) -> str:
        extra = f" ({self.detail})" if self.detail else ""
        took = f"{self.seconds:.1f} s"
        return f"#{self.index} {self.kind} {self.target}: {self.outcome} in {took}{extra}"


class MembershipNemesis:
    def __init__(
        self,
        cluster: LocalCluster,
        injector: FaultInjector,
        partitioned_topic: str,
        partitions: Callable[[], int],
        log: Callable[[str], None] = print,
    ) -> None:
        """``partitioned_topic``: the topic partitions are added to and faults target;
        ``partitions()``: how many it has now."""
        self._cluster, self._injector, self._log = cluster, injector, log
        self._topic, self._partitions = partitioned_topic, partitions
        self._client = client_session(require_admin_key(cluster))
        self.drains: list[DrainAttempt] = []
        self.records: list[OpRecord] = []

    def close(self) -> None:
        self._client.close()

    def execute(self, step: OpStep) -> OpRecord:
        handlers: dict[OpKind, Callable[[OpStep], tuple[str, str, str]]] = {
            OpKind.KILL_REPLACE_BROKER: self._kill_replace_broker,
            OpKind.DRAIN_REMOVE_BROKER: self._drain_remove_broker,
            OpKind.ADD_BROKER: self._add_broker,
            OpKind.ADD_MANAGER: self._add_manager,
            OpKind.REMOVE_MANAGER: self._remove_manager,
            OpKind.ADD_PARTITION: self._add_partition,
        }
        started_s = time.monotonic()
        handler = handlers.get(step.kind, self._fault)
        target, outcome, detail = handler(step)
        record = OpRecord(
            step.index, step.kind.value, target, outcome, time.monotonic() - started_s, detail
        )
        self.records.append(record)
        self._log(f"  op {record.describe()}")
        return record

    # --- brokers ---------------------------------------------------------------------------
    def _kill_replace_broker(self, step: OpStep) -> tuple[str, str, str]:
        state = self.wait_quiet()
        victim_id = pick_of(step.pick, sorted(state.brokers))
        if victim_id is None:
            raise NemesisError("no broker to kill")
        victim = f"broker-{victim_id}"
        self._cluster.signal_node(victim, signal.SIGKILL)
        self._wait(lambda: not self._cluster.is_running(victim), STOPPED_WAIT_S, f"{victim} dead")
        killed_s = time.monotonic()
        self._wait(lambda: self._replaced(victim_id), REPLACE_WAIT_S, f"{victim}'s replicas moved")
        replaced_s = time.monotonic() - killed_s
        self._start(victim)
        return victim, "done", f"replicas moved {replaced_s:.1f} s after the kill"

    def _replaced(self, broker_id: int) -> bool | None:
        """No partition of three or more replicas has one on the broker or is moving
        (replication factors 1 and 2 cannot move while it is dead: they wait for it)."""
        state = overview(self._client, self._cluster.lb_url)
        if state is None:
            return None
        wide = [p for p in state.partitions if len(p.replicas) >= 3]
        return not any(p.moving or broker_id in p.replicas for p in wide)

    def _drain_remove_broker(self, step: OpStep) -> tuple[str, str, str]:
        state = self.wait_quiet()
        notes = []
        if step.refusal_probe:
            notes.append(self._refused_drain(step, state))
            state = self.wait_quiet()
        candidates = sorted(b for b in state.brokers if drainable(state, b))
        target = pick_of(step.pick, candidates)
        if target is None:
            raise NemesisError(f"no broker may be drained: {state.brokers}")
        attempt = self._drain(target, state)
        if attempt.status != 202:
            return f"broker-{target}", "refused", attempt.describe()
        self._wait(lambda: self._holds_nothing(target), DRAIN_WAIT_S, f"broker-{target} drained")
        self._cluster.forget_broker(target)
        # 409 BROKER_NOT_EMPTY while the managers' view of the last move lags: repeated
        self._call_until("DELETE", "/brokers", {"broker_id": target}, (200, 404), (409,))
        notes.append(f"broker {target} drained and removed")
        return f"broker-{target}", "done", "; ".join(notes)

    def _refused_drain(self, step: OpStep, state: ClusterState) -> str:
        """A drain of a broker holding a lone replica (replication factor 1): it must be
        refused. Taken by mistake, it is recorded (``check_drains`` fails the run) and
        cancelled, so the run goes on with the broker."""
        lone = sorted(
            b for b in state.brokers if any(len(p.replicas) == 1 for p in state.held_by(b))
        )
        target = pick_of(step.pick, lone)
        if target is None:
            return "no broker holds a lone replica"
        attempt = self._drain(target, state)
        if attempt.status == 202:
            self._call_until("DELETE", "/brokers/drain", {"broker_id": target}, (200, 202))
        return attempt.describe()

    def _drain(self, broker_id: int, state: ClusterState) -> DrainAttempt:
        response = self._call_until("POST", "/brokers/drain", {"broker_id": broker_id}, None)
        body = _json(response)
        code = body.get("error_code") if isinstance(body, dict) else None
        attempt = drain_attempt(
            state, broker_id, response.status_code, code if isinstance(code, int) else None
        )
        self.drains.append(attempt)
        return attempt

    def _holds_nothing(self, broker_id: int) -> bool | None:
        state = overview(self._client, self._cluster.lb_url)
        if state is None:
            return None
        return not state.held_by(broker_id) and not any(p.moving for p in state.partitions)

    def _add_broker(self, _step: OpStep) -> tuple[str, str, str]:
        self.wait_quiet()
        node = self._cluster.add_broker(READY_WAIT_S)
        return node.name, "done", ""

    # --- managers --------------------------------------------------------------------------
    def _add_manager(self, _step: OpStep) -> tuple[str, str, str]:
        node = self._when_managers_answer(lambda: self._cluster.add_manager(READY_WAIT_S))
        return node.name, "done", ""

    def _remove_manager(self, step: OpStep) -> tuple[str, str, str]:
        manager_id = pick_of(step.pick, sorted(self._cluster.settings.manager_ids))
        if manager_id is None:
            raise NemesisError("no manager to remove")
        self._when_managers_answer(lambda: self._cluster.remove_manager(manager_id, READY_WAIT_S))
        return f"manager-{manager_id}", "done", ""

    def _when_managers_answer(self, change: Callable[[], T]) -> T:
        """``change`` once the cluster is quiet and every manager answers, asked again
        while the managers refuse it because one does not answer their leader yet (a
        manager the schedule killed came back a moment ago). Seed 502 of the membership
        tier asked at once and was refused: a run that carried out too few operations."""
        self.wait_quiet()
        self._wait(self._managers_alive, MANAGERS_WAIT_S, "every manager alive")
        deadline_s = time.monotonic() + MANAGERS_WAIT_S
        while True:
            try:
                return change()
            except ClusterError as exc:
                away = any(refusal in str(exc) for refusal in MANAGERS_AWAY)
                if not away or time.monotonic() >= deadline_s:
                    raise
            time.sleep(MANAGERS_RETRY_PAUSE_S)

    def _managers_alive(self) -> bool:
        body = get_json(self._client, self._cluster.lb_url + "/overview", CALL_TIMEOUT_S)
        managers = body.get("managers") if isinstance(body, dict) else None
        if not isinstance(managers, list) or not managers:
            return False
        return all(m.get("alive") is True for m in managers)

    # --- partitions ------------------------------------------------------------------------
    def _add_partition(self, _step: OpStep) -> tuple[str, str, str]:
        """``POST /partitions``, not repeated once its outcome is open (a repeat would add
        a second one): repeated only while refused with nothing done."""
        self.wait_quiet()
        before = self._partitions()
        deadline_s = time.monotonic() + CALL_WAIT_S
        last = "no attempt"
        while time.monotonic() < deadline_s:
            try:
                response = self._client.post(
                    self._cluster.lb_url + "/partitions",
                    json={"topic": self._topic},
                    timeout=CALL_TIMEOUT_S,
                )
            except requests.ConnectionError as exc:
                last = repr(exc)[:200]
                return self._topic, "unknown", f"{before} partitions before; {last}"
            if response.status_code == 201:
                return self._topic, "done", f"partition {response.json()['partition_id']}"
            last = f"{response.status_code} {response.text[:200]}"
            if not proves_nothing_done(response.status_code, _json(response)):
                return self._topic, "unknown", last
            time.sleep(0.5)
        raise NemesisError(f"POST /partitions refused for {CALL_WAIT_S:g} s: {last}")

    # --- faults of scheduler.py ------------------------------------------------------------
    def _fault(self, step: OpStep) -> tuple[str, str, str]:
        self.wait_quiet()
        fault = FaultStep(
            index=step.index,
            kind=FAULT_KINDS[step.kind],
            gap_s=0.0,
            hold_s=step.hold_s,
            partition_id=step.pick % max(1, self._partitions()),
        )
        try:
            record = self._injector.execute(fault)
        except FaultError as exc:
            raise NemesisError(str(exc)) from exc
        shown = "-" if record.failover_s is None else f"{record.failover_s:.2f} s"
        return record.target, "done", f"failover {shown}"

    # --- helpers ---------------------------------------------------------------------------
    def wait_quiet(self) -> ClusterState:
        """The overview once every broker is alive and no partition is moving."""

        def quiet() -> ClusterState | None:
            state = overview(self._client, self._cluster.lb_url)
            if state is None or not all(b.alive for b in state.brokers.values()):
                return None
            return None if any(p.moving for p in state.partitions) else state

        try:
            return poll_until(quiet, QUIET_WAIT_S, "every broker alive and no move", 0.5)
        except WaitTimeoutError as exc:
            raise NemesisError(str(exc)) from exc

    def _call_until(
        self,
        method: str,
        path: str,
        body: dict[str, object],
        done: tuple[int, ...] | None,
        also_repeat: tuple[int, ...] = (),
    ) -> requests.Response:
        """An idempotent call repeated while the answer is a 503, 429 (or one of
        ``also_repeat``) or none came; ``done``: the statuses that end it (None: any other)."""
        deadline_s = time.monotonic() + CALL_WAIT_S
        last = "no attempt"
        while time.monotonic() < deadline_s:
            try:
                response = self._client.request(
                    method, self._cluster.lb_url + path, json=body, timeout=CALL_TIMEOUT_S
                )
            except requests.RequestException as exc:
                last = repr(exc)[:200]
            else:
                if response.status_code not in (429, 503, *also_repeat):
                    if done is None or response.status_code in done:
                        return response
                    raise NemesisError(f"{method} {path}: {response.status_code} {response.text}")
                last = f"{response.status_code} {response.text[:200]}"
            time.sleep(0.5)
        raise NemesisError(f"{method} {path} {body}: not answered in {CALL_WAIT_S:g} s: {last}")

    def _start(self, node: str) -> None:
        self._cluster.start_node(node)
        try:
            self._cluster.wait_ready(READY_WAIT_S)
        except ClusterError as exc:
            raise NemesisError(f"cluster not ready after restarting {node}: {exc}") from exc

    @staticmethod
    def _wait(condition: Callable[[], bool | None], timeout_s: float, what: str) -> None:
        try:
            poll_until(condition, timeout_s, what, 0.5)
        except WaitTimeoutError as exc:
            raise NemesisError(str(exc)) from exc


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
