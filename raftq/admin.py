"""``Admin``: topics, partitions, brokers and the cluster summary, through the load balancer."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from urllib.parse import quote

from protocol.errors import ErrorCode
from raftq.client_limits import ClientLimits
from raftq.errors import ApiError, ProtocolError, RaftQClientError, UnavailableError
from raftq.http import HttpTransport
from raftq.node_signing import NodeSigning
from raftq.records import (
    BrokerInfo,
    GroupInfo,
    KeyInfo,
    NewKey,
    PartitionAssignment,
    PartitionInfo,
    Redriven,
    Topic,
    TopicLag,
    TopicSummary,
    parse_brokers,
    parse_group,
    parse_groups,
    parse_keys,
    parse_new_key,
    parse_partition,
    parse_partitions,
    parse_redriven,
    parse_topic,
    parse_topic_lag,
    parse_topic_summaries,
)


class Admin:
    """Not thread-safe; cheap to create, one per thread. Close it (or use ``with``)."""

    def __init__(
        self,
        url: str,
        *,
        limits: ClientLimits | None = None,
        api_key: str | None = None,
        tls_ca: str | None = None,
        node: NodeSigning | None = None,
        node_cert: tuple[str, str] | None = None,
    ) -> None:
        """``api_key``: sent with every request (``Authorization: Bearer``); ``tls_ca``: the
        CA bundle ``https://`` certificates are checked against (default: the system's);
        ``node``: act as a node (see ``HttpTransport``), showing ``node_cert`` (certificate
        and key files) to nodes with mutual TLS."""
        self._limits = (limits or ClientLimits()).validate()
        self._http = HttpTransport(
            url, self._limits, api_key=api_key, tls_ca=tls_ca, node=node, node_cert=node_cert
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        *,
        retention_ms: int = 0,
        retention_bytes: int = 0,
        min_insync_replicas: int | None = None,
    ) -> Topic:
        """Create a topic; ``ApiError`` with status 409 if it already exists. Retention (0:
        none): messages older than ``retention_ms`` leave, and the oldest leave while a
        partition holds more than ``retention_bytes``. ``min_insync_replicas`` (default: a
        majority of ``replication_factor``): produces are refused (503
        NOT_ENOUGH_REPLICAS) while fewer replicas of a partition are in sync."""
        body: dict[str, object] = {
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
            "retention_ms": retention_ms,
            "retention_bytes": retention_bytes,
        }
        if min_insync_replicas is not None:
            body["min_insync_replicas"] = min_insync_replicas
        try:
            return parse_topic(self._http.call("POST", "/topics", body=body, idempotent=True))
        except ApiError as exc:
            # A retry of an attempt that timed out may find the topic its first try created.
            if exc.code is ErrorCode.TOPIC_EXISTS and exc.after_unknown_outcome:
                return self._existing_topic(name)
            raise

    def create_group(
        self,
        topic: str,
        group: str,
        *,
        visibility_timeout_ms: int | None = None,
        max_deliveries: int = 0,
        dead_letter_topic: str | None = None,
        ordering: str = "none",
    ) -> GroupInfo:
        """Create consumer group ``group`` of ``topic`` (leased delivery), or find it with
        the same settings; ``ApiError`` 409 when it exists with others. A lease lasts
        ``visibility_timeout_ms`` (default: the managers'); past ``max_deliveries`` (0: no
        limit) a message goes to ``dead_letter_topic``; ``ordering="key"`` holds a key's
        next message back while an earlier one is leased."""
        body: dict[str, object] = {
            "topic": topic,
            "group": group,
            "max_deliveries": max_deliveries,
            "ordering": ordering,
        }
        if visibility_timeout_ms is not None:
            body["visibility_timeout_ms"] = visibility_timeout_ms
        if dead_letter_topic is not None:
            body["dead_letter_topic"] = dead_letter_topic
        answer = self._http.call("POST", "/groups", body=body, idempotent=True)
        return parse_group(answer, "POST /groups")

    def groups(self, topic: str | None = None) -> list[GroupInfo]:
        """The consumer groups of ``topic`` (of every topic without it)."""
        params = {} if topic is None else {"topic": topic}
        return parse_groups(self._http.call("GET", "/groups", params=params, idempotent=True))

    def redrive(self, topic: str, group: str, max_messages: int | None = None) -> Redriven:
        """Make up to ``max_messages`` (default: the managers' bound) dead messages of
        consumer group ``group`` deliverable to it again: those in its dead-letter topic
        since the last redrive, or, without one, those parked in its partitions. Call
        again while ``more``. Safe to retry (a request id goes with it)."""
        body: dict[str, object] = {"topic": topic, "request_id": uuid.uuid4().hex}
        if max_messages is not None:
            body["max_messages"] = max_messages
        path = f"/groups/{quote(group, safe='')}/redrive"
        return parse_redriven(self._http.call("POST", path, body=body, idempotent=True))

    def consumer_lag(self, topic: str) -> TopicLag:
        """Every consumer's lag on each partition of ``topic``, in messages and in seconds
        (the age of its oldest unread message), as the partitions' leaders say it."""
        body = self._http.call("GET", "/lag", params={"topic": topic}, idempotent=True)
        return parse_topic_lag(body)

    def list_topics(self) -> list[TopicSummary]:
        return parse_topic_summaries(self._http.call("GET", "/topics", idempotent=True))

    def partitions(self, topic: str) -> list[PartitionInfo]:
        body = self._http.call("GET", "/partitions", params={"topic": topic}, idempotent=True)
        return parse_partitions(body)

    def add_partition(self, topic: str) -> PartitionInfo:
        """Add one partition. Not retried once sent: a repeat would add a second one."""
        body = self._http.call("POST", "/partitions", body={"topic": topic}, idempotent=False)
        return parse_partition(body, "POST /partitions")

    def create_key(self, role: str, topics: Sequence[str] = (), name: str = "") -> NewKey:
        """A new API key (``admin``, ``producer`` or ``consumer``; the latter two for
        ``topics``: names, ``prefix*`` or ``*``). Not retried once sent: a repeat would
        make a second key (the first, never seen, can be revoked from ``list_keys``)."""
        body: dict[str, object] = {"role": role, "topics": list(topics)}
        if name:  # optional; the managers refuse an empty one
            body["name"] = name
        return parse_new_key(self._http.call("POST", "/keys", body=body, idempotent=False))

    def list_keys(self) -> list[KeyInfo]:
        return parse_keys(self._http.call("GET", "/keys", idempotent=True))

    def revoke_key(self, key_id: str) -> None:
        """Revoke a key: the load balancer path refuses it at once, brokers within
        ``key_cache_s``. ``ApiError`` 404 if no such key is known."""
        try:
            self._http.call("POST", "/keys/revoke", body={"key_id": key_id}, idempotent=True)
        except ApiError as exc:
            # A retry after an unknown outcome may find the key its first try revoked.
            if not (exc.code is ErrorCode.NOT_FOUND and exc.after_unknown_outcome):
                raise

    def brokers(self) -> list[BrokerInfo]:
        return parse_brokers(self._http.call("GET", "/brokers", idempotent=True))

    def drain_broker(self, broker_id: int) -> int:
        """Begin removing a broker: it takes no new replica and its replicas move to other
        brokers (re-replication). Idempotent; the replicas it still holds."""
        body = self._http.call(
            "POST", "/brokers/drain", body={"broker_id": broker_id}, idempotent=True
        )
        (info,) = parse_brokers({"brokers": [body]})
        return info.partition_count

    def cancel_drain(self, broker_id: int) -> int:
        """Stop removing a broker: it takes replicas again and no more of its replicas
        move (one moving now finishes). Idempotent; the replicas it holds."""
        body = self._http.call(
            "DELETE", "/brokers/drain", body={"broker_id": broker_id}, idempotent=True
        )
        (info,) = parse_brokers({"brokers": [body]})
        return info.partition_count

    def remove_broker(self, broker_id: int) -> None:
        """Forget a drained broker that holds no replica (``ApiError`` 409 otherwise); its
        id is refused from then on, so a broker still running with it stops."""
        self._http.call("DELETE", "/brokers", body={"broker_id": broker_id}, idempotent=True)

    def cluster(self) -> dict[str, object]:
        """``GET /cluster`` as the service sends it: managers, brokers and topics."""
        body = self._http.call("GET", "/cluster", idempotent=True)
        if not isinstance(body, dict):
            raise ProtocolError("GET /cluster: expected a JSON object")
        return body

    def under_replicated(self) -> int:
        """Partitions with a replica on a broker held dead, or a replica moving to a new
        broker (re-replication not finished), from ``GET /overview``."""
        body = self._http.call("GET", "/overview", idempotent=True)
        partitions = body.get("partitions") if isinstance(body, dict) else None
        if not isinstance(partitions, list):
            raise ProtocolError("GET /overview: expected a list of partitions")
        return sum(1 for p in partitions if isinstance(p, dict) and _under_replicated(p))

    def end_offsets(self, topic: str) -> dict[int, int]:
        """``{partition_id: end offset}``: the offset each partition's next message gets.

        There is no end-offset call through the load balancer, so this asks the brokers that
        host the replicas (``GET {broker}/partitions``, one call per broker) and takes the
        leader's end offset, or, when no reachable replica says it leads, the largest a
        reachable replica reports (a lower bound: followers may lag). Raises
        ``UnavailableError`` if no replica of some partition answers.
        """
        return self._broker_figures(topic, "end_offset")

    def start_offsets(self, topic: str) -> dict[int, int]:
        """``{partition_id: log start offset}``: the first offset each partition still holds
        (retention moves it), asked of the brokers as ``end_offsets`` is."""
        return self._broker_figures(topic, "log_start_offset")

    def _broker_figures(self, topic: str, field: str) -> dict[int, int]:
        partitions = self.partitions(topic)
        addresses = sorted({r.address for p in partitions for r in p.replicas if r.address})
        answers = {address: self._broker_partitions(address) for address in addresses}
        return pick_end_offsets(topic, partitions, answers, field)

    def _broker_partitions(self, address: str) -> list[Mapping[str, object]] | None:
        """The broker's replica list, or ``None`` if it does not answer: a dead broker
        must not fail the call while other replicas can say the end offset."""
        # Few attempts: another replica answers for a dead broker.
        limits = replace(self._limits, attempts_max=min(2, self._limits.attempts_max))
        transport = self._http.sibling(address, limits)
        try:
            body = transport.call("GET", "/partitions", idempotent=True)
        except RaftQClientError:
            return None
        finally:
            transport.close()
        items = body.get("partitions") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise ProtocolError(f"GET {address}/partitions: expected {{'partitions': [...]}}")
        return [i for i in items if isinstance(i, dict)]

    def _existing_topic(self, name: str) -> Topic:
        assignments = tuple(
            PartitionAssignment(p.partition_id, tuple(r.broker_id for r in p.replicas), p.leader)
            for p in self.partitions(name)
        )
        return Topic(name, assignments)


def pick_end_offsets(
    topic: str,
    partitions: list[PartitionInfo],
    answers: Mapping[str, Sequence[Mapping[str, object]] | None],
    field: str = "end_offset",
) -> dict[int, int]:
    """Pure part of ``Admin.end_offsets`` (and ``start_offsets``, with ``field``
    ``log_start_offset``): per partition, the value its leader reports, else the largest any
    replica reports (both only move forward; followers may lag). ``answers`` maps broker
    address to the broker's ``GET /partitions`` items (``None``: it did not answer)."""
    result: dict[int, int] = {}
    for partition in partitions:
        reported: list[tuple[bool, int]] = []
        for replica in partition.replicas:
            for item in answers.get(replica.address or "") or []:
                end = item.get(field)
                if (
                    item.get("topic") == topic
                    and item.get("partition_id") == partition.partition_id
                    and isinstance(end, int)
                ):
                    reported.append((item.get("is_leader") is True, end))
        if not reported:
            raise UnavailableError(
                f"no replica of {topic}/{partition.partition_id} reported its {field}",
                outcome_unknown=False,
                attempts=1,
            )
        leaders = [end for is_leader, end in reported if is_leader]
        result[partition.partition_id] = max(leaders or [end for _, end in reported])
    return result


def _under_replicated(partition: dict[str, object]) -> bool:
    replicas = partition.get("replicas")
    down = not isinstance(replicas, list) or any(
        not (isinstance(r, dict) and r.get("alive") is True) for r in replicas
    )
    return down or partition.get("moving") is not None
