"""Redelivery after a member's death (issue 20): the rounds every system's scenario runs.

A round: ``MESSAGES_PER_DEATH`` new messages are put on the queue; a *doomed* member, a
process of its own, takes them all in one receive (a lease of ``VISIBILITY_TIMEOUT_MS``,
NATS's AckWait, RabbitMQ's prefetch) and reports what it took; the benchmark kill -9s it
while a *survivor*, another member in the benchmark's process, is receiving (a long poll,
a pull request, a consumer); each message is timed from the kill until the survivor has it
again, and, where the system has leases, from the end of the doomed member's lease. The
lease is counted from when the doomed member *sent* its receive (its lease began no
earlier), so "past the lease's end" is an upper bound: it includes the receive's own way
to the server.

The doomed member is killed as soon as it reports, so "from the kill" is about the whole
lease plus the time past its end; RabbitMQ has no lease (a dead consumer's connection
closes and its unacknowledged messages are requeued at once), so only "from the kill" is
measured there. Each system's scenario drives the rounds with its own client (``one_round``
returns a ``Round``); this module starts, reads and kills the doomed process and turns the
rounds into table rows. Every wait is bounded; a doomed process nobody kills exits on its
own after ``DOOMED_LIFETIME_S``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stress_tests.bench_report import Row, percentile

VISIBILITY_TIMEOUT_MS = 1000
"""The lease (NATS: AckWait) of every redelivery scenario: short, so a round is short."""
MESSAGES_PER_DEATH = 10
"""Messages the doomed member holds when it dies."""
ROUNDS_MIN = 3
ROUNDS_MAX = 30
"""Rounds (deaths) per system: until the scenario's seconds are spent, within these."""
DOOMED_START_S = 60.0
"""Bound on a doomed member's start (a Python process, on a loaded machine) and receive."""
REDELIVERY_WAIT_S = 15.0
"""Bound on the survivor's wait for every message of a round after the kill."""
DOOMED_LIFETIME_S = 120.0
"""A doomed member that was never killed (the benchmark died first) exits after this."""
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Taken:
    """What a doomed member reports: the messages (their values) it holds, and when
    (``time.monotonic``, one clock for every process of the machine) it sent the receive
    that leased them."""

    values: tuple[str, ...]
    sent_s: float

    def to_line(self) -> str:
        return json.dumps({"values": list(self.values), "sent_s": self.sent_s})

    @classmethod
    def from_line(cls, line: str) -> Taken:
        body = json.loads(line)
        return cls(tuple(str(v) for v in body["values"]), float(body["sent_s"]))


@dataclass(slots=True)
class Round:
    """One death: when the doomed member was killed, when its lease ended (None: the
    system has none), and when the survivor had each of its messages again (by value)."""

    taken: Taken
    killed_s: float
    lease_end_s: float | None
    redelivered_s: dict[str, float] = field(default_factory=dict)

    @property
    def missing(self) -> int:
        """Messages the survivor did not get back within ``REDELIVERY_WAIT_S``."""
        return len(set(self.taken.values) - set(self.redelivered_s))


def report_taken(taken: Taken) -> None:
    """The doomed member's last act: report what it holds, then wait to be killed (never
    settling anything); exit on its own after ``DOOMED_LIFETIME_S``."""
    print(taken.to_line(), flush=True)
    time.sleep(DOOMED_LIFETIME_S)


class Doomed:
    """One doomed member's process: ``python -m MODULE ARGS`` in the repository, with
    ``env`` added to the environment (an API key goes there, not on the command line)."""

    def __init__(
        self, module: str, args: Sequence[str], env: Mapping[str, str] | None = None
    ) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )

    def taken(self, timeout_s: float = DOOMED_START_S) -> Taken:
        """Its report; ``RuntimeError`` when it exits or says nothing within the bound."""
        stdout = self._process.stdout
        if stdout is None:
            raise RuntimeError("the doomed member's output is not piped")
        ready, _, _ = select.select([stdout], [], [], timeout_s)
        line = stdout.readline() if ready else ""
        if not line:
            code = self._process.poll()
            raise RuntimeError(f"the doomed member reported nothing (exit code {code})")
        return Taken.from_line(line)

    def kill(self) -> float:
        """kill -9; when it was sent (``time.monotonic``)."""
        self._process.send_signal(signal.SIGKILL)
        return time.monotonic()

    def close(self) -> None:
        """Kill it if it still runs, and reap it."""
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(10)
        if self._process.stdout is not None:
            self._process.stdout.close()


def run_rounds(seconds: float, one_round: Callable[[int], Round]) -> list[Round]:
    """Rounds one after another until ``seconds`` have passed, at least ``ROUNDS_MIN`` and
    at most ``ROUNDS_MAX``; ``one_round(number)`` runs round ``number``."""
    started_s = time.monotonic()
    rounds: list[Round] = []
    for number in range(ROUNDS_MAX):
        if number >= ROUNDS_MIN and time.monotonic() - started_s >= seconds:
            break
        rounds.append(one_round(number))
    return rounds


@dataclass(frozen=True, slots=True)
class Scenario:
    """How a system's redelivery rows are named and compared."""

    system: str
    name: str
    """e.g. "redelivery after kill -9 of a member, 1 s lease"."""
    key_past_lease: str | None
    key_from_kill: str | None
    note: str = ""


KEY_PAST_LEASE = "redelivery past the lease's end, 1 s lease"
KEY_FROM_KILL = "redelivery from kill -9 of a member, 1 s lease"
PAST_LEASE = "past the lease's end"
FROM_KILL = "from the kill"


def rows(scenario: Scenario, rounds: Sequence[Round]) -> list[Row]:
    """p50 and p99 per message over every round: past the lease's end (systems with
    leases), and from the kill. ``errors``: messages not redelivered in time."""
    note = f"n={sum(len(r.redelivered_s) for r in rounds)} messages, {len(rounds)} kills"
    if scenario.note:
        note += f"; {scenario.note}"
    missing = sum(r.missing for r in rounds)
    from_kill = [t - r.killed_s for r in rounds for t in r.redelivered_s.values()]
    found = [(FROM_KILL, from_kill, scenario.key_from_kill)]
    if all(r.lease_end_s is not None for r in rounds):
        past = [t - (r.lease_end_s or 0.0) for r in rounds for t in r.redelivered_s.values()]
        found.insert(0, (PAST_LEASE, past, scenario.key_past_lease))
    return [
        _row(scenario.system, f"{scenario.name}: {what}", values, missing, note, key)
        for what, values, key in found
    ]


def _row(
    system: str, name: str, values_s: list[float], missing: int, note: str, key: str | None
) -> Row:
    if not values_s:
        return Row(system, name, errors=missing, key=key, error="no message was redelivered")
    p50, p99 = percentile(values_s, 0.5), percentile(values_s, 0.99)
    return Row(
        system,
        name,
        None,
        None,
        None if p50 is None else p50 * 1000,
        None if p99 is None else p99 * 1000,
        missing,
        note,
        key,
    )
