"""Registered producers and consumers, each bound to one topic. Pure.

Ids are chosen by the proposer (``uuid4().hex``) so apply stays deterministic; registering the
same id with the same data again is a no-op, which makes a retried command harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from manager.registry.outcome import Outcome
from protocol.types import ConsumerId, PartitionId, ProducerId


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    producer_id: ProducerId
    topic: str
    version: int


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    consumer_id: ConsumerId
    topic: str
    partition_id: PartitionId | None
    """The one partition it pops from, or None for every partition of its topic."""
    version: int


class ClientRegistry:
    def __init__(self) -> None:
        self._producers: dict[ProducerId, ProducerRecord] = {}
        self._consumers: dict[ConsumerId, ConsumerRecord] = {}

    def producer(self, producer_id: str) -> ProducerRecord | None:
        return self._producers.get(ProducerId(producer_id))

    def consumer(self, consumer_id: str) -> ConsumerRecord | None:
        return self._consumers.get(ConsumerId(consumer_id))

    def __len__(self) -> int:
        return len(self._producers) + len(self._consumers)

    def add_producer(
        self, producer_id: str, topic: str, *, clients_max: int, version: int
    ) -> Outcome:
        if not (isinstance(producer_id, str) and producer_id and isinstance(topic, str)):
            return Outcome.INVALID
        known = self._producers.get(ProducerId(producer_id))
        if known is not None:
            return Outcome.UNCHANGED if known.topic == topic else Outcome.EXISTS
        if len(self) >= clients_max:
            return Outcome.TOO_MANY
        self._producers[ProducerId(producer_id)] = ProducerRecord(
            ProducerId(producer_id), topic, version
        )
        return Outcome.CREATED

    def add_consumer(
        self,
        consumer_id: str,
        topic: str,
        partition_id: int | None,
        *,
        clients_max: int,
        version: int,
    ) -> Outcome:
        if not (isinstance(consumer_id, str) and consumer_id and isinstance(topic, str)):
            return Outcome.INVALID
        if partition_id is not None and not isinstance(partition_id, int):
            return Outcome.INVALID
        pid = None if partition_id is None else PartitionId(partition_id)
        known = self._consumers.get(ConsumerId(consumer_id))
        if known is not None:
            same = (known.topic, known.partition_id) == (topic, pid)
            return Outcome.UNCHANGED if same else Outcome.EXISTS
        if len(self) >= clients_max:
            return Outcome.TOO_MANY
        self._consumers[ConsumerId(consumer_id)] = ConsumerRecord(
            ConsumerId(consumer_id), topic, pid, version
        )
        return Outcome.CREATED
