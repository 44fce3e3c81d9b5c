"""Bounded waits for the tests of real Raft groups in this process (a condition polled until
it holds, never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

N = TypeVar("N")
WAIT_S = 30.0


def wait_for(condition: Callable[[], object], what: str, wait_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + wait_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {wait_s} s: {what}"
        time.sleep(0.01)


def one_leader(nodes: Sequence[N], leads: Callable[[N], bool], wait_s: float = WAIT_S) -> N:
    """The node that leads, once exactly one of ``nodes`` does."""
    found: list[N] = []

    def one_leads() -> bool:
        found[:] = [node for node in nodes if leads(node)]
        return len(found) == 1

    wait_for(one_leads, "a leader", wait_s)
    return found[0]
