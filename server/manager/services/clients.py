"""Producers and consumers: their registrations, leased for ``client_idle_expiry_s``, owned
by the key that made them, checked for brokers, and forgotten when idle."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypeVar

from manager.log_routing import routing_count
from manager.registry import commands
from manager.registry.clients import ConsumerRecord, ProducerRecord
from manager.registry.outcome import Outcome
from manager.registry.state import EXPIRED_PER_SWEEP_MAX, ManagerState
from manager.services.context import ServiceContext, check_outcome
from protocol.access import Grant, Principal, Role
from protocol.errors import ErrorCode, RaftQError
from protocol.requests import RegisterConsumer, RegisterProducer, VerifyClient

R = TypeVar("R", ProducerRecord, ConsumerRecord)


class ClientService:
    """Register producers and consumers; check and expire their registrations."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._limits = context.limits
        self._raft = context.raft
        self._clock_ms = context.clock_ms
        self._idle_expiry_ms = int(context.limits.client_idle_expiry_s * 1000)

    def register_producer(
        self, request: RegisterProducer, principal: Principal | None = None
    ) -> tuple[dict[str, object], bool]:
        """Register a producer; True when it is new (a known id with the same topic is not).
        The answer carries the producer's pinned ``partition_count``, if it has one. The id
        belongs to the key that registered it (``principal``): another key's registration
        of it is refused (409 ID_TAKEN), except an admin's, which renews it."""
        topic = self._context.topic(request.topic)
        count = request.partition_count
        if count is not None:
            routing_count(topic, count)  # refuses a count above the active partitions
        # Chosen by the proposer (or the client): apply stays deterministic.
        producer_id = request.producer_id or uuid.uuid4().hex
        now_ms = self._clock_ms()
        known = self._held(lambda s: s.clients.producer(producer_id), now_ms)
        if known is not None and known.topic != request.topic:
            raise _id_taken(f"producer {producer_id!r}", f"topic {known.topic!r}")
        owner = _claim(
            f"producer {producer_id!r}", None if known is None else known.owner, principal
        )
        outcome = self._raft.propose(
            commands.RegisterProducer(
                producer_id,
                request.topic,
                self._limits.registry_clients_max,
                now_ms,
                self._idle_expiry_ms,
                count,
                owner,
            )
        )
        check_outcome(outcome, f"producer {producer_id!r}", ErrorCode.ID_TAKEN)
        body: dict[str, object] = {"producer_id": producer_id, **self._lease()}
        record = self._raft.read(lambda state: state.clients.producer(producer_id))
        if record is not None and record.partition_count is not None:
            body["partition_count"] = record.partition_count
        return body, outcome is Outcome.CREATED

    def register_consumer(
        self, request: RegisterConsumer, principal: Principal | None = None
    ) -> dict[str, object]:
        """Register a consumer; its id belongs to the registering key (as a producer's)."""
        topic = self._context.topic(request.topic)
        if request.partition_id is not None and request.partition_id >= len(topic.partitions):
            raise RaftQError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {topic.name!r} has no partition {request.partition_id}",
            )
        consumer_id = request.consumer_id or uuid.uuid4().hex
        now_ms = self._clock_ms()
        known = self._held(lambda s: s.clients.consumer(consumer_id), now_ms)
        if known is not None and (known.topic, known.partition_id) != (
            request.topic,
            request.partition_id,
        ):
            partitions = "all" if known.partition_id is None else f"partition {known.partition_id}"
            raise _id_taken(f"consumer {consumer_id!r}", f"topic {known.topic!r} ({partitions})")
        owner = _claim(
            f"consumer {consumer_id!r}", None if known is None else known.owner, principal
        )
        outcome = self._raft.propose(
            commands.RegisterConsumer(
                consumer_id,
                request.topic,
                request.partition_id,
                self._limits.registry_clients_max,
                now_ms,
                self._idle_expiry_ms,
                owner,
            )
        )
        check_outcome(outcome, f"consumer {consumer_id!r}", ErrorCode.ID_TAKEN)
        return {"consumer_id": consumer_id, **self._lease()}

    def verify_client(self, request: VerifyClient) -> dict[str, object]:
        """For a broker (direct-path produce or pop): the registration of a producer or
        consumer id, with its owner's key id, else 404 UNKNOWN_PRODUCER/CONSUMER."""
        if request.kind == "producer":
            producer = self._raft.read(lambda s: s.clients.producer(request.client_id))
            if producer is None:
                raise RaftQError(ErrorCode.UNKNOWN_PRODUCER, "unknown producer; register it first")
            return {"topic": producer.topic, "partition_id": None, "owner": producer.owner}
        consumer = self._raft.read(lambda s: s.clients.consumer(request.client_id))
        if consumer is None:
            raise RaftQError(ErrorCode.UNKNOWN_CONSUMER, "unknown consumer; register it first")
        return {
            "topic": consumer.topic,
            "partition_id": consumer.partition_id,
            "owner": consumer.owner,
        }

    def expire_idle_clients(self) -> int:
        """Leader duty: forget registrations not renewed for ``client_idle_expiry_s``. Proposes
        only when the oldest one is past it (a read), so an idle cluster writes nothing.
        Returns how many registrations are left (for logs and tests)."""
        now_ms = self._clock_ms()
        oldest_ms = self._raft.read(lambda s: s.clients.oldest_seen_ms())
        if oldest_ms is not None and now_ms - oldest_ms > self._idle_expiry_ms:
            outcome = self._raft.propose(
                commands.ExpireIdleClients(now_ms, self._idle_expiry_ms, EXPIRED_PER_SWEEP_MAX)
            )
            check_outcome(outcome, "expiring idle clients")
        return self._raft.read(lambda s: len(s.clients))

    def _held(self, find: Callable[[ManagerState], R | None], now_ms: int) -> R | None:
        """The registration ``find`` reads, if it keeps its id through a registration at
        ``now_ms``. A registration for another topic (or partition) is refused here, before
        proposing: apply would refuse it too, but only after moving registry time and
        forgetting idle clients, so its 409 would not prove that nothing was done. (An id
        whose lease ran out is left to apply, which forgets it and registers it anew.)"""

        def held(state: ManagerState) -> R | None:
            record = find(state)
            if record is None or not state.clients.holds_id(record, now_ms, self._idle_expiry_ms):
                return None
            return record

        return self._raft.read(held)

    def _lease(self) -> dict[str, object]:
        # Tells the client how often to renew (raftq renews every third of it while active).
        return {"idle_expiry_s": self._limits.client_idle_expiry_s}


def _id_taken(client: str, registered_for: str) -> RaftQError:
    return RaftQError(ErrorCode.ID_TAKEN, f"{client} is registered for {registered_for}")


def _claim(what: str, owner: str | None, principal: Principal | None) -> str | None:
    """The owner a registration by ``principal`` records for an id ``owner`` holds
    (``None``: no claim). Another key's id is refused, unless the caller is an admin (a
    super-user, as in Kafka: it acts for any id and claims none it does not own)."""
    if not isinstance(principal, Grant):
        return None  # a node (the managers' own clients) claims nothing
    if owner is None or owner == principal.key_id:
        return principal.key_id
    if principal.role is Role.ADMIN:
        return None
    raise RaftQError(ErrorCode.ID_TAKEN, f"{what} belongs to another API key: register a new id")
