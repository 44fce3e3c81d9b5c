"""The benchmark's figures and its one printed table. Pure: no I/O, no clock.

A ``Row`` is one measured scenario of one system; a ``MemoryRow`` is one process's resident
memory in each phase. ``render`` turns both (plus RaftQ's ratios to each peer) into the text
the benchmark prints, so the whole report can be tested without a cluster.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

RAFTQ = "raftq"
MISSING = "-"


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (the value below which ``fraction`` of the sample lies), or
    None for an empty sample. Nearest rank, not interpolation: every figure printed is one
    that was actually measured."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], not {fraction}")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True, slots=True)
class Row:
    """One scenario of one system. ``key`` names the comparable scenario across systems
    (None: not compared); ``error`` is set when the scenario could not run at all."""

    system: str
    scenario: str
    msgs_per_s: float | None = None
    requests_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    note: str = ""
    key: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """A figure was measured and nothing failed outright."""
        return self.error is None and (self.msgs_per_s is not None or self.p50_ms is not None)


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """Resident memory (MiB) of one process of one node, per phase; None: not running then
    (or not sampled). ``phases`` maps a phase name to (median, max) over its samples."""

    node: str
    process: str
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)


def ratio_rows(rows: Iterable[Row]) -> list[Row]:
    """RaftQ's figure divided by each peer's, per comparable scenario (same ``key``), for
    throughput and for latency: ``msgs/s 0.5x`` means RaftQ moves half as many messages,
    ``p99 2.0x`` that its p99 is twice the peer's. Every RaftQ row with the key is compared
    (through the LB and straight to the leader broker), with the peer's first row."""
    ours: dict[str, list[Row]] = {}
    theirs: dict[tuple[str, str], Row] = {}
    for row in rows:
        if row.key is None or not row.ok:
            continue
        if row.system == RAFTQ:
            ours.setdefault(row.key, []).append(row)
        else:
            theirs.setdefault((row.system, row.key), row)
    return [
        Row(
            f"{RAFTQ}/{system}",
            mine.scenario,
            _ratio(mine.msgs_per_s, peer.msgs_per_s),
            _ratio(mine.requests_per_s, peer.requests_per_s),
            _ratio(mine.p50_ms, peer.p50_ms),
            _ratio(mine.p99_ms, peer.p99_ms),
            note=f"vs {peer.scenario}",
        )
        for (system, key), peer in theirs.items()
        for mine in ours.get(key, [])
    ]


def _ratio(mine: float | None, theirs: float | None) -> float | None:
    if mine is None or theirs is None or theirs == 0:
        return None
    return mine / theirs


HEADER = ("system", "scenario", "msgs/s", "req/s", "p50 ms", "p99 ms", "errors", "note")


def _figure(value: float | None, ratio: bool = False) -> str:
    if value is None or math.isnan(value):
        return MISSING
    if ratio:
        return f"{value:.2f}x"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def row_cells(row: Row) -> tuple[str, ...]:
    ratio = "/" in row.system
    note = row.note if row.error is None else f"FAILED: {row.error}"
    figures = (row.msgs_per_s, row.requests_per_s, row.p50_ms, row.p99_ms)
    return (
        row.system,
        row.scenario,
        *(_figure(value, ratio) for value in figures),
        MISSING if ratio else str(row.errors),
        note,
    )


def memory_cells(row: MemoryRow, phases: Sequence[str]) -> tuple[str, ...]:
    cells = [row.node, row.process]
    for phase in phases:
        figures = row.phases.get(phase)
        cells.append(MISSING if figures is None else f"{figures[0]:.0f} / {figures[1]:.0f}")
    return tuple(cells)


def align(lines: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell; numbers (every column but the first two and the
    last) right-aligned."""
    if not lines:
        return []
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    last = len(widths) - 1
    out = []
    for line in lines:
        cells = [
            cell.ljust(widths[i]) if i < 2 or i == last else cell.rjust(widths[i])
            for i, cell in enumerate(line)
        ]
        out.append("  ".join(cells).rstrip())
    return out


def render(
    title: str, rows: Sequence[Row], memory: Sequence[MemoryRow], phases: Sequence[str]
) -> str:
    """The one table: every scenario row, RaftQ's ratios to each peer, then resident memory
    per process and phase ("median / max MiB" of the samples taken in that phase)."""
    table = [HEADER, *(row_cells(row) for row in rows)]
    ratios = ratio_rows(rows)
    if ratios:
        table.append(("", "ratios: RaftQ / peer, per comparable scenario", *[""] * 6))
        table.extend(row_cells(row) for row in ratios)
    lines = [title, *align(table)]
    if memory:
        header = ("node", "process", *(f"RSS MiB {phase} (median / max)" for phase in phases))
        lines.append("")
        lines.extend(align([header, *(memory_cells(row, phases) for row in memory)]))
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ScalingRow:
    """One row of the partition-scaling table (issue 22): an idle cluster holding
    ``partitions`` partitions, each on every broker. Figures per broker (the brokers' mean);
    None: not measured. ``error`` is set when the row could not be measured."""

    partitions: int
    cpu_percent: float | None = None
    """Of one core, over the idle window."""
    rss_mib: float | None = None
    threads: float | None = None
    p50_ms: float | None = None
    """One single-message produce to one partition through the client library."""
    error: str | None = None


SCALING_HEADER = (
    "partitions",
    "idle CPU per broker",
    "RSS per broker",
    "threads per broker",
    "one message, p50",
)


def _with_unit(value: float | None, decimals: int, unit: str) -> str:
    return MISSING if value is None else f"{value:,.{decimals}f}{unit}"


def scaling_cells(row: ScalingRow) -> tuple[str, ...]:
    if row.error is not None:
        return (str(row.partitions), f"FAILED: {row.error}", "", "", "")
    return (
        str(row.partitions),
        _with_unit(row.cpu_percent, 1, "%"),
        _with_unit(row.rss_mib, 0, " MiB"),
        _with_unit(row.threads, 0, ""),
        _with_unit(row.p50_ms, 1, " ms"),
    )


def render_scaling(title: str, rows: Sequence[ScalingRow]) -> str:
    """The partition-scaling table, in markdown (as the README shows it), under ``title``."""
    lines = [title, "", "| " + " | ".join(SCALING_HEADER) + " |"]
    lines.append("|" + "---|" * len(SCALING_HEADER))
    lines.extend("| " + " | ".join(scaling_cells(row)) + " |" for row in rows)
    return "\n".join(lines)
