"""Registered brokers: where they answer HTTP, where their Raft ports are, and whether the
manager leader last saw them alive. Pure."""

from __future__ import annotations

from dataclasses import dataclass, replace

from manager.registry.outcome import Outcome
from protocol import snapshot_fields
from protocol.types import BrokerId


@dataclass(frozen=True, slots=True)
class BrokerRecord:
    broker_id: BrokerId
    address: str
    """HTTP base URL."""
    raft_host: str
    raft_port_min: int
    raft_port_max: int
    """Replicas on this broker get Raft ports in ``[raft_port_min, raft_port_max]`` (inclusive)."""
    alive: bool
    version: int
    draining: bool = False
    """``raftq broker remove`` began: it takes no new replica and its replicas move away."""
    removed: bool = False
    """Removed once drained: hidden from every read, and its id is refused from then on."""

    # Snapshots written before ``draining`` and ``removed`` existed hold seven fields.
    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)

    def same_registration(
        self, address: str, raft_host: str, raft_port_min: int, raft_port_max: int
    ) -> bool:
        return (self.address, self.raft_host, self.raft_port_min, self.raft_port_max) == (
            address,
            raft_host,
            raft_port_min,
            raft_port_max,
        )


def _valid(broker_id: object, address: object, host: object, low: object, high: object) -> bool:
    if not (isinstance(address, str) and address and isinstance(host, str) and host):
        return False
    if isinstance(broker_id, bool) or not isinstance(broker_id, int):
        return False
    if not (isinstance(low, int) and isinstance(high, int)):
        return False
    return 1 <= low <= high <= 65535


class BrokerRegistry:
    def __init__(self) -> None:
        self._brokers: dict[BrokerId, BrokerRecord] = {}

    def get(self, broker_id: BrokerId) -> BrokerRecord | None:
        """A registered broker (``None`` also for a removed one)."""
        record = self._brokers.get(broker_id)
        return None if record is None or record.removed else record

    def is_removed(self, broker_id: BrokerId) -> bool:
        record = self._brokers.get(broker_id)
        return record is not None and record.removed

    def all(self) -> list[BrokerRecord]:
        return [self._brokers[b] for b in sorted(self._brokers) if not self._brokers[b].removed]

    def __len__(self) -> int:
        return len(self._brokers)

    def drain(self, broker_id: int, *, version: int) -> Outcome:
        return self._set_draining(broker_id, True, version)

    def cancel_drain(self, broker_id: int, *, version: int) -> Outcome:
        return self._set_draining(broker_id, False, version)

    def _set_draining(self, broker_id: int, draining: bool, version: int) -> Outcome:
        known = self.get(BrokerId(broker_id)) if isinstance(broker_id, int) else None
        if known is None:
            return Outcome.UNKNOWN_BROKER
        if bool(known.draining) is draining:
            return Outcome.UNCHANGED
        self._brokers[known.broker_id] = replace(known, draining=draining, version=version)
        return Outcome.UPDATED

    def remove(self, broker_id: int, *, version: int) -> Outcome:
        """Only a draining broker (the caller checks that it holds no replica)."""
        if isinstance(broker_id, int) and self.is_removed(BrokerId(broker_id)):
            return Outcome.UNCHANGED
        known = self.get(BrokerId(broker_id)) if isinstance(broker_id, int) else None
        if known is None:
            return Outcome.UNKNOWN_BROKER
        if not known.draining:
            return Outcome.INVALID
        self._brokers[known.broker_id] = replace(known, removed=True, version=version)
        return Outcome.UPDATED

    def register(
        self,
        broker_id: int,
        address: str,
        raft_host: str,
        raft_port_min: int,
        raft_port_max: int,
        *,
        brokers_max: int,
        version: int,
    ) -> Outcome:
        """Add or update a broker; the same data again is a no-op. A new broker starts alive:
        it has just spoken to us."""
        if not _valid(broker_id, address, raft_host, raft_port_min, raft_port_max):
            return Outcome.INVALID
        if self.is_removed(BrokerId(broker_id)):
            return Outcome.EXISTS  # a removed id is never taken again
        known = self._brokers.get(BrokerId(broker_id))
        if known is not None:
            if known.same_registration(address, raft_host, raft_port_min, raft_port_max):
                return Outcome.UNCHANGED
            self._brokers[known.broker_id] = replace(
                known,
                address=address,
                raft_host=raft_host,
                raft_port_min=raft_port_min,
                raft_port_max=raft_port_max,
                version=version,
            )
            return Outcome.UPDATED
        if len(self._brokers) >= brokers_max:
            return Outcome.TOO_MANY
        self._brokers[BrokerId(broker_id)] = BrokerRecord(
            BrokerId(broker_id), address, raft_host, raft_port_min, raft_port_max, True, version
        )
        return Outcome.CREATED

    def set_alive(self, broker_id: int, alive: bool, *, version: int) -> Outcome:
        if not isinstance(broker_id, int) or not isinstance(alive, bool):
            return Outcome.INVALID
        known = self.get(BrokerId(broker_id))
        if known is None:
            return Outcome.UNKNOWN_BROKER
        if known.alive == alive:
            return Outcome.UNCHANGED
        self._brokers[known.broker_id] = replace(known, alive=alive, version=version)
        return Outcome.UPDATED
