"""Resident memory (RSS) of every process of every node, sampled on a thread by phase, and
the /proc readers of a process's figures (RSS, threads, CPU ticks) that the benchmark uses.

Each node runs in its own process group (``LocalCluster`` starts it in a new session): a
RaftQ node is one process (``python``); a peer's node may be several, each reported apart
(never summed), named by its command (``nats-server``, ``beam.smp``, ...).

Processes are keyed by (node, role), not pid, so a node restarted by a fault keeps its row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from stress_tests.bench_report import MemoryRow, median

SAMPLE_PERIOD_S = 0.5
SAMPLES_MAX = 100_000
"""Bound on the samples kept per run (7 nodes x 2 processes x 2/s is ~30/s)."""

GroupsOf = Callable[[], Mapping[str, int | None]]
"""node name -> its process group id (None: not running), asked at every sample."""


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_ticks_of(fields: list[str]) -> int:
    """utime + stime (clock ticks, ``os.sysconf("SC_CLK_TCK")`` a second) of ``stat_fields``'
    fields: /proc/<pid>/stat's 14th and 15th, the 12th and 13th after the command name. Every
    thread of the process counted, its reaped children not."""
    return int(fields[11]) + int(fields[12])


def cpu_ticks(pid: int) -> int | None:
    """CPU time one process has used so far (ticks), or None when it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else cpu_ticks_of(fields)


def status_value(text: str, name: str) -> int | None:
    """The first number of the line ``name:`` of a /proc/<pid>/status text (``VmRSS`` in kB,
    ``Threads``), or None when the line is missing (a zombie has no ``VmRSS``)."""
    prefix = f"{name}:"
    for line in text.splitlines():
        if line.startswith(prefix):
            return int(line[len(prefix) :].split()[0])
    return None


def _status(pid: int, name: str) -> int | None:
    try:
        return status_value(Path(f"/proc/{pid}/status").read_text(), name)
    except OSError:
        return None


def rss_mib(pid: int) -> float | None:
    """VmRSS of one process (not its children), or None when it is gone."""
    kib = _status(pid, "VmRSS")
    return None if kib is None else kib / 1024


def thread_count(pid: int) -> int | None:
    """Threads of one process, or None when it is gone."""
    return _status(pid, "Threads")


def group_members(pgids: set[int]) -> dict[int, list[int]]:
    """Live (non-zombie) processes of each group, leader first: one pass over /proc for all
    groups, so sampling every node costs one scan, not one per node."""
    members: dict[int, list[int]] = {pgid: [] for pgid in pgids}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat_fields(int(entry.name))
            if fields is not None and int(fields[2]) in members and fields[0] != "Z":
                members[int(fields[2])].append(int(entry.name))
    for pgid, pids in members.items():
        pids.sort()
        if pgid in pids:  # the group leader first
            pids.remove(pgid)
            pids.insert(0, pgid)
    return members


def role_names(members: list[int]) -> dict[int, str]:
    """pid -> role in its node: the command name (numbered when two share a name)."""
    names: dict[int, str] = {}
    seen: dict[str, int] = {}
    for pid in members:
        try:
            base = Path(f"/proc/{pid}/comm").read_text().strip() or str(pid)
        except OSError:
            base = str(pid)
        seen[base] = seen.get(base, 0) + 1
        names[pid] = base if seen[base] == 1 else f"{base}-{seen[base]}"
    return names


def snapshot(groups: Mapping[str, int | None]) -> dict[tuple[str, str], float]:
    """(node, role) -> RSS MiB, for every running process of every node."""
    running = {node: pgid for node, pgid in groups.items() if pgid is not None}
    members = group_members(set(running.values()))
    found: dict[tuple[str, str], float] = {}
    for node, pgid in running.items():
        for pid, role in role_names(members[pgid]).items():
            mib = rss_mib(pid)
            if mib is not None:
                found[(node, role)] = mib
    return found


class MemorySampler:
    """Samples RSS every ``SAMPLE_PERIOD_S`` on its own thread, tagging each sample with the
    phase the main thread set last. ``take`` samples once on the caller's thread."""

    def __init__(self, groups: GroupsOf) -> None:
        self._groups = groups
        self._lock = threading.Lock()
        self._samples: dict[tuple[str, str], dict[str, list[float]]] = {}
        self._count = 0
        self._phase = "idle"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self._phase = phase

    def count(self, phase: str) -> int:
        """How many samples of any process were taken in ``phase``."""
        with self._lock:
            return sum(len(phases.get(phase, [])) for phases in self._samples.values())

    def take(self) -> None:
        found = snapshot(self._groups())
        with self._lock:
            if self._count + len(found) > SAMPLES_MAX:
                return
            self._count += len(found)
            for key, mib in found.items():
                self._samples.setdefault(key, {}).setdefault(self._phase, []).append(mib)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(SAMPLE_PERIOD_S * 10)

    def rows(self) -> list[MemoryRow]:
        with self._lock:
            samples = {key: dict(phases) for key, phases in self._samples.items()}
        rows = []
        for (node, process), phases in sorted(samples.items()):
            figures = {p: (median(v) or 0.0, max(v)) for p, v in phases.items() if v}
            rows.append(MemoryRow(node, process, figures))
        return rows

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_PERIOD_S):
            self.take()
