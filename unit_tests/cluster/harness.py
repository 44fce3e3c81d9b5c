"""Drives a real local cluster for tests through the ``raftq`` CLI, as a user would.

Nodes run detached in their own sessions (their process group id is their pid), so a
"crash" is ``kill -9`` of the whole group (the server and any child of it).
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import requests

from ops.cluster import LocalCluster
from stress_tests.cluster_view import manager_leader
from unit_tests.node_signing import TEST_NODE

_T = TypeVar("_T")
CLI_TIMEOUT_S = 180


class Cluster:
    def __init__(
        self,
        directory: Path,
        base_port: int,
        db_url: str | None = None,
        limits: dict[str, str] | None = None,
        tls: bool = False,
        up_args: Sequence[str] = (),
    ) -> None:
        self.directory = directory
        self.up_args = tuple(up_args)
        """More ``cluster up`` options (e.g. ``--dead-broker-timeout-s``)."""
        self.tls = tls
        self.base_port = base_port
        self.db_url = db_url
        self.limits = limits or {}
        self.info: dict[str, Any] = {}
        self.http = requests.Session()
        """Calls the client API with the admin key ``cluster up`` made."""
        self.internal = requests.Session()
        """Calls nodes' internal endpoints as a node (each request signed with a key from the
        cluster secret: to a node's own URL, never the load balancer's)."""

    # --- lifecycle through the CLI ----------------------------------------------------------

    def up(self) -> None:
        """``raftq cluster up``: start the cluster, or restart the nodes that are down."""
        args = ["cluster", "up", "--dir", str(self.directory), "--base-port", str(self.base_port)]
        if self.db_url:
            args += ["--db-url", self.db_url]
        for name, value in self.limits.items():
            args += ["--limit", f"{name}={value}"]
        if self.tls:
            args.append("--tls")
        self._cli(*args, *self.up_args)
        self.info = json.loads((self.directory / "cluster.json").read_text())
        self.local = LocalCluster(self.directory)  # the same cluster, for node operations
        for session in (self.http, self.internal):
            # Not $REQUESTS_CA_BUNDLE's CAs (requests would prefer it): the cluster's own.
            session.trust_env = False
            session.verify = self.local.tls_ca or True
        self.http.headers["Authorization"] = f"Bearer {self.admin_key}"
        self.internal.auth = self.local.node_auth(TEST_NODE)
        self.internal.cert = self.local.node_cert  # with --mutual-tls

    def down(self) -> None:
        self._cli("cluster", "down", "--dir", str(self.directory))

    def add_broker(self) -> str:
        """``raftq broker add``: one more broker, started and registered; its output."""
        out = self._cli("broker", "add", "--dir", str(self.directory))
        self.info = json.loads((self.directory / "cluster.json").read_text())
        self.local = LocalCluster(self.directory)
        return out

    def status(self) -> dict[str, Any]:
        out = self._cli("cluster", "status", "--dir", str(self.directory), "--json")
        result: dict[str, Any] = json.loads(out)
        return result

    def close(self) -> None:
        try:
            self.down()
        finally:
            # Nodes a test started itself (``local.start_node``) were stopped by ``down``:
            # reap them here, or their handles warn when collected, in another test.
            if hasattr(self, "local"):
                self.local.detach()
            self.http.close()
            self.internal.close()

    def cli(self, *args: str) -> str:
        """``raftq ARGS`` as a user runs it; its stdout (fails the test on an error)."""
        return self._cli(*args)

    def _cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "raftq.cli", *args],
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"raftq {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    # --- nodes ------------------------------------------------------------------------------

    @property
    def lb_url(self) -> str:
        return str(self.info["load_balancer_url"])

    @property
    def admin_key(self) -> str:
        return str(self.info["admin_key"])

    def node(self, name: str) -> dict[str, Any]:
        for node in self.info["nodes"]:
            if node["name"] == name:
                return dict(node)
        raise KeyError(name)

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        self.local.signal_node(name, sig)
        if sig == signal.SIGKILL:
            wait_until(lambda: not self.local.is_running(name), 10, f"{name} to die")

    def broker_name(self, broker_id: int) -> str:
        return f"broker-{broker_id}"

    def broker_url(self, broker_id: int) -> str:
        return str(self.node(self.broker_name(broker_id))["http_address"])

    def manager_leader(self) -> str:
        """Name of the manager that says it leads."""
        leader = manager_leader(self.local, self.http)
        if leader is None:
            raise AssertionError("no manager leads")
        return leader

    # --- HTTP through the load balancer -------------------------------------------------

    def get(self, path: str, **params: str | int) -> requests.Response:
        return self.http.get(f"{self.lb_url}{path}", params=params, timeout=30)

    def post(self, path: str, body: object) -> requests.Response:
        return self.http.post(f"{self.lb_url}{path}", json=body, timeout=30)


def running_cluster(
    directory: Path,
    base_port: int,
    limits: dict[str, str] | None = None,
    *,
    tls: bool = False,
    up_args: Sequence[str] = (),
) -> Generator[Cluster, None, None]:
    """A module's cluster: up before its first test, down after its last (``yield from``
    it in a module-scoped fixture)."""
    instance = Cluster(directory, base_port, limits=limits, tls=tls, up_args=up_args)
    try:
        instance.up()
    except BaseException:
        # Nodes ``up`` started before it failed must not hold the module's ports.
        with contextlib.suppress(Exception):
            instance.close()
        raise
    try:
        yield instance
    finally:
        instance.close()


def wait_until(
    check: Callable[[], _T | None], timeout_s: float, what: str, period_s: float = 0.1
) -> _T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (requests.RequestException, AssertionError, KeyError, ValueError) as exc:
            last_error = exc
        time.sleep(period_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}: {last_error}")


def run_node_file(node_file: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``raftq node run --config FILE`` for a node expected to refuse to start: its exit
    status and what it said."""
    return subprocess.run(
        [sys.executable, "-m", "raftq.cli", "node", "run", "--config", str(node_file)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def broker_file_copy(node: dict[str, Any], data_dir: Path, http_port: int, raft_port: int) -> str:
    """A broker's node file moved to other ports and another data directory (its id and
    limits as they were): a second broker as a copy-paste slip would make it."""
    text = Path(node["config_file"]).read_text()
    port = str(node["http_address"]).rsplit(":", 1)[1]
    copy = text.replace(f"port = {port}", f"port = {http_port}")
    copy = copy.replace(str(node["data_dir"]), str(data_dir))
    copy = re.sub(r"raft_port_min = \d+", f"raft_port_min = {raft_port}", copy)
    return re.sub(r"raft_port_max = \d+", f"raft_port_max = {raft_port}", copy)
