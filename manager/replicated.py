"""``ReplicatedRegistry``: what the rest of the manager needs from the replicated state, as an
interface, so that only ``manager.raft`` (the pysyncobj adapter, wired in ``manager.app``)
depends on pysyncobj. ``LocalRegistry`` is its in-memory twin for tests: one node that always
leads and applies each command at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.registry.topics import Assignment

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RaftStatus:
    role: str
    """``leader``, ``follower`` or ``candidate``."""
    is_leader: bool
    leader_raft_address: str | None
    term: int
    commit_index: int
    last_applied: int
    has_quorum: bool
    uptime_s: int


class ReplicatedRegistry(Protocol):
    """Commands block until applied on this node, or raise ``RaftQError`` (503)."""

    def read(self, query: Callable[[ManagerState], T]) -> T: ...
    def is_leader(self) -> bool: ...
    def leader_raft_address(self) -> str | None: ...
    def status(self) -> RaftStatus: ...
    def begin_topic(
        self,
        name: str,
        assignments: tuple[Assignment, ...],
        topics_max: int,
        partitions_max: int,
        replicas_max: int,
    ) -> Outcome: ...
    def begin_partition(
        self,
        name: str,
        partition_id: int,
        assignment: Assignment,
        partitions_max: int,
        replicas_max: int,
    ) -> Outcome: ...
    def finish_partitions(self, name: str, partition_ids: tuple[int, ...]) -> Outcome: ...
    def register_broker(
        self, broker_id: int, address: str, host: str, low: int, high: int, brokers_max: int
    ) -> Outcome: ...
    def set_broker_alive(self, broker_id: int, alive: bool) -> Outcome: ...
    def register_producer(
        self, producer_id: str, topic: str, clients_max: int, now_ms: int, expiry_ms: int
    ) -> Outcome: ...
    def register_consumer(
        self,
        consumer_id: str,
        topic: str,
        partition_id: int | None,
        clients_max: int,
        now_ms: int,
        expiry_ms: int,
    ) -> Outcome: ...
    def expire_idle_clients(self, now_ms: int, expiry_ms: int, count_max: int) -> Outcome: ...


class LocalRegistry:
    """In-memory twin of ``ManagerRaft``: a single node that always leads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = ManagerState()
        self.commands: list[str] = []
        """Names of the commands applied, in order (tests check what was proposed)."""

    def _apply(self, name: str, command: Callable[[ManagerState], Outcome]) -> Outcome:
        with self._lock:
            self.commands.append(name)
            return command(self.state)

    def read(self, query: Callable[[ManagerState], T]) -> T:
        with self._lock:
            return query(self.state)

    def is_leader(self) -> bool:
        return True

    def leader_raft_address(self) -> str | None:
        return None

    def status(self) -> RaftStatus:
        applied = len(self.commands)
        return RaftStatus("leader", True, None, 1, applied, applied, True, 0)

    def begin_topic(
        self,
        name: str,
        assignments: tuple[Assignment, ...],
        topics_max: int,
        partitions_max: int,
        replicas_max: int,
    ) -> Outcome:
        return self._apply(
            "begin_topic",
            lambda s: s.begin_topic(name, assignments, topics_max, partitions_max, replicas_max),
        )

    def begin_partition(
        self,
        name: str,
        partition_id: int,
        assignment: Assignment,
        partitions_max: int,
        replicas_max: int,
    ) -> Outcome:
        return self._apply(
            "begin_partition",
            lambda s: s.begin_partition(
                name, partition_id, assignment, partitions_max, replicas_max
            ),
        )

    def finish_partitions(self, name: str, partition_ids: tuple[int, ...]) -> Outcome:
        return self._apply("finish_partitions", lambda s: s.finish_partitions(name, partition_ids))

    def register_broker(
        self, broker_id: int, address: str, host: str, low: int, high: int, brokers_max: int
    ) -> Outcome:
        return self._apply(
            "register_broker",
            lambda s: s.register_broker(broker_id, address, host, low, high, brokers_max),
        )

    def set_broker_alive(self, broker_id: int, alive: bool) -> Outcome:
        return self._apply("set_broker_alive", lambda s: s.set_broker_alive(broker_id, alive))

    def register_producer(
        self, producer_id: str, topic: str, clients_max: int, now_ms: int, expiry_ms: int
    ) -> Outcome:
        return self._apply(
            "upsert_producer",
            lambda s: s.register_producer(producer_id, topic, clients_max, now_ms, expiry_ms),
        )

    def register_consumer(
        self,
        consumer_id: str,
        topic: str,
        partition_id: int | None,
        clients_max: int,
        now_ms: int,
        expiry_ms: int,
    ) -> Outcome:
        return self._apply(
            "upsert_consumer",
            lambda s: s.register_consumer(
                consumer_id, topic, partition_id, clients_max, now_ms, expiry_ms
            ),
        )

    def expire_idle_clients(self, now_ms: int, expiry_ms: int, count_max: int) -> Outcome:
        return self._apply(
            "sweep_idle_clients", lambda s: s.expire_idle_clients(now_ms, expiry_ms, count_max)
        )
