"""Consumer lag: every consumer's lag on each partition of a topic, from the partitions'
leaders."""

from __future__ import annotations

from manager.services.context import ServiceContext
from protocol.errors import RaftQError
from protocol.requests import TopicRef


class LagService:
    """Consumer lag per partition, as the partitions' leaders count it."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._limits = context.limits
        self._raft = context.raft
        self._brokers = context.brokers

    def consumer_lag(self, request: TopicRef) -> dict[str, object]:
        """Every consumer's lag on each partition of the topic, from the partitions' leaders
        (``GET {broker}/lag``, one call per leading broker). A partition whose leader is not
        known, does not answer, or no longer leads it is listed in ``unavailable_partitions``
        (the others are still answered)."""
        topic = self._context.topic(request.topic)
        leaders, unavailable = self._context.leading_brokers(topic)
        consumers: list[dict[str, object]] = []
        partitions: dict[object, dict[str, object]] = {}
        for address, partition_ids in leaders.items():
            try:
                found, figures = self._brokers.consumer_lag(address, topic.name)
            except RaftQError:
                unavailable.extend(partition_ids)
                continue
            answered = {p.get("partition_id"): p for p in figures}
            # A broker that no longer leads a partition leaves it out: leadership moved
            # since the last poll, so that partition has no answer here.
            unavailable.extend(p for p in partition_ids if p not in answered)
            consumers.extend(c for c in found if c.get("partition_id") in answered)
            partitions.update((p, answered[p]) for p in partition_ids if p in answered)
        consumers += self._not_popped_yet(topic.name, consumers, partitions)
        consumers.sort(
            key=lambda c: (str(c.get("consumer_id")), str(c.get("partition_id")).zfill(9))
        )
        return {
            "topic": topic.name,
            "consumers": consumers,
            "unavailable_partitions": sorted(unavailable),
        }

    def _not_popped_yet(
        self,
        topic: str,
        consumers: list[dict[str, object]],
        partitions: dict[object, dict[str, object]],
    ) -> list[dict[str, object]]:
        """A registered consumer that has not popped from a partition yet would start at its
        log start: its lag there is the partition's whole content."""
        popped = {(c.get("consumer_id"), c.get("partition_id")) for c in consumers}
        registered = self._raft.read(lambda s: s.clients.consumers_of(topic))
        return [
            {**figures, "consumer_id": record.consumer_id}
            for record in registered
            for partition_id, figures in partitions.items()
            if record.partition_id in (None, partition_id)
            and (record.consumer_id, partition_id) not in popped
        ]
