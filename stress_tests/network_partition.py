"""Network partitions between local nodes, with cgroup v2 and iptables (root only).

All nodes listen on 127.0.0.1, so a partition cannot be a firewall rule on an address.
Instead each cut-off node's processes go into their own cgroup ``raftq-<node>`` and
``iptables -m cgroup --path`` drops what those processes send to the Raft ports of their
peers (and what the peers send to theirs). HTTP ports stay open: clients and the managers
still reach the isolated node, which is exactly the case Raft must handle (a leader that
clients see but that cannot reach a majority).

A socket keeps the cgroup it was created in, so the connections already open are reset
(``ss -K``) once the processes are moved; the nodes reconnect from their new cgroups.

Every rule lives in one chain, ``RAFTQ-FAULTS``, jumped to from OUTPUT; ``heal`` flushes it
and moves the processes back, and ``reset`` runs at start and exit so a crashed run leaves
nothing behind. Not thread-safe: the fault injector's thread only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from ops.cluster import LocalCluster

CGROUP_ROOT = Path("/sys/fs/cgroup/unified")
CHAIN = "RAFTQ-FAULTS"
CGROUP_PREFIX = "raftq-"
INSTALL_SCRIPT = Path(__file__).with_name("install_fault_tools.sh")
COMMAND_TIMEOUT_S = 20.0


class NetworkFaultError(RuntimeError):
    """Partitions cannot be made on this machine (not root, no cgroup v2, no iptables)."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=check
    )


def ensure_tools() -> None:
    """Install iptables from Debian's packages when it is missing (needs root)."""
    if shutil.which("iptables") is None:
        _run("bash", str(INSTALL_SCRIPT))
    if shutil.which("iptables") is None:
        raise NetworkFaultError("iptables is missing and could not be installed")


def available() -> str | None:
    """None when partitions work here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if not (CGROUP_ROOT / "cgroup.procs").exists():
        return f"no cgroup v2 hierarchy at {CGROUP_ROOT}"
    try:
        ensure_tools()
    except (NetworkFaultError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None


def group_pids(pgid: int) -> list[int]:
    """Every live process of a node's process group."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    pids.append(int(entry.name))
    return pids


def partitioner_if_needed(cluster: LocalCluster, needed: bool) -> NetworkPartitioner | None:
    """A partitioner for ``cluster`` with every rule of ours removed (a crashed run's too);
    None when the run makes no partition (so it also runs where partitions cannot be made)."""
    if not needed:
        return None
    network = NetworkPartitioner(cluster)
    network.reset()
    return network


class NetworkPartitioner:
    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster
        self._rules: dict[str, list[tuple[int, int]]] = {}
        """node -> port ranges its processes may not send to (the partition in force)."""

    @property
    def active(self) -> bool:
        return bool(self._rules)

    def reset(self) -> None:
        """Remove every rule and cgroup of ours, including a crashed run's."""
        if _run("iptables", "-N", CHAIN, check=False).returncode != 0:
            _run("iptables", "-F", CHAIN)
        if _run("iptables", "-C", "OUTPUT", "-j", CHAIN, check=False).returncode != 0:
            _run("iptables", "-I", "OUTPUT", "-j", CHAIN)
        for group in CGROUP_ROOT.glob(CGROUP_PREFIX + "*"):
            _empty_and_remove(group)
        self._rules.clear()

    def isolate(self, node: str, peers: Iterable[str]) -> None:
        """Cut Raft traffic between ``node`` and each of ``peers`` (both directions)."""
        peers = [p for p in peers if p != node]
        self._rules.setdefault(node, []).extend(self._raft_ranges(p) for p in peers)
        for peer in peers:
            self._rules.setdefault(peer, []).append(self._raft_ranges(node))
        self.apply()

    def rejoin(self, node: str, peers: Iterable[str]) -> None:
        """Take back ``isolate(node, peers)``; every other rule stays in force."""
        peers = [p for p in peers if p != node]
        self._take_back(node, [self._raft_ranges(p) for p in peers])
        for peer in peers:
            self._take_back(peer, [self._raft_ranges(node)])
        self.apply()

    def _take_back(self, node: str, ranges: list[tuple[int, int]]) -> None:
        kept = self._rules.get(node, [])
        for port_range in ranges:
            kept.remove(port_range)
        if not kept:
            self._rules.pop(node, None)

    def block(self, node: str, ports: Iterable[tuple[int, int]]) -> None:
        """Drop what ``node``'s processes send to each ``(low, high)`` port range; what
        others send to ``node`` still arrives (one direction, e.g. one broker's HTTP calls
        to its peers while their Raft traffic flows)."""
        self._rules.setdefault(node, []).extend(ports)
        self.apply()

    def apply(self) -> None:
        """(Re)write the rules and cgroup membership: a restarted node has new pids."""
        _run("iptables", "-F", CHAIN)
        for node in self._rules:
            self._enroll(node)
        # A socket stays in the cgroup it was created in, so connections opened before the
        # move would escape the rules: reset them, and the nodes reconnect from their new
        # cgroups (the reset must go out before the rules drop it).
        for low, high in {r for ranges in self._rules.values() for r in ranges}:
            _reset_connections(low, high)
        for node, ranges in self._rules.items():
            for low, high in ranges:
                _run(
                    "iptables",
                    "-A",
                    CHAIN,
                    "-m",
                    "cgroup",
                    "--path",
                    CGROUP_PREFIX + node,
                    "-p",
                    "tcp",
                    "--dport",
                    f"{low}:{high}",
                    "-j",
                    "DROP",
                )

    def _enroll(self, node: str) -> None:
        group = CGROUP_ROOT / (CGROUP_PREFIX + node)
        group.mkdir(exist_ok=True)
        pgid = self._cluster.pid(node)
        for pid in group_pids(pgid) if pgid is not None else []:
            with contextlib.suppress(OSError):  # it may have just exited
                (group / "cgroup.procs").write_text(str(pid))

    def heal(self) -> None:
        _run("iptables", "-F", CHAIN)
        for group in CGROUP_ROOT.glob(CGROUP_PREFIX + "*"):
            _empty_and_remove(group)
        self._rules.clear()

    def _raft_ranges(self, node: str) -> tuple[int, int]:
        spec = self._cluster.node(node)
        if spec.raft_port_min is not None and spec.raft_port_max is not None:
            return spec.raft_port_min, spec.raft_port_max
        if spec.raft_address is None:
            raise NetworkFaultError(f"{node} has no Raft port")
        port = int(spec.raft_address.rsplit(":", 1)[1])
        return port, port


def _reset_connections(low: int, high: int) -> None:
    """Abort every TCP connection from or to a port in ``[low, high]`` (``ss -K``)."""
    ports = f"sport >= :{low} and sport <= :{high}"
    _run("ss", "-K", "-t", f"( {ports} ) or ( {ports.replace('sport', 'dport')} )", check=False)


def _empty_and_remove(group: Path) -> None:
    """Move the group's processes back to the root cgroup, then remove it (a cgroup with
    processes in it cannot be removed)."""
    with contextlib.suppress(OSError):
        for line in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (CGROUP_ROOT / "cgroup.procs").write_text(line)
    with contextlib.suppress(OSError):
        group.rmdir()
