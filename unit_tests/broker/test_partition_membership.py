"""Re-replication at the Raft layer, with real pysyncobj nodes in this process: the leader
replaces a dead member by a new one (remove, reset the slot, add) that catches up, a move
re-targeted before it finished drops the abandoned member as well, a live leaving member
(a drain) leaves only after its replacement caught up, so a replication-factor-2 group
keeps its leader, a new leader does not count a dead member as in sync, a restarted member
and a member that installs a snapshot take the newest members."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from broker.partition.commands import Append, ResetReplica
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

    # The move to D: D's replica is started first, then the group takes it.
    with_d = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    d = start(_spec(with_d, slot))
    gone = dead.spec.raft_address
    assert leader.replace_member(_spec(with_d, leader.spec.replica_id), slot, gone, False)
    _wait(lambda: d.read(lambda log: log.end_offset) == 1, "D to catch up")
    assert leader.read(lambda log: log.flushed_offsets[slot]) == 0  # reset for the new one

    # D is lost before the move finished: the move goes to E instead.
    d.destroy()
    with_e = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    leader = _leader(survivors)
    spec_e = _spec(with_e, leader.spec.replica_id)
    e = start(_spec(with_e, slot))
    assert leader.replace_member(spec_e, slot, gone, False)
    leader.propose([Append(((None, "m1"),), 2, None, None)])
    _wait(lambda: e.read(lambda log: log.end_offset) == 2, "E to catch up")
    # The members are exactly the spec's: D was removed (``replace_member`` compares the
    # group's own members); a repeat changes nothing and says so again.
    before = leader.status().commit_index
    assert leader.replace_member(spec_e, slot, gone, False)
    assert leader.status().commit_index == before


def test_a_live_leaving_member_leaves_last_and_the_group_keeps_its_leader(
    start: Callable[[ReplicaSpec], PartitionRaft],
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
        leader.propose([Append(((None, f"m{number}"),), number, None, None)])
    moved = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    new = start(_spec(moved, slot))
    spec = _spec(moved, leader.spec.replica_id)
    address = leaving.spec.raft_address

    def replaced() -> bool:
        leader.propose([Append(((None, "during"),), 99, None, None)])  # writes go on
        return leader.replace_member(spec, slot, address, True)

    _wait(replaced, "the members to be the new spec's")
    assert leader.status().role is RaftRole.LEADER
    assert leader._sync.members() == {new.spec.raft_address}
    end = leader.read(lambda log: log.end_offset)
    _wait(lambda: new.read(lambda log: log.end_offset) == end, "the new member to hold all")
    leader.propose([Append(((None, "after"),), 100, None, None)])  # a commit needs the new one
    assert leader.read(lambda log: log.holders[slot]) == new.spec.raft_address


def test_a_new_replica_that_leads_completes_its_own_move(
    start: Callable[[ReplicaSpec], PartitionRaft],
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
    leader.propose([Append(((None, "m0"),), 1, None, None)])
    moved = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    new = start(_spec(moved, slot))
    address = leaving.spec.raft_address
    # The first steps of the move as the old leader takes them (reset, add), stopped
    # before the live leaving member leaves: that is left to the new replica.
    leader.propose([ResetReplica(slot, new.spec.raft_address)])
    leader._sync.change_member(new.spec.raft_address, add=True, timeout_s=WAIT_S)
    _wait(lambda: _joined(leader, new), "the new replica to hold every entry")
    _wait(lambda: _transfer(leader, new), "the new replica to lead")
    own = _spec(moved, slot)
    _wait(lambda: new.replace_member(own, slot, address, True), "the leaving one to leave")
    assert new._sync.members() == frozenset(own.partners)
    assert new.spec.raft_address not in new._sync.members()
    new.propose([Append(((None, "m1"),), 2, None, None)])  # the group of three commits


def _joined(leader: PartitionRaft, new: PartitionRaft) -> bool:
    """The new replica is a member and holds every committed entry (the live leaving one
    is still in: it leaves last)."""
    commit_index = leader.status().commit_index
    return leader._sync.member_holds(new.spec.raft_address, commit_index)


def test_a_new_leader_counts_only_members_that_answered_it_as_in_sync(
    start: Callable[[ReplicaSpec], PartitionRaft],
) -> None:
    """pysyncobj stamps every member "answered just now" when a node becomes leader: a dead
    member counted as in sync for seconds after an election (a min_insync_replicas = 3
    topic then took writes that reached two replicas)."""
    replicas = tuple(_address(slot) for slot in range(3))
    nodes = [start(_spec(replicas, slot)) for slot in range(3)]
    leader = _leader(nodes)
    leader.propose([Append(((None, "m0"),), 1, None, None)])
    dead = next(n for n in nodes if n is not leader)
    heir = next(n for n in nodes if n is not leader and n is not dead)
    _wait(lambda: leader.replicas_in_sync() == 3, "every member to answer")
    dead.destroy()
    _wait(lambda: heir.read(lambda log: log.end_offset) == 1, "the heir to hold the entry")
    _wait(lambda: _transfer(leader, heir), "the heir to lead")
    assert heir.replicas_in_sync() == 2


def _holds(node: PartitionRaft, end: int) -> bool:
    return node.read(lambda log: log.end_offset) == end


def _record_members_after_snapshots(node: PartitionRaft) -> list[frozenset[str]]:
    """The node's members right after each snapshot from its leader is installed (the
    entries after it, which may add members, have not arrived yet then)."""
    found: list[frozenset[str]] = []
    raft = node._sync
    load = raft._SyncObj__loadDumpFile

    def loading(clearJournal: bool) -> None:  # noqa: N803 (pysyncobj's name)
        load(clearJournal)
        if clearJournal:
            found.append(raft.members())

    raft._SyncObj__loadDumpFile = loading  # type: ignore[method-assign]
    return found


def _transfer(leader: PartitionRaft, heir: PartitionRaft) -> bool:
    leader.transfer_leadership(heir.spec.raft_address)
    return heir.status().role is RaftRole.LEADER


def test_a_restarted_member_counts_votes_over_the_newest_members_in_its_log(
    start: Callable[[ReplicaSpec], PartitionRaft], tmp_path: Path
) -> None:
    """A move is two membership changes. A member restarted right after them, from a dump
    taken before them, took the dump's members plus only the changes up to the commit
    index stored with its term (stale): it counted votes over the members from before the
    move, where it and the removed replica alone were a majority. It must take the newest
    members its log holds, committed or not."""
    replicas = tuple(_address(slot) for slot in range(3))
    nodes = [start(_spec(replicas, slot)) for slot in range(3)]
    leader = _leader(nodes)
    follower, leaving = [n for n in nodes if n is not leader]
    leader.propose([Append(((None, "m0"),), 1, None, None)])
    _wait(lambda: follower.read(lambda log: log.end_offset) == 1, "the follower to hold m0")
    follower._sync.forceLogCompaction()
    dump = tmp_path / follower.spec.raft_address.replace(":", "-") / "raft.dump"
    _wait(dump.is_file, "the follower's dump")
    slot = leaving.spec.replica_id
    moved = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    new = start(_spec(moved, slot))
    spec = _spec(moved, leader.spec.replica_id)
    _wait(lambda: leader.replace_member(spec, slot, leaving.spec.raft_address, True), "the move")
    wanted = {leader.spec.raft_address, new.spec.raft_address}
    _wait(lambda: follower._sync.members() == wanted, "the follower to take both changes")
    for node in (follower, leader, new):
        node._sync.close(WAIT_S)  # its sockets and journal closed before the restart
    restarted = start(_spec(moved, follower.spec.replica_id))
    _wait(lambda: not restarted._sync._SyncObj__needLoadDumpFile, "the dump to be loaded")
    assert restarted._sync.members() == wanted


def test_a_member_that_installs_a_snapshot_moves_old_takes_the_leaders_members(
    start: Callable[[ReplicaSpec], PartitionRaft], tmp_path: Path
) -> None:
    """A leader that joined by a snapshot keeps that snapshot as its dump until it
    compacts, and the members stored in it are of when it was taken: here two moves old,
    without the leader. A new member that took them dropped the leader's connection (found
    by the membership nemesis, seed 101; later it kept the leader, and took a 5 s reconnect
    pause) and refused connections from the members added since, so once leadership moved
    to one of them it followed no one (seed 501). Installing a snapshot takes the sending
    leader's members."""
    replicas = tuple(_address(slot) for slot in range(3))
    nodes = [start(_spec(replicas, slot)) for slot in range(3)]
    a = _leader(nodes)
    b, c = (n for n in nodes if n is not a)
    for number in range(30):  # so the dump ends far past where a new member's log starts
        a.propose([Append(((None, f"m{number}"),), number, None, None)])
    for node in nodes:
        _wait(partial(_holds, node, 30), "every member to hold all")
        node._sync.forceLogCompaction()
        dump = tmp_path / node.spec.raft_address.replace(":", "-") / "raft.dump"
        _wait(dump.is_file, "a dump")
    # D replaces B and catches up from A's dump ({A, B, C}), then leads, keeping that dump.
    d, specs = _move(start, a, b, replicas)
    _wait(lambda: d.read(lambda log: log.end_offset) == 30, "D to catch up")
    _wait(lambda: _transfer(a, d), "D to lead")
    # F replaces A, then E replaces C: both install D's dump, whose members are {A, B, C}.
    f, specs = _move(start, d, a, specs)
    _wait(lambda: f.read(lambda log: log.end_offset) == 30, "F to catch up")
    e_slot = c.spec.replica_id
    with_e = tuple(_address(e_slot) if r.replica_id == e_slot else r for r in specs)
    e = start(_spec(with_e, e_slot))
    installed = _record_members_after_snapshots(e)
    c._sync.close(WAIT_S)
    d.respec(_spec(with_e, d.spec.replica_id))
    spec_e = _spec(with_e, d.spec.replica_id)
    _wait(lambda: d.replace_member(spec_e, e_slot, c.spec.raft_address, False), "E in")
    _wait(lambda: bool(installed), "E to install a snapshot")
    assert installed[0] == {d.spec.raft_address, f.spec.raft_address}
    _wait(lambda: _transfer(d, f), "F to lead")
    f.propose([Append(((None, "last"),), 31, None, None)])
    _wait(lambda: e.read(lambda log: log.end_offset) == 31, "E to catch up from F")


def _move(
    start: Callable[[ReplicaSpec], PartitionRaft],
    leader: PartitionRaft,
    gone: PartitionRaft,
    replicas: tuple[ReplicaAddress, ...],
) -> tuple[PartitionRaft, tuple[ReplicaAddress, ...]]:
    """Stop ``gone`` and have ``leader`` replace it by a new replica in its slot."""
    slot = gone.spec.replica_id
    moved = tuple(_address(slot) if r.replica_id == slot else r for r in replicas)
    new = start(_spec(moved, slot))
    gone._sync.close(WAIT_S)
    spec = _spec(moved, leader.spec.replica_id)
    leader.respec(spec)
    _wait(lambda: leader.replace_member(spec, slot, gone.spec.raft_address, False), "the move")
    return new, moved
