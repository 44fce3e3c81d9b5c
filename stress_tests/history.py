"""What a run observed, as plain frozen data: every send with its outcome, every message
read, every fault injected, and the final read of every replica. The checker judges only
this, so it stays pure and testable on synthetic histories.

``Recorder`` is the one mutable, thread-safe piece: workload threads append to it.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field


class Outcome(enum.Enum):
    ACKED = "acked"
    """The service returned offsets: the messages must be readable forever."""
    FAILED = "failed"
    """The service provably did nothing (refused before acting): they must never appear."""
    UNKNOWN = "unknown"
    """No answer we can trust (timeouts, commit timeouts): they may appear, at most once."""


@dataclass(frozen=True, slots=True)
class Position:
    partition_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class Send:
    """One batch of one producer, with its final outcome after all retries of its sequence."""

    producer: str
    sequence: int
    values: tuple[str, ...]
    outcome: Outcome
    positions: tuple[Position, ...] = ()
    """One per value, in the same order, when acknowledged; empty otherwise."""
    start_s: float = 0.0
    end_s: float = 0.0
    detail: str = ""
    """The last error the client saw for it (why it was judged failed or unknown)."""
    replicas_synced: int | None = None
    """Acknowledged: the fewest ``replicas_synced`` over the answer's acks (replicas the
    leader knew to hold the batch on disk when it answered); None when not recorded (the
    ``raftq.Producer`` does not expose its acks)."""


@dataclass(frozen=True, slots=True)
class Read:
    """One message popped by one consumer."""

    consumer: str
    """The consumer worker's name (the same as in ``History.consumers``)."""
    partition_id: int
    offset: int
    value: str
    at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class FaultRecord:
    kind: str
    target: str
    start_s: float
    end_s: float
    failover_s: float | None = None
    """Time from the fault until the affected partition (or the managers) acknowledged a
    write again; None when not measured."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One message as a replica serves it by offset (fetch)."""

    offset: int
    key: str | None
    value: str
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class RangeSum:
    """A replica's database checksum over ``[start, end)`` (``GET /checksum``)."""

    start: int
    end: int
    count: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """Everything one replica holds of one partition at the end of a run."""

    broker_id: int
    partition_id: int
    entries: tuple[Entry, ...]
    """From ``log_start`` on, contiguous."""
    db_sums: tuple[RangeSum, ...]
    log_start: int = 0
    """The replica's log start offset: retention removed everything below it, so an
    acknowledged or popped message below it is legitimately gone."""


@dataclass(frozen=True, slots=True)
class History:
    sends: tuple[Send, ...]
    reads: tuple[Read, ...]
    faults: tuple[FaultRecord, ...] = ()
    consumers: tuple[str, ...] = ()
    """The consumers that ran to the end (through the final drain, on no other thread): each
    must have popped every message of the final log. Empty: no consumer is held to it."""


@dataclass(frozen=True, slots=True)
class FinalRead:
    """Every replica of every partition, read after every fault healed."""

    replicas: tuple[ReplicaLog, ...]
    partition_count: int = 0


class HistoryFullError(RuntimeError):
    """More events than the run's bound: a runaway workload, stopped rather than let grow."""


@dataclass
class Recorder:
    """Thread-safe, bounded append-only history. Any thread may call every method."""

    events_max: int = 2_000_000
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sends: list[Send] = field(default_factory=list)
    _reads: list[Read] = field(default_factory=list)
    _faults: list[FaultRecord] = field(default_factory=list)
    _count: int = 0

    def _reserve(self, n: int) -> None:
        if self._count + n > self.events_max:
            raise HistoryFullError(f"history would exceed {self.events_max} events")
        self._count += n

    def send(self, send: Send) -> None:
        with self._lock:
            self._reserve(len(send.values))
            self._sends.append(send)

    def reads(self, reads: list[Read]) -> None:
        with self._lock:
            self._reserve(len(reads))
            self._reads.extend(reads)

    def fault(self, fault: FaultRecord) -> None:
        with self._lock:
            self._reserve(1)
            self._faults.append(fault)

    def acked_messages(self) -> int:
        with self._lock:
            return sum(len(s.values) for s in self._sends if s.outcome is Outcome.ACKED)

    def snapshot(self) -> History:
        with self._lock:
            return History(tuple(self._sends), tuple(self._reads), tuple(self._faults))
