"""``LogRouter``: forwards ``/logs`` (produce, pop, fetch) to brokers hosting the partition.

A request goes to the partition leader's broker when polling knows it, else to another alive
replica's. The next replica is tried only when the previous one provably did not process the
request (connection refused, a 5xx that ``proves_nothing_done``, or 404 UNKNOWN_PARTITION: a
replica placed on that broker but not hosted yet), or when repeating is harmless anyway (a
pop with its request id, a fetch, a produce with a sequence: each partition de-duplicates
those). Any other broker error goes back to the caller unchanged, except a 4xx after an
attempt whose outcome is unknown: that becomes 503 UNAVAILABLE, since the 4xx proves
nothing about the earlier attempt.

A produce is planned by ``protocol.produce_plan`` (the cut, each group's body, the merged
answer and which failure speaks for the whole batch), as the client's direct path plans it.
A pop over several partitions stops at a partition that refuses it with an answer proving
nothing was done there, and answers what the partitions before it claimed (``pop``).
With the caller's ``Deadline`` nothing more is sent once it has passed, and each broker is
told what is left of it (``protocol.deadline``).

Threads: HTTP threads; produce groups for several partitions run on the shared executor.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor

from manager.broker_client import BrokerClient, BrokerRefusalError
from manager.broker_monitor import BrokerMonitor
from manager.log_routing import broker_order, pop_order, routing_count
from manager.raft import RegistryMachine
from manager.registry.brokers import BrokerRecord
from manager.registry.clients import ConsumerRecord, ProducerRecord
from manager.registry.topics import PartitionRecord, TopicRecord
from protocol import consume_plan, produce_plan
from protocol.consume_plan import receive_order
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError, proves_nothing_done
from protocol.group_requests import (
    BrokerReceive,
    DeliveryReceipt,
    GroupReceive,
    GroupRedrive,
    GroupSettingsParams,
    Ordering,
    Outcome,
    SettleRequest,
)
from protocol.produce_plan import BatchFailure, ProducePlan
from protocol.requests import Fetch, Pop, Produce, invalid
from protocol.routing import PartitionGroup
from protocol.types import BrokerId, PartitionId, RequestId
from runtime.http_client import HttpAnswer, NoAnswerError

BrokerCall = Callable[[str], HttpAnswer]
GroupStored = tuple[list[dict[str, object]], object]
"""A partition group's offsets (each ``{"partition_id", "offset"}``, in the group's order),
and its broker's ``ack`` (``protocol.types.Ack`` as JSON), passed on unchanged."""


