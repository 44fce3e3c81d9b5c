"""``Admin``: topics, partitions, brokers and the cluster summary, through the load balancer."""

from __future__ import annotations

from types import TracebackType

from protocol.errors import ErrorCode
from raftq.client_limits import ClientLimits
from raftq.errors import ApiError, ProtocolError
from raftq.http import HttpTransport
from raftq.records import (
    BrokerInfo,
    PartitionAssignment,
    PartitionInfo,
    Topic,
    TopicSummary,
    parse_brokers,
    parse_partition,
    parse_partitions,
    parse_topic,
    parse_topic_summaries,
)


class Admin:
    """Not thread-safe; cheap to create, one per thread. Close it (or use ``with``)."""

    def __init__(self, url: str, *, limits: ClientLimits | None = None) -> None:
        self._http = HttpTransport(url, (limits or ClientLimits()).validate())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3) -> Topic:
        """Create a topic; ``ApiError`` with status 409 if it already exists."""
        body = {"name": name, "partitions": partitions, "replication_factor": replication_factor}
        try:
            return parse_topic(self._http.call("POST", "/topics", body=body, idempotent=True))
        except ApiError as exc:
            # A retry of an attempt that timed out may find the topic its first try created.
            if exc.code is ErrorCode.TOPIC_EXISTS and exc.after_unknown_outcome:
                return self._existing_topic(name)
            raise

    def list_topics(self) -> list[TopicSummary]:
        return parse_topic_summaries(self._http.call("GET", "/topics", idempotent=True))

    def partitions(self, topic: str) -> list[PartitionInfo]:
        body = self._http.call("GET", "/partitions", params={"topic": topic}, idempotent=True)
        return parse_partitions(body)

    def add_partition(self, topic: str) -> PartitionInfo:
        """Add one partition. Not retried once sent: a repeat would add a second one."""
        body = self._http.call("POST", "/partitions", body={"topic": topic}, idempotent=False)
        return parse_partition(body, "POST /partitions")

    def brokers(self) -> list[BrokerInfo]:
        return parse_brokers(self._http.call("GET", "/brokers", idempotent=True))

    def cluster(self) -> dict[str, object]:
        """``GET /cluster`` as the service sends it: managers, brokers and topics."""
        body = self._http.call("GET", "/cluster", idempotent=True)
        if not isinstance(body, dict):
            raise ProtocolError("GET /cluster: expected a JSON object")
        return body

    def _existing_topic(self, name: str) -> Topic:
        assignments = tuple(
            PartitionAssignment(p.partition_id, tuple(r.broker_id for r in p.replicas), p.leader)
            for p in self.partitions(name)
        )
        return Topic(name, assignments)
