"""The power of a whole local cluster (issues 7 and 20): a cluster whose whole directory
(cluster.json, the secret, every node's Raft journals and dumps and SQLite database) lives on
the power-cut file system (``stress_tests/powercut``), and the switch that cuts the power of
every node at once and restores it.

A cut is what a power failure of every machine does: kill -9 of every node's process group
(nothing gets to flush or close), then ``PowerCutFS.cut()`` (everything not fsynced is gone,
and names whose directory was not fsynced). Restoring power is a remount and the same
``raftq cluster up --dir D`` a user would run again.

Used by the power-loss runs (``power_loss.py``, ``unit_tests/cluster/test_power_loss.py``)
and the consumer group's at-least-once run (``lease_run.py``). ``PowerSwitch`` is used from
one thread (the run's nemesis).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ops.cluster import LocalCluster
from ops.cluster_layout import CLUSTER_FILE
from stress_tests.polling import poll_until
from stress_tests.powercut import PowerCutFS, fuse_unavailable_reason

REPO_DIR = Path(__file__).resolve().parents[1]
CLI_TIMEOUT_S = 180.0
"""``raftq cluster up`` waits up to 90 s for the cluster itself; this bounds the command."""
KILL_TIMEOUT_S = 10.0
"""From kill -9 of every node until no process of any node's group is left."""
CLUSTER_DIR_NAME = "cluster"
"""The cluster directory inside the mount: the mount root also holds FUSE's own entries."""
COMPACTION_LIMITS = {
    # A partition's log compacts after 64 KiB of entries (about 40 batches of 25), not 32 MiB;
    # every group (managers too) at least every 10 s or 300 entries: a cut then finds state
    # in full dumps too, not only in journals.
    "raft_log_compaction_bytes_min": str(64 * 1024),
    "raft_log_compaction_entries_min": "300",
    "raft_log_compaction_time_min_s": "10",
}


def cluster_up(directory: Path, base_port: int, limits: Mapping[str, str]) -> LocalCluster:
    """``raftq cluster up --dir D --base-port P [--limit k=v ...]``, as a user starts (and,
    after a cut, restarts) the cluster; returns it for node operations."""
    argv = ["cluster", "up", "--dir", str(directory), "--base-port", str(base_port)]
    for name, value in limits.items():
        argv += ["--limit", f"{name}={value}"]
    done = subprocess.run(
        [sys.executable, "-m", "raftq.cli", *argv],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"raftq {' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return LocalCluster(directory)


def kill_every_node(cluster: LocalCluster, timeout_s: float = KILL_TIMEOUT_S) -> None:
    """kill -9 every running node's process group at once, then wait (bounded) until no
    process of those groups runs any more (so none writes to the disk after the cut).
    The nodes ``cluster`` started itself are reaped (a handle never polled warns when it
    is collected)."""
    groups = []
    for name in cluster.node_names:
        pid = cluster.pid(name)
        if pid is not None and cluster.is_running(name):
            cluster.signal_node(name, signal.SIGKILL)
            groups.append(pid)
    poll_until(
        lambda: not any(_group_runs(pgid) for pgid in groups),
        timeout_s,
        "every node's processes gone after kill -9",
        period_s=0.05,
    )
    cluster.detach()


def save_logs(cluster: LocalCluster, into: Path) -> None:
    """Copy every node's log as the processes left it (a cut keeps only what was synced, and
    nothing syncs a log): diagnostics for a failure after the cut."""
    into.mkdir(parents=True, exist_ok=True)
    for name in cluster.node_names:
        source = cluster.node(name).log_file
        if source.exists():
            shutil.copyfile(source, into / f"{name}.log")


def cut_power(cluster: LocalCluster, disk: PowerCutFS, logs_dir: Path | None = None) -> None:
    """A power cut of every node at once: kill -9 all, then the disk loses what was not
    synced. The disk is unmounted afterwards (``restore_power`` mounts it again)."""
    kill_every_node(cluster)
    if logs_dir is not None:
        save_logs(cluster, logs_dir)
    disk.cut()


def restore_power(
    disk: PowerCutFS, directory: Path, base_port: int, limits: Mapping[str, str]
) -> LocalCluster:
    """Mount the disk as the cut left it and start the cluster again on the same directory."""
    disk.mount()
    return cluster_up(directory, base_port, limits)


def stop_everything(directory: Path, disk: PowerCutFS) -> None:
    """However a run ended: no node left running on the mount, and no mount left. The
    nodes are found from ``cluster.json`` on the disk (a ``cluster up`` that failed halfway
    may have started some that no ``LocalCluster`` object of the caller knows)."""
    try:
        if disk.mounted and (directory / CLUSTER_FILE).exists():
            kill_every_node(LocalCluster(directory))
    finally:
        disk.unmount()


class PowerSwitch:
    """A running cluster on a mounted power-cut disk, and its power. ``cluster`` is the
    cluster as last started: a restore starts new processes, so a ``LocalCluster`` from
    before a cut must not be used after it (it would take the dead processes for its own)."""

    def __init__(
        self, disk: PowerCutFS, directory: Path, base_port: int, limits: Mapping[str, str]
    ) -> None:
        self.disk = disk
        self.directory = directory
        self.base_port = base_port
        self.limits = dict(limits)
        self.cluster = LocalCluster(directory)

    def cut(self, logs_dir: Path | None = None) -> None:
        """Cut the power of every node at once (``cut_power``); the nodes' logs as they were
        go to ``logs_dir``."""
        cut_power(self.cluster, self.disk, logs_dir)

    def restore(self) -> LocalCluster:
        """Power back on: remount, ``cluster up`` on the same directory; the new cluster."""
        self.cluster = restore_power(self.disk, self.directory, self.base_port, self.limits)
        return self.cluster


@contextmanager
def power_cut_cluster(
    backing_dir: Path, base_port: int, limits: Mapping[str, str]
) -> Iterator[PowerSwitch]:
    """A mounted power-cut disk (strict directory semantics) in ``backing_dir`` with a running
    cluster in ``<mount>/cluster``, and its power switch. Nodes are killed and the disk
    unmounted however the block ends (the caller may have cut and remounted meanwhile).
    Raises ``RuntimeError`` when FUSE cannot run here: a run that cannot cut power proves
    nothing, so it must not pass as if it had."""
    reason = fuse_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"the power-cut file system cannot run here: {reason}")
    disk = PowerCutFS(backing_dir, strict_directories=True)
    directory = disk.mount() / CLUSTER_DIR_NAME
    switch: PowerSwitch | None = None
    try:
        cluster_up(directory, base_port, limits)
        switch = PowerSwitch(disk, directory, base_port, limits)
        yield switch
    finally:
        stop_everything(directory, disk)
        if switch is not None:
            switch.cluster.detach()  # reaps the nodes it started (killed by now)


def _group_runs(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies hold no files: not counted)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
