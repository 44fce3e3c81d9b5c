"""``GroupMember``: one member of a consumer group with leased delivery (issue 20).

A receive leases messages to this member for the group's visibility timeout; each comes as
a ``Delivery`` with its receipt and delivery count. ``ack`` ends a message's life in the
group, ``nack`` makes it deliverable again (at once, or after ``delay_ms``), ``extend``
keeps a lease for longer. A member that dies holding leases loses nothing: they end, and
the messages go to another member. ``working`` runs a block of work on deliveries and
settles them by how it ended: extended while it runs, acked when it returns, nacked when
it raises.

Each ``receive`` carries a fresh ``request_id``; its retries carry the same one, so each
partition hands back the leases it gave the first attempt. A receive whose retries are
spent keeps its request id for the next one (its leases come back at once, rather than
after their visibility timeout). Settling is idempotent by receipt and is retried freely.

With ``direct=True`` (the default) a receive asks the partitions' leaders itself, in the
managers' order (``protocol.consume_plan``, with the group's settings read at the start), and
a settle sends each partition's receipts to its leader; the first failure that leaves
nothing in hand repeats the whole call through the load balancer, with the same request
id (a receive) or the same receipts (a settle: idempotent).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import quote

from protocol import consume_plan
from protocol.errors import ErrorCode
from protocol.group_requests import (
    BrokerReceive,
    DeliveryReceipt,
    GroupSettingsParams,
    Ordering,
    SettleRequest,
)
from protocol.types import PartitionId, RequestId
from raftq.client_limits import ClientLimits
from raftq.direct_path import DirectPath, Fallback, FellBackError
from raftq.errors import ApiError, ProtocolError, RaftQClientError
from raftq.http import HttpTransport
from raftq.records import Record, parse_deliveries, parse_groups, parse_outcomes

Leased = tuple[Record, int, str]
"""A delivery as answered: the record, its delivery count and its receipt."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message leased to this member: settle it by its ``receipt``."""

    record: Record
    delivery_count: int
    """1 on its first delivery; more after leases that ended or nacks."""
    receipt: str
    member: GroupMember = field(repr=False, compare=False)

    def ack(self) -> str:
        return self.member.ack([self])[0][1]

    def nack(self, delay_ms: int = 0) -> str:
        return self.member.nack([self], delay_ms)[0][1]

    def extend(self, visibility_timeout_ms: int) -> str:
        return self.member.extend([self], visibility_timeout_ms)[0][1]


