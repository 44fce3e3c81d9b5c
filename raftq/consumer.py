"""``Consumer``: pops messages for a registered consumer, or fetches by offset.

Each logical ``poll`` carries a fresh ``request_id``; its retries carry the same one, so the
partition hands back the same range instead of advancing twice. A poll whose retries are spent
keeps its request id, and the next ``poll`` asks with it again: a lost answer never makes the
consumer skip messages. Only an answer that proves nothing was claimed (``ApiError``'s
``proves_nothing_done``, the rule of ``protocol.errors``) ends a poll; a partition that
refuses once another claimed a range ends the pop with the records in hand instead.

With ``direct=True`` (the default) ``fetch`` asks the partition leader's broker, and ``poll``
of a consumer this object registered visits the partitions' brokers itself, in the manager's
order for ``(consumer_id, request_id)`` over the partition count it kept with the pending
poll. A failed direct attempt is repeated through the load balancer with the same request id
and that partition count (``partition_count``), so the manager visits the same partitions in
the same order; pops through the load balancer (``direct=False``) carry the count of their
first attempt too. A consumer resumed by ``consumer_id`` first confirms what it is
registered for: its first ``poll`` registers again under its id with its topic (and
partition), which the managers accept only when they match (409 otherwise) and which renews
its lease; from then on it pops as one registered here does. ``fetch`` alone registers
nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from types import TracebackType

from protocol import consume_plan
from protocol.errors import ErrorCode
from protocol.routing import pop_order
from protocol.types import PartitionId
from raftq.client_limits import ClientLimits
from raftq.direct_path import DirectPath, Fallback, FellBackError, partition_maps
from raftq.errors import ApiError, ProtocolError, RaftQClientError
from raftq.http import HttpTransport
from raftq.lease import Lease, repeat_if_forgotten
from raftq.records import Record, parse_records
from raftq.stream import FetchFrom, stream_partition


@dataclass(frozen=True, slots=True)
class PendingPoll:
    request_id: str
    max_messages: int
    sequence: int
    """The poll's pop sequence: above every earlier poll's of this consumer, so a late copy
    of an earlier poll is refused by the partitions instead of claiming a new range."""
    partition_count: int | None = None
    """The partition count the first attempt visited partitions by (fixes which partitions,
    and their order, on every attempt of this poll)."""
    outcome_unknown: bool = False
    """An attempt failed without proving it claimed nothing (a commit timeout, a lost
    answer): its Raft entry may still be applied later, whatever a later attempt answers."""
    wait_ms: int = 0
    """How long the poll may wait for a message when there is none (a long poll)."""


class Consumer:
    """Registers with ``POST /consumers`` on creation, unless given a ``consumer_id`` to
    resume. Not thread-safe: one per thread."""

    def __init__(
        self,
        url: str,
        topic: str,
        partition_id: int | None = None,
        *,
        consumer_id: str | None = None,
        limits: ClientLimits | None = None,
        direct: bool = True,
        api_key: str | None = None,
        tls_ca: str | None = None,
    ) -> None:
        """``direct``: read straight from the partition leaders' brokers (falling back to the
        load balancer); ``False`` reads everything through the load balancer. ``api_key``:
        a consumer (or admin) key, sent with every request. ``tls_ca``: the CA bundle
        ``https://`` certificates are checked against (default: the system's)."""
        self.topic = topic
        self.partition_id = partition_id
        limits = (limits or ClientLimits()).validate()
        self._http = HttpTransport(url, limits, api_key=api_key, tls_ca=tls_ca)
        self.direct_path = DirectPath(self._http, limits) if direct else None
        self._maps = (
            self.direct_path.maps
            if self.direct_path is not None
            else partition_maps(self._http, limits)
        )
        self._pending: PendingPoll | None = None
        self._limits = limits
        self._last_sequence = 0
        self._registration_known = consumer_id is None
        """Registered by this object, or resumed and confirmed: only then are its topic and
        partition known for sure, so only then may its pops go direct and fix their
        partition count, and its lease be renewed."""
        self._lease = Lease()
        try:
            self.consumer_id = consumer_id or self._register()
        except BaseException:
            self._http.close()
            raise

    def close(self) -> None:
        self._http.close()
        if self.direct_path is not None:
            self.direct_path.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def poll(self, max_messages: int = 100, wait_ms: int = 0) -> list[Record]:
        """Pop up to ``max_messages`` (fewer, maybe none, when the partition has no more),
        waiting up to ``wait_ms`` (at most the managers' ``long_poll_wait_ms_max``, 5 s) for
        one when there is none: a long poll, which costs the partitions no Raft entry while
        it waits."""
        self._confirm_registration()
        self._renew_if_due()
        if self._pending is None:
            sequence = self._next_sequence()
            self._pending = PendingPoll(str(uuid.uuid4()), max_messages, sequence, wait_ms=wait_ms)
        try:
            records = self._pop_registered(self._pending)
        except ApiError as exc:
            if exc.proves_nothing_done and not self._pending.outcome_unknown:
                self._pending = None  # no partition claimed anything: a new poll may start
            else:
                self._pending = replace(self._pending, outcome_unknown=True)
            raise
        except Exception:
            self._pending = replace(self._pending, outcome_unknown=True)
            raise
        # Any other failure keeps the pending poll, so the next poll repeats it with the same
        # sequence and gets back the ranges this one may have claimed. Once an attempt's
        # outcome was unknown, so does every later failure, even one proving that *its*
        # attempt claimed nothing (no leader, say): the unknown attempt's entry may still be
        # committed by the next leader, and a new poll would then skip its range (found by
        # the membership nemesis, seed 202: a pop timed out at a replication-factor-2 leader
        # whose follower was killed; later attempts got "no leader"; 14 messages skipped).
        self._pending = None
        return records

    def fetch(
        self,
        topic: str,
        partition_id: int,
        offset: int,
        max_messages: int = 100,
        wait_ms: int = 0,
    ) -> list[Record]:
        """Read committed messages ``[offset, offset + max_messages)`` without moving any
        consumer offset, waiting up to ``wait_ms`` for the first when there is none yet (a
        long poll: ``stream`` keeps one request open instead)."""
        params = _fetch_params(topic, partition_id, offset, wait_ms, max_messages)
        direct = self.direct_path
        if direct is not None and direct.usable_map(topic, partition_id) is not None:
            answer = direct.call(topic, partition_id, "GET", params=params)
            if not isinstance(answer, Fallback):
                return parse_records(answer)
            return direct.via_lb(answer, lambda: self._get_logs(params))
        return self._get_logs(params)

    def stream(self, topic: str, partition_id: int, offset: int = 0) -> Iterator[Record]:
        """Every message of the partition from ``offset`` on, as it comes, for as long as
        the caller iterates: over one open request to the partition's leader
        (``raftq.stream``), or with ``direct=False`` by long-polling fetches through the
        load balancer. Reads only: no consumer offset moves."""

        def via_lb(start: int) -> list[Record]:
            wait_ms = self._limits.stream_fallback_wait_ms
            return self._get_logs(_fetch_params(topic, partition_id, start, wait_ms))

        if self.direct_path is None:
            return _long_polled(via_lb, offset)
        where = (topic, partition_id)
        return stream_partition(self._http, self._maps, where, offset, via_lb, self._limits)

    def _pop_registered(self, pending: PendingPoll) -> list[Record]:
        """``_pop``; on 404 UNKNOWN_CONSUMER (the managers forgot this consumer: renewals
        they never saw, or their clock ahead of ours), register again under the same id and
        repeat the same poll once. The partitions still know the consumer, so ranges an
        earlier attempt claimed come back."""
        return repeat_if_forgotten(
            lambda: self._pop(self._pending or pending),
            ErrorCode.UNKNOWN_CONSUMER,
            lambda: self._register(self.consumer_id),
        )

    def _pop(self, pending: PendingPoll) -> list[Record]:
        direct = self.direct_path
        if direct is None or not self._registration_known:
            return self._pop_via_lb(pending)
        answer = self._pop_direct(direct, pending)
        if not isinstance(answer, Fallback):
            return answer
        pending = self._pending or pending
        return direct.via_lb(answer, lambda: self._pop_via_lb(pending))

    def _pop_direct(self, direct: DirectPath, pending: PendingPoll) -> list[Record] | Fallback:
        """Visit the partitions' brokers in the manager's order; a ``Fallback`` at the first
        failure (partitions visited before it keep their range for the repeat). A partition
        that refuses with an answer proving it claimed nothing ends the pop with the records
        in hand, as the manager's router does (``manager.log_router``): raising would end the
        poll, and the ranges claimed before would never be delivered."""
        count = pending.partition_count
        if count is None:
            found = direct.usable_map(self.topic, self.partition_id)
            if found is None:
                return Fallback("no partition map", outcome_unknown=False)
            count = found.partition_count
            self._pending = pending = replace(pending, partition_count=count)
        if self.partition_id is not None:
            partition_ids = [PartitionId(self.partition_id)]
        else:
            partition_ids = [PartitionId(p) for p in range(count)]
        order = pop_order(partition_ids, self.consumer_id, pending.request_id, 0)

        wait = consume_plan.PopWait(
            pending.wait_ms, time.monotonic(), single=len(order) == 1, if_ready=False
        )

        def ask(partition_id: PartitionId, remaining: int) -> list[Record]:
            params: dict[str, str | int] = {
                "topic": self.topic,
                "partition_id": partition_id,
                "consumer_id": self.consumer_id,
                "max_messages": remaining,
                "request_id": pending.request_id,
                "sequence": pending.sequence,
                **wait.params(time.monotonic()),
            }
            answer = direct.call(self.topic, partition_id, "GET", params=params)
            if isinstance(answer, Fallback):
                raise FellBackError(answer)
            return parse_records(answer)

        def ends_it(failure: Exception) -> bool:
            return (
                isinstance(failure, ApiError)
                and failure.proves_nothing_done
                and not pending.outcome_unknown
            )

        judged = (ApiError, FellBackError)
        try:
            while True:
                records = consume_plan.visit(
                    order, pending.max_messages, ask, judged, ends_it, _claimed
                )
                left_s = wait.left_s(time.monotonic())
                if records or left_s <= 0:
                    return records
                time.sleep(min(self._limits.long_poll_period_s, left_s))
        except FellBackError as fell:
            return fell.fallback

    def _next_sequence(self) -> int:
        """Microseconds since the epoch, kept above the last: increasing across polls, and
        across a restart of a consumer resumed by its id (unless the clock went back further
        than the pause; then its pops are refused with 409 until it catches up)."""
        self._last_sequence = max(self._last_sequence + 1, time.time_ns() // 1000)
        return self._last_sequence

    def _pop_via_lb(self, pending: PendingPoll) -> list[Record]:
        if self._visits_all_partitions and pending.partition_count is None:
            found = self._maps.get(self.topic)
            if found is not None:
                self._pending = pending = replace(pending, partition_count=found.partition_count)
        params: dict[str, str | int] = {
            "consumer_id": self.consumer_id,
            "max_messages": pending.max_messages,
            "request_id": pending.request_id,
            "sequence": pending.sequence,
        }
        if self._visits_all_partitions and pending.partition_count is not None:
            params["partition_count"] = pending.partition_count
        if pending.outcome_unknown:
            params["after_unknown_outcome"] = "true"
        if pending.wait_ms:
            params["wait_ms"] = pending.wait_ms
        answer = self._http.call(
            "GET",
            "/logs",
            params=params,
            idempotent=True,
            flag_after_unknown_outcome="after_unknown_outcome",
        )
        return parse_records(answer)

    @property
    def _visits_all_partitions(self) -> bool:
        """Registered for the whole topic: its pops visit every partition."""
        return self._registration_known and self.partition_id is None

    def _get_logs(self, params: dict[str, str | int]) -> list[Record]:
        return parse_records(self._http.call("GET", "/logs", params=params, idempotent=True))

    def _register(self, consumer_id: str | None = None) -> str:
        """Register, or with ``consumer_id`` renew that registration (``raftq.lease``)."""
        body: dict[str, object] = {"topic": self.topic}
        if self.partition_id is not None:
            body["partition_id"] = self.partition_id
        if consumer_id is not None:
            body["consumer_id"] = consumer_id
        # Retrying may register a second, unused consumer: harmless, so idempotent=True.
        answer = self._http.call("POST", "/consumers", body=body, idempotent=True)
        if not isinstance(answer, dict) or not isinstance(answer.get("consumer_id"), str):
            raise ProtocolError("POST /consumers: expected {'consumer_id': str}")
        self._lease.renewed(answer)
        registered: str = answer["consumer_id"]
        return registered

    def _confirm_registration(self) -> None:
        """A resumed consumer learns what it is registered for by registering again under its
        id with its topic and partition: accepted only when they match (``ApiError`` 409
        otherwise; an expired registration is made anew, as the next registration would)."""
        if self._registration_known:
            return
        try:
            registered = self._register(self.consumer_id)
        except ApiError as exc:
            if exc.status != 409:
                raise
            where = "" if self.partition_id is None else f", partition {self.partition_id}"
            raise ApiError(
                exc.status,
                exc.error_code,
                f"consumer {self.consumer_id!r} is registered for another topic or partition "
                f"than topic {self.topic!r}{where}",
            ) from exc
        if registered != self.consumer_id:
            raise ProtocolError("POST /consumers answered another consumer id")
        self._registration_known = True

    def _renew_if_due(self) -> None:
        # Only a consumer whose registration is known knows what to renew.
        if self._registration_known and self._lease.due():
            try:
                self._register(self.consumer_id)
            except RaftQClientError:
                self._lease.failed()  # the pop itself may still work (direct path)


def _fetch_params(
    topic: str, partition_id: int, offset: int, wait_ms: int, max_messages: int = 1_000
) -> dict[str, str | int]:
    params: dict[str, str | int] = {
        "topic": topic,
        "partition_id": partition_id,
        "offset": offset,
        "max_messages": max_messages,
    }
    if wait_ms:
        params["wait_ms"] = wait_ms
    return params


def _long_polled(fetch_from: FetchFrom, offset: int) -> Iterator[Record]:
    while True:
        for record in fetch_from(offset):
            offset = record.offset + 1
            yield record


def _claimed(_partition_id: PartitionId, failure: Exception) -> Exception:
    """A failure after earlier partitions claimed ranges for this poll: they may have, and
    this one may have claimed one whose answer was lost, so the outcome is unknown (ending
    the poll now would skip a range; the next poll repeats)."""
    if isinstance(failure, FellBackError):
        return FellBackError(Fallback(failure.fallback.reason, outcome_unknown=True))
    if isinstance(failure, ApiError):
        failure.after_unknown_outcome = True
    return failure
