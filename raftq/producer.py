"""``Producer``: buffers messages and sends them in batches, each with its own sequence.

A batch is retried with the same ``sequence``, so the partition applies it once however many
times it arrives (the service remembers each producer's recent sequences). A batch whose
retries are spent stays queued with its sequence, and the next ``flush`` resends it first.

With ``direct=True`` (the default) a batch is cut into partition groups here, by the
manager's rule and the cached partition map, and each group goes to its partition leader's
broker; a group the broker does not take is repeated through the load balancer with its
``partition_id`` and the same sequence (``raftq.direct_path``). The cut is fixed when the
batch is first sent (its partition count is kept with it), so every resend reaches the same
partitions. Without a map the batch goes through the load balancer whole, as with
``direct=False``. A batch sent through the load balancer carries the partition count it was
first sent with (``partition_count``; also with ``direct=False``, from the same cached map),
so the manager cuts every resend the same way even after partitions were added.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TypeGuard

from protocol import produce_plan
from protocol.errors import ErrorCode
from protocol.invariant import check
from protocol.produce_plan import BatchFailure
from protocol.routing import PartitionGroup
from protocol.types import Durability, NewMessage, PartitionId, headers_of
from raftq.client_limits import ClientLimits
from raftq.direct_path import DirectPath, Fallback, PartitionRequest, partition_maps
from raftq.errors import (
    ApiError,
    BufferFullError,
    ProduceError,
    ProtocolError,
    RaftQClientError,
    UnavailableError,
)
from raftq.http import HttpTransport
from raftq.lease import Lease, repeat_if_forgotten
from raftq.records import PartitionOffset, parse_broker_offsets, parse_offsets

MessageLike = str | tuple[str, str | None] | NewMessage
"""A value, a ``(value, key)`` pair, or a ``NewMessage``."""


@dataclass(frozen=True, slots=True)
class Batch:
    sequence: int
    messages: tuple[NewMessage, ...]
    partition_count: int | None = None
    """The partition count this batch is cut with, fixed when first sent and kept for
    resends (the direct path cuts it here, the load balancer's manager is told it); ``None``
    until first sent, or when no partition map could be had."""
    via_lb: bool = False
    """First sent whole through the load balancer (which cut it): resends go there too."""
    acked: tuple[PartitionOffset | None, ...] = ()
    """Direct path: each message's offset once its partition acknowledged it on some attempt,
    else ``None``; empty until a partition answered. Reported with a failure
    (``ProduceError.acked_in_batch``): those messages are stored whatever the rest does."""
    outcome_unknown: bool = False
    """An attempt failed without proving it stored nothing: its Raft entry may still be
    applied later, so a later attempt's "nothing done" says nothing of the batch."""


def message_bytes(message: NewMessage) -> int:
    key_bytes = 0 if message.key is None else utf8_bytes(message.key)
    if not message.headers:
        return utf8_bytes(message.value) + key_bytes
    header_bytes = sum(utf8_bytes(n) + utf8_bytes(v) for n, v in message.headers)
    return utf8_bytes(message.value) + key_bytes + header_bytes


def utf8_bytes(text: str) -> int:
    """The UTF-8 length of ``text``, without encoding it when it is ASCII (most values)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def take_batch(buffer: deque[NewMessage], messages_max: int, bytes_max: int) -> list[NewMessage]:
    """Pop the longest prefix within both bounds (at least one message: an oversized one
    goes alone, and the service answers 413 for it)."""
    taken: list[NewMessage] = []
    size = 0
    while buffer and len(taken) < messages_max:
        next_size = message_bytes(buffer[0])
        if taken and size + next_size > bytes_max:
            break
        taken.append(buffer.popleft())
        size += next_size
    return taken


def as_message(item: MessageLike) -> NewMessage:
    if isinstance(item, NewMessage):
        return item
    if isinstance(item, str):
        return NewMessage(value=item)
    value, key = item
    return NewMessage(value=value, key=key)


@dataclass(frozen=True, slots=True)
class PartitionBatch:
    """``Producer.send_partition_batches``: messages for one partition under one sequence."""

    partition_id: int
    sequence: int
    messages: tuple[NewMessage, ...]


class Producer:
    """Registers with ``POST /producers`` on creation. Not thread-safe: one per thread."""

    def __init__(
        self,
        url: str,
        topic: str,
        *,
        partition_id: int | None = None,
        batch_messages_max: int | None = None,
        limits: ClientLimits | None = None,
        producer_id: str | None = None,
        first_sequence: int = 0,
        direct: bool = True,
        partition_count: int | None = None,
        durability: Durability | str = Durability.FSYNC,
        api_key: str | None = None,
        tls_ca: str | None = None,
    ) -> None:
        """``producer_id`` reuses a client-chosen id (registered idempotently, like Kafka's
        ``transactional.id``); its batches must then start above every sequence it used
        before (``first_sequence``), or replay the same batches with the same sequences.
        ``direct`` sends batches straight to the partition leaders' brokers (falling back to
        the load balancer); ``False`` sends everything through the load balancer.
        ``partition_count`` fixes the count every batch is cut with instead of the map's at
        its first send: a job whose tasks may be retried in another process (Spark) fixes it
        once, so a replayed batch reaches the same partitions and is recognised there. The
        manager records it with the producer id at its first registration and answers that
        count to every later one (a restarted job that now sees more partitions still cuts
        its replays as the first attempt did), until the id's lease expires.
        ``durability`` is what each acknowledgement waits for (README, "What an
        acknowledgement means"): ``replicated``, ``fsync`` (the default) or ``flushed``.
        ``api_key``: a producer (or admin) key, sent with every request. ``tls_ca``: the CA
        bundle ``https://`` certificates are checked against (default: the system's)."""
        limits = (limits or ClientLimits()).validate()
        self.durability = Durability(durability)  # ValueError for an unknown level
        self.topic = topic
        self.partition_id = partition_id
        """Send every message to this partition; ``None`` lets the service route by key."""
        self._batch_messages_max = min(
            batch_messages_max or limits.batch_messages_max, limits.batch_messages_max
        )
        self._batch_bytes_max = limits.batch_bytes_max
        self._buffer_messages_max = limits.buffer_messages_max
        self._http = HttpTransport(url, limits, api_key=api_key, tls_ca=tls_ca)
        self.direct_path = DirectPath(self._http, limits) if direct else None
        self._maps = (
            self.direct_path.maps
            if self.direct_path is not None
            else partition_maps(self._http, limits)
        )
        self._buffer: deque[NewMessage] = deque()
        self._in_flight: Batch | None = None
        self._next_sequence = first_sequence
        self._fixed_partition_count = partition_count
        self._lease = Lease()
        try:
            self.producer_id = self._register(producer_id)
        except BaseException:
            self._http.close()
            raise

    def close(self) -> None:
        """Release the connections (and the direct path's threads); unsent messages are
        dropped (call ``flush`` first)."""
        self._http.close()
        if self.direct_path is not None:
            self.direct_path.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if kind is None:
                self.flush()
        finally:
            self.close()

    @property
    def pending_messages(self) -> int:
        """Messages not yet acknowledged, including a retained batch."""
        in_flight = 0 if self._in_flight is None else len(self._in_flight.messages)
        return len(self._buffer) + in_flight

    def send(
        self, value: str, key: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        """Buffer one message; ``flush`` sends it."""
        if self.pending_messages >= self._buffer_messages_max:
            raise BufferFullError(
                f"{self.pending_messages} messages are unsent (buffer_messages_max): flush first"
            )
        self._buffer.append(
            NewMessage(value=value, key=key, headers=headers_of(dict(headers or {})))
        )

    def produce_batch(self, messages: Iterable[MessageLike]) -> list[PartitionOffset]:
        """Send these messages (after any buffered ones) and return the offsets of all, in
        order. Each full batch is sent as soon as it forms, so the buffer stays bounded
        however long ``messages`` is."""
        acked: list[PartitionOffset] = []
        for item in messages:
            if len(self._buffer) >= self._batch_messages_max:
                self._flush_into(acked)
            self._buffer.append(as_message(item))
        self._flush_into(acked)
        return acked

    def flush(self) -> list[PartitionOffset]:
        """Send everything buffered; return each message's offset in send order.

        Raises ``ProduceError`` when a batch fails; see its ``retained``, ``completed`` and
        ``acked_in_batch``.
        """
        acked: list[PartitionOffset] = []
        self._flush_into(acked)
        return acked

    def partition_count(self) -> int | None:
        """The topic's partition count in the cached map (fetched when missing or old,
        rate-limited); ``None`` when no map could be had."""
        found = self._maps.get(self.topic)
        return None if found is None else found.partition_count

    def send_partition_batches(
        self, batches: Sequence[PartitionBatch]
    ) -> list[list[PartitionOffset] | RaftQClientError]:
        """One attempt of each batch, all at once (``raftq.async_producer``'s sender): each
        to its partition's leader, a refusal repeated through the load balancer with the
        same ``partition_id`` and sequence, exactly as this producer's own groups are; each
        result is the batch's offsets or its failure (returned, not raised). The caller
        repeats a failed batch with the same sequence and partition. After a 404
        UNKNOWN_PRODUCER it registers again under its id (once), so the repeat is known."""
        self._renew_if_due()
        durability = self._stated_durability()
        plans = [
            produce_plan.cut(
                self.topic,
                b.messages,
                b.partition_id + 1,  # unread: the partition is given
                partition_id=PartitionId(b.partition_id),
                producer_id=self.producer_id,
                sequence=b.sequence,
                durability=durability,
                round_robin=0,
            )
            for b in batches
        ]
        groups = [plan.groups[0] for plan in plans]
        bodies = [plan.body(group) for plan, group in zip(plans, groups, strict=True)]
        results = self._send_groups(groups, bodies)
        if any(_error_code(r) is ErrorCode.UNKNOWN_PRODUCER for r in results if _failed(r)):
            try:
                self._register(self.producer_id)
            except RaftQClientError:
                self._lease.failed()
        return results

    def _send_groups(
        self, groups: Sequence[PartitionGroup], bodies: Sequence[dict[str, object]]
    ) -> list[list[PartitionOffset] | RaftQClientError]:
        direct = self.direct_path
        if direct is not None:
            requests = [
                PartitionRequest(g.partition_id, "POST", b)
                for g, b in zip(groups, bodies, strict=True)
            ]
            answers = direct.call_many(self.topic, requests)
            return [
                self._settle_group(direct, group, body, answer)
                for group, body, answer in zip(groups, bodies, answers, strict=True)
            ]
        results: list[list[PartitionOffset] | RaftQClientError] = []
        for group, body in zip(groups, bodies, strict=True):
            try:
                answer = self._http.call("POST", "/logs", body=body, idempotent=True)
                results.append(parse_offsets(answer, len(group.indexes)))
            except RaftQClientError as exc:
                results.append(exc)
        return results

    def _flush_into(self, acked: list[PartitionOffset]) -> None:
        self._renew_if_due()
        while self._in_flight is not None or self._buffer:
            if self._in_flight is None:
                messages = take_batch(self._buffer, self._batch_messages_max, self._batch_bytes_max)
                self._in_flight = Batch(self._next_sequence, tuple(messages))
                self._next_sequence += 1
            acked.extend(self._send_in_flight(tuple(acked)))
            self._in_flight = None

    def _send_in_flight(self, completed: tuple[PartitionOffset, ...]) -> list[PartitionOffset]:
        batch = self._in_flight
        if batch is None:
            return []
        try:
            return self._send_registered(batch)
        except UnavailableError as exc:
            # Read before anything drops the batch: ``_send`` keeps its acks on the one queued.
            queued = self._in_flight or batch
            acked = _acked_part(queued)
            if exc.outcome_unknown:
                self._in_flight = replace(queued, outcome_unknown=True)
            raise ProduceError(
                f"batch with sequence {batch.sequence} ({len(batch.messages)} messages) not "
                f"acknowledged: {exc}. It stays queued; flush() resends it with the same "
                "sequence, which is safe",
                completed=completed,
                retained=True,
                outcome_unknown=exc.outcome_unknown,
                acked_in_batch=acked,
            ) from exc
        except (ApiError, ProtocolError) as exc:
            queued = self._in_flight or batch
            acked = _acked_part(queued)
            self._in_flight = None
            # A final answer after an attempt whose outcome is unknown (say a 401 once the
            # key was revoked, after a timeout, in this flush or an earlier one) proves
            # nothing about that attempt: its entry may still be applied later.
            unknown = (
                isinstance(exc, ProtocolError)
                or exc.after_unknown_outcome
                or queued.outcome_unknown
            )
            done = (
                "dropped, maybe stored by an earlier attempt" if unknown else "rejected and dropped"
            )
            raise ProduceError(
                f"batch with sequence {batch.sequence} ({len(batch.messages)} messages) "
                f"{done}: {exc}",
                completed=completed,
                retained=False,
                outcome_unknown=unknown,
                acked_in_batch=acked,
            ) from exc

    def _send_registered(self, batch: Batch) -> list[PartitionOffset]:
        """``_send``; on 404 UNKNOWN_PRODUCER (the managers forgot this producer: renewals
        they never saw, or their clock ahead of ours), register again under the same id and
        resend the same sequence once. The partitions still know the producer, so a part an
        earlier attempt stored is recognised, not appended again."""
        return repeat_if_forgotten(
            lambda: self._send(self._in_flight or batch),
            ErrorCode.UNKNOWN_PRODUCER,
            lambda: self._register(self.producer_id),
            unavailable_note="an earlier attempt may have stored part of the batch",
        )

    def _pin_routing(self, batch: Batch) -> Batch:
        """Fix the batch's partition count at its first send (see ``Batch``): the direct
        path's map, else (through the load balancer) the cached map's count, unless the
        count is fixed for this producer. A batch for one ``partition_id`` needs none."""
        direct = self.direct_path
        found = None if direct is None else direct.usable_map(self.topic, self.partition_id)
        count = None if found is None else found.partition_count
        if self.partition_id is None:
            if self._fixed_partition_count is not None:
                count = self._fixed_partition_count
            elif direct is None:
                cached = self._maps.get(self.topic)
                count = None if cached is None else cached.partition_count
        return replace(batch, partition_count=count, via_lb=found is None)

    def _send(self, batch: Batch) -> list[PartitionOffset]:
        if batch.partition_count is None and not batch.via_lb:
            batch = self._in_flight = self._pin_routing(batch)
        direct = self.direct_path
        if direct is None or batch.via_lb or batch.partition_count is None:
            body = self._http.call("POST", "/logs", body=self._body(batch), idempotent=True)
            return parse_offsets(body, len(batch.messages))
        return self._send_direct(direct, batch, batch.partition_count)

    def _send_direct(
        self, direct: DirectPath, batch: Batch, partition_count: int
    ) -> list[PartitionOffset]:
        """Each partition group to its leader's broker at once (``protocol.produce_plan``)."""
        plan = produce_plan.cut(
            self.topic,
            batch.messages,
            partition_count,
            partition_id=None if self.partition_id is None else PartitionId(self.partition_id),
            producer_id=self.producer_id,
            sequence=batch.sequence,
            durability=self._stated_durability(),
            round_robin=0,  # unused: a batch always carries a sequence
        )
        bodies = [plan.body(group) for group in plan.groups]
        answers = direct.call_many(
            self.topic,
            [
                PartitionRequest(g.partition_id, "POST", b)
                for g, b in zip(plan.groups, bodies, strict=True)
            ],
        )
        results = [
            self._settle_group(direct, group, body, answer)
            for group, body, answer in zip(plan.groups, bodies, answers, strict=True)
        ]
        # Kept on the queued batch before the failure (if any) is raised: the groups stored
        # now are acknowledged even if the batch as a whole is not.
        self._in_flight = replace(batch, acked=with_earlier_acks(batch.acked, plan.acked(results)))
        merged = plan.merge(results, _error_code, _proves_nothing_done)
        if isinstance(merged, BatchFailure):
            raise _batch_error(merged)
        return merged

    def _settle_group(
        self, direct: DirectPath, group: PartitionGroup, body: object, answer: object
    ) -> list[PartitionOffset] | RaftQClientError:
        """One partition's part: the broker's offsets, else the same group through the load
        balancer with its ``partition_id`` and the same sequence."""
        count = len(group.indexes)
        if isinstance(answer, RaftQClientError):
            return answer
        try:
            if not isinstance(answer, Fallback):
                return parse_broker_offsets(answer, group.partition_id, count)
            return direct.via_lb(
                answer,
                lambda: parse_offsets(
                    self._http.call("POST", "/logs", body=body, idempotent=True), count
                ),
            )
        except RaftQClientError as exc:
            return exc

    def _body(self, batch: Batch) -> dict[str, object]:
        body: dict[str, object] = {
            "producer_id": self.producer_id,
            "topic": self.topic,
            "sequence": batch.sequence,
            "messages": [m.to_json() for m in batch.messages],
        }
        if self.partition_id is not None:
            body["partition_id"] = self.partition_id
        elif batch.partition_count is not None:
            body["partition_count"] = batch.partition_count
        durability = self._stated_durability()
        if durability is not None:
            body["durability"] = durability.value
        return body

    def _stated_durability(self) -> Durability | None:
        if self.durability is Durability.FSYNC:
            return None  # the service's default: bodies stay as before
        return self.durability

    def _register(self, producer_id: str | None) -> str:
        # Retrying may register a second, unused producer id: harmless, so idempotent=True.
        request: dict[str, object] = {"topic": self.topic}
        if producer_id is not None:
            request["producer_id"] = producer_id
        if self._fixed_partition_count is not None:
            request["partition_count"] = self._fixed_partition_count
        body = self._http.call("POST", "/producers", body=request, idempotent=True)
        if not isinstance(body, dict) or not isinstance(body.get("producer_id"), str):
            raise ProtocolError("POST /producers: expected {'producer_id': str}")
        pinned = body.get("partition_count")
        if pinned is not None:
            if not isinstance(pinned, int) or isinstance(pinned, bool) or pinned < 1:
                raise ProtocolError("POST /producers: 'partition_count' is not a count")
            # The count this id was first registered with wins: a replay routes as before.
            self._fixed_partition_count = pinned
        self._lease.renewed(body)
        registered: str = body["producer_id"]
        return registered

    def _renew_if_due(self) -> None:
        """Registering again under its id renews the lease (``raftq.lease``)."""
        if self._lease.due():
            try:
                self._register(self.producer_id)
            except RaftQClientError:
                self._lease.failed()  # the batch itself may still go (direct path)


def _acked_part(batch: Batch) -> tuple[PartitionOffset | None, ...]:
    """``ProduceError.acked_in_batch``: empty when no message of the batch was acknowledged."""
    return batch.acked if any(o is not None for o in batch.acked) else ()


def with_earlier_acks(
    earlier: Sequence[PartitionOffset | None], now: Sequence[PartitionOffset | None]
) -> tuple[PartitionOffset | None, ...]:
    """The acknowledgements of two attempts of one batch: a message acknowledged by either.
    An ack is never taken back (a resend of a stored group is recognised by its sequence
    and answered with the same offsets), so the earlier one is kept."""
    if not earlier:
        return tuple(now)
    check(len(earlier) == len(now), "two attempts of one batch have the same messages")
    return tuple(e if e is not None else n for e, n in zip(earlier, now, strict=True))


def _batch_error(failure: BatchFailure[RaftQClientError]) -> RaftQClientError:
    """The client's form of a failed batch (``protocol.produce_plan``): a partly written one
    is an unknown outcome (the batch stays queued, resent with its sequence). An
    UNKNOWN_PRODUCER is raised even then, so that ``_send_registered`` registers again and
    resends the batch, marked as after an unknown outcome: other groups may have stored."""
    error = failure.failure
    if failure.speaks_for_batch:
        return error
    if isinstance(error, ApiError) and error.code is ErrorCode.UNKNOWN_PRODUCER:
        error.after_unknown_outcome = True
        return error
    return UnavailableError(failure.partly_written, outcome_unknown=True, attempts=1)


def _failed(
    result: list[PartitionOffset] | RaftQClientError,
) -> TypeGuard[RaftQClientError]:
    return isinstance(result, RaftQClientError)


def _error_code(failure: RaftQClientError) -> ErrorCode | None:
    return failure.code if isinstance(failure, ApiError) else None


def _proves_nothing_done(failure: RaftQClientError) -> bool:
    """The failure proves its group stored nothing, on this attempt or any earlier one."""
    if isinstance(failure, ApiError):
        return failure.proves_nothing_done
    if isinstance(failure, UnavailableError):
        return not failure.outcome_unknown
    return False
