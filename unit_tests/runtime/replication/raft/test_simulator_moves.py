"""The simulator's moves workload (``stress_tests/sim_moves.py``): a partition whose replicas
flush into databases of their own while brokers are lost for good or drained and
re-replication moves their replicas, with the broker's and the manager's own code. Seeds
hold every check; issue 19's items 1 and 4 show up with their fixes taken out
(``fixes_taken_out.py``); the databases' check rejects a database that lost a row.

More seeds: ``RAFTQ_SIM_MOVES_SEEDS=500`` here, or
``python -m stress_tests.raft_sim --workload moves [--profile moves-unsynced] --seeds N``.
"""

from __future__ import annotations

import os

import pytest

from broker.partition.replica import PartitionReplica
from broker.persistence.flusher import Flusher
from broker.persistence.store import FlushBatch, MemoryMessageStore
from stress_tests import raft_sim
from stress_tests.raft_sim import moves_workload, run_seed
from unit_tests.runtime.replication.raft.fixes_taken_out import (
    replace_member_removing_first,
    reset_without_address,
    slot_to_move_before_fix,
    sync_when_behind_without_start,
)

SEEDS = int(os.environ.get("RAFTQ_SIM_MOVES_SEEDS", "24"))
"""Seeds per profile in CI (about 0.35 s each)."""

OPEN: dict[tuple[str, int], str] = {}
"""Seeds in CI's range that fail on today's code, each an open finding of this workload
(ARCHITECTURE.md, "Deterministic simulation", moves), run as strict xfails: a fix makes
them pass, and this table must then shrink. Moves seeds 8 and 32 and unsynced seeds 3
and 5 were here until the leaving replica of a drain was named in the spec
(``ReplicaSpec.leaving``) and left only once its replacement had copied what left memory."""


def _seeds(profile: str) -> list[object]:
    return [
        pytest.param(
            seed,
            marks=pytest.mark.xfail(strict=True, reason=OPEN[(profile, seed)])
            if (profile, seed) in OPEN
            else (),
        )
        for seed in range(1, SEEDS + 1)
    ]


@pytest.mark.parametrize("seed", _seeds("moves"))
def test_moves_seeds_hold_every_check(seed: int) -> None:
    result = run_seed(seed, "moves")
    assert result.violation is None, result.trace_text()[-4000:]


@pytest.mark.parametrize("seed", _seeds("moves-unsynced"))
def test_moves_seeds_with_unsynced_appends_hold_every_check(seed: int) -> None:
    result = run_seed(seed, "moves", "moves-unsynced")
    assert result.violation is None, result.trace_text()[-4000:]


@pytest.mark.xfail(strict=True, reason="open: a member behind a membership change is deaf")
@pytest.mark.parametrize(("profile", "seed"), [("moves", 199), ("moves-unsynced", 185)])
def test_open_findings_still_fail(profile: str, seed: int) -> None:
    """Open, outside CI's seed range: a member whose log lacks the add of a new member
    ignores that member (pysyncobj's transport drops messages from nodes its configuration
    does not name); when the new member holds the longest log and another member is lost,
    no candidate can gather a majority (ARCHITECTURE.md, "Deterministic simulation"). Kept
    strict: a fix turns these into passes, and they move to the seeds that hold."""
    result = run_seed(seed, "moves", profile)
    assert result.violation is None, result.violation


def test_a_moves_seed_replays_exactly() -> None:
    first, second = run_seed(2, "moves"), run_seed(2, "moves")
    assert first.trace == second.trace
    assert any("finish move" in line for line in first.trace)


def test_removing_a_live_member_first_leaves_no_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19, item 1, without its fix (fc243fe): a drain starts while another replica is
    down, the live leaving member is removed first, and the new one is hosted only once
    the members match. Seed 1: n1 drained, removed; n3 then lost for good; the group of
    n2, n3 and the unhosted n4 never elects a leader. The seed passes with the fix
    (``test_moves_seeds_hold_every_check``)."""
    monkeypatch.setattr(PartitionReplica, "replace_member", replace_member_removing_first)
    monkeypatch.setitem(
        raft_sim.WORKLOADS,
        "moves",
        lambda: moves_workload(slot_to_move_before_fix, host_first=False),
    )
    result = run_seed(1, "moves")
    assert result.violation is not None
    assert "after the faults stopped" in result.violation


def test_flush_marks_across_a_reset_leave_a_hole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19, item 4, without its fix: a reset records no holder, and the flusher's
    "sync when behind" mark carries neither its start nor its sender, so a mark made on a
    view from before the reset (or by the leaving replica) claims rows the new replica's
    database lacks. Seed 2 of the unsynced profile; it passes with the fix."""
    monkeypatch.setattr(PartitionReplica, "_reset_slot", reset_without_address)
    monkeypatch.setattr(Flusher, "_sync_when_behind", sync_when_behind_without_start)
    result = run_seed(2, "moves", "moves-unsynced")
    assert result.violation is not None
    assert "claims flushed up to" in result.violation


def test_a_database_that_lost_a_row_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """The databases' check is not vacuous: a database that drops offset 3 fails it."""
    insert = MemoryMessageStore.insert_messages

    def dropping(
        self: MemoryMessageStore, topic: str, partition_id: int, batch: FlushBatch, end: int
    ) -> None:
        insert(self, topic, partition_id, batch, end)
        self._messages.get((topic, partition_id), {}).pop(3, None)

    monkeypatch.setattr(MemoryMessageStore, "insert_messages", dropping)
    result = run_seed(2, "moves")
    assert result.violation is not None
    assert "lacks" in result.violation
