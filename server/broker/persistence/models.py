"""SQLAlchemy models of the seed's two broker tables, ``Log`` and ``HostedReplicaRow``."""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Log(Base):
    """One flushed message of one partition replica. ``(topic_name, partition_id,
    msg_offset)`` is the primary key, which makes a repeated flush insert nothing."""

    __tablename__ = "log"

    topic_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    partition_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    msg_offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    msg: Mapped[str] = mapped_column(Text)
    msg_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    msg_headers: Mapped[str | None] = mapped_column(Text, nullable=True)
    """The message's headers as a JSON object of strings; NULL when it has none."""
    msg_replicated_bitmask: Mapped[int] = mapped_column(Integer)
    """Bit r set: replica r had not yet flushed this message when this replica flushed it."""


class HostedReplicaRow(Base):
    """One replica hosted by this broker: enough to rebuild it after a restart."""

    __tablename__ = "partition_raft"

    topic_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    partition_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    msg_count: Mapped[int] = mapped_column(BigInteger, default=0)
    """This replica's flushed offset: the messages ``[0, msg_count)`` are in ``log``."""
    replica_id: Mapped[int] = mapped_column(Integer)
    raft_host: Mapped[str] = mapped_column(String(300))
    """This replica's Raft node, ``host:port``."""
    raft_partners: Mapped[str] = mapped_column(Text)
    """JSON list of the other replicas' Raft nodes."""
    replicas: Mapped[str] = mapped_column(Text)
    """JSON list of every replica (id, broker, HTTP and Raft address)."""
    partition_limits: Mapped[str | None] = mapped_column(Text, nullable=True)
    """JSON of the partition's limits as the manager sent them (``ReplicaSpec.limits``);
    NULL for a replica created before they were sent (it keeps its broker's own)."""
