"""Bounded waiting: every wait in the benchmark polls a condition until a deadline, never
sleeps blindly, so a condition that never comes true costs a known time and a clear error."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_PERIOD_S = 0.1


class WaitTimeoutError(TimeoutError):
    """The condition did not come true within its bound."""


def poll_until(
    condition: Callable[[], T | None],
    timeout_s: float,
    what: str,
    period_s: float = POLL_PERIOD_S,
) -> T:
    """The first non-None (and non-False) value of ``condition`` within ``timeout_s``;
    raises ``WaitTimeoutError`` naming ``what`` otherwise. Exceptions of the condition propagate."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value is not None and value is not False:
            return value
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            raise WaitTimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(min(period_s, remaining_s))
