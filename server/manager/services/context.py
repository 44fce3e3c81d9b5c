"""What every manager service shares: the registry's Raft machine, the limits, the
brokers' client and monitor, the request executor and the proposer's clock; and the one rule
from a registry outcome to an error."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from manager.broker_client import BrokerClient
from manager.broker_monitor import BrokerMonitor
from manager.raft import RegistryMachine
from manager.registry.outcome import Outcome
from manager.registry.topics import TopicRecord
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits

_ERRORS = {
    Outcome.EXISTS: ErrorCode.TOPIC_EXISTS,
    Outcome.TOO_MANY: ErrorCode.TOO_MANY,
    Outcome.UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC,
    Outcome.UNKNOWN_PARTITION: ErrorCode.UNKNOWN_PARTITION,
    Outcome.UNKNOWN_BROKER: ErrorCode.NOT_ENOUGH_BROKERS,
    Outcome.INVALID: ErrorCode.INVALID_FIELD,
    Outcome.BUSY: ErrorCode.REFUSED,
    Outcome.ADDRESS_TAKEN: ErrorCode.REFUSED,
    Outcome.FAILED: ErrorCode.INTERNAL,
}


def check_outcome(
    outcome: Outcome, what: str, exists: ErrorCode = ErrorCode.TOPIC_EXISTS
) -> Outcome:
    """Return a successful outcome; raise the error a failed one maps to (``exists``: what
    ``Outcome.EXISTS`` means for ``what``)."""
    if outcome.ok:
        return outcome
    code = exists if outcome is Outcome.EXISTS else _ERRORS.get(outcome, ErrorCode.INTERNAL)
    raise RaftQError(code, f"{what}: {outcome.value}")


@dataclass(frozen=True)
class ServiceContext:
    limits: Limits
    raft: RegistryMachine
    brokers: BrokerClient
    monitor: BrokerMonitor
    executor: Executor
    clock_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    """Wall clock of the proposer: registration leases and keys are stamped with it."""

    def topic(self, name: str) -> TopicRecord:
        topic = self.raft.read(lambda s: s.topics.get(name))
        if topic is None:
            raise RaftQError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        return topic

    def leading_brokers(self, topic: TopicRecord) -> tuple[dict[str, list[int]], list[int]]:
        """The address of each broker that leads partitions of ``topic``, with those
        partitions; and the partitions whose leader is not known."""
        brokers = self.raft.read(lambda s: {b.broker_id: b.address for b in s.brokers.all()})
        leaders: dict[str, list[int]] = {}
        unavailable: list[int] = []
        for partition in topic.partitions:
            leader = self.monitor.leader_of(topic.name, partition.partition_id)
            address = None if leader is None else brokers.get(leader)
            if address is None:
                unavailable.append(partition.partition_id)
            else:
                leaders.setdefault(address, []).append(partition.partition_id)
        return leaders, unavailable