class LogRouter:
    def __init__(
        self,
        raft: RegistryMachine,
        brokers: BrokerClient,
        monitor: BrokerMonitor,
        executor: Executor,
        *,
        poll_period_s: float,
    ) -> None:
        """``poll_period_s``: a long-polling receive's pause between asks."""
        self._raft = raft
        self._brokers = brokers
        self._monitor = monitor
        self._executor = executor
        self._poll_period_s = poll_period_s
        self._round_robin = itertools.count()  # next() is atomic under the GIL

    # --- produce -----------------------------------------------------------------------------
    def produce(self, request: Produce, deadline: Deadline | None = None) -> dict[str, object]:
        if request.producer_id is None:
            raise invalid("missing field 'producer_id' (register with POST /producers)")
        producer = self._raft.read(lambda s: s.clients.producer(request.producer_id or ""))
        if producer is None:
            raise RaftQError(ErrorCode.UNKNOWN_PRODUCER, "unknown producer; register it first")
        if producer.topic != request.topic:
            raise invalid(f"producer is registered for topic {producer.topic!r}")
        return self.produce_unregistered(request, deadline)

    def produce_unregistered(
        self, request: Produce, deadline: Deadline | None = None
    ) -> dict[str, object]:
        """A produce routed as any, without a producer registration: the managers' own (a
        dead letter's copy, under an id no client registers)."""
        topic = self._active_topic(request.topic)
        count = routing_count(topic, request.partition_count)
        if request.partition_id is not None and request.partition_id >= count:
            raise RaftQError(
                ErrorCode.UNKNOWN_PARTITION,
                f"{topic.name!r} has no partition {request.partition_id}",
            )
        plan = produce_plan.cut(
            topic.name,
            request.messages,
            count,
            partition_id=request.partition_id,
            producer_id=request.producer_id,
            sequence=request.sequence,
            durability=request.durability,
            round_robin=next(self._round_robin),
        )
        results = self._produce_groups(plan, topic, deadline)
        merged = plan.merge(
            [r if isinstance(r, Exception) else r[0] for r in results],
            error_code,
            _proves_nothing_done,
        )
        if isinstance(merged, BatchFailure):
            raise _batch_error(merged)
        acks = [r[1] for r in results if not isinstance(r, Exception)]
        if request.is_batch:
            return {"offsets": merged, "acks": acks}
        return {**merged[0], "ack": acks[0]}

    def _produce_groups(
        self, plan: ProducePlan, topic: TopicRecord, deadline: Deadline | None
    ) -> list[GroupStored | Exception]:
        """Each group's offsets and ack, or failure. One group (the common case) is sent from this
        thread; several go out in parallel. Every group is waited for: answering at the first
        failure could tell the client "nothing was done" (429, 503 NO_LEADER) while another
        partition stored its part."""
        calls: list[Callable[[], GroupStored]]
        if len(plan.groups) == 1:
            calls = [lambda: self._produce_group(plan, topic, plan.groups[0], deadline)]
        else:
            futures = [
                self._executor.submit(self._produce_group, plan, topic, g, deadline)
                for g in plan.groups
            ]
            calls = [future.result for future in futures]
        results: list[GroupStored | Exception] = []
        for call in calls:
            try:
                results.append(call())
            except (RaftQError, BrokerRefusalError) as exc:
                results.append(exc)
        return results

    def _produce_group(
        self,
        plan: ProducePlan,
        topic: TopicRecord,
        group: PartitionGroup,
        deadline: Deadline | None,
    ) -> GroupStored:
        body = plan.body(group)
        answer = self._send(
            topic.partitions[group.partition_id],
            topic.name,
            lambda address: self._brokers.produce(address, body, deadline),
            repeat_is_harmless=plan.sequence is not None,
            deadline=deadline,
        )
        offsets = answer.body.get("offsets") if isinstance(answer.body, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == len(group.indexes)):
            raise RaftQError(ErrorCode.INTERNAL, "a broker answered a produce without offsets")
        ack = answer.body.get("ack") if isinstance(answer.body, dict) else None
        return [{"partition_id": group.partition_id, "offset": int(o)} for o in offsets], ack

    # --- consume -----------------------------------------------------------------------------
    def consumer_topic(self, consumer_id: str) -> str | None:
        """The topic a registered consumer reads (what its pops are checked against)."""
        consumer = self.consumer(consumer_id)
        return None if consumer is None else consumer.topic

    def consumer(self, consumer_id: str) -> ConsumerRecord | None:
        return self._raft.read(lambda s: s.clients.consumer(consumer_id))

    def producer(self, producer_id: str) -> ProducerRecord | None:
        return self._raft.read(lambda s: s.clients.producer(producer_id))

    def pop(self, request: Pop, deadline: Deadline | None = None) -> dict[str, object]:
        consumer = self._raft.read(lambda s: s.clients.consumer(request.consumer_id))
        if consumer is None:
            raise RaftQError(ErrorCode.UNKNOWN_CONSUMER, "unknown consumer; register it first")
        topic = self._active_topic(consumer.topic)
        if consumer.partition_id is not None:
            partition_ids = [consumer.partition_id]
        else:
            count = routing_count(topic, request.partition_count)
            partition_ids = [PartitionId(p) for p in range(count)]
        order = pop_order(
            partition_ids, request.consumer_id, request.request_id, next(self._round_robin)
        )
        request_id = request.request_id or uuid.uuid4().hex
        wait = consume_plan.PopWait(
            request.wait_ms, time.monotonic(), single=len(order) == 1, if_ready=request.if_ready
        )

        def ask(partition_id: PartitionId, remaining: int) -> list[object]:
            params = {
                "topic": topic.name,
                "partition_id": str(partition_id),
                "consumer_id": request.consumer_id,
                "max_messages": str(remaining),
                "request_id": request_id,
                **wait.params(time.monotonic()),
            }
            if request.sequence is not None:
                params["sequence"] = str(request.sequence)
            return self._read(topic, partition_id, params, deadline)

        def ends_it(failure: Exception) -> bool:
            # This partition refuses this consumer (a full consumer table, a key revoked
            # since): answer what the others claimed. A failure here would end the client's
            # poll, and their ranges would never be delivered. Stopping here keeps a repeat
            # exact: the partitions before give their ranges again, and none after this one
            # was asked. Only a 4xx: a 503 that proves *this* attempt did nothing (no leader,
            # during an election) says nothing of an earlier attempt of the same pop, which
            # may have claimed a range there whose answer was lost; answering without it
            # would end the poll and skip that range (found by the multi-host
            # network-partition tier: 52 messages skipped). Nor after an attempt whose
            # outcome was unknown, as the client says. Otherwise the whole pop fails, even
            # with messages in hand (``_claimed_before``): this partition may have advanced
            # the consumer's offset before its answer was lost (e.g. its leader was
            # killed); the client repeats the pop with the same sequence and every
            # partition that served it hands back the same range (found by stress_tests:
            # offset_gap after kill -9).
            return _refused_for_good(failure) and not request.after_unknown_outcome

        judged = (RaftQError, BrokerRefusalError)
        while True:
            messages = consume_plan.visit(
                order, request.max_messages, ask, judged, ends_it, _claimed_before
            )
            left_s = wait.left_s(time.monotonic())
            if messages or left_s <= 0 or (deadline and deadline.expired(time.monotonic())):
                return {"messages": messages}
            # Each partition answered ``if_ready`` without a Raft entry: ask again.
            time.sleep(min(self._poll_period_s, left_s))

    def fetch(self, request: Fetch, deadline: Deadline | None = None) -> dict[str, object]:
        topic = self._active_partition(request.topic, request.partition_id)
        params = request.to_params()
        return {"messages": self._read(topic, request.partition_id, params, deadline)}

    def _read(
        self,
        topic: TopicRecord,
        partition_id: PartitionId,
        params: dict[str, str],
        deadline: Deadline | None,
    ) -> list[object]:
        answer = self._send(
            topic.partitions[partition_id],
            topic.name,
            lambda address: self._brokers.read(address, params, deadline),
            repeat_is_harmless=True,
            deadline=deadline,
        )
        found = answer.body.get("messages") if isinstance(answer.body, dict) else None
        if not isinstance(found, list):
            raise RaftQError(ErrorCode.INTERNAL, "a broker answered a read without messages")
        return found

    # --- consumer groups (issue 20) ---------------------------------------------------------
    def receive(self, receive: GroupReceive, deadline: Deadline | None = None) -> dict[str, object]:
        """Lease up to ``max_messages`` messages of the group over the topic's partitions,
        with the group's settings from the registry (``protocol.consume_plan``: a failure
        after some leased answers those)."""
        topic = self._active_topic(receive.topic)
        group = receive.group
        settings = self._group_settings(topic.name, group)
        order = receive_order(
            topic.active_count, group, receive.request_id, next(self._round_robin)
        )
        request = RequestId(receive.request_id or uuid.uuid4().hex)
        max_messages = receive.max_messages

        single = len(order) == 1  # a long poll of one partition waits at its broker
        wait_until_s = time.monotonic() + receive.wait_ms / 1000

        def ask(partition_id: PartitionId, wanted: int) -> list[object]:
            left_ms = max(0, int((wait_until_s - time.monotonic()) * 1000)) if single else 0
            params = BrokerReceive(
                topic.name, partition_id, group, settings, wanted, request, left_ms
            ).to_params()
            answer = self._send(
                topic.partitions[partition_id],
                topic.name,
                lambda address: self._brokers.receive(address, group, params, deadline),
                repeat_is_harmless=True,
                deadline=deadline,
            )
            return _listed(answer, "messages")

        while True:
            messages = consume_plan.receive(order, max_messages, ask)
            now_s = time.monotonic()
            if messages or now_s >= wait_until_s or (deadline and deadline.expired(now_s)):
                return {"messages": messages}
            # Each ask that found nothing was answered without a Raft entry; an empty
            # answer is not remembered under the request id, so asking again is safe.
            time.sleep(min(self._poll_period_s, wait_until_s - now_s))

    def settle(self, request: SettleRequest, deadline: Deadline | None = None) -> dict[str, object]:
        """Ack, nack or extend: each partition's receipts to its broker; the outcomes in the
        order of the receipts. A receipt of a partition the topic does not have was never
        handed out: ``unknown``."""
        topic = self._active_topic(request.topic)
        self._group_settings(topic.name, request.group)  # 404 for a group never defined

        def ask(partition_id: PartitionId, receipts: tuple[DeliveryReceipt, ...]) -> list[str]:
            if partition_id >= topic.active_count:
                return [Outcome.UNKNOWN.value] * len(receipts)
            body = request.broker_body(partition_id, receipts)
            answer = self._send(
                topic.partitions[partition_id],
                topic.name,
                lambda address: self._brokers.settle(
                    address, request.group, request.action, body, deadline
                ),
                repeat_is_harmless=True,
                deadline=deadline,
            )
            return [
                str(o.get("outcome")) if isinstance(o, dict) else ""
                for o in _listed(answer, "outcomes")
            ]

        pairs = consume_plan.settle(request.receipts, ask)
        return {"outcomes": [{"receipt": r.to_wire(), "outcome": o} for r, o in pairs]}

    def redrive(self, request: GroupRedrive, deadline: Deadline | None = None) -> tuple[int, int]:
        """One partition's part of a redrive (``manager.redrive``), at its leader: the
        messages made deliverable again there, and those retention had removed."""
        topic = self._active_partition(request.topic, request.partition_id)
        answer = self._send(
            topic.partitions[request.partition_id],
            topic.name,
            lambda address: self._brokers.redrive(address, request, deadline),
            repeat_is_harmless=request.request_id is not None,
            deadline=deadline,
        )
        body = answer.body if isinstance(answer.body, dict) else {}
        redriven, gone = body.get("redriven"), body.get("gone")
        if not (isinstance(redriven, int) and isinstance(gone, int)):
            raise RaftQError(ErrorCode.INTERNAL, "a broker answered a redrive without counts")
        return redriven, gone

    def _group_settings(self, topic: str, group: str) -> GroupSettingsParams:
        entry = self._raft.read(lambda s: s.groups.get(topic, group))
        if entry is None:
            raise RaftQError(
                ErrorCode.NOT_FOUND,
                f"topic {topic!r} has no consumer group {group!r}: create it with POST /groups",
            )
        return GroupSettingsParams(
            entry.visibility_timeout_ms, entry.max_deliveries, Ordering(entry.ordering)
        )

    # --- choosing a broker -------------------------------------------------------------------
    def _send(
        self,
        partition: PartitionRecord,
        topic: str,
        call: BrokerCall,
        *,
        repeat_is_harmless: bool,
        deadline: Deadline | None,
    ) -> HttpAnswer:
        """The first 2xx answer of the partition's brokers, trying at most one per replica."""
        brokers = self._raft.read(lambda s: {b.broker_id: b for b in s.brokers.all()})
        alive = {b.broker_id for b in brokers.values() if b.alive}
        leader = self._monitor.leader_of(topic, partition.partition_id)
        last_reason = "no replica broker is registered"
        outcome_unknown = False
        silent = self._monitor.silent()
        for broker_id in broker_order(partition, leader, alive, silent):
            broker: BrokerRecord | None = brokers.get(BrokerId(broker_id))
            if broker is None:
                continue
            try:
                answer = call(broker.address)
            except NoAnswerError as exc:
                if not (exc.refused or repeat_is_harmless):
                    raise
                last_reason = exc.message
                outcome_unknown = outcome_unknown or not exc.refused
                continue
            if 200 <= answer.status < 300:
                return answer
            if not (_says_not_processed(answer) or _not_hosted(answer)):
                if outcome_unknown and answer.status < 500:
                    # A refusal here proves nothing about the earlier replica's attempt, which
                    # may have acted: a 4xx would tell the client "nothing was done".
                    raise RaftQError(
                        ErrorCode.UNAVAILABLE,
                        f"broker {broker_id} answered {answer.status} {answer.body} after an "
                        f"attempt whose outcome is unknown ({last_reason}): retry with the same "
                        "sequence or request id",
                    )
                raise BrokerRefusalError(answer)
            last_reason = f"broker {broker_id} answered {answer.status}: {answer.body}"
        if deadline is not None and deadline.expired(time.monotonic()):
            last_reason = f"the caller's deadline passed (last: {last_reason})"
        raise RaftQError(
            ErrorCode.UNAVAILABLE if outcome_unknown else ErrorCode.REFUSED,
            f"no replica of {topic}/{partition.partition_id} took the request: {last_reason}",
        )

    def _active_partition(self, name: str, partition_id: int) -> TopicRecord:
        """The topic, which has an active partition ``partition_id``."""
        topic = self._active_topic(name)
        if partition_id >= topic.active_count:
            raise RaftQError(
                ErrorCode.UNKNOWN_PARTITION, f"{topic.name!r} has no partition {partition_id}"
            )
        return topic

    def _active_topic(self, name: str) -> TopicRecord:
        topic = self._raft.read(lambda s: s.topics.get(name))
        if topic is None or not topic.is_active:
            raise RaftQError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        return topic


