"""Closed-loop load: N threads each repeat one request for a bounded time and count, and a
``Tally`` of what they measured becomes one table ``Row``.

Each thread builds its own step (its own HTTP session, producer id or AMQP connection), since
none of those clients is thread-safe; what a step opens it registers on the run's
``ExitStack``, closed when the run ends. Threads are joined with a bound, and a step that raises
counts as one error, so one broken request never ends or hangs a scenario.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stress_tests.bench_report import Row, percentile

Step = Callable[[], int]
"""One request; returns how many messages it moved. Raises ``Exhausted`` when there is
nothing left to move (a drained queue), any other exception for a failed request."""

REQUESTS_PER_THREAD_MAX = 1_000_000
"""Upper bound on one thread's loop, whatever the duration."""
JOIN_GRACE_S = 60.0
"""How long after the deadline a thread may still finish its last request (above every
request timeout used here)."""
ERROR_PAUSE_S = 0.05
"""Pause after a failed request, so a refusing server is not hammered in a tight loop."""


class Exhausted(Exception):  # noqa: N818 (a signal, not an error)
    """The step found nothing left to do: the thread stops early."""


@dataclass
class Tally:
    """What the threads of one scenario measured. Any thread may call ``add``/``failed``."""

    latencies_s: list[float] = field(default_factory=list)
    messages: int = 0
    errors: int = 0
    last_error: str = ""
    elapsed_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, latency_s: float, messages: int) -> None:
        with self._lock:
            self.latencies_s.append(latency_s)
            self.messages += messages

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self.errors += 1
            self.last_error = f"{type(error).__name__}: {error}"[:160]

    def row(self, system: str, scenario: str, key: str | None = None, note: str = "") -> Row:
        """Throughput over the wall time of the whole scenario; latency per request."""
        if not self.latencies_s:
            return Row(system, scenario, errors=self.errors, key=key, error=self._why_empty())
        elapsed_s = max(self.elapsed_s, 1e-9)
        p50, p99 = percentile(self.latencies_s, 0.50), percentile(self.latencies_s, 0.99)
        return Row(
            system,
            scenario,
            self.messages / elapsed_s,
            len(self.latencies_s) / elapsed_s,
            None if p50 is None else p50 * 1000,
            None if p99 is None else p99 * 1000,
            self.errors,
            note,
            key,
        )

    def _why_empty(self) -> str:
        return f"no request succeeded ({self.errors} errors; last: {self.last_error or '-'})"


MakeStep = Callable[[contextlib.ExitStack], Step]
"""Builds one thread's step; registers what it opens (sessions, connections) to be closed."""


def run_load(threads: int, seconds: float, make_step: MakeStep) -> Tally:
    """Run one step per thread in a loop until ``seconds`` have passed (or the step is
    exhausted, or the per-thread count bound is reached), and tally every request."""
    with contextlib.ExitStack() as opened:
        steps = [make_step(opened) for _ in range(threads)]  # setup is not timed
        return _run_steps(steps, seconds)


def _run_steps(steps: list[Step], seconds: float) -> Tally:
    tally = Tally()
    started_s = time.monotonic()
    deadline_s = started_s + seconds
    pool = [
        threading.Thread(target=_loop, args=(step, deadline_s, tally), daemon=True)
        for step in steps
    ]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(max(0.0, deadline_s - time.monotonic()) + JOIN_GRACE_S)
    tally.elapsed_s = time.monotonic() - started_s
    return tally


def _loop(step: Step, deadline_s: float, tally: Tally) -> None:
    for _ in range(REQUESTS_PER_THREAD_MAX):
        if time.monotonic() >= deadline_s:
            return
        started_s = time.monotonic()
        try:
            moved = step()
        except Exhausted:
            return
        except Exception as exc:  # counted, shown in the row; the scenario goes on
            tally.failed(exc)
            time.sleep(ERROR_PAUSE_S)
            continue
        tally.add(time.monotonic() - started_s, moved)
