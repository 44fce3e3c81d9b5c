"""When a run fails besides the checker's verdict: the rules that turn what a run observed of
itself (acks, faults, convergence, its worker threads, the consumers' drain) into problems.
Pure: no I/O, no clock.

A run that proves nothing is invalid (too few acks, fewer faults than planned). A run is also
failed by what the checker cannot see in a history:

- a worker thread that crashed, or that hung (still alive after its join timed out: it is
  then neither drained nor held to the end, since a second thread must not drive it);
- a drain that timed out: a consumer not caught up (``CAUGHT_UP_EMPTY_POPS`` successful empty
  pops in a row) by the drain's deadline;
- consumer errors. The bound: errors are tolerated only from a consumer that caught up in the
  drain afterwards (a pop fails while a fault lasts; the consumer then retries its request
  id and must recover once the cluster healed). A consumer with errors that did not catch up
  fails with its error count and last error, so one that fails every pop after a fault
  cannot leave the run green. Tolerated errors are still shown (``notes``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConsumerEnd:
    """One consumer worker at the end of a run."""

    name: str
    errors: int
    last_error: str = ""
    caught_up: bool = True
    """Caught up in the final drain (False too when it hung and was not drained)."""


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a run observed of itself, apart from the history the checker judges."""

    acked: int
    min_acked: int
    faults_planned: int
    faults_injected: int
    probe_timeouts: int = 0
    converged: bool = True
    crashed: tuple[str, ...] = ()
    """Each crashed worker's exception (repr)."""
    hung: tuple[str, ...] = ()
    """The names of worker threads still alive after their join timed out."""
    consumers: tuple[ConsumerEnd, ...] = ()
    drain_s: float = 0.0
    """How long the consumers' drain was given."""


def problems(facts: RunFacts) -> list[str]:
    """Every reason the run fails besides the checker's verdict; empty when valid."""
    found: list[str] = []
    if facts.acked < facts.min_acked:
        found.append(f"invalid: only {facts.acked} messages acknowledged (< {facts.min_acked})")
    if facts.faults_injected < facts.faults_planned:
        found.append(
            f"invalid: {facts.faults_injected} of {facts.faults_planned} planned faults injected"
        )
    if facts.probe_timeouts:
        found.append(
            f"{facts.probe_timeouts} faults left the partition "
            "without acknowledged writes for 45 s (availability)"
        )
    if not facts.converged:
        found.append("replicas did not converge (same end offset, all flushed) in time")
    found += [f"worker crashed: {crash}" for crash in facts.crashed]
    found += [f"worker hung: {name} still running after its join timed out" for name in facts.hung]
    found += consumer_problems(facts.consumers, facts.drain_s)
    return found


def consumer_problems(consumers: tuple[ConsumerEnd, ...], drain_s: float) -> list[str]:
    found = []
    for consumer in consumers:
        if consumer.caught_up:
            continue
        errors = (
            f"; {consumer.errors} errors, the last: {consumer.last_error}"
            if consumer.errors
            else ""
        )
        found.append(
            f"drain timed out: consumer {consumer.name} not caught up within {drain_s:.0f} s"
            f"{errors}"
        )
    return found


def notes(facts: RunFacts) -> list[str]:
    """What is tolerated but worth showing: errors of consumers that caught up."""
    return [
        f"consumer {c.name}: {c.errors} errors, tolerated (caught up afterwards); the last: "
        f"{c.last_error}"
        for c in facts.consumers
        if c.errors and c.caught_up
    ]
