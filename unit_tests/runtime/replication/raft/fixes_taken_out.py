"""``RaftNode`` as it was before a fix, for the tests that show a seed finding the fault:
each stands in for one method, patched in the test's process (``monkeypatch``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pysyncobj.syncobj

from runtime.replication.raft.node import RaftNode


def changes_without_the_guard(
    self: RaftNode, address: str, *, add: bool, answered: Callable[[object], None]
) -> None:
    """``RaftNode.start_member_change`` before fc243fe: no one-change-at-a-time rule."""
    change = self.addNodeToCluster if add else self.removeNodeFromCluster
    change(address, lambda _result, error: answered(error))


STAMP_WINDOW_S = 3.0
"""How lately a member must have answered to count, as the leader's check did
(``raft_leader_fallback_timeout_s``'s default)."""


def replicas_by_stamps(self: RaftNode, index: int) -> int:
    """``RaftNode.replicas_holding`` as issue 19's item 3 found it counted before fc243fe:
    the members pysyncobj stamps as answered lately, whatever they hold (a new leader, and a
    leader adding a member, stamp every member "just now")."""
    if not self._isLeader():
        return 0
    answered: dict[Any, float] = self._SyncObj__lastResponseTime
    since = pysyncobj.syncobj.monotonicTime() - STAMP_WINDOW_S
    return 1 + sum(1 for n in self._SyncObj__otherNodes if answered.get(n, 0.0) >= since)
