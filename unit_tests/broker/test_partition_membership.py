"""Re-replication at the Raft layer, with real pysyncobj nodes in this process: the leader
replaces a dead member by a new one (remove, reset the slot, add) that catches up, a move
re-targeted before it finished drops the abandoned member as well, a live leaving member
(a drain) leaves only after its replacement caught up, so a replication-factor-2 group
keeps its leader, and a new leader does not count a dead member as in sync. (A restarted
member and a member that installs a snapshot take the newest members:
``unit_tests/runtime/replication/raft/test_membership.py``.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.partition.commands import Append, Command, MarkFlushed, ResetReplica
from broker.partition.raft import PartitionMachine, partition_raft
from broker.partition.replica import PartitionReplica
from protocol.limits import Limits
from protocol.types import (
    BrokerId,
    Offset,
    PartitionId,
    RaftRole,
    ReplicaAddress,
    ReplicaId,
    ReplicaSpec,
)
from unit_tests.ports import free_port
from unit_tests.runtime.replication.waits import WAIT_S, one_leader, wait_for

LIMITS = Limits()


@dataclass
class Node:
    """One replica: its spec and its partition's Raft machine."""

    spec: ReplicaSpec
    machine: PartitionMachine

    def propose(self, command: Command) -> None:
        self.machine.propose([command])

    def end_offset(self) -> int:
        return self.machine.read(lambda log: log.end_offset)

    def leads(self) -> bool:
        return self.machine.status().role is RaftRole.LEADER

    def replace_member(
        self, spec: ReplicaSpec, slot: ReplicaId, leaving: str, leaving_alive: bool
    ) -> bool:
        """As the broker takes it: the replica keeps the new spec, then changes members."""
        self.spec = spec
        replica = PartitionReplica(spec, self.machine, LIMITS)
        return replica.replace_member(slot, leaving, leaving_alive)


def _address(slot: int) -> ReplicaAddress:
    return ReplicaAddress(
        ReplicaId(slot), BrokerId(100 + free_port() % 1000), "http://b", f"127.0.0.1:{free_port()}"
    )


def _spec(replicas: tuple[ReplicaAddress, ...], slot: int) -> ReplicaSpec:
    return ReplicaSpec("t", PartitionId(0), ReplicaId(slot), replicas)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[ReplicaSpec], Node]]:
    nodes: list[Node] = []

    def make(spec: ReplicaSpec) -> Node:
        directory = tmp_path / spec.raft_address.replace(":", "-")
        node = Node(spec, partition_raft(spec, str(directory), "secret", LIMITS))
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.machine.close()


def _leader(nodes: list[Node]) -> Node:
    return one_leader(nodes, Node.leads)


def test_a_dead_member_is_replaced_and_a_re_targeted_move_drops_the_abandoned_one(
    start: Callable[[ReplicaSpec], Node],
) -> None:
    replicas = tuple(_address(slot) for slot in range(3))
    nodes = [start(_spec(replicas, slot)) for slot in range(3)]
    leader = _leader(nodes)
    leader.propose(Append(((None, "m0"),), 1, None, None))
    dead = next(n for n in nodes if n is not leader)
    slot = dead.spec.replica_id
    dead.machine.close()
    survivors = [n for n in nodes if n is not dead]

    # The move to D: D's replica is started first, then the group takes it.
    with_d = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    d = start(_spec(with_d, slot))
    gone = dead.spec.raft_address
    assert leader.replace_member(_spec(with_d, leader.spec.replica_id), slot, gone, False)
    wait_for(lambda: d.end_offset() == 1, "D to catch up")
    # The slot was reset for the new one.
    assert leader.machine.read(lambda log: log.flushed_offsets[slot]) == 0

    # D is lost before the move finished: the move goes to E instead.
    d.machine.close()
    with_e = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    leader = _leader(survivors)
    spec_e = _spec(with_e, leader.spec.replica_id)
    e = start(_spec(with_e, slot))
    assert leader.replace_member(spec_e, slot, gone, False)
    leader.propose(Append(((None, "m1"),), 2, None, None))
    wait_for(lambda: e.end_offset() == 2, "E to catch up")
    # The members are exactly the spec's: D was removed (``replace_member`` compares the
    # group's own members); a repeat changes nothing and says so again.
    before = leader.machine.status().commit_index
    assert leader.replace_member(spec_e, slot, gone, False)
    assert leader.machine.status().commit_index == before


def test_a_live_leaving_member_leaves_last_and_the_group_keeps_its_leader(
    start: Callable[[ReplicaSpec], Node],
) -> None:
    """Replication factor 2, a drain of the follower: removing it first would leave the
    leader alone in a two-member group with the new member not yet in it (the old order
    lost the leader for good). Now the new member joins first, the leaving one leaves once
    the new one holds every committed entry, and writes are taken throughout."""
    replicas = tuple(_address(slot) for slot in range(2))
    nodes = [start(_spec(replicas, slot)) for slot in range(2)]
    leader = _leader(nodes)
    leaving = next(n for n in nodes if n is not leader)
    slot = leaving.spec.replica_id
    for number in range(20):
        leader.propose(Append(((None, f"m{number}"),), number, None, None))
    moved = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    new = start(_spec(moved, slot))
    spec = _spec(moved, leader.spec.replica_id)
    address = leaving.spec.raft_address

    def replaced() -> bool:
        leader.propose(Append(((None, "during"),), 99, None, None))  # writes go on
        return leader.replace_member(spec, slot, address, True)

    wait_for(replaced, "the members to be the new spec's")
    assert leader.machine.status().role is RaftRole.LEADER
    assert leader.machine.members() == {new.spec.raft_address}
    end = leader.end_offset()
    wait_for(lambda: new.end_offset() == end, "the new member to hold all")
    leader.propose(Append(((None, "after"),), 100, None, None))  # a commit needs the new one
    assert leader.machine.read(lambda log: log.holders[slot]) == new.spec.raft_address


