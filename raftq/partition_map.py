"""The client's cache of partition maps: for each topic, how many partitions it has and which
broker leads each, as ``GET /partitions`` last said. The direct path routes with it.

Every part is bounded (``ClientLimits``): a map older than ``partition_map_age_s_max`` is
fetched again before use; one topic's map is fetched at most once per
``partition_map_refresh_s_min`` (refusals ask for fresh maps, this bounds how often); at most
``partition_maps_max`` topics are kept (least recently used dropped); a broker that failed a
request is avoided for ``broker_avoid_s``, and only brokers some kept map names are recorded.
A fetch that fails keeps the map in hand: the brokers may still answer while the load
balancer does not. Pure apart from the injected ``fetch`` and ``clock``.

Not thread-safe: one per client object.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raftq.client_limits import ClientLimits
from raftq.errors import ProtocolError, RaftQClientError
from raftq.records import PartitionInfo


@dataclass(frozen=True, slots=True)
class PartitionMap:
    """One topic as the manager described it at ``fetched_at_s``."""

    topic: str
    leaders: tuple[str | None, ...]
    """HTTP address of each partition's leader broker, by partition id; ``None`` when the
    manager does not know it (an election, a new partition)."""
    fetched_at_s: float

    @property
    def partition_count(self) -> int:
        return len(self.leaders)


def build_map(topic: str, partitions: Sequence[PartitionInfo], now_s: float) -> PartitionMap:
    """The map of ``GET /partitions``; its partition ids must be ``0 .. n-1``."""
    ordered = sorted(partitions, key=lambda p: p.partition_id)
    if [p.partition_id for p in ordered] != list(range(len(ordered))) or not ordered:
        raise ProtocolError(f"GET /partitions?topic={topic}: partition ids are not 0..n-1")
    # Only the active prefix takes messages (the manager routes over the same prefix): a
    # partition still being created is not routed to until its creation has finished.
    active = list(itertools.takewhile(lambda p: p.active, ordered))
    if not active:
        raise ProtocolError(f"GET /partitions?topic={topic}: no partition is active yet")
    leaders = tuple(
        next((r.address for r in p.replicas if r.is_leader and r.address), None) for p in active
    )
    return PartitionMap(topic, leaders, now_s)


@dataclass(slots=True)
class _Entry:
    map: PartitionMap | None
    attempted_at_s: float


class PartitionMaps:
    def __init__(
        self,
        fetch: Callable[[str], Sequence[PartitionInfo]],
        limits: ClientLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._limits = limits
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._avoided: dict[str, float] = {}
        """Broker address -> monotonic time until which it is avoided."""

    def get(self, topic: str) -> PartitionMap | None:
        """The topic's map, fetched first if there is none, it is too old or it lacks a
        leader (rate-limited)."""
        entry = self._entries.get(topic)
        now_s = self._clock()
        if entry is None or entry.map is None:
            return self.refresh(topic)
        if now_s - entry.map.fetched_at_s >= self._limits.partition_map_age_s_max:
            return self.refresh(topic)
        if None in entry.map.leaders:
            # A leader the managers did not know at the fetch (an election, a topic just
            # created): asked again, rate-limited, rather than going around it until the
            # map is old.
            return self.refresh(topic)
        self._entries.move_to_end(topic)
        return entry.map

    def refresh(self, topic: str) -> PartitionMap | None:
        """Fetch the topic's map unless it was tried less than ``partition_map_refresh_s_min``
        ago; the newest map in hand either way (``None`` if none was ever fetched)."""
        now_s = self._clock()
        entry = self._entries.get(topic)
        if entry is None:
            entry = self._entries[topic] = _Entry(None, float("-inf"))
        self._entries.move_to_end(topic)
        while len(self._entries) > self._limits.partition_maps_max:
            self._entries.popitem(last=False)
        if now_s - entry.attempted_at_s < self._limits.partition_map_refresh_s_min:
            return entry.map
        entry.attempted_at_s = now_s
        # A failed fetch keeps the map in hand; without one the caller uses the LB path.
        with contextlib.suppress(RaftQClientError):
            entry.map = build_map(topic, self._fetch(topic), now_s)
        return entry.map

    def leader(self, topic: str, partition_id: int) -> str | None:
        """The address to send a request for this partition to, or ``None``: no map, no
        such partition in it, leader unknown, or the leader's broker is being avoided."""
        found = self.get(topic)
        if found is None or not 0 <= partition_id < found.partition_count:
            return None
        address = found.leaders[partition_id]
        if address is None or self._avoided.get(address, float("-inf")) > self._clock():
            return None
        return address

    def avoid(self, address: str) -> None:
        """Route around this broker for ``broker_avoid_s``."""
        now_s = self._clock()
        named = {a for e in self._entries.values() if e.map for a in e.map.leaders if a}
        self._avoided = {a: t for a, t in self._avoided.items() if t > now_s and a in named}
        if address in named:
            self._avoided[address] = now_s + self._limits.broker_avoid_s
