"""RaftQ's client library (``Admin``, ``Producer``, ``AsyncProducer``, ``Consumer``,
``GroupMember``) and the ``raftq`` CLI.

Talks HTTP to the load balancer, and to the brokers on the direct path (``raftq.direct_path``);
imports only ``protocol`` of the project, so it stays light.
"""

from raftq.admin import Admin
from raftq.async_producer import AsyncProducer
from raftq.client_limits import ClientLimits
from raftq.consumer import Consumer
from raftq.errors import (
    ApiError,
    BufferFullError,
    ProduceError,
    ProtocolError,
    RaftQClientError,
    UnavailableError,
)
from raftq.group import Delivery, GroupMember
from raftq.producer import Producer
from raftq.records import (
    BrokerInfo,
    ConsumerLag,
    GroupInfo,
    GroupPartition,
    KeyInfo,
    NewKey,
    PartitionAssignment,
    PartitionInfo,
    PartitionOffset,
    Record,
    Replica,
    Topic,
    TopicLag,
    TopicSummary,
)

__all__ = [
    "Admin",
    "ApiError",
    "AsyncProducer",
    "BrokerInfo",
    "BufferFullError",
    "ClientLimits",
    "Consumer",
    "ConsumerLag",
    "Delivery",
    "GroupInfo",
    "GroupMember",
    "GroupPartition",
    "KeyInfo",
    "NewKey",
    "PartitionAssignment",
    "PartitionInfo",
    "PartitionOffset",
    "ProduceError",
    "Producer",
    "ProtocolError",
    "RaftQClientError",
    "Record",
    "Replica",
    "Topic",
    "TopicLag",
    "TopicSummary",
    "UnavailableError",
]