def _listed(answer: HttpAnswer, name: str) -> list[object]:
    found = answer.body.get(name) if isinstance(answer.body, dict) else None
    if not isinstance(found, list):
        raise RaftQError(ErrorCode.INTERNAL, f"a broker answered without {name!r}")
    return found


def _batch_error(failure: BatchFailure[Exception]) -> Exception:
    """The router's answer for a batch some of whose groups failed (``protocol.produce_plan``):
    a failure that is not true of the whole batch becomes PARTIALLY_WRITTEN, an unknown
    outcome the client retries with the same sequence."""
    if failure.speaks_for_batch:
        return failure.failure
    return RaftQError(ErrorCode.PARTIALLY_WRITTEN, failure.partly_written)


def _claimed_before(partition_id: PartitionId, failure: Exception) -> RaftQError:
    """The error of a pop that failed at ``partition_id`` after earlier partitions claimed
    ranges for it: an unknown outcome, whatever this partition answered. Its own "nothing
    done" (no leader, no replica took it) is true of it alone; passed on, it ended the
    client's poll, and the ranges claimed before were never delivered (found by the long
    tier's mixed chaos, seed 61637: 70 messages of two partitions skipped)."""
    return RaftQError(
        ErrorCode.UNAVAILABLE,
        f"partitions before {partition_id} claimed ranges for this pop, then it failed "
        f"({failure}): repeat the same pop (same sequence or request id) to get them",
    )


