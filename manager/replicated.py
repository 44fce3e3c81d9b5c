"""``ReplicatedRegistry``: what the rest of the manager needs from the replicated state, as an
interface, so that only ``manager.raft`` (the pysyncobj adapter, wired in ``manager.app``)
depends on pysyncobj. ``LocalRegistry`` is its in-memory twin for tests: one node that always
leads and applies each command at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from manager.registry.commands import RegistryCommand, command_name, from_wire, to_wire
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RaftStatus:
    role: str
    """``leader``, ``follower`` or ``candidate``."""
    is_leader: bool
    leader_raft_address: str | None
    term: int
    commit_index: int
    last_applied: int
    has_quorum: bool
    uptime_s: int


class ReplicatedRegistry(Protocol):
    """``propose`` blocks until the command is applied on this node, or raises
    ``RaftQError`` (503). The commands are ``manager.registry.commands``."""

    def read(self, query: Callable[[ManagerState], T]) -> T: ...
    def is_leader(self) -> bool: ...
    def leader_raft_address(self) -> str | None: ...
    def status(self) -> RaftStatus: ...
    def propose(self, command: RegistryCommand) -> Outcome: ...
    def members(self) -> frozenset[str]:
        """The Raft addresses of the other members of the managers' group, as this node's
        log has them."""

    def change_member(self, raft_address: str, *, add: bool) -> None:
        """On the leader: add or remove one member and wait until that is committed;
        ``RaftQError`` otherwise (NOT_LEADER, nothing done, while a change is open:
        ``RaftNode.change_member``)."""

    def transfer_leadership(self, raft_address: str | None) -> None:
        """Ask this node, if it leads, to hand leadership to that member, or with ``None``
        to the connected member that holds the most (asynchronous)."""

    def members_answering(self) -> int:
        """On the leader: the members, itself included, that answered it lately."""


class LocalRegistry:
    """In-memory twin of ``ManagerRaft``: a single node that always leads. Goes through the
    same wire form as Raft, so what it accepts a real group accepts too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = ManagerState()
        self._members: set[str] = set()
        self.transferred_to: str | None = None
        self.transfer_asked = False
        self.silent_members = 0
        """Members the twin's leader counts as not answering (tests)."""
        """Where the last leadership transfer was asked to go (tests)."""
        self.commands: list[str] = []
        """Names of the commands applied, in order (tests check what was proposed)."""

    def propose(self, command: RegistryCommand) -> Outcome:
        with self._lock:
            self.commands.append(command_name(command))
            return self.state.apply(from_wire(to_wire(command)))

    def read(self, query: Callable[[ManagerState], T]) -> T:
        with self._lock:
            return query(self.state)

    def is_leader(self) -> bool:
        return True

    def leader_raft_address(self) -> str | None:
        return None

    def status(self) -> RaftStatus:
        applied = len(self.commands)
        return RaftStatus("leader", True, None, 1, applied, applied, True, 0)

    def members(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._members)

    def change_member(self, raft_address: str, *, add: bool) -> None:
        with self._lock:
            if add:
                self._members.add(raft_address)
            else:
                self._members.discard(raft_address)

    def transfer_leadership(self, raft_address: str | None) -> None:
        self.transferred_to = raft_address
        self.transfer_asked = True

    def members_answering(self) -> int:
        with self._lock:
            return 1 + len(self._members) - self.silent_members
