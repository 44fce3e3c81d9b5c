"""``LocalCluster``: starts, inspects and stops a RaftQ cluster of local processes.

Three managers, three brokers and one load balancer run detached (each in its own session,
so a node is a process group: the server and any child it starts), logging to
``DIR/<node>/node.log``. ``DIR/cluster.json`` records the settings and pids, so any later
``LocalCluster(DIR)`` (another CLI call, a test) can find, signal and restart the same nodes.

Runs in the caller's thread only; not thread-safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import requests

from ops.cluster_layout import (
    CLUSTER_FILE,
    ClusterSettings,
    LayoutError,
    NodeSpec,
    admin_key_of,
    cluster_json,
    parse_cluster_json,
    plan_nodes,
)
from protocol.access import AUTHORIZATION_HEADER
from raftq.node_signing import NodeSigning, manager_leader
from raftq.profile import ClientProfile, profile_path
from runtime.durable_files import create_if_missing, make_directories, write_atomically

_SERVER_ROOT = Path(__file__).resolve().parent.parent
"""Where ``python -m manager`` finds its package: the server's packages sit beside ops."""
HTTP_PROBE_TIMEOUT_S = 1.0
READY_POLL_PERIOD_S = 0.5
PROGRESS_PERIOD_S = 5.0
LOG_TAIL_LINES = 30
ADMIN_KEY_REQUEST_TIMEOUT_S = 10.0
LOG_TAIL_BYTES_MAX = 64 * 1024


class ClusterError(RuntimeError):
    """The cluster could not be started, found or stopped as asked."""


class _RefusedError(ClusterError):
    """The managers refused a change (nothing done)."""


@dataclass(frozen=True, slots=True)
class NodeStatus:
    name: str
    role: str
    pid: int | None
    process_alive: bool
    http_ok: bool
    http_address: str

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "role": self.role,
            "pid": self.pid,
            "process_alive": self.process_alive,
            "http_ok": self.http_ok,
            "http_address": self.http_address,
        }


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    load_balancer_url: str
    manager_leader: str | None
    nodes: tuple[NodeStatus, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "load_balancer_url": self.load_balancer_url,
            "manager_leader": self.manager_leader,
            "nodes": [n.to_json() for n in self.nodes],
        }


