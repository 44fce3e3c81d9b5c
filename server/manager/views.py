"""JSON shapes of the manager's answers, rendered from registry records. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from manager.registry.brokers import BrokerRecord
from manager.registry.topics import PartitionRecord, TopicRecord
from protocol.types import BrokerId, PartitionId

LeaderOf = Callable[[str, PartitionId], BrokerId | None]


def topic_summary(topic: TopicRecord) -> dict[str, object]:
    return {
        "name": topic.name,
        "partitions": len(topic.partitions),
        "active_partitions": topic.active_count,
    }


def topic_created(topic: TopicRecord, leader_of: LeaderOf) -> dict[str, object]:
    return {
        "name": topic.name,
        "partitions": [
            {
                "partition_id": p.partition_id,
                "replicas": [r.broker_id for r in p.replicas],
                "leader": leader_of(topic.name, p.partition_id),
            }
            for p in topic.partitions
        ],
    }


def partition_detail(
    topic: str,
    partition: PartitionRecord,
    brokers: Mapping[BrokerId, BrokerRecord],
    leader_of: LeaderOf,
) -> dict[str, object]:
    leader = leader_of(topic, partition.partition_id)
    replicas = []
    for replica in partition.replicas:
        broker = brokers.get(replica.broker_id)
        replicas.append(
            {
                "broker_id": replica.broker_id,
                "address": None if broker is None else broker.address,
                "raft_address": replica.raft_address,
                "is_leader": replica.broker_id == leader,
            }
        )
    return {
        "partition_id": partition.partition_id,
        "state": partition.state.value,
        "leader": leader,
        "replicas": replicas,
        "moving": moving_json(partition),
    }


def broker_summary(broker: BrokerRecord, replica_count: int) -> dict[str, object]:
    return {
        "broker_id": broker.broker_id,
        "address": broker.address,
        "alive": broker.alive,
        "partitions": replica_count,
        "draining": broker.draining,
    }


Reports = Mapping[BrokerId, Mapping[str, object]]
"""Each broker's last report on its replica of one partition (``BrokerMonitor``)."""


def partition_overview(
    topic: str,
    partition: PartitionRecord,
    brokers: Mapping[BrokerId, BrokerRecord],
    leader: BrokerId | None,
    reports: Reports,
) -> dict[str, object]:
    """One partition for the dashboard: its leader, end offset and log start as the leader
    last reported them, and per replica whether its broker is alive and how far it has
    flushed (the leader's view of every replica's flushed offset)."""
    led = reports.get(leader) if leader is not None else None
    flushed = led.get("flushed_offsets") if led is not None else None
    replicas = []
    for replica in partition.replicas:
        broker = brokers.get(replica.broker_id)
        replicas.append(
            {
                "broker_id": replica.broker_id,
                "alive": broker is not None and broker.alive,
                "is_leader": replica.broker_id == leader,
                "flushed_offset": (
                    flushed[replica.replica_id]
                    if isinstance(flushed, list) and replica.replica_id < len(flushed)
                    else None
                ),
            }
        )
    return {
        "topic": topic,
        "partition_id": partition.partition_id,
        "state": partition.state.value,
        "leader": leader,
        "end_offset": None if led is None else led.get("end_offset"),
        "log_start_offset": None if led is None else led.get("log_start_offset"),
        "replicas": replicas,
        "moving": moving_json(partition),
    }


def moving_json(partition: PartitionRecord) -> dict[str, object] | None:
    """The re-replication in progress, if any: which replica moves, from and to which broker."""
    move = partition.moving
    if move is None:
        return None
    return {
        "replica_id": move.replica_id,
        "from_broker_id": move.removed.broker_id,
        "to_broker_id": partition.replicas[move.replica_id].broker_id,
    }
