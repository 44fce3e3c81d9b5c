"""The deterministic simulator driving the managers' registry (``stress_tests/manager_sim.py``,
``python -m stress_tests.raft_sim --workload manager``): a seed replays exactly; a range of
seeds, and a membership-profile run, hold every check; the checks reject a replica that
applies another command, a refusal that changes the state and an apply that raises; the
command mix reaches every command and outcome; the fingerprint is a deterministic
serialization.

More seeds: ``RAFTQ_SIM_MANAGER_SEEDS=500`` here, or ``python -m stress_tests.raft_sim
--workload manager --seeds N``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import pickle
import random
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from manager.raft import REGISTRY
from manager.registry import commands as c
from manager.registry.commands import RegistryCommand, command_name, from_wire, to_wire
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from protocol.types import BrokerId
from runtime.replication.machine import method_numbers
from runtime.replication.raft.node import RaftNode
from runtime.replication.raft.sim.checks import InvariantError
from runtime.replication.raft.sim.simulation import SimResult
from stress_tests.manager_sim import (
    MALFORMED,
    CheckedApply,
    ManagerProposer,
    broken,
    manager_definition,
    registry_document,
    registry_fingerprint,
)
from stress_tests.raft_sim import main, run_seed
from unit_tests.runtime.replication.raft.fixes_taken_out import changes_without_the_guard

REPO_DIR = Path(__file__).resolve().parents[4]
SEEDS = int(os.environ.get("RAFTQ_SIM_MANAGER_SEEDS", "24"))
"""Seeds of the faulty network in CI (about 0.3 s of CPU each)."""
MEMBERSHIP_SEEDS = range(1, 6)
MEMBERSHIP = 0.08


def _failures(results: list[SimResult]) -> str:
    first = results[0]
    tail = "\n".join(first.trace[-40:])
    return f"seeds {[r.seed for r in results]} failed; seed {first.seed}: {first.violation}\n{tail}"


def test_a_manager_seed_replays_exactly() -> None:
    first, second = run_seed(3, "manager"), run_seed(3, "manager")
    assert first.violation is None, first.trace_text()
    assert first.trace == second.trace
    assert first.acknowledged > 10
    acked = [line for line in first.trace if "acked index" in line]
    assert any(line.endswith(" created") for line in acked)  # outcomes are in the trace
    assert run_seed(3).trace != first.trace  # the partition workload is another run


def test_manager_seeds_hold_every_check() -> None:
    failed = [r for r in (run_seed(s, "manager") for s in range(1, SEEDS + 1)) if r.violation]
    assert not failed, _failures(failed)


def test_a_membership_run_holds_every_check() -> None:
    results = [run_seed(s, "manager", member_change_p=MEMBERSHIP) for s in MEMBERSHIP_SEEDS]
    failed = [r for r in results if r.violation]
    assert not failed, _failures(failed)
    assert any("committed" in line for r in results for line in r.trace)  # members changed


def test_a_replica_that_applies_another_command_is_rejected() -> None:
    result = run_seed(1, "manager", diverging_node=2)
    assert result.violation is not None
    assert result.violation.startswith("states differ at applied index")


def test_a_refusal_that_changes_the_state_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken ``set_alive`` that moves the revision when it refuses an unknown broker:
    the workload's own check sees it, in the simulator too."""
    real = ManagerState.set_broker_alive

    def leaky(state: ManagerState, broker_id: int, alive: bool) -> Outcome:
        outcome = real(state, broker_id, alive)
        if outcome is Outcome.UNKNOWN_BROKER:
            state.revision += 1
        return outcome

    monkeypatch.setattr(ManagerState, "set_broker_alive", leaky)
    checked, state = CheckedApply(), ManagerState()
    assert checked(state, to_wire(c.SetBrokerAlive(5, True))) is Outcome.UNKNOWN_BROKER
    with pytest.raises(InvariantError, match=r"refused \(unknown_broker\) but changed the state"):
        checked.fingerprint(state)
    violation = run_seed(1, "manager").violation
    assert (
        violation
        == "('set_broker_alive', 3, True) was refused (unknown_broker) but changed the state"
    )


def test_an_apply_that_raises_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(state: ManagerState, command: object) -> Outcome:
        raise KeyError("k")

    monkeypatch.setattr(ManagerState, "apply", broken)
    checked, state = CheckedApply(), ManagerState()
    with pytest.raises(KeyError):
        checked(state, to_wire(c.RevokeKey("k")))
    with pytest.raises(InvariantError, match="apply raised KeyError"):
        checked.fingerprint(state)


