"""Members after a restart and after a snapshot, with real pysyncobj nodes in this process
(``RaftNode``'s fixes): a restarted member counts votes over the newest members its log
holds, and a member that installs a snapshot takes the sending leader's members."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from protocol.errors import RaftQError
from protocol.limits import Limits
from protocol.types import RaftRole
from runtime.replication.machine import Entry
from runtime.replication.raft.machine import RaftConfig, RaftMachine
from unit_tests.ports import free_port
from unit_tests.runtime.replication.ledger import LEDGER, Ledger
from unit_tests.runtime.replication.waits import WAIT_S, one_leader, wait_for

LIMITS = Limits()


@dataclass
class Node:
    address: str
    directory: Path
    machine: RaftMachine[Ledger, int, tuple[object, Entry]]

    def count(self) -> int:
        return self.machine.read(lambda ledger: len(ledger.values))

    def leads(self) -> bool:
        return self.machine.status().role is RaftRole.LEADER


Start = Callable[[str, Sequence[str]], Node]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    nodes: list[Node] = []

    def make(address: str, partners: Sequence[str]) -> Node:
        directory = tmp_path / address.replace(":", "-")
        config = RaftConfig("ledger", address, tuple(partners), str(directory), "s", LIMITS)
        nodes.append(Node(address, directory, RaftMachine(LEDGER, config)))
        return nodes[-1]

    yield make
    for node in nodes:
        node.machine.close()


def _group(start: Start, size: int) -> list[Node]:
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(size)]
    return [start(a, [p for p in addresses if p != a]) for a in addresses]


def _leader(nodes: list[Node]) -> Node:
    return one_leader(nodes, Node.leads)


def _change(leader: Node, address: str, *, add: bool) -> None:
    """One membership change, repeated while the leader refuses it (the previous change,
    or its own first entry, not yet committed)."""

    def changed() -> bool:
        try:
            leader.machine.change_member(address, add=add)
        except RaftQError:
            return False
        return True

    wait_for(changed, f"{'adding' if add else 'removing'} {address}")


def _counts(node: Node, count: int) -> bool:
    return node.count() == count


def _dump(node: Node) -> Path:
    node.machine.compact()
    dump = node.directory / "raft.dump"
    wait_for(dump.is_file, f"{node.address}'s dump")
    return dump


def _holds_all(leader: Node, member: Node) -> bool:
    return leader.machine.member_holds(member.address, leader.machine.status().commit_index)


def _transfer(group: list[Node], heir: Node) -> bool:
    """Whoever of ``group`` leads now hands leadership to ``heir`` (an election on a loaded
    machine may have moved it since the test last looked: CI saw the old leader asked in
    vain for 30 s)."""
    for node in group:
        if node is not heir and node.leads():
            node.machine.transfer_leadership(heir.address)
    return heir.leads()


def test_a_restarted_member_counts_votes_over_the_newest_members_in_its_log(
    start: Start,
) -> None:
    """A move is two membership changes. A member restarted right after them, from a dump
    taken before them, took the dump's members plus only the changes up to the commit
    index stored with its term (stale): it counted votes over the members from before the
    move, where it and the removed replica alone were a majority. It must take the newest
    members its log holds, committed or not."""
    nodes = _group(start, 3)
    leader = _leader(nodes)
    follower, leaving = [n for n in nodes if n is not leader]
    leader.machine.propose(1)
    wait_for(lambda: follower.count() == 1, "the follower to hold the entry")
    _dump(follower)
    new = start(f"127.0.0.1:{free_port()}", [leader.address, follower.address])
    _change(leader, new.address, add=True)
    wait_for(lambda: _holds_all(leader, new), "the new member to catch up")
    _change(leader, leaving.address, add=False)  # a live leaving member leaves last
    wanted = {leader.address, new.address}
    wait_for(lambda: follower.machine.members() == wanted, "the follower to take both changes")
    for node in (follower, leader, new):
        node.machine.stop(WAIT_S)  # its sockets and journal closed before the restart
    restarted = start(follower.address, sorted(wanted))
    raft = restarted.machine._node
    wait_for(lambda: not raft._SyncObj__needLoadDumpFile, "the dump to be loaded")
    assert restarted.machine.members() == wanted


def _record_members_after_snapshots(node: Node) -> list[frozenset[str]]:
    """The node's members right after each snapshot from its leader is installed (the
    entries after it, which may add members, have not arrived yet then)."""
    found: list[frozenset[str]] = []
    raft = node.machine._node
    load = raft._SyncObj__loadDumpFile

    def loading(clearJournal: bool) -> None:  # noqa: N803 (pysyncobj's name)
        load(clearJournal)
        if clearJournal:
            found.append(raft.members())

    raft._SyncObj__loadDumpFile = loading  # type: ignore[method-assign]
    return found


def _move(start: Start, leader: Node, gone: Node, members: list[Node]) -> tuple[Node, list[Node]]:
    """Stop ``gone`` and have ``leader`` replace it by a new member (a dead member is
    removed first, then the new one added)."""
    stay = [n for n in members if n is not gone]
    new = start(f"127.0.0.1:{free_port()}", [n.address for n in stay])
    gone.machine.stop(WAIT_S)
    _change(leader, gone.address, add=False)
    _change(leader, new.address, add=True)
    return new, [*stay, new]


def test_a_member_that_installs_a_snapshot_moves_old_takes_the_leaders_members(
    start: Start,
) -> None:
    """A leader that joined by a snapshot keeps that snapshot as its dump until it
    compacts, and the members stored in it are of when it was taken: here two moves old,
    without the leader. A new member that took them dropped the leader's connection (found
    by the membership nemesis, seed 101; later it kept the leader, and took a 5 s reconnect
    pause) and refused connections from the members added since, so once leadership moved
    to one of them it followed no one (seed 501). Installing a snapshot takes the sending
    leader's members."""
    nodes = _group(start, 3)
    a = _leader(nodes)
    b, c = (n for n in nodes if n is not a)
    for number in range(30):  # so the dump ends far past where a new member's log starts
        a.machine.propose(number)
    for node in nodes:
        wait_for(partial(_counts, node, 30), "every member to hold all")
        _dump(node)
    # D replaces B and catches up from A's dump ({A, B, C}), then leads, keeping that dump.
    d, members = _move(start, a, b, nodes)
    wait_for(lambda: d.count() == 30, "D to catch up")
    wait_for(lambda: _transfer(members, d), "D to lead")
    # F replaces A, then E replaces C: both install D's dump, whose members are {A, B, C}.
    f, members = _move(start, d, a, members)
    wait_for(lambda: f.count() == 30, "F to catch up")
    e = start(f"127.0.0.1:{free_port()}", [d.address, f.address])
    installed = _record_members_after_snapshots(e)
    c.machine.stop(WAIT_S)
    _change(d, c.address, add=False)
    _change(d, e.address, add=True)
    wait_for(lambda: bool(installed), "E to install a snapshot")
    assert installed[0] == {d.address, f.address}
    wait_for(lambda: _transfer([d, e, f], f), "F to lead")
    f.machine.propose(31)
    wait_for(lambda: e.count() == 31, "E to catch up from F")
