"""A 3-node RabbitMQ cluster on loopback, for the benchmark to compare RaftQ with.

Ports chosen clear of the system RabbitMQ (5672/15672/25672, epmd 4369), of RaftQ, and below
the kernel's ephemeral range (32768-60999 here: a client connection's local port there can
take a fixed listening port, which crashed a node once in CI): AMQP ``base+i``
(26672..26674), Erlang distribution ``base+10+i`` (set explicitly: it would
default to AMQP + 20000), the CLI's distribution ports ``base+20..base+26`` and a private epmd
on ``base+27``, everything bound to 127.0.0.1. Each node's data, logs, config and an empty
plugin list (no management listener) live in the work directory, and ``HOME`` holds the
cluster's Erlang cookie, so nothing of the system's RabbitMQ is read or touched.

Nodes start standalone; nodes 2 and 3 then ``join_cluster`` node 1 (deterministic, unlike
peer discovery's randomized start-up delay). Every ``rabbitmqctl`` call has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from stress_tests.peers.processes import PeerProcess, find_binary, port_open
from stress_tests.polling import WaitTimeoutError, poll_until

NODES = 3
DEFAULT_BASE_PORT = 26671
START_TIMEOUT_S = 90.0
FORM_TIMEOUT_S = 60.0
CTL_TIMEOUT_S = 30.0
RABBITMQ_BIN = "/usr/lib/rabbitmq/bin"
"""Debian's real scripts. ``/usr/sbin/rabbitmq-server`` is a wrapper that, run as root,
switches to the ``rabbitmq`` user and its home, which could not use this work directory."""


def node_name(index: int) -> str:
    return f"raftq-bench-{index}@localhost"


@dataclass
class RabbitCluster:
    directory: Path
    base_port: int = DEFAULT_BASE_PORT
    nodes: list[PeerProcess] = field(default_factory=list)
    status: str = "not started"
    """What the table's title says about this peer ("RabbitMQ: 1 of 3 nodes started")."""
    _ctl: str | None = None

    @property
    def amqp_ports(self) -> list[int]:
        return [self.base_port + i for i in range(1, NODES + 1)]

    @property
    def listen_ports(self) -> list[int]:
        """Every port the nodes listen on (AMQP, distribution, epmd)."""
        dist = [self.base_port + 10 + i for i in range(1, NODES + 1)]
        return [*self.amqp_ports, *dist, self.epmd_port]

    @property
    def epmd_port(self) -> int:
        return self.base_port + 27

    def environment(self, index: int | None = None) -> dict[str, str]:
        """Variables for a node (``index``) or for ``rabbitmqctl`` (None)."""
        env = dict(os.environ)
        env.update(
            HOME=str(self.directory / "rabbit-home"),
            RABBITMQ_CONF_ENV_FILE=str(self.directory / "rabbit-env.conf"),
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
            ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}",
            RABBITMQ_CTL_DIST_PORT_MIN=str(self.base_port + 20),
            RABBITMQ_CTL_DIST_PORT_MAX=str(self.base_port + 26),
        )
        if index is not None:
            home = self.directory / f"rabbit-{index}"
            env.update(
                RABBITMQ_NODENAME=node_name(index),
                RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
                RABBITMQ_NODE_PORT=str(self.base_port + index),
                RABBITMQ_DIST_PORT=str(self.base_port + 10 + index),
                RABBITMQ_CONFIG_FILE=str(home / "rabbitmq.conf"),
                RABBITMQ_MNESIA_BASE=str(home / "mnesia"),
                RABBITMQ_LOG_BASE=str(home / "log"),
                RABBITMQ_ENABLED_PLUGINS_FILE=str(home / "enabled_plugins"),
                RABBITMQ_PID_FILE=str(home / "rabbitmq.pid"),
                ERL_CRASH_DUMP=str(home / "erl_crash.dump"),
            )
        return env

    def _write_files(self, index: int) -> None:
        home = self.directory / f"rabbit-{index}"
        home.mkdir(parents=True, exist_ok=True)
        (home / "enabled_plugins").write_text("[].\n")
        (home / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.base_port + index}\nloopback_users = none\n"
        )

    def _write_shared(self) -> None:
        """The Erlang cookie (mode 0400, as Erlang demands) and an empty env file (so the
        system's /etc/rabbitmq/rabbitmq-env.conf is not read)."""
        home = self.directory / "rabbit-home"
        home.mkdir(parents=True, exist_ok=True)
        cookie = home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16))
            cookie.chmod(0o400)
        (self.directory / "rabbit-env.conf").write_text("")

    def start(self) -> bool:
        """Start three nodes, wait for each, join 2 and 3 to 1; False (``status`` says why
        and how far it got) when the binary is missing or a step misses its bound."""
        server = find_binary("rabbitmq-server", (RABBITMQ_BIN,))
        self._ctl = find_binary("rabbitmqctl", (RABBITMQ_BIN,))
        if server is None or self._ctl is None:
            self.status = (
                "RabbitMQ: not run (rabbitmq-server not found; scripts/bench.sh installs it)"
            )
            return False
        self._write_shared()
        for index in range(1, NODES + 1):
            self._write_files(index)
            log = self.directory / f"rabbit-{index}" / "stdout.log"
            node = PeerProcess(f"rabbit-{index}", [server], log, self.environment(index))
            node.start()
            self.nodes.append(node)
        started = self._wait_started()
        if started < NODES:
            self.status = (
                f"RabbitMQ: {started} of {NODES} nodes started within "
                f"{START_TIMEOUT_S:g} s; not run. {self._why_not_started()}"
            )
            return False
        return self._form_cluster()

    def _why_not_started(self) -> str:
        """The crash dump's slogan (Erlang's one-line reason) of the first node that died, or
        the tail of its log."""
        for index, node in enumerate(self.nodes, start=1):
            if node.running():
                continue
            dump = self.directory / f"rabbit-{index}" / "erl_crash.dump"
            with contextlib.suppress(OSError):
                for line in dump.read_text(errors="replace").splitlines()[:5]:
                    if line.startswith("Slogan:"):
                        return f"{node.name}: {line[:300]}"
            return f"{node.name}: {node.log_tail()[-300:]}"
        return "every node is running but not answering"

    def _wait_started(self) -> int:
        """How many nodes answer AMQP and ``rabbitmqctl status`` within the bound."""

        def started() -> int:
            return sum(self._answers(i) for i in range(1, NODES + 1))

        with contextlib.suppress(WaitTimeoutError):
            poll_until(lambda: started() == NODES, START_TIMEOUT_S, "RabbitMQ nodes", 1.0)
        return started()

    def _answers(self, index: int) -> bool:
        return port_open(self.base_port + index) and self.ctl(index, "status").returncode == 0

    def _form_cluster(self) -> bool:
        for index in range(2, NODES + 1):
            for command in (["stop_app"], ["join_cluster", node_name(1)], ["start_app"]):
                result = self.ctl(index, *command)
                if result.returncode != 0:
                    self.status = (
                        f"RabbitMQ: {NODES} of {NODES} nodes started, but "
                        f"{node_name(index)} {' '.join(command)} failed: "
                        f"{(result.stderr or result.stdout).strip()[-200:]}"
                    )
                    return False
        try:
            poll_until(
                lambda: len(self.running_nodes()) == NODES,
                FORM_TIMEOUT_S,
                "a 3-node RabbitMQ cluster",
                1.0,
            )
        except WaitTimeoutError:
            running = len(self.running_nodes())
            self.status = f"RabbitMQ: {NODES} nodes started, {running} of them clustered; not run"
            return False
        self.status = f"RabbitMQ {NODES} nodes (AMQP ports {self.amqp_ports[0]}+): cluster formed"
        return True

    def running_nodes(self) -> list[str]:
        result = self.ctl(1, "cluster_status", "--formatter", "json")
        try:
            nodes = json.loads(result.stdout).get("running_nodes", [])
        except (ValueError, AttributeError):
            return []
        return [str(n) for n in nodes] if isinstance(nodes, list) else []

    def ctl(self, index: int, *command: str) -> subprocess.CompletedProcess[str]:
        """``rabbitmqctl -n <node> ...``; a timeout is reported as a failed call."""
        argv = [self._ctl or "rabbitmqctl", "-n", node_name(index), *command]
        try:
            return subprocess.run(
                argv,
                env=self.environment(),
                capture_output=True,
                text=True,
                timeout=CTL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(
                argv, 124, "", f"timed out after {CTL_TIMEOUT_S:g} s"
            )

    def groups(self) -> dict[str, int | None]:
        return {node.name: node.pgid for node in self.nodes}

    def stop(self) -> None:
        """Stop every node, then the private epmd the first node started."""
        for node in self.nodes:
            node.stop()
        epmd = find_binary("epmd", ("/usr/bin", "/usr/lib/erlang/bin"))
        if epmd is not None and self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                subprocess.run(
                    [epmd, "-port", str(self.epmd_port), "-kill"],
                    env=self.environment(),
                    capture_output=True,
                    timeout=CTL_TIMEOUT_S,
                    check=False,
                )
