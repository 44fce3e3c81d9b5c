"""``RaftNode`` as it was before a fix, for the tests that show a seed finding the fault:
each stands in for one method, patched in the test's process (``monkeypatch``)."""

from __future__ import annotations

from collections.abc import Callable

from runtime.replication.raft.node import RaftNode


def changes_without_the_guard(
    self: RaftNode, address: str, *, add: bool, answered: Callable[[object], None]
) -> None:
    """``RaftNode.start_member_change`` before fc243fe: no one-change-at-a-time rule."""
    change = self.addNodeToCluster if add else self.removeNodeFromCluster
    change(address, lambda _result, error: answered(error))
