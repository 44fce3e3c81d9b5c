"""``MemoryMachine``: the in-memory twin of ``RaftMachine``.

One node that always leads and applies every proposal at once, on the proposer's thread.
It goes through the same ``Definition`` as Raft (the same ``encode``, the same replicated
method, the same ``result``), so what it accepts a real group accepts too, and the
component's services run in-process, without sockets or threads of its own.

It stands for a healthy group: every member answers and holds every entry, unless a test
makes some silent (``silent_members``). It records what it was asked (``applied``,
``transfers``) for tests to check.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from protocol.types import RaftRole
from runtime.replication.machine import C, Definition, Entry, R, RaftStatus, S

T = TypeVar("T")
_log = logging.getLogger(__name__)


class MemoryMachine(Generic[S, C, R]):
    def __init__(
        self,
        definition: Definition[S, C, R],
        name: str,
        *,
        address: str | None = None,
        partners: Iterable[str] = (),
    ) -> None:
        self._definition = definition
        self._name = name
        self._address = address
        self._lock = threading.Lock()
        self._state = definition.new_state()
        self._members = set(partners)
        self._entries = 0
        self.applied: list[C] = []
        """The commands applied, in order."""
        self.transfers: list[str | None] = []
        """The leadership transfers asked, in order (``None``: to any member)."""
        self.silent_members = 0
        """Members the twin's leader counts as not answering."""

    @property
    def name(self) -> str:
        return self._name

    def propose(self, command: C, *, synced: bool = True) -> R:
        name, args = self._definition.encode(command, synced)
        method = self._definition.method(name)
        with self._lock:
            self._entries += 1
            self.applied.append(command)
            try:
                value = method.apply(self._state, *args)
            except Exception:  # as the Raft implementation: applied as None
                _log.exception("%s: replicated method %s failed", self._name, name)
                value = None
            entry = Entry(1, self._entries, int(synced))  # it alone synced it
        return self._definition.result(value, entry)

    def read(self, query: Callable[[S], T]) -> T:
        with self._lock:
            return query(self._state)

    def status(self) -> RaftStatus:
        with self._lock:
            entries, partners = self._entries, tuple(sorted(self._members))
        leader = RaftRole.LEADER
        return RaftStatus(leader, self._address, 1, entries, entries, True, partners, entries, 0)

    def leads(self) -> bool:
        return True  # as ``status``: the one member of its group

    def caught_up(self) -> bool:
        return True

    def members(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._members)

    def change_member(self, address: str, *, add: bool) -> None:
        with self._lock:
            if add:
                self._members.add(address)
            else:
                self._members.discard(address)

    def member_holds(self, address: str, index: int) -> bool:
        with self._lock:
            return address in self._members

    def transfer_leadership(self, address: str | None) -> None:
        self.transfers.append(address)  # one node: it keeps leading

    def replicas_answering(self) -> int:
        with self._lock:
            return 1 + len(self._members) - self.silent_members

    def replicas_holding(self, entry: Entry) -> int:
        with self._lock:
            return 1 + len(self._members)

    def close(self) -> None:
        pass

    def discard(self) -> None:
        pass