def test_a_registration_refused_after_its_lease_step_passes() -> None:
    """A producer registered under another key's id is refused (EXISTS) after the lease
    clock moved and an idle client expired: allowed, and nothing else changed."""
    state, checked = ManagerState(), CheckedApply()
    state.register_broker(1, "http://b1", "b1", 1, 9, 10)
    state.begin_topic("t", (((BrokerId(1), "b1:1"),),), 10, 10, 3)
    state.finish_partitions("t", (0,))
    state.register_consumer("idle", "t", None, 10, 1_000, 100)
    state.register_producer("p", "t", 10, 4_950, 100, owner="key-a")
    wire = to_wire(c.RegisterProducer("p", "t", 10, 5_000, 100, None, "key-b"))
    assert checked(state, wire) is Outcome.EXISTS
    assert checked.violations == []
    assert state.clients.consumer("idle") is None


# --- the command mix ------------------------------------------------------------------


def _direct_run(
    seed: int, count: int
) -> tuple[ManagerState, list[tuple[RegistryCommand, Outcome]]]:
    """``count`` commands of the mix applied in order, each made from the state so far (a
    fresh copy of the state each call)."""
    state, applied = _direct_run_once(seed, count)
    return pickle.loads(state), list(applied)


@functools.cache
def _direct_run_once(
    seed: int, count: int
) -> tuple[bytes, tuple[tuple[RegistryCommand, Outcome], ...]]:
    rng, state, proposer = random.Random(seed), ManagerState(), ManagerProposer()
    applied = []
    for number in range(1, count + 1):
        proposer.see(state)
        command = proposer(rng, number)
        applied.append((command, state.apply(from_wire(to_wire(command)))))
    return pickle.dumps(state), tuple(applied)


def test_the_mix_reaches_every_command_and_mostly_valid_ones() -> None:
    applied = [pair for seed in range(1, 5) for pair in _direct_run(seed, 300)[1]]
    kinds = {command_name(command) for command, _ in applied}
    assert kinds == {command_name_of(kind) for kind in typing.get_args(RegistryCommand)}
    outcomes = {outcome for _, outcome in applied}
    assert outcomes >= set(Outcome) - {Outcome.FAILED}
    ok = sum(outcome.ok for _, outcome in applied)
    assert ok > len(applied) / 2
    assert len(applied) - ok > len(applied) / 5  # and refusals, plenty


def command_name_of(kind: type[RegistryCommand]) -> str:
    values: list[typing.Any] = [None] * len(dataclasses.fields(kind))
    return command_name(kind(*values))


def test_every_kind_of_command_has_a_malformed_variant() -> None:
    assert {kind for kind, _, _ in MALFORMED} == set(typing.get_args(RegistryCommand))


def test_every_malformed_command_changes_nothing() -> None:
    """Each entry of ``MALFORMED``, put into commands of its kind from a run, is refused
    and changes nothing (but a registration's lease step), or is taken as a repeat that
    changes nothing (a roll-back with no partition left to roll back, a revoke of no key)."""
    state = _direct_run(1, 300)[0]
    applied = [pair for seed in range(1, 4) for pair in _direct_run(seed, 300)[1]]
    for kind, name, value in MALFORMED:
        commands = [command for command, _ in applied if isinstance(command, kind)]
        assert commands, f"no {kind.__name__} in the run"
        for command in commands[:5]:
            bad = broken(command, name, value)
            checked, target = CheckedApply(), pickle.loads(pickle.dumps(state))
            outcome = checked(target, to_wire(bad))
            assert outcome not in (Outcome.CREATED, Outcome.UPDATED), (bad, outcome)
            if outcome is Outcome.UNCHANGED:
                assert registry_fingerprint(target) == registry_fingerprint(state), bad
            assert checked.violations == []


def test_the_sim_definition_keeps_the_managers_method_table() -> None:
    """Same names, versions and durability, so the same journal numbers as ``REGISTRY``."""
    definition = manager_definition(CheckedApply())
    assert method_numbers(definition.methods) == method_numbers(REGISTRY.methods)
    assert [(m.name, m.synced, m.version) for m in definition.methods] == [
        (m.name, m.synced, m.version) for m in REGISTRY.methods
    ]
    assert definition.encode(c.RevokeKey("k"), True) == REGISTRY.encode(c.RevokeKey("k"), True)