def test_a_live_leaving_member_stays_until_its_replacement_copied_what_left_memory(
    start: Callable[[ReplicaSpec], Node],
) -> None:
    """Messages every replica flushed left memory (evicted); the new replica must copy them
    from a peer's database, and the leaving one may be the only live peer holding them
    (simulator, moves workload: unsynced seed 5). So the leaving member stays a member
    (and a peer to copy from) until the new replica's flush mark reaches the evicted
    offset, even though it holds every committed entry already."""
    replicas = tuple(_address(slot) for slot in range(3))
    nodes = [start(_spec(replicas, slot)) for slot in range(3)]
    leader = _leader(nodes)
    for number in range(10):
        leader.propose(Append(((None, f"m{number}"),), number, None, None))
    for node in nodes:  # every replica flushed all ten: they leave memory
        leader.propose(
            MarkFlushed(node.spec.replica_id, Offset(10), Offset(0), node.spec.raft_address)
        )
    assert leader.machine.read(lambda log: log.evicted_offset) == 10
    leaving = next(n for n in nodes if n is not leader)
    slot = leaving.spec.replica_id
    moved = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    new = start(_spec(moved, slot))
    spec = _spec(moved, leader.spec.replica_id)
    address = leaving.spec.raft_address

    def step() -> bool:
        return leader.replace_member(spec, slot, address, True)

    def joined_but_kept() -> bool:
        assert not step(), "the leaving member left before its replacement copied"
        return _joined(leader, new)

    wait_for(joined_but_kept, "the new member to hold every entry")
    assert not step()  # still lagging: the leaving one stays
    assert address in leader.machine.members()
    leader.propose(MarkFlushed(slot, Offset(10), Offset(0), new.spec.raft_address))
    wait_for(step, "the leaving member to leave")
    assert address not in leader.machine.members()


def test_a_new_replica_that_leads_completes_its_own_move(
    start: Callable[[ReplicaSpec], Node],
) -> None:
    """Once a member, the new replica may lead (elected, or handed the lead) before the
    move is done; asked with its own spec, it removes the live leaving member and never
    proposes to add itself (its members name the others only). The manager skipped it
    before, and such a move never finished (long tier, membership seed 61637)."""
    replicas = tuple(_address(slot) for slot in range(3))
    nodes = [start(_spec(replicas, slot)) for slot in range(3)]
    leader = _leader(nodes)
    leaving = next(n for n in nodes if n is not leader)
    slot = leaving.spec.replica_id
    leader.propose(Append(((None, "m0"),), 1, None, None))
    moved = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    new = start(_spec(moved, slot))
    address = leaving.spec.raft_address
    # The first steps of the move as the old leader takes them (reset, add), stopped
    # before the live leaving member leaves: that is left to the new replica.
    leader.propose(ResetReplica(slot, new.spec.raft_address))
    leader.machine.change_member(new.spec.raft_address, add=True)
    wait_for(lambda: _joined(leader, new), "the new replica to hold every entry")
    wait_for(lambda: _transfer(leader, new), "the new replica to lead")
    own = _spec(moved, slot)
    wait_for(lambda: new.replace_member(own, slot, address, True), "the leaving one to leave")
    assert new.machine.members() == frozenset(own.partners)
    assert new.spec.raft_address not in new.machine.members()
    new.propose(Append(((None, "m1"),), 2, None, None))  # the group of three commits


def _joined(leader: Node, new: Node) -> bool:
    """The new replica is a member and holds every committed entry (the live leaving one
    is still in: it leaves last)."""
    commit_index = leader.machine.status().commit_index
    return leader.machine.member_holds(new.spec.raft_address, commit_index)


def test_a_new_leader_counts_only_members_that_answered_it_as_in_sync(
    start: Callable[[ReplicaSpec], Node],
) -> None:
    """pysyncobj stamps every member "answered just now" when a node becomes leader: a dead
    member counted as in sync for seconds after an election (a min_insync_replicas = 3
    topic then took writes that reached two replicas)."""
    replicas = tuple(_address(slot) for slot in range(3))
    nodes = [start(_spec(replicas, slot)) for slot in range(3)]
    leader = _settled_leader(nodes)
    leader.propose(Append(((None, "m0"),), 1, None, None))
    dead = next(n for n in nodes if n is not leader)
    heir = next(n for n in nodes if n is not leader and n is not dead)
    dead.machine.close()
    wait_for(lambda: heir.end_offset() == 1, "the heir to hold the entry")
    wait_for(lambda: _transfer(leader, heir), "the heir to lead")
    deadline = time.monotonic() + WAIT_S
    while (answering := heir.machine.replicas_answering()) != 2:  # once the old one answers
        assert answering < 2, "the dead member counted as in sync"
        assert time.monotonic() < deadline, "the old leader never answered the new one"
        time.sleep(0.01)


def _settled_leader(nodes: list[Node]) -> Node:
    """The leader once every member answers it. A group's start may take an election or
    two more: pysyncobj retries a connection refused at the start (the peer not listening
    yet) only after 5 s, and a member that hears from no leader meanwhile stands itself."""
    found: list[Node] = []

    def settled() -> bool:
        found[:] = [n for n in nodes if n.machine.replicas_answering() == len(nodes)]
        return len(found) == 1

    wait_for(settled, "a leader every member answers")
    return found[0]


def _transfer(leader: Node, heir: Node) -> bool:
    leader.machine.transfer_leadership(heir.spec.raft_address)
    return heir.leads()
