"""A replicated state machine: what a component supplies, and what it gets back.

A component (a partition, the managers' registry) supplies a ``Definition``: its pure state,
how a command travels (``encode``: which replicated method, with which plain arguments), the
frozen table of every replicated method its journals may name, and what an applied value
means to the proposer (with where it landed). It gets a ``ReplicatedMachine``: propose a
command and wait until it is applied here, read the applied state, and ask the group about
itself (status, caught up, members, leadership, replicas answering). Two implementations:
``RaftMachine`` (``runtime.replication.raft``, pysyncobj) and ``MemoryMachine``
(``runtime.replication.memory``, its in-memory twin); one contract test suite runs against
both.

Callers never take a lock or hold the state: ``read`` runs a query on it under the
implementation's lock and returns the query's (copied, plain) answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from protocol.types import RaftRole

S = TypeVar("S")
C = TypeVar("C")
R = TypeVar("R")
T = TypeVar("T")
S_co = TypeVar("S_co", covariant=True)
C_contra = TypeVar("C_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True, slots=True)
class ReplicatedMethod:
    """One replicated method as a journal names it: the table of them is a wire protocol.

    pysyncobj numbers a group's replicated methods by sorted ``(ver, name + "_v" + ver)`` and
    an entry holds the number, not the name: adding, removing or renaming a method at a
    version renumbers the others and breaks every journal written before. A new command is a
    new method at the next version (once every node runs it), or one whose name sorts after
    every other; an old one stays, unchanged, so old journals replay."""

    name: str
    apply: Callable[..., object]
    """``apply(state, *args, **kwargs)``, on the applying thread, under the state's lock.
    Total: the implementations log an exception and apply it as ``None`` (one escaping a
    pysyncobj apply wedges the group for good), but the state may be left half changed."""
    synced: bool = True
    """False: a journal appends its entries without syncing them (``replicated``
    durability); the next synced entry, or any other sync, covers them."""
    version: int = 0


def method_numbers(methods: tuple[ReplicatedMethod, ...]) -> dict[str, int]:
    """The number each method of a table has in a journal entry: pysyncobj's order, by
    sorted ``(version, name_vN)`` (checked against pysyncobj by the package's tests)."""
    ordered = sorted(methods, key=lambda m: (m.version, f"{m.name}_v{m.version}"))
    return {method.name: number for number, method in enumerate(ordered)}


@dataclass(frozen=True, slots=True)
class Definition(Generic[S, C, R]):
    """What a component supplies: everything about its replicated state but how it is
    replicated."""

    new_state: Callable[[], S]
    state_attribute: str
    """The name a full dump stores the state under (part of the dump format)."""
    methods: tuple[ReplicatedMethod, ...]
    encode: Callable[[C, bool], tuple[str, tuple[object, ...]]]
    """``encode(command, synced)``: the method that carries it and its plain arguments."""
    result: Callable[[object, Entry], R]
    """What an applied value, and the entry that carried it, mean to its proposer (may raise
    ``RaftQError``)."""
    freeze: Callable[[S], object] = lambda state: state
    """The state as a snapshot takes it, on the applying thread under the lock: the state
    itself (pickled there), or a ``FrozenState`` pickled later on a thread of its own."""

    def method(self, name: str) -> ReplicatedMethod:
        for method in self.methods:
            if method.name == name:
                return method
        raise KeyError(f"no replicated method {name!r}")


class FrozenState:
    """A snapshot value that is already an immutable copy of the state it stands for: the
    full dump pickles it on a thread of its own, as it is (``Definition.freeze``)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """Where a proposed command landed, for an acknowledgement: its Raft term and index, and
    how many replicas were known to hold it on disk when it was applied here (a majority of
    the group as it was created, or more as the leader knew; 0 for an entry proposed
    unsynced: ``replicated`` durability)."""

    term: int
    index: int
    replicas_synced: int


@dataclass(frozen=True, slots=True)
class RaftStatus:
    """One node's view of its group."""

    role: RaftRole
    leader: str | None
    """Raft address of the group's leader, when known."""
    term: int
    commit_index: int
    last_applied: int
    has_quorum: bool
    partners: tuple[str, ...]
    """The other members' Raft addresses, sorted, as this node's log has them."""
    log_entries: int
    """Entries the Raft log holds in memory (a compaction drops those the dump holds)."""
    uptime_s: int

    def to_json(self) -> dict[str, object]:
        """A replica's Raft status as a broker's ``/raft_status`` and ``/partitions`` show it."""
        return {
            "role": self.role.value,
            "leader": self.leader,
            "term": self.term,
            "commit_index": self.commit_index,
            "last_applied": self.last_applied,
            "has_quorum": self.has_quorum,
            "partners": list(self.partners),
            "log_len": self.log_entries,
        }


class ReplicatedMachine(Protocol[S_co, C_contra, R_co]):
    """One node of a replicated state machine's group."""

    @property
    def name(self) -> str:
        """Names the group in error messages (a partition replica, the managers)."""

    def propose(self, command: C_contra, *, synced: bool = True) -> R_co:
        """Commit ``command`` as one entry and wait until it is applied here: what it
        applied as (``Definition.result``). ``synced=False``: the replicas need not sync the
        entry before counting it. Raises ``RaftQError``: a code that proves nothing was
        done (NO_LEADER, NOT_LEADER, BACKPRESSURE) or COMMIT_TIMEOUT (it may still apply)."""

    def read(self, query: Callable[[S_co], T]) -> T:
        """``query`` run on the applied state, atomically with respect to apply."""

    def status(self) -> RaftStatus: ...

    def leads(self) -> bool:
        """This node is its group's leader (``status().role is LEADER``) without building
        the whole status: the managers ask it of every request they serve."""

    def caught_up(self) -> bool:
        """This node has applied an entry of its current term, so its state holds every
        committed entry: reads of it are not stale (a leader that is not caught up yet may
        hold a state older than what its group committed)."""

    def members(self) -> frozenset[str]:
        """The other members' Raft addresses as this node's log has them (on the leader: the
        newest configuration, committed or not)."""

    def change_member(self, address: str, *, add: bool) -> None:
        """On the leader: add or remove one member and wait until that is committed.
        ``RaftQError`` otherwise: NOT_LEADER (nothing done) while a change it proposed is
        still open or before it has applied an entry of its term, else as ``propose``."""

    def member_holds(self, address: str, index: int) -> bool:
        """On the leader: the member at ``address`` acknowledged the log up to ``index``.
        False elsewhere."""

    def transfer_leadership(self, address: str | None) -> None:
        """Ask this node, if it leads, to hand leadership to the member at ``address``
        (Raft's TimeoutNow), or with ``None`` to the connected member that holds the most.
        Best effort and asynchronous: refused unless that member has every entry; the new
        leader shows in ``status``."""

    def replicas_answering(self) -> int:
        """On the leader: the replicas, itself included, that answered an append of its
        term lately (Kafka's in-sync replicas); 0 on a follower."""

    def replicas_holding(self, entry: Entry) -> int:
        """On the leader of ``entry``'s term: the replicas, itself included, known to hold
        the log up to ``entry``; 0 elsewhere."""

    def close(self) -> None:
        """Leave the group (the files stay: a restart rejoins it)."""

    def discard(self) -> None:
        """``close``, then delete this node's Raft files: it is no longer a member."""
