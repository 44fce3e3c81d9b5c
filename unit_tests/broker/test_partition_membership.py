"""Re-replication at the Raft layer, with real pysyncobj nodes in this process: the leader
replaces a dead member by a new one (remove, reset the slot, add) that catches up, and a
move re-targeted before it finished drops the abandoned member as well."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.partition.commands import Append
from broker.partition.raft import PartitionRaft
from protocol.limits import Limits
from protocol.types import BrokerId, PartitionId, RaftRole, ReplicaAddress, ReplicaId, ReplicaSpec
from unit_tests.ports import free_port

WAIT_S = 30.0
LIMITS = Limits()


def _address(slot: int) -> ReplicaAddress:
    return ReplicaAddress(
        ReplicaId(slot), BrokerId(100 + free_port() % 1000), "http://b", f"127.0.0.1:{free_port()}"
    )


def _spec(replicas: tuple[ReplicaAddress, ...], slot: int) -> ReplicaSpec:
    return ReplicaSpec("t", PartitionId(0), ReplicaId(slot), replicas)


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[ReplicaSpec], PartitionRaft]]:
    nodes: list[PartitionRaft] = []

    def make(spec: ReplicaSpec) -> PartitionRaft:
        directory = tmp_path / spec.raft_address.replace(":", "-")
        node = PartitionRaft(spec, str(directory), "secret", LIMITS)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.destroy()


def _leader(nodes: list[PartitionRaft]) -> PartitionRaft:
    found: list[PartitionRaft] = []

    def one_leads() -> bool:
        found[:] = [n for n in nodes if n.status().role is RaftRole.LEADER]
        return len(found) == 1

    _wait(one_leads, "a leader")
    return found[0]


def test_a_dead_member_is_replaced_and_a_re_targeted_move_drops_the_abandoned_one(
    start: Callable[[ReplicaSpec], PartitionRaft],
) -> None:
    replicas = tuple(_address(slot) for slot in range(3))
    nodes = [start(_spec(replicas, slot)) for slot in range(3)]
    leader = _leader(nodes)
    leader.propose([Append(((None, "m0"),), 1, None, None)])
    dead = next(n for n in nodes if n is not leader)
    slot = dead.spec.replica_id
    dead.destroy()
    survivors = [n for n in nodes if n is not dead]

    # The move to D: D's replica is started only once the group has it.
    with_d = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    assert leader.replace_member(_spec(with_d, leader.spec.replica_id), slot)
    d = start(_spec(with_d, slot))
    _wait(lambda: d.read(lambda log: log.end_offset) == 1, "D to catch up")
    assert leader.read(lambda log: log.flushed_offsets[slot]) == 0  # reset for the new one

    # D is lost before the move finished: the move goes to E instead.
    d.destroy()
    with_e = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    leader = _leader(survivors)
    spec_e = _spec(with_e, leader.spec.replica_id)
    assert leader.replace_member(spec_e, slot)
    e = start(_spec(with_e, slot))
    leader.propose([Append(((None, "m1"),), 2, None, None)])
    _wait(lambda: e.read(lambda log: log.end_offset) == 2, "E to catch up")
    # The members are exactly the spec's: D was removed (``replace_member`` compares the
    # group's own members); a repeat changes nothing and says so again.
    before = leader.status().commit_index
    assert leader.replace_member(spec_e, slot)
    assert leader.status().commit_index == before