def _proves_nothing_done(failure: Exception) -> bool:
    if isinstance(failure, BrokerRefusalError):
        return proves_nothing_done(failure.answer.status, failure.answer.body)
    if isinstance(failure, RaftQError):
        return failure.code.proves_nothing_done
    return False


def _refused_for_good(failure: Exception) -> bool:
    """A partition's 4xx to a pop: it claimed nothing, and would refuse a repeat as well."""
    code = error_code(failure)
    return code is not None and code.status < 500 and _proves_nothing_done(failure)


def error_code(failure: Exception) -> ErrorCode | None:
    """The code of a router failure: a ``RaftQError``'s, or a broker's answer passed on."""
    if isinstance(failure, RaftQError):
        return failure.code
    if isinstance(failure, BrokerRefusalError):
        status, body = failure.answer.status, failure.answer.body
        return RaftQError.from_json(status, body).code
    return None


def _not_hosted(answer: HttpAnswer) -> bool:
    """A broker's 404 UNKNOWN_PARTITION: it does not host the replica (yet: a move placed it
    there before starting it; or any more). It did nothing, and another replica may serve;
    the manager checked that the partition exists before sending."""
    body = answer.body
    code = body.get("error_code") if isinstance(body, dict) else None
    return answer.status == 404 and code == ErrorCode.UNKNOWN_PARTITION.value


def _says_not_processed(answer: HttpAnswer) -> bool:
    """A broker's 5xx that proves it did nothing: another replica may take the request. (A
    4xx proves it too, but it is the caller's to see: another replica would answer the same;
    so is NOT_ENOUGH_REPLICAS: the leader alone knows, and the others refuse as well.)"""
    body = answer.body
    code = body.get("error_code") if isinstance(body, dict) else None
    if code == ErrorCode.NOT_ENOUGH_REPLICAS.value:
        return False
    return answer.status >= 500 and proves_nothing_done(answer.status, answer.body)