class GroupMember:
    """A member of ``group`` of ``topic`` (created first with ``Admin.create_group``). Not
    thread-safe (``working`` extends from a thread of its own, with its own transport)."""

    def __init__(
        self,
        url: str,
        topic: str,
        group: str,
        *,
        limits: ClientLimits | None = None,
        direct: bool = True,
        api_key: str | None = None,
        tls_ca: str | None = None,
    ) -> None:
        """Reads the group's settings once (``ApiError`` 404 when the group or its topic
        does not exist)."""
        self.topic = topic
        self.group = group
        limits = (limits or ClientLimits()).validate()
        self._http = HttpTransport(url, limits, api_key=api_key, tls_ca=tls_ca)
        self._keeper_http = HttpTransport(url, limits, api_key=api_key, tls_ca=tls_ca)
        """``working``'s thread's own (a transport serves one thread at a time)."""
        self._keeper_lock = threading.Lock()
        self._poll_s = limits.long_poll_period_s
        self.direct_path = DirectPath(self._http, limits) if direct else None
        self._path = f"/groups/{quote(group, safe='')}"
        self._pending_request: str | None = None
        try:
            self.settings = self._settings()
        except BaseException:
            self.close()
            raise
        self.visibility_timeout_ms = self.settings.visibility_timeout_ms

    def close(self) -> None:
        if self.direct_path is not None:
            self.direct_path.close()
        self._http.close()
        self._keeper_http.close()

    def __enter__(self) -> GroupMember:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def receive(self, max_messages: int = 10, wait_ms: int = 0) -> list[Delivery]:
        """Up to ``max_messages`` deliveries; when none is deliverable, waits up to
        ``wait_ms`` (at most the managers' ``long_poll_wait_ms_max``, 5 s) for one."""
        request_id = self._pending_request or uuid.uuid4().hex
        self._pending_request = request_id
        until_s = time.monotonic() + wait_ms / 1000
        found = self._receive_direct(request_id, max_messages, wait_ms)
        while not found and time.monotonic() < until_s:
            time.sleep(min(self._poll_s, max(0.0, until_s - time.monotonic())))
            left_ms = max(0, int((until_s - time.monotonic()) * 1000))
            found = self._receive_direct(request_id, max_messages, left_ms)
        if isinstance(found, Fallback):
            left_ms = max(0, int((until_s - time.monotonic()) * 1000))
            found = self._receive_fallback(found, request_id, max_messages, left_ms)
        self._pending_request = None
        return [Delivery(record, count, receipt, self) for record, count, receipt in found]

    def _receive_fallback(
        self, fallback: Fallback, request_id: str, max_messages: int, wait_ms: int
    ) -> list[Leased]:
        def via_lb() -> list[Leased]:
            return self._receive_via_lb(request_id, max_messages, wait_ms)

        if self.direct_path is None:
            return via_lb()
        return self.direct_path.via_lb(fallback, via_lb)

    def _receive_via_lb(self, request_id: str, max_messages: int, wait_ms: int) -> list[Leased]:
        params: dict[str, str | int] = {
            "topic": self.topic,
            "max_messages": max_messages,
            "request_id": request_id,
            "wait_ms": wait_ms,
        }
        body = self._http.call("GET", f"{self._path}/messages", params=params, idempotent=True)
        return parse_deliveries(body, f"GET {self._path}/messages")

    def _receive_direct(
        self, request_id: str, max_messages: int, wait_ms: int = 0
    ) -> list[Leased] | Fallback:
        """The partitions' leaders in the managers' order; a ``Fallback`` when the first
        failure comes before any lease (after one, ``consume_plan`` answers those)."""
        direct = self.direct_path
        found = None if direct is None else direct.usable_map(self.topic)
        if direct is None or found is None:
            return Fallback("direct=False, or no partition map", outcome_unknown=False)
        order = consume_plan.receive_order(found.partition_count, self.group, request_id, 0)
        path = f"{self._path}/messages"
        wait_ms = wait_ms if len(order) == 1 else 0  # one partition: its broker waits

        def ask(partition_id: PartitionId, wanted: int) -> list[Leased]:
            request = BrokerReceive(
                self.topic,
                partition_id,
                self.group,
                self.settings,
                wanted,
                RequestId(request_id),
                wait_ms,
            )
            params = request.to_params()
            answer = direct.call(self.topic, partition_id, "GET", params=params, path=path)
            if isinstance(answer, Fallback):
                raise FellBackError(answer)
            return parse_deliveries(answer, f"GET {path}")

        try:
            return consume_plan.receive(order, max_messages, ask)
        except FellBackError as exc:
            return exc.fallback

    def __iter__(self) -> Iterator[Delivery]:
        """Deliveries for ever, one receive at a time (settle each before the next)."""
        while True:
            yield from self.receive()

    def ack(self, deliveries: Iterable[Delivery | str]) -> list[tuple[str, str]]:
        """Each receipt with its outcome: ``done``, ``already`` (settled before),
        ``stale`` (its lease ended: the message is another delivery's now) or ``unknown``."""
        return self._settle("ack", deliveries, {})

    def nack(
        self, deliveries: Iterable[Delivery | str], delay_ms: int = 0
    ) -> list[tuple[str, str]]:
        """As ``ack``'s, and ``ended``: that delivery had ended already (a repeat of this
        nack, or its lease ran out), and the message waits to be delivered again."""
        return self._settle("nack", deliveries, {"delay_ms": delay_ms})

    def extend(
        self, deliveries: Iterable[Delivery | str], visibility_timeout_ms: int
    ) -> list[tuple[str, str]]:
        """The leases last ``visibility_timeout_ms`` from now."""
        return self._settle("extend", deliveries, {"visibility_timeout_ms": visibility_timeout_ms})

    @contextmanager
    def working(self, deliveries: list[Delivery]) -> Iterator[list[Delivery]]:
        """Extend the leases every third of the visibility timeout while the block runs;
        ack them when it returns, nack them when it raises (the exception goes on)."""
        stop = threading.Event()
        keeper = threading.Thread(
            target=self._keep_extended, args=(deliveries, stop), name="raftq-lease", daemon=True
        )
        keeper.start()
        try:
            yield deliveries
        except BaseException:
            stop.set()
            keeper.join()
            self.nack(deliveries)
            raise
        stop.set()
        keeper.join()
        self.ack(deliveries)

    def _keep_extended(self, deliveries: list[Delivery], stop: threading.Event) -> None:
        period_s = self.visibility_timeout_ms / 3000
        extra: dict[str, object] = {"visibility_timeout_ms": self.visibility_timeout_ms}
        while not stop.wait(period_s):
            try:
                with self._keeper_lock:
                    self._settle("extend", deliveries, extra, self._keeper_http)
            except RaftQClientError:
                continue  # the next period tries again; a lease that ends is delivered again

    def _settle(
        self,
        action: str,
        deliveries: Iterable[Delivery | str],
        extra: dict[str, object],
        http: HttpTransport | None = None,
    ) -> list[tuple[str, str]]:
        receipts = [d.receipt if isinstance(d, Delivery) else d for d in deliveries]
        if not receipts:
            return []
        if http is None and self.direct_path is not None:
            answered = self._settle_direct(self.direct_path, action, receipts, extra)
            if not isinstance(answered, Fallback):
                return answered
            fallback = answered
            return self.direct_path.via_lb(
                fallback, lambda: self._settle_via_lb(action, receipts, extra, self._http)
            )
        return self._settle_via_lb(action, receipts, extra, http or self._http)

    def _settle_via_lb(
        self, action: str, receipts: list[str], extra: dict[str, object], http: HttpTransport
    ) -> list[tuple[str, str]]:
        body = {"topic": self.topic, "receipts": receipts, **extra}
        path = f"{self._path}/{action}"
        answer = http.call("POST", path, body=body, idempotent=True)
        return parse_outcomes(answer, f"POST {path}")

    def _settle_direct(
        self, direct: DirectPath, action: str, receipts: list[str], extra: dict[str, object]
    ) -> list[tuple[str, str]] | Fallback:
        """Each partition's receipts to its leader; a ``Fallback`` at the first failure
        (repeating every receipt through the load balancer is safe: idempotent)."""
        parsed = [DeliveryReceipt.from_wire(r) for r in receipts]
        if any(p is None for p in parsed) or direct.usable_map(self.topic) is None:
            return Fallback("receipts the managers must judge, or no partition map", False)
        duration = extra.get("delay_ms", extra.get("visibility_timeout_ms", 0))
        request = SettleRequest(
            self.topic,
            self.group,
            action,
            tuple(p for p in parsed if p is not None),
            duration if isinstance(duration, int) else 0,
        )
        path = f"{self._path}/{action}"

        def ask(partition_id: PartitionId, of: tuple[DeliveryReceipt, ...]) -> list[str]:
            body = request.broker_body(partition_id, of)
            answer = direct.call(self.topic, partition_id, "POST", body=body, path=path)
            if isinstance(answer, Fallback):
                raise FellBackError(answer)
            return [outcome for _, outcome in parse_outcomes(answer, f"POST {path}")]

        try:
            pairs = consume_plan.settle(request.receipts, ask)
        except FellBackError as exc:
            return exc.fallback
        return [(receipt.to_wire(), outcome) for receipt, outcome in pairs]

    def _settings(self) -> GroupSettingsParams:
        body = self._http.call("GET", "/groups", params={"topic": self.topic}, idempotent=True)
        for found in parse_groups(body):
            if found.group == self.group:
                try:
                    ordering = Ordering(found.ordering)
                except ValueError:
                    raise ProtocolError(f"GET /groups: ordering {found.ordering!r}") from None
                return GroupSettingsParams(
                    found.visibility_timeout_ms, found.max_deliveries, ordering
                )
        raise ApiError(
            404, ErrorCode.NOT_FOUND.value, f"no group {self.group!r} of topic {self.topic!r}"
        )