class LocalCluster:
    def __init__(
        self,
        directory: str | Path,
        *,
        host: str | None = None,
        base_port: int | None = None,
        db_url: str | None = None,
        limits: Mapping[str, str] | None = None,
        tls: bool | None = None,
        mutual_tls: bool | None = None,
        brokers: int | None = None,
        hosts: Sequence[str] | None = None,
        python: str = sys.executable,
        code_dir: Path = _SERVER_ROOT,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """Open the cluster in ``directory``: its ``cluster.json`` settings if it exists
        (then any setting given here must agree), else these settings or the defaults.
        Nodes run ``python -m <role>`` in ``code_dir`` (tests point it at stand-ins)."""
        root = Path(directory).resolve()
        given: dict[str, object] = {
            "host": host,
            "base_port": base_port,
            "db_url": db_url,
            "tls": tls,
            "mutual_tls": mutual_tls,
            "brokers": brokers,
            "hosts": None if hosts is None else tuple(hosts),
        }
        if limits is not None:
            given["limits"] = tuple(sorted(limits.items()))
        self._settings, self._pids = _open_settings(root, given)
        self._admin_key = _read_admin_key(root / CLUSTER_FILE)
        self._nodes = {node.name: node for node in plan_nodes(self._settings, python)}
        self._python = python
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._code_dir = code_dir
        self._progress = progress or (lambda _line: None)

    # --- what the cluster is ---------------------------------------------------------------

    @property
    def settings(self) -> ClusterSettings:
        return self._settings

    @property
    def directory(self) -> Path:
        return self._settings.directory

    @property
    def lb_url(self) -> str:
        return self._settings.lb_url

    @property
    def admin_key(self) -> str | None:
        """The admin API key ``up`` made (kept in ``cluster.json``, mode 0600)."""
        return self._admin_key

    @property
    def node_names(self) -> tuple[str, ...]:
        """``lb``, ``manager-1..3``, ``broker-1..3``, in start order."""
        return tuple(self._nodes)

    def node(self, name: str) -> NodeSpec:
        try:
            return self._nodes[name]
        except KeyError:
            raise ClusterError(f"no node {name!r}; nodes: {', '.join(self._nodes)}") from None

    def pid(self, name: str) -> int | None:
        self.node(name)
        return self._pids.get(name)

    def is_running(self, name: str) -> bool:
        """Whether the node's process (the group leader) is alive and is that node."""
        pid = self.pid(name)
        if pid is None:
            return False
        child = self._children.get(name)
        if child is not None:
            return child.poll() is None  # also reaps it, so it does not linger as a zombie
        return _is_node_process(pid, self.node(name).argv)

    # --- lifecycle -------------------------------------------------------------------------

    def up(self, timeout_s: float = 90.0) -> None:
        """Start every node that is not running, then wait until the load balancer lists
        all brokers alive. Raises ``ClusterError`` with the failing node's log tail."""
        self.ensure_secret()
        self.ensure_certificates()
        for name in self._nodes:
            if self.is_running(name):
                self._progress(f"{name} already running (pid {self._pids[name]})")
            else:
                self._progress(f"starting {name} (pid {self.start_node(name)})")
        deadline_s = time.monotonic() + timeout_s
        self.wait_ready(timeout_s)
        if self._admin_key is None:
            self._admin_key = self._create_admin_key(deadline_s)
            self.save()
            self._progress(
                f"admin API key written to {self.directory / CLUSTER_FILE} and to the "
                f"client's profile {profile_path(self.directory)}"
            )

    def add_broker(self, timeout_s: float = 90.0) -> NodeSpec:
        """Grow the cluster by one broker (the next id): record it in ``cluster.json`` first
        (so a later ``up`` starts it too), start it, and wait until the managers list every
        broker alive. New partitions then go to it first: placement takes the least loaded
        brokers. Existing replicas stay where they are."""
        if self._settings.hosts:
            raise ClusterError("cannot add a broker to a cluster with --hosts: which address?")
        try:
            settings = replace(self._settings, brokers=self._settings.brokers + 1).validate()
        except LayoutError as exc:
            raise ClusterError(f"cannot add a broker: {exc}") from None
        self._settings = settings
        self._nodes = {node.name: node for node in plan_nodes(settings, self._python)}
        self.save()
        name = f"broker-{settings.brokers}"
        self._progress(f"starting {name} (pid {self.start_node(name)})")
        self.wait_ready(timeout_s)
        return self.node(name)

    def forget_broker(self, broker_id: int, timeout_s: float = 10.0) -> None:
        """After ``raftq broker remove`` drained it: stop the broker and record it removed
        in ``cluster.json``, so no later ``up`` starts it (the managers refuse its id)."""
        name = f"broker-{broker_id}"
        if broker_id not in self._settings.broker_ids:
            raise ClusterError(f"{name} is not one of this cluster's brokers")
        self.stop_node(name, timeout_s)
        removed = (*self._settings.removed_brokers, broker_id)
        self._settings = replace(self._settings, removed_brokers=removed)
        self._nodes = {node.name: node for node in plan_nodes(self._settings, self._python)}
        self.save()

    def add_manager(self, timeout_s: float = 90.0) -> NodeSpec:
        """Grow the managers by one (the next id): ``cluster.json`` records it and it starts,
        its file listing every manager; it waits to be added (nobody lists it yet). Then the
        managers are asked with the admin key: the leader checks its address (it answers
        with the cluster secret), records it and adds its Raft node to the group (committed).
        Waits until it follows a leader. Refused (400/409): it is stopped and forgotten."""
        if self._settings.hosts:
            raise ClusterError("cannot add a manager to a cluster with --hosts: which address?")
        try:
            settings = replace(self._settings, managers=self._settings.managers + 1).validate()
        except LayoutError as exc:
            raise ClusterError(f"cannot add a manager: {exc}") from None
        before = self._settings
        node = {n.name: n for n in plan_nodes(settings, self._python)}[
            f"manager-{settings.managers}"
        ]
        body = {
            "manager_id": settings.managers,
            "http_url": node.http_address,
            "raft_address": node.raft_address,
        }
        deadline_s = time.monotonic() + timeout_s
        self._settings = settings
        self._nodes = {n.name: n for n in plan_nodes(settings, self._python)}
        self.save()
        self._progress(f"starting {node.name} (pid {self.start_node(node.name)})")
        try:
            self._wait_answers(node, deadline_s)
            self._call_managers("POST", body, (200, 201), deadline_s)
        except _RefusedError:
            self.stop_node(node.name)
            self._settings = before
            self._nodes = {n.name: n for n in plan_nodes(before, self._python)}
            self.save()
            raise
        self._wait_follows(node, deadline_s)
        return node

    def remove_manager(self, manager_id: int, timeout_s: float = 90.0) -> None:
        """Shrink the managers by one: the group removes its Raft node (its leader hands
        over first if it was the one), then it is stopped and ``cluster.json`` records it
        removed (no later ``up`` starts it)."""
        name = f"manager-{manager_id}"
        if manager_id not in self._settings.manager_ids:
            raise ClusterError(f"{name} is not one of this cluster's managers")
        deadline_s = time.monotonic() + timeout_s
        # 404 after an attempt whose answer was lost: it is removed already.
        self._call_managers("DELETE", {"manager_id": manager_id}, (200, 404), deadline_s)
        self.stop_node(name)
        removed = (*self._settings.removed_managers, manager_id)
        self._settings = replace(self._settings, removed_managers=removed)
        self._nodes = {n.name: n for n in plan_nodes(self._settings, self._python)}
        self.save()

    def _call_managers(
        self, method: str, body: dict[str, object], done: tuple[int, ...], deadline_s: float
    ) -> None:
        """``/managers`` through the load balancer, with the admin key (it is a client's
        request: no node credential goes through the load balancer), repeated while the
        answer is a 503 (no leader yet, a leader handing over, an outcome not known: each
        repeat is harmless) until ``deadline_s``. Any other refusal: ``_RefusedError``."""
        if self._admin_key is None:
            raise ClusterError("this cluster has no admin API key yet: run raftq cluster up")
        last = "no attempt"
        with self._session() as session:
            session.headers[AUTHORIZATION_HEADER] = f"Bearer {self._admin_key}"
            while time.monotonic() < deadline_s:
                try:
                    response = session.request(
                        method,
                        self.lb_url + "/managers",
                        json=body,
                        timeout=ADMIN_KEY_REQUEST_TIMEOUT_S,
                    )
                except requests.RequestException as exc:
                    last = repr(exc)
                else:
                    if response.status_code in done:
                        return
                    last = f"{response.status_code} {response.text[:300]}"
                    if response.status_code != 503:
                        raise _RefusedError(f"{method} /managers: {last}")
                time.sleep(READY_POLL_PERIOD_S)
        raise ClusterError(f"{method} /managers did not succeed: {last}")

    def _wait_answers(self, node: NodeSpec, deadline_s: float) -> None:
        """Until ``node`` answers HTTP (a manager being added answers its address check)."""
        with self._session() as session:
            while time.monotonic() < deadline_s and self.is_running(node.name):
                if _answers(session, node.http_address + "/") is not None:
                    return
                time.sleep(READY_POLL_PERIOD_S)
        raise _RefusedError(
            f"{node.name} did not answer in time (or exited)\n"
            f"last lines of {node.log_file}:\n{self.log_tail(node.name)}"
        )

    def _wait_follows(self, node: NodeSpec, deadline_s: float) -> None:
        """Until ``node`` knows a leader (``leader_address`` is public)."""
        with self._session() as session:
            while time.monotonic() < deadline_s:
                self._fail_if_exited()
                answer = _answers(session, node.http_address + "/raft_status")
                status = answer[1] if answer is not None else None
                if isinstance(status, dict) and isinstance(status.get("leader_address"), str):
                    return
                time.sleep(READY_POLL_PERIOD_S)
        raise ClusterError(
            f"{node.name} did not join the managers in time\n"
            f"last lines of {node.log_file}:\n{self.log_tail(node.name)}"
        )

    def ensure_secret(self) -> Path:
        """Create the cluster secret (64 hex characters, mode 0600) unless it exists; on disk
        (file and directory synced) before any node can use it."""
        path = self._settings.secret_file
        make_directories(path.parent)
        create_if_missing(path, (secrets.token_hex(32) + "\n").encode(), 0o600)
        return path

    def ensure_certificates(self) -> None:
        """With ``tls``: the cluster's CA and the nodes' certificate, made once."""
        settings = self._settings
        if not settings.tls:
            return
        # Here, not at the top: cryptography is a server dependency, the CLI a client's.
        from ops.local_tls import TlsMaterial, ensure_certificates  # noqa: PLC0415

        material = TlsMaterial(settings.tls_ca_file, settings.tls_cert_file, settings.tls_key_file)
        if ensure_certificates(settings.hosts or (settings.host,), material):
            self._progress(f"TLS: made a CA for this cluster, {settings.tls_ca_file}")

    def start_node(self, name: str, extra_args: Sequence[str] = ()) -> int:
        """Start one node detached (unless running) and return its pid. ``extra_args`` are
        added to its command line this time only (e.g. a ``--limit`` that differs from the
        other nodes', which a test of replicated limits needs)."""
        node = self.node(name)
        running_pid = self._pids.get(name)
        if running_pid is not None and self.is_running(name):
            return running_pid
        self.ensure_secret()
        make_directories(node.data_dir)
        # Written at every start, so a node runs with the cluster's settings of today; 0600:
        # a database URL in it may hold a password.
        write_atomically(node.config_file, node.config_text.encode(), 0o600)
        with open(node.log_file, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
            log.flush()
            child = subprocess.Popen(
                [*node.argv, *extra_args],
                cwd=self._code_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        self._children[name] = child
        self._pids[name] = child.pid
        self.save()
        return child.pid

    def signal_node(self, name: str, sig: int) -> None:
        """Send ``sig`` (e.g. SIGKILL, SIGSTOP, SIGCONT) to the node's whole process group."""
        pid = self.pid(name)
        if pid is None or not self.is_running(name):
            raise ClusterError(f"{name} is not running")
        os.killpg(pid, sig)

    def stop_node(self, name: str, timeout_s: float = 10.0) -> None:
        """SIGTERM the node's process group, then SIGKILL it if still there after
        ``timeout_s``. Only a group verified to be this node's is signalled."""
        pid = self.pid(name)
        if pid is None:
            return
        if self.is_running(name):
            _signal_group(pid, signal.SIGCONT)  # a paused node cannot act on SIGTERM
            _signal_group(pid, signal.SIGTERM)
            if not self._wait_stopped(name, pid, timeout_s):
                self._progress(f"{name} ignored SIGTERM for {timeout_s:g} s: killing it")
                _signal_group(pid, signal.SIGKILL)
                self._wait_stopped(name, pid, timeout_s)
        elif _orphaned_group(pid):
            _signal_group(pid, signal.SIGKILL)  # workers that outlived their master
            self._wait_stopped(name, pid, timeout_s)
        self._children.pop(name, None)
        self._pids.pop(name, None)
        self.save()

    def down(self, timeout_s: float = 10.0) -> None:
        """Stop every node (data is kept); brokers first, the load balancer last."""
        # Signal all first so they stop in parallel; stop_node then waits for each.
        for name in reversed(self._nodes):
            pid = self._pids.get(name)
            if pid is not None and self.is_running(name):
                _signal_group(pid, signal.SIGCONT)
                _signal_group(pid, signal.SIGTERM)
        for name in reversed(self._nodes):
            self.stop_node(name, timeout_s)

    def save(self) -> None:
        """Write ``cluster.json`` atomically and durably (``cluster up`` after a power cut
        reads it to find the cluster's settings), and the client's profile beside it (how
        ``raftq`` reaches this cluster with ``--dir``)."""
        body = cluster_json(
            self._settings, tuple(self._nodes.values()), self._pids, self._admin_key
        )
        make_directories(self.directory)
        text = json.dumps(body, indent=2) + "\n"
        write_atomically(self.directory / CLUSTER_FILE, text.encode(), 0o600)
        profile = ClientProfile(self.lb_url, self._admin_key, self.tls_ca, self._settings.node_cert)
        profile_text = json.dumps(profile.to_json(), indent=2) + "\n"
        write_atomically(profile_path(self.directory), profile_text.encode(), 0o600)

    @property
    def tls_ca(self) -> str | None:
        """The CA bundle that the nodes' certificates are checked against (``--tls``)."""
        return str(self._settings.tls_ca_file) if self._settings.tls else None

    def _session(self) -> requests.Session:
        """A session to the nodes: it trusts the cluster's CA (``--tls``). Not the environment:
        requests would let ``REQUESTS_CA_BUNDLE`` override that CA, and a proxy variable
        would send calls to nodes on this host through a proxy."""
        session = requests.Session()
        session.trust_env = False
        session.verify = self.tls_ca or True
        session.cert = self._settings.node_cert  # mutual TLS: the nodes take none without
        return session

    @property
    def node_cert(self) -> tuple[str, str] | None:
        """(certificate, key) to show with a signed request to a node: with
        ``--mutual-tls``, the nodes take node requests only from callers that show one of
        the cluster's CA (``requests``' ``cert=``); ``None`` otherwise."""
        return self._settings.node_cert

    def node_auth(self, name: str = "tool-cli") -> NodeSigning:
        """Signs each request as a node (``raftq.node_signing``), with a key from the
        cluster's own secret: for tools that read internals (``/raft_status`` details,
        ``/checksum``). Send such requests to the node itself: the load balancer refuses
        them."""
        secret = self._settings.secret_file.read_text(encoding="utf-8").strip()
        return NodeSigning.of(secret, name)

    def _create_admin_key(self, deadline_s: float) -> str:
        """Ask the manager leader itself for an admin key, as a node. Retried until the
        deadline: a retry after a lost answer makes a second key whose secret nobody ever
        saw."""
        last = "no attempt"
        signing = self.node_auth()
        with self._session() as session:
            while time.monotonic() < deadline_s:
                leader = self._manager_leader(session)
                if leader is None:
                    last = "no manager leads"
                    time.sleep(READY_POLL_PERIOD_S)
                    continue
                try:
                    response = session.post(
                        leader + "/keys",
                        json={"role": "admin", "name": "cluster up"},
                        timeout=ADMIN_KEY_REQUEST_TIMEOUT_S,
                        auth=signing,
                    )
                except requests.RequestException as exc:
                    last = repr(exc)
                else:
                    body = response.json() if response.status_code == 201 else None
                    if isinstance(body, dict) and isinstance(body.get("key"), str):
                        return str(body["key"])
                    last = f"{response.status_code} {response.text[:200]}"
                time.sleep(READY_POLL_PERIOD_S)
        raise ClusterError(f"could not create the admin API key: {last}")

    # --- readiness and status --------------------------------------------------------------

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Wait until the load balancer lists every broker alive (which needs a manager
        leader). Fails early when a node exits."""
        deadline_s = time.monotonic() + timeout_s
        next_progress_s = time.monotonic() + PROGRESS_PERIOD_S
        ready_before = False
        with self._session() as session:
            while True:
                self._fail_if_exited()
                waiting_for, culprit = self._readiness(session)
                if waiting_for is None and ready_before:
                    return  # ready on two polls in a row, with every node still running
                ready_before = waiting_for is None
                if ready_before:
                    time.sleep(READY_POLL_PERIOD_S)
                    continue
                now_s = time.monotonic()
                if now_s >= deadline_s:
                    raise ClusterError(
                        f"cluster not ready after {timeout_s:g} s: {waiting_for}\n"
                        f"last lines of {self.node(culprit).log_file}:\n{self.log_tail(culprit)}"
                    )
                if now_s >= next_progress_s:
                    self._progress(f"waiting: {waiting_for}")
                    next_progress_s = now_s + PROGRESS_PERIOD_S
                time.sleep(READY_POLL_PERIOD_S)

    def status(self) -> ClusterStatus:
        with self._session() as session:
            nodes = tuple(
                NodeStatus(
                    name,
                    node.role,
                    self._pids.get(name),
                    self.is_running(name),
                    _answers(session, node.http_address + "/") is not None,
                    node.http_address,
                )
                for name, node in self._nodes.items()
            )
            leader = self._manager_leader(session)
        return ClusterStatus(self.lb_url, leader, nodes)

    def log_tail(self, name: str, lines: int = LOG_TAIL_LINES) -> str:
        path = self.node(name).log_file
        try:
            with open(path, "rb") as handle:
                handle.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES_MAX))
                text = handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return "(no log yet)"
        return "\n".join(text.splitlines()[-lines:])

    def detach(self) -> None:
        """Forget the child handles without stopping the nodes, which run on detached (the
        CLI calls this before it exits). A node that exits later stays a zombie until this
        process exits; nodes started by a later ``LocalCluster`` are reaped by init."""
        for child in self._children.values():
            if child.poll() is None:
                # Popen warns when a handle to a running child is dropped; here that is the
                # intent, so mark it as settled.
                child.returncode = 0
        self._children.clear()

    # --- helpers ---------------------------------------------------------------------------

    def _wait_stopped(self, name: str, pid: int, timeout_s: float) -> bool:
        deadline_s = time.monotonic() + timeout_s
        while time.monotonic() < deadline_s:
            if not self.is_running(name) and not _orphaned_group(pid):
                return True
            time.sleep(0.05)
        return False

    def _fail_if_exited(self) -> None:
        for name in self._nodes:
            if not self.is_running(name):
                raise ClusterError(
                    f"{name} is not running (it exited?); last lines of "
                    f"{self.node(name).log_file}:\n{self.log_tail(name)}"
                )

    def _readiness(self, session: requests.Session) -> tuple[str | None, str]:
        """(what is still missing or None when ready, the node whose log would explain it):
        the load balancer knows the manager leader, and that leader lists every broker
        alive (asked as a node, straight)."""
        leader = manager_leader(session, self.lb_url, HTTP_PROBE_TIMEOUT_S)
        if leader is None:
            if _answers(session, self.lb_url + "/") is None:
                return "the load balancer does not answer", "lb"
            return "the load balancer knows no manager leader yet", self._silent_manager(session)
        answer = _answers(session, leader + "/brokers", self.node_auth())
        if answer is None:
            return f"the manager leader {leader} does not answer", self._silent_manager(session)
        status, body = answer
        if status != 200 or not isinstance(body, dict):
            message = body.get("message") if isinstance(body, dict) else None
            return f"no manager leader yet ({status}: {message})", self._silent_manager(session)
        alive = {
            b.get("broker_id")
            for b in body.get("brokers", [])
            if isinstance(b, dict) and b.get("alive") is True
        }
        missing = [i for i in self._settings.broker_ids if i not in alive]
        if not missing:
            return None, "lb"
        names = ", ".join(f"broker-{i}" for i in missing)
        return f"brokers not yet registered and alive: {names}", f"broker-{missing[0]}"

    def _silent_manager(self, session: requests.Session) -> str:
        for i in self._settings.manager_ids:
            if _answers(session, self.node(f"manager-{i}").http_address + "/") is None:
                return f"manager-{i}"
        return "manager-1"

    def _manager_leader(self, session: requests.Session) -> str | None:
        leader = manager_leader(session, self.lb_url, HTTP_PROBE_TIMEOUT_S)
        if leader is not None:
            return leader
        for i in self._settings.manager_ids:
            node = self.node(f"manager-{i}")
            reply = _answers(session, node.http_address + "/raft_status")
            if reply is not None and isinstance(reply[1], dict) and reply[1].get("is_leader"):
                return node.http_address
        return None


def _read_admin_key(path: Path) -> str | None:
    try:
        return admin_key_of(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):
        return None  # _open_settings reports a broken file


def _open_settings(
    root: Path, given: Mapping[str, object]
) -> tuple[ClusterSettings, dict[str, int]]:
    path = root / CLUSTER_FILE
    if not path.exists():
        chosen = {k: v for k, v in given.items() if v is not None}
        return ClusterSettings(root, **chosen).validate(), {}  # type: ignore[arg-type]
    try:
        settings, pids = parse_cluster_json(root, json.loads(path.read_text()))
    except ValueError as exc:
        raise ClusterError(f"{path}: {exc}") from exc
    for name, value in given.items():
        if value is not None and value != getattr(settings, name):
            raise ClusterError(
                f"{path} says {name}={getattr(settings, name)!r}, not {value!r}: "
                "an existing cluster keeps its settings (use another --dir for another one)"
            )
    return settings, dict(pids)


def _answers(
    session: requests.Session, url: str, auth: NodeSigning | None = None
) -> tuple[int, object] | None:
    """(status, JSON body or None), or None when nothing answered in time. ``auth``: sign
    as a node (for a node's own URL only)."""
    try:
        with session.get(url, timeout=HTTP_PROBE_TIMEOUT_S, auth=auth) as response:
            try:
                return response.status_code, response.json()
            except ValueError:
                return response.status_code, None
    except requests.RequestException:
        return None


def _is_node_process(pid: int, argv: tuple[str, ...]) -> bool:
    """Whether ``pid`` is alive, not a zombie, and runs this node's command line (a pid in an
    old cluster.json may since belong to another program)."""
    if _process_state(pid) in (None, "Z"):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return not Path("/proc").is_dir()  # no /proc: the pid check is all there is
    except OSError:
        return False
    return [part.decode("utf-8", "replace") for part in cmdline[1 : len(argv)]] == list(argv[1:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphaned_group(pgid: int) -> bool:
    """Whether live processes remain in a group whose leader is gone (or a zombie). The
    kernel does not reuse a pid while a group of that id exists, so such a group is still
    this node's; a live leader with another command line is someone else's."""
    if _process_state(pgid) not in (None, "Z"):
        return False
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            # Zombies wait for a reaper (in a container, maybe none): they no longer run.
            if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _process_state(pid: int) -> str | None:
    """One-letter state ("R", "S", "T", "Z", ...) or None when there is no such process."""
    fields = _stat_fields(pid)
    if fields is not None:
        return fields[0]
    if Path("/proc").is_dir():
        return None
    return "S" if _pid_alive(pid) else None


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