# --- the fingerprint --------------------------------------------------------------------


def test_equal_states_have_equal_fingerprints() -> None:
    state, _ = _direct_run(2, 300)
    restored = pickle.loads(pickle.dumps(state))  # as a replica restored from a dump
    assert registry_fingerprint(restored) == registry_fingerprint(state)
    assert registry_fingerprint(copy.deepcopy(state)) == registry_fingerprint(state)
    state.apply(c.RegisterBroker(42, "http://b42", "b42", 1, 9, 100))
    assert registry_fingerprint(restored) != registry_fingerprint(state)


def test_the_fingerprint_sees_the_lease_order() -> None:
    one, two = ManagerState(), ManagerState()
    for state in (one, two):
        state.register_broker(1, "http://b1", "b1", 1, 9, 10)
        state.begin_topic("t", (((BrokerId(1), "b1:1"),),), 10, 10, 3)
    one.register_consumer("a", "t", None, 10, 1_000, 100)
    one.register_consumer("b", "t", None, 10, 1_000, 100)
    two.register_consumer("b", "t", None, 10, 1_000, 100)
    two.register_consumer("a", "t", None, 10, 1_000, 100)
    assert registry_fingerprint(one) != registry_fingerprint(two)  # which lease runs out first


def test_the_document_refuses_a_value_without_a_plain_form() -> None:
    with pytest.raises(TypeError, match="no plain form for a object"):
        registry_document({"x": object()})
    assert registry_document({2: {"b", "a"}}) == ["dict", [[2, ["set", ['"a"', '"b"']]]]]


def test_the_fingerprint_is_the_same_in_another_process() -> None:
    """Sets of strings (the taken Raft addresses) iterate in an order that follows
    ``PYTHONHASHSEED``: the fingerprint must not."""
    script = (
        "from unit_tests.runtime.replication.raft.test_simulator_manager import _direct_run; "
        "from stress_tests.manager_sim import registry_fingerprint; "
        "print(registry_fingerprint(_direct_run(4, 300)[0]))"
    )
    environment = {**os.environ, "PYTHONHASHSEED": "777", "PYTHONPATH": str(REPO_DIR)}
    found = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_DIR,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert found.stdout.strip() == registry_fingerprint(_direct_run(4, 300)[0])


# --- the command line -------------------------------------------------------------------


def test_the_command_line_runs_the_manager_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workload", "manager", "--seed", "2", "--trace"]) == 0
    out = capsys.readouterr().out
    assert "acked index" in out
    assert out.strip().splitlines()[-1].startswith("1 seeds, 0 failed")


# --- what the manager workload found ---------------------------------------------------


def test_a_late_snapshot_older_than_the_nodes_own_dump_is_ignored() -> None:
    """Membership seed 71 (faulty network) before ``DumpWriter._refuse_older``: n12, added
    by a snapshot ending at index 12, took entries up to 78 and compacted (its dump to 73,
    its journal 74..78); a late copy of that first snapshot then arrived (a network
    duplicate). pysyncobj renamed it over n12's newer dump and cleared the journal
    (``RaftNode``'s rule for a late snapshot keeps the log only when it holds the
    snapshot's last entry, and n12's no longer did), so n12 went back to index 12, losing
    acknowledged entries: the leader, which had counted n12, acknowledged index 78 as
    synced on 3 replicas when only 2 held it ("n1:9001 acknowledged index 78 (term 5) as
    synced on 3 replicas; only ['n1:9001', 'n9:9009'] hold it on disk"). Raft ignores a
    snapshot older than what the node holds, and so does a node now."""
    result = run_seed(71, "manager", member_change_p=MEMBERSHIP)
    assert result.violation is None, result.trace_text()


def test_the_managers_change_members_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19's item 8 (three quick ``POST /managers`` stopped the managers' group; the
    one-change-at-a-time guard of fc243fe) on the managers' own state: without the guard,
    membership seed 32 of the manager workload acknowledges an entry that a later leader
    replaced (also seeds 72 and 83 of 1-120, none of 1-31); with it, the seed passes."""
    assert run_seed(32, "manager", member_change_p=MEMBERSHIP).violation is None
    monkeypatch.setattr(RaftNode, "start_member_change", changes_without_the_guard)
    violation = run_seed(32, "manager", member_change_p=MEMBERSHIP).violation
    assert violation == "n2:9002 acknowledged index 4 of term 1; term 2 was committed there"
