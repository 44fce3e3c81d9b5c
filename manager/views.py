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
    }


def broker_summary(broker: BrokerRecord, replica_count: int) -> dict[str, object]:
    return {
        "broker_id": broker.broker_id,
        "address": broker.address,
        "alive": broker.alive,
        "partitions": replica_count,
    }
