"""A 3-node NATS JetStream cluster on loopback, for the benchmark to compare RaftQ with.

Each node gets a config file in the work directory: client port ``base+i``, cluster (route)
port ``base+100+i``, monitoring port ``base+200+i`` (default base 24000: clear of the system
NATS on 4222/8222 and of RaftQ's ports), file storage in ``DIR/nats-i``. The cluster counts as
formed when every node's ``/healthz`` answers ok; the stream (file storage, 3 replicas) is
created by the scenarios, which retry until JetStream has a meta leader.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from stress_tests.peers.processes import PeerProcess, find_binary
from stress_tests.polling import WaitTimeoutError, poll_until

NODES = 3
DEFAULT_BASE_PORT = 24000
FORM_TIMEOUT_S = 30.0
HEALTH_TIMEOUT_S = 1.0


def node_config(index: int, base_port: int, directory: Path) -> str:
    """nats-server's config for node ``index`` (1..3), routes to all three."""
    routes = ", ".join(f'"nats-route://127.0.0.1:{base_port + 100 + i}"' for i in range(1, 4))
    return "\n".join(
        [
            f'server_name: "bench-nats-{index}"',
            'host: "127.0.0.1"',
            f"port: {base_port + index}",
            f'http: "127.0.0.1:{base_port + 200 + index}"',
            f'jetstream {{ store_dir: "{directory / f"nats-{index}"}" }}',
            "cluster {",
            '  name: "raftq-bench"',
            '  host: "127.0.0.1"',
            f"  port: {base_port + 100 + index}",
            f"  routes: [{routes}]",
            "}",
            "",
        ]
    )


@dataclass
class NatsCluster:
    directory: Path
    base_port: int = DEFAULT_BASE_PORT
    nodes: list[PeerProcess] = field(default_factory=list)
    status: str = "not started"
    """What the table's title says about this peer ("NATS: 3 of 3 nodes, cluster formed")."""

    @property
    def listen_ports(self) -> list[int]:
        """Every port the cluster listens on (client, route, monitoring)."""
        return [self.base_port + o + i for o in (0, 100, 200) for i in range(1, NODES + 1)]

    @property
    def servers(self) -> list[str]:
        return [f"nats://127.0.0.1:{self.base_port + i}" for i in range(1, NODES + 1)]

    def start(self) -> bool:
        """Start the nodes and wait until all are healthy; False (with ``status`` saying
        why) when the binary is missing or the cluster does not form in time."""
        binary = find_binary("nats-server")
        if binary is None:
            self.status = "NATS: not run (nats-server not found; scripts/bench.sh installs it)"
            return False
        for index in range(1, NODES + 1):
            config = self.directory / f"nats-{index}.conf"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(node_config(index, self.base_port, self.directory))
            node = PeerProcess(
                f"nats-{index}", [binary, "-c", str(config)], config.with_suffix(".log")
            )
            node.start()
            self.nodes.append(node)
        return self._wait_formed()

    def _wait_formed(self) -> bool:
        try:
            poll_until(
                lambda: all(self._healthy(i) for i in range(1, NODES + 1)),
                FORM_TIMEOUT_S,
                "every NATS node healthy",
                0.2,
            )
        except WaitTimeoutError:
            alive = sum(node.running() for node in self.nodes)
            tail = next((n.log_tail() for n in self.nodes if not n.running()), "")
            self.status = (
                f"NATS: {alive} of {NODES} nodes running, cluster not healthy within "
                f"{FORM_TIMEOUT_S:g} s; not run. {tail[-200:]}"
            )
            return False
        self.status = f"NATS JetStream {NODES} nodes (ports {self.base_port + 1}+): cluster formed"
        return True

    def _healthy(self, index: int) -> bool:
        url = f"http://127.0.0.1:{self.base_port + 200 + index}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as response:
                return bool(json.loads(response.read()).get("status") == "ok")
        except (OSError, ValueError):
            return False

    def groups(self) -> dict[str, int | None]:
        return {node.name: node.pgid for node in self.nodes}

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
