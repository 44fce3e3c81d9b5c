"""Soft state the manager leader keeps in memory from polling brokers: when each broker last
answered and which broker's replica leads each partition. Never replicated: a new leader
rebuilds it within one poll period (and gives every broker a grace period first).

Thread-safe: written by the leader-duties thread, read by HTTP threads. Times are monotonic
seconds passed in by the caller.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from manager.registry.brokers import BrokerRecord
from protocol.types import BrokerId, PartitionId

PartitionKey = tuple[str, PartitionId]


class BrokerMonitor:
    def __init__(self, dead_after_s: float) -> None:
        self._dead_after_s = dead_after_s
        self._lock = threading.Lock()
        self._last_seen_s: dict[BrokerId, float] = {}
        self._leaders: dict[PartitionKey, BrokerId] = {}
        self._silent: set[BrokerId] = set()
        """Brokers whose last poll got no answer (crashed, paused or cut off): tried last."""
        self._replicas: dict[PartitionKey, dict[BrokerId, dict[str, object]]] = {}
        """What each broker last said about each replica it hosts (end offset, flushed
        offsets, leadership): for the overview, never for a decision."""

    def start_grace(self, broker_ids: Iterable[BrokerId], now_s: float) -> None:
        """Count every broker as seen now: a newly elected leader has not polled anyone yet
        and must not mark brokers dead for its own ignorance."""
        with self._lock:
            self._last_seen_s = dict.fromkeys(broker_ids, now_s)
            self._leaders.clear()
            self._silent.clear()
            self._replicas.clear()

    def record_answer(
        self, broker_id: BrokerId, partitions: list[dict[str, object]], now_s: float
    ) -> None:
        led = set()
        reported: dict[PartitionKey, dict[str, object]] = {}
        for item in partitions:
            topic, pid = item.get("topic"), item.get("partition_id")
            if not isinstance(topic, str) or not isinstance(pid, int):
                continue
            reported[(topic, PartitionId(pid))] = item
            if item.get("is_leader") is True:
                led.add((topic, PartitionId(pid)))
        with self._lock:
            for key, by_broker in list(self._replicas.items()):
                if key not in reported:
                    by_broker.pop(broker_id, None)
            for key, item in reported.items():
                self._replicas.setdefault(key, {})[broker_id] = item
            self._last_seen_s[broker_id] = now_s
            self._silent.discard(broker_id)
            for key, leader in list(self._leaders.items()):
                if leader == broker_id and key not in led:
                    del self._leaders[key]
            for key in led:
                self._leaders[key] = broker_id

    def record_silence(self, broker_id: BrokerId, now_s: float) -> None:
        """No answer: its replicas no longer count as leaders; a broker never seen before
        starts its grace period now."""
        with self._lock:
            self._last_seen_s.setdefault(broker_id, now_s)
            self._silent.add(broker_id)
            for key, leader in list(self._leaders.items()):
                if leader == broker_id:
                    del self._leaders[key]

    def is_dead(self, broker_id: BrokerId, now_s: float) -> bool:
        with self._lock:
            last = self._last_seen_s.get(broker_id)
        return last is not None and now_s - last > self._dead_after_s

    def silent_for_s(self, broker_id: BrokerId, now_s: float) -> float:
        """How long the broker has not answered (0 while it answers, or unknown)."""
        with self._lock:
            last = self._last_seen_s.get(broker_id)
            silent = broker_id in self._silent
        return now_s - last if silent and last is not None else 0.0

    def gone(
        self, brokers: Iterable[BrokerRecord], replace_after_s: float, now_s: float
    ) -> set[BrokerId]:
        """Brokers that will not come back soon: draining (being removed), or held dead and
        silent for ``replace_after_s``. Their replicas move away (``ReplicaMover``), and a
        creation placed on them is rolled back (``TopicService.resume_pending``)."""
        return {
            b.broker_id
            for b in brokers
            if b.draining
            or (not b.alive and self.silent_for_s(b.broker_id, now_s) >= replace_after_s)
        }

    def silent(self) -> frozenset[BrokerId]:
        with self._lock:
            return frozenset(self._silent)

    def replica_reports(
        self, topic: str, partition_id: PartitionId
    ) -> dict[BrokerId, dict[str, object]]:
        """Each broker's last report on its replica of the partition (its ``GET
        /partitions`` item)."""
        with self._lock:
            return dict(self._replicas.get((topic, partition_id), {}))

    def hosted(self) -> list[tuple[BrokerId, str, PartitionId, str]]:
        """Every replica the brokers last reported hosting: ``(broker, topic, partition,
        raft address)``."""
        with self._lock:
            return [
                (broker_id, topic, partition_id, str(item.get("raft_address")))
                for (topic, partition_id), by_broker in self._replicas.items()
                for broker_id, item in by_broker.items()
            ]

    def leader_of(self, topic: str, partition_id: PartitionId) -> BrokerId | None:
        with self._lock:
            return self._leaders.get((topic, partition_id))
