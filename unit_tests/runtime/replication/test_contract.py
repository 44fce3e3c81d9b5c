"""The ``ReplicatedMachine`` contract, run against the in-memory twin and the pysyncobj
implementation alike (a group of one real node, and a second one for membership), over the
same ``Definition`` (``ledger.py``). What the twin promises here, Raft keeps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from protocol.errors import RaftQError
from protocol.limits import Limits
from protocol.types import RaftRole
from runtime.replication.machine import Entry, ReplicatedMachine
from runtime.replication.memory import MemoryMachine
from runtime.replication.raft.machine import RaftConfig, RaftMachine
from unit_tests.ports import free_port
from unit_tests.runtime.replication.ledger import LEDGER, Ledger
from unit_tests.runtime.replication.waits import wait_for

Machine = ReplicatedMachine[Ledger, int, tuple[object, Entry]]


class Group(Protocol):
    """A group of one node, and what the contract needs around it."""

    address: str

    def leader(self) -> Machine: ...

    def spare(self) -> str:
        """The address of a node that may join the group (it runs, if the group needs it)."""

    def again(self) -> Machine:
        """A node on the leader's files, after ``discard``."""


class TwinGroup:
    address = "twin:1"

    def __init__(self) -> None:
        self._machine = MemoryMachine(LEDGER, "ledger", address=self.address)

    def leader(self) -> Machine:
        return self._machine

    def spare(self) -> str:
        return f"twin:{free_port()}"

    def again(self) -> Machine:
        self._machine = MemoryMachine(LEDGER, "ledger", address=self.address)
        return self._machine


class RaftGroup:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self.address = f"127.0.0.1:{free_port()}"
        self.machines: list[RaftMachine[Ledger, int, tuple[object, Entry]]] = []
        self._machine = self._start(self.address, ())

    def _start(
        self, address: str, partners: tuple[str, ...]
    ) -> RaftMachine[Ledger, int, tuple[object, Entry]]:
        directory = self._directory / address.replace(":", "-")
        config = RaftConfig("ledger", address, partners, str(directory), "s", Limits())
        self.machines.append(RaftMachine(LEDGER, config))
        return self.machines[-1]

    def leader(self) -> Machine:
        wait_for(self._machine.caught_up, "the node to elect itself and apply its first entry")
        return self._machine

    def spare(self) -> str:
        address = f"127.0.0.1:{free_port()}"
        self._start(address, (self.address,))
        return address

    def again(self) -> Machine:
        self._machine = self._start(self.address, ())
        return self.leader()


@pytest.fixture(params=["twin", "raft"])
def group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Group]:
    if request.param == "twin":
        yield TwinGroup()
        return
    raft = RaftGroup(tmp_path)
    yield raft
    for machine in raft.machines:
        machine.close()


def test_a_proposal_is_applied_here_and_says_where_it_landed(group: Group) -> None:
    machine = group.leader()
    count, first = machine.propose(5)
    assert count == 1 and first.term >= 1 and first.index >= 1 and first.replicas_synced == 1
    count, second = machine.propose(6)
    assert count == 2 and (second.term, second.index) == (first.term, first.index + 1)
    assert machine.read(lambda ledger: list(ledger.values)) == [5, 6]
    assert machine.status().commit_index >= second.index


def test_an_unsynced_proposal_says_no_replica_synced_it(group: Group) -> None:
    machine = group.leader()
    count, entry = machine.propose(7, synced=False)
    assert count == 1 and entry.replicas_synced == 0
    _, synced = machine.propose(8)
    assert synced.replicas_synced == 1 and synced.index == entry.index + 1


def test_an_apply_that_raises_applies_as_none_and_the_group_goes_on(group: Group) -> None:
    machine = group.leader()
    value, failed = machine.propose(-1)
    assert value is None
    count, entry = machine.propose(9)
    assert count == 1 and entry.index == failed.index + 1


def test_a_read_answers_from_the_applied_state(group: Group) -> None:
    machine = group.leader()
    for value in (1, 2, 3):
        machine.propose(value)
    assert machine.read(lambda ledger: sum(ledger.values)) == 6


def test_a_node_alone_leads_is_caught_up_and_is_every_replica(group: Group) -> None:
    machine = group.leader()
    _, entry = machine.propose(1)
    status = machine.status()
    assert (status.role, status.leader, status.has_quorum) == (RaftRole.LEADER, group.address, True)
    assert status.partners == () and status.last_applied >= entry.index
    assert machine.caught_up()
    assert machine.members() == frozenset()
    assert machine.replicas_answering() == 1 and machine.replicas_holding(entry) == 1


def test_an_added_member_is_listed_holds_the_log_and_leaves_when_removed(group: Group) -> None:
    machine = group.leader()
    _, entry = machine.propose(1)
    spare = group.spare()
    wait_for(lambda: _changed(machine, spare, add=True), "the member to join")
    assert machine.members() == {spare}
    assert machine.status().partners == (spare,)
    wait_for(lambda: machine.member_holds(spare, entry.index), "the new member to hold the log")
    wait_for(lambda: _changed(machine, spare, add=False), "the member to leave")
    assert machine.members() == frozenset()
    assert machine.propose(2)[0] == 2  # alone again, it commits alone


def _changed(machine: Machine, address: str, *, add: bool) -> bool:
    """One change, repeated until it is committed: refused (nothing done) while another is
    open, or timed out while the new member is not connected yet (pysyncobj retries a
    refused connection only after 5 s), in which case the change stays open and commits."""
    if (address in machine.members()) is add:
        return True  # a repeat after a timeout: the change committed meanwhile
    try:
        machine.change_member(address, add=add)
    except RaftQError:
        return False
    return True


def test_a_transfer_with_nobody_to_take_over_leaves_the_leader_leading(group: Group) -> None:
    machine = group.leader()
    machine.transfer_leadership(None)
    machine.transfer_leadership("127.0.0.1:1")  # not a member: refused
    count, _ = machine.propose(1)
    assert count == 1 and machine.status().role is RaftRole.LEADER


def test_a_discarded_node_starts_again_with_nothing(group: Group) -> None:
    machine = group.leader()
    machine.propose(1)
    machine.discard()
    again = group.again()
    assert again.read(lambda ledger: list(ledger.values)) == []
    assert again.propose(2)[0] == 1
