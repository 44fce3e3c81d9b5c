"""Registered producers and consumers, each bound to one topic. Pure.

Ids are chosen by the proposer (``uuid4().hex``) so apply stays deterministic; registering the
same id with the same data again changes no record, which makes a retried command harmless.

A registration is a lease: registering again renews it, and one not renewed for longer than
the idle expiry is forgotten (the client then registers again, as a new client). Time is the
registry's clock, the highest ``now_ms`` a command carried (the proposers' clocks, so every
manager forgets the same clients), never the local clock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from manager.registry.outcome import Outcome
from protocol import snapshot_fields
from protocol.types import ConsumerId, PartitionId, ProducerId


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    producer_id: ProducerId
    topic: str
    version: int
    partition_count: int | None = None
    """Pinned by the first registration that asked (``RegisterProducer``); ``None``: the
    producer routes by its partition map."""
    owner: str | None = None
    """The key id of the API key that registered it (issue 23): only that key (or an
    admin, or a node) may produce as it. ``None``: registered by a node, or before owners
    were recorded; the next key that registers it claims it."""

    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    consumer_id: ConsumerId
    topic: str
    partition_id: PartitionId | None
    """The one partition it pops from, or None for every partition of its topic."""
    version: int
    owner: str | None = None
    """As ``ProducerRecord.owner``: only this key (or an admin, or a node) pops as it."""

    # Snapshots before ``owner`` hold four values: pickled by field order (a missing
    # trailing field takes its default; dataclass pickling would leave it unset).
    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)


_CONSUMER = "c"
_PRODUCER = "p"
ClientKey = tuple[str, str]
"""``(_CONSUMER or _PRODUCER, client id)``."""


class ClientRegistry:
    def __init__(self) -> None:
        self._producers: dict[ProducerId, ProducerRecord] = {}
        self._consumers: dict[ConsumerId, ConsumerRecord] = {}
        self._clock_ms = 0
        """Highest ``now_ms`` a command carried; 0 until the first."""
        self._last_seen_ms: OrderedDict[ClientKey, int] = OrderedDict()
        """Every record above with the registry time of its last (re)registration, oldest
        first, so expiry looks only at the front."""

    def __setstate__(self, state: dict[str, object]) -> None:
        """Unpickle a dump, also one from before leases: its clients are stamped when the
        first timed command sets the clock (see ``advance``)."""
        self.__dict__.update(state)
        if "_last_seen_ms" not in state:
            self._clock_ms = 0
            keys = [(_PRODUCER, str(p)) for p in self._producers]
            keys += [(_CONSUMER, str(c)) for c in self._consumers]
            self._last_seen_ms = OrderedDict((key, 0) for key in keys)

    def advance(self, now_ms: int | None, expiry_ms: int | None, count_max: int) -> int:
        """Move registry time to ``now_ms`` (never back) and forget at most ``count_max``
        clients not renewed for longer than ``expiry_ms``; how many were forgotten."""
        if now_ms is not None and now_ms > self._clock_ms:
            if self._clock_ms == 0:  # records from before leases start their lease now
                self._last_seen_ms = OrderedDict.fromkeys(self._last_seen_ms, now_ms)
            self._clock_ms = now_ms
        if expiry_ms is None:
            return 0
        horizon_ms = self._clock_ms - expiry_ms
        forgotten = 0
        while forgotten < count_max and self._last_seen_ms:
            (kind, client_id), seen_ms = next(iter(self._last_seen_ms.items()))
            if seen_ms >= horizon_ms:
                break
            self._last_seen_ms.popitem(last=False)
            if kind == _PRODUCER:
                del self._producers[ProducerId(client_id)]
            else:
                del self._consumers[ConsumerId(client_id)]
            forgotten += 1
        return forgotten

    def oldest_seen_ms(self) -> int | None:
        """Registry time of the least recently renewed registration (None when empty)."""
        return next(iter(self._last_seen_ms.values()), None)

    def holds_id(
        self, record: ProducerRecord | ConsumerRecord, now_ms: int, expiry_ms: int
    ) -> bool:
        """True when ``record`` keeps its id through a registration stamped ``now_ms``: its
        lease has not run out, so that registration's expiry (``advance``) cannot forget it."""
        if isinstance(record, ProducerRecord):
            key = (_PRODUCER, str(record.producer_id))
        else:
            key = (_CONSUMER, str(record.consumer_id))
        seen_ms = self._last_seen_ms.get(key)
        return seen_ms is not None and seen_ms >= max(self._clock_ms, now_ms) - expiry_ms

    def _renew(self, kind: str, client_id: str) -> None:
        key = (kind, client_id)
        self._last_seen_ms[key] = self._clock_ms
        self._last_seen_ms.move_to_end(key)

    def producer(self, producer_id: str) -> ProducerRecord | None:
        return self._producers.get(ProducerId(producer_id))

    def consumer(self, consumer_id: str) -> ConsumerRecord | None:
        return self._consumers.get(ConsumerId(consumer_id))

    def consumers_of(self, topic: str) -> list[ConsumerRecord]:
        """The consumers registered for ``topic`` (a scan: for the lag query, not a hot path;
        at most ``registry_clients_max`` records)."""
        return [c for c in self._consumers.values() if c.topic == topic]

    def __len__(self) -> int:
        return len(self._producers) + len(self._consumers)

    def add_producer(
        self,
        producer_id: str,
        topic: str,
        *,
        clients_max: int,
        version: int,
        partition_count: int | None = None,
        owner: str | None = None,
    ) -> Outcome:
        """Register (CREATED) or renew (UNCHANGED) a producer. A pinned partition count is
        never replaced: a registration that brings one for a producer without one pins it
        (UPDATED); any other count it brings is ignored, so a replay routes as before.
        ``owner``: the registering key's id, which claims a producer without an owner
        (UPDATED); one owned by another key is EXISTS. ``None`` (a node, an admin acting
        for another key) changes no owner."""
        if not (isinstance(producer_id, str) and producer_id and isinstance(topic, str)):
            return Outcome.INVALID
        if owner is not None and not isinstance(owner, str):
            return Outcome.INVALID
        key = ProducerId(producer_id)
        known = self._producers.get(key)
        if known is not None and (known.topic != topic or _taken(known.owner, owner)):
            return Outcome.EXISTS
        if known is None and len(self) >= clients_max:
            return Outcome.TOO_MANY
        outcome = Outcome.UNCHANGED
        if known is None:
            self._producers[key] = ProducerRecord(key, topic, version, partition_count, owner)
            outcome = Outcome.CREATED
        else:
            count = known.partition_count if known.partition_count is not None else partition_count
            claimed = known.owner if known.owner is not None else owner
            if (count, claimed) != (known.partition_count, known.owner):
                self._producers[key] = ProducerRecord(key, topic, version, count, claimed)
                outcome = Outcome.UPDATED
        self._renew(_PRODUCER, producer_id)
        return outcome

    def add_consumer(
        self,
        consumer_id: str,
        topic: str,
        partition_id: int | None,
        *,
        clients_max: int,
        version: int,
        owner: str | None = None,
    ) -> Outcome:
        """As ``add_producer`` (``owner`` the same way)."""
        if not (isinstance(consumer_id, str) and consumer_id and isinstance(topic, str)):
            return Outcome.INVALID
        if partition_id is not None and not isinstance(partition_id, int):
            return Outcome.INVALID
        if owner is not None and not isinstance(owner, str):
            return Outcome.INVALID
        pid = None if partition_id is None else PartitionId(partition_id)
        key = ConsumerId(consumer_id)
        known = self._consumers.get(key)
        if known is not None and (
            (known.topic, known.partition_id) != (topic, pid) or _taken(known.owner, owner)
        ):
            return Outcome.EXISTS
        if known is None and len(self) >= clients_max:
            return Outcome.TOO_MANY
        outcome = Outcome.UNCHANGED
        if known is None:
            self._consumers[key] = ConsumerRecord(key, topic, pid, version, owner)
            outcome = Outcome.CREATED
        elif known.owner is None and owner is not None:
            self._consumers[key] = ConsumerRecord(key, topic, pid, version, owner)
            outcome = Outcome.UPDATED
        self._renew(_CONSUMER, consumer_id)
        return outcome


def _taken(owner: str | None, claimant: str | None) -> bool:
    """A registration by ``claimant`` (a key id; ``None``: no claim) of an id ``owner``
    holds: refused only when both are keys and differ."""
    return owner is not None and claimant is not None and owner != claimant
