"""Managers added or removed since the cluster started (dynamic membership). Pure.

The managers a cluster starts with are those of its node files (``--peers``); this registry
holds only the changes since, so a manager restarted with an older file still knows every
member: ``effective`` overlays them on the file's list. The Raft group's membership itself
lives in pysyncobj's log (``RegistryMachine.change_member``); this is where the managers' HTTP
addresses are, for leader hints, ``/cluster`` and the load balancer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from manager.registry.outcome import Outcome


@dataclass(frozen=True, slots=True)
class ManagerEntry:
    manager_id: int
    http_url: str
    raft_address: str
    removed: bool = False


class ManagerRegistry:
    def __init__(self) -> None:
        self._changes: dict[int, ManagerEntry] = {}

    @property
    def changed(self) -> bool:
        """Some manager was added or removed since the cluster started."""
        return bool(self._changes)

    def effective(self, started: Iterable[ManagerEntry]) -> list[ManagerEntry]:
        """The members today: those the cluster started with, then the changes, by id."""
        members = {m.manager_id: m for m in started}
        members.update(self._changes)
        return [members[i] for i in sorted(members) if not members[i].removed]

    def add(self, manager_id: int, http_url: str, raft_address: str) -> Outcome:
        valid = isinstance(manager_id, int) and not isinstance(manager_id, bool)
        if not (valid and manager_id > 0 and isinstance(http_url, str) and http_url):
            return Outcome.INVALID
        if not (isinstance(raft_address, str) and ":" in raft_address):
            return Outcome.INVALID
        entry = ManagerEntry(manager_id, http_url, raft_address)
        known = self._changes.get(manager_id)
        if known == entry:
            return Outcome.UNCHANGED
        if known is not None and known.removed:
            return Outcome.EXISTS  # a removed id is never taken again
        taken = any(
            m.raft_address == raft_address and m.manager_id != manager_id
            for m in self._changes.values()
        )
        if taken:
            return Outcome.ADDRESS_TAKEN
        self._changes[manager_id] = entry
        return Outcome.CREATED

    def remove(self, manager_id: int, http_url: str, raft_address: str) -> Outcome:
        if not isinstance(manager_id, int) or isinstance(manager_id, bool):
            return Outcome.INVALID
        known = self._changes.get(manager_id)
        if known is not None and known.removed:
            return Outcome.UNCHANGED
        self._changes[manager_id] = ManagerEntry(manager_id, http_url, raft_address, True)
        return Outcome.UPDATED
