"""What must hold after every step of a simulated run, each stated once, and checked by
``Invariants`` against what the nodes and the simulated disk show.

- **One leader per term**: no two nodes lead in the same term.
- **Committed entries never change**: every node's entry at an index up to its commit index
  is the one every other node had there (term and bytes), and an acknowledged entry is
  the one the group committed at its index. At the end of a run the leader holds every
  acknowledged entry (none lost).
- **Equal states at equal indexes**: two replicas that have applied up to the same index
  hold equal states (the workload's fingerprint).
- **An acknowledgement's promise**: an acknowledged synced entry says ``replicas_synced``
  replicas hold it on disk; at that moment at least that many nodes' durable journals (what
  a power cut leaves, ``SimDisk``) hold it, and ``replicas_synced`` is at least the run's
  ``min_insync_replicas``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from dataclasses import dataclass, field

from pysyncobj.journal import FIRST_RECORD_OFFSET, LAST_RECORD_OFFSET_OFFSET


class InvariantError(Exception):
    """A check failed: the message says which and where."""


_PLAIN = frozenset({str, bytes, int, float, bool, type(None)})


def canonical(value: object, depth: int = 0) -> object:
    """``value`` as nested tuples of plain values, equal for equal states whatever their
    objects' identities (a replica restored from a dump shares no object with one that
    applied). Dicts keep their order: a least-recently-used order is state too."""
    if depth > 50:
        raise ValueError("state nested too deep to compare")
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if isinstance(value, dict):
        return (
            "dict",
            tuple((canonical(k, depth + 1), canonical(v, depth + 1)) for k, v in value.items()),
        )
    if isinstance(value, list | tuple):
        text = repr(value)
        if "<" not in text and "{" not in text:  # plain values only (most of a state)
            return text
        return ("seq", tuple(canonical(item, depth + 1) for item in value))
    if isinstance(value, set | frozenset):
        return ("set", tuple(sorted(repr(canonical(item, depth + 1)) for item in value)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (
            type(value).__name__,
            tuple(canonical(getattr(value, f.name), depth + 1) for f in fields),
        )
    attributes = getattr(value, "__dict__", None)
    if attributes is not None:
        return (type(value).__name__, canonical(attributes, depth + 1))
    return repr(value)


def fingerprint(state: object) -> str:
    """A digest of ``canonical(state)``."""
    return hashlib.sha256(repr(canonical(state)).encode()).hexdigest()[:16]


def durable_entries(journal: bytes) -> dict[int, int]:
    """Index -> term of each whole record of a journal's bytes (pysyncobj's format), as a
    restart would read them."""
    if len(journal) < FIRST_RECORD_OFFSET:
        return {}
    (end,) = struct.unpack_from("<I", journal, LAST_RECORD_OFFSET_OFFSET)
    end = min(end, len(journal))
    offset, found = FIRST_RECORD_OFFSET, {}
    while offset + 4 <= end:
        (size,) = struct.unpack_from("<I", journal, offset)
        if size < 16 or offset + 8 + size > end:
            break
        index, term = struct.unpack_from("<QQ", journal, offset + 4)
        found[index] = term
        offset += 8 + size
    return found


CHECKS = ("leader", "committed", "states", "ack", "lost")
"""The checks by name, for ``Invariants.off`` (a broken variant shows each one alone)."""


@dataclass(slots=True)
class Invariants:
    min_insync_replicas: int
    off: frozenset[str] = frozenset()
    """Checks not made (names from ``CHECKS``)."""
    leaders: dict[int, str] = field(default_factory=dict)
    committed: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    """Index -> (term, command) of every entry some node has seen committed."""
    committed_by: dict[int, str] = field(default_factory=dict)
    acknowledged: dict[int, int] = field(default_factory=dict)
    """Index -> term of every acknowledged synced entry."""
    states: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Applied index -> (fingerprint, the first node seen there)."""

    def leader(self, address: str, term: int) -> None:
        if "leader" in self.off:
            return
        other = self.leaders.setdefault(term, address)
        if other != address:
            raise InvariantError(f"two leaders in term {term}: {other} and {address}")

    def committed_entry(self, address: str, index: int, term: int, command: bytes) -> None:
        if "committed" in self.off:
            return
        known = self.committed.get(index)
        if known is None:
            acked = self.acknowledged.get(index)
            if acked is not None and acked != term:
                raise InvariantError(
                    f"{address} committed index {index} in term {term}, but an "
                    f"acknowledged entry of term {acked} was there"
                )
            self.committed[index] = (term, command)
            self.committed_by[index] = address
        elif known != (term, command):
            raise InvariantError(
                f"committed entry {index} changed: {self.committed_by[index]} had term "
                f"{known[0]}, {address} has term {term}"
                + ("" if known[0] != term else " with other bytes")
            )

    def applied_state(self, address: str, index: int, digest: str) -> None:
        if "states" in self.off:
            return
        known = self.states.setdefault(index, (digest, address))
        if known[0] != digest:
            raise InvariantError(
                f"states differ at applied index {index}: {known[1]} {known[0]}, {address} {digest}"
            )

    def acknowledgement(
        self, proposer: str, index: int, term: int, replicas_synced: int, holders: list[str]
    ) -> None:
        """``holders``: the nodes whose durable journal holds (index, term) right now."""
        if replicas_synced == 0 or "ack" in self.off:
            return  # an unsynced (``replicated``) entry promises nothing about disks
        known = self.committed.get(index)
        if known is not None and known[0] != term:
            raise InvariantError(
                f"{proposer} acknowledged index {index} of term {term}; term {known[0]} "
                "was committed there"
            )
        self.acknowledged[index] = term
        if replicas_synced < self.min_insync_replicas:
            raise InvariantError(
                f"{proposer} acknowledged index {index} with {replicas_synced} replicas "
                f"synced, below min_insync_replicas {self.min_insync_replicas}"
            )
        if len(holders) < replicas_synced:
            raise InvariantError(
                f"{proposer} acknowledged index {index} (term {term}) as synced on "
                f"{replicas_synced} replicas; only {holders or 'none'} hold it on disk"
            )

    def none_lost(self, address: str, log_terms: dict[int, int], first_index: int) -> None:
        """At the end: ``address`` (the leader) holds every acknowledged entry (an index
        below ``first_index`` is in its dump)."""
        if "lost" in self.off:
            return
        for index, term in sorted(self.acknowledged.items()):
            if index >= first_index and log_terms.get(index) != term:
                raise InvariantError(
                    f"acknowledged entry {index} (term {term}) lost: the final leader "
                    f"{address} has {log_terms.get(index, 'nothing')} there"
                )
