"""The direct path: a produce, pop or fetch (or a consumer group's receive or settle) for one
partition goes straight to the broker the partition map names as its leader, and falls back
to the load balancer (LB) when that fails.

One attempt per request at the broker, then the decision:

- 2xx: the answer.
- A final error (400, 409, 413, ...): raised as ``ApiError``, as the LB would relay it (a
  pop over several partitions that meets one after others claimed ranges answers the
  records in hand instead: ``Consumer._pop_direct``, as the manager's router does).
- Anything else falls back, and the caller repeats the request through the LB with the SAME
  sequence or request id (so the partition recognises a repeat): connection refused, 429,
  503 NO_LEADER / NOT_LEADER / UNAVAILABLE (the broker did nothing), 404 (it does not host
  the partition: a stale map), and the unknown outcomes (timeout, lost connection, 500,
  503 COMMIT_TIMEOUT), which the client retries with the same ids anyway. The broker is then
  avoided for ``broker_avoid_s`` and the map is refreshed (rate-limited).

A batch's partition groups are sent at once (``call_many``, on ``ParallelSender``'s worker
threads); everything else here runs on the caller's thread. Not thread-safe: one per client
object.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from protocol.errors import proves_nothing_done
from raftq.client_limits import ClientLimits
from raftq.errors import ApiError, ProtocolError, RaftQClientError, UnavailableError
from raftq.http import Failure, HttpTransport, Reply, api_error
from raftq.parallel_sender import ParallelSender, Send
from raftq.partition_map import PartitionMap, PartitionMaps
from raftq.records import PartitionInfo, parse_partitions

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """A request to ``{leader}{path}`` for one partition."""

    partition_id: int
    method: str
    body: object | None = None
    params: Mapping[str, str | int] | None = None
    path: str = "/logs"


@dataclass(frozen=True, slots=True)
class Fallback:
    """The direct attempt failed: repeat the request through the load balancer."""

    reason: str
    outcome_unknown: bool


class FellBackError(Exception):
    """Raised inside a plan (``protocol.consume_plan``) when a direct attempt at one
    partition fell back: the caller goes through the load balancer with ``fallback``."""

    def __init__(self, fallback: Fallback) -> None:
        super().__init__(fallback.reason)
        self.fallback = fallback


def classify_broker_reply(reply: Reply | Failure) -> Failure | None:
    """``None`` for a 2xx answer, the ``Failure`` to fall back on, or raises ``ApiError``
    for a final answer. Pure. Differs from the LB's classification in one place: a 404
    means the map is stale (nothing was done: fall back)."""
    if isinstance(reply, Failure):
        return reply
    if 200 <= reply.status < 300:
        return None
    code = reply.error_code
    description = f"broker answered {reply.status} {code or ''}".strip()
    if reply.status in (404, 429) or (
        reply.status >= 500 and proves_nothing_done(reply.status, reply.body)
    ):
        return Failure(description, outcome_unknown=False)
    if reply.status >= 500:
        return Failure(description, outcome_unknown=True)
    raise api_error(reply.status, reply.body, after_unknown_outcome=False)


class DirectPath:
    def __init__(
        self,
        http: HttpTransport,
        limits: ClientLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = http
        self._limits = limits
        self.maps = partition_maps(http, limits, clock)
        self._sender = ParallelSender(limits, limits.broker_request_timeout_s, http)
        self.answers = 0
        """Requests a broker answered directly (for tests and curiosity)."""
        self.fallbacks = 0
        """Requests repeated through the load balancer."""

    def usable_map(self, topic: str, partition_id: int | None = None) -> PartitionMap | None:
        """The map to route with, or ``None`` (go through the LB): there is none, or it lacks
        ``partition_id`` even after a refresh (the LB then answers 404 UNKNOWN_PARTITION)."""
        found = self.maps.get(topic)
        if found is not None and partition_id is not None:
            if partition_id >= found.partition_count:
                found = self.maps.refresh(topic)
            if found is None or not 0 <= partition_id < found.partition_count:
                return None
        return found

    def call(
        self,
        topic: str,
        partition_id: int,
        method: str,
        *,
        body: object | None = None,
        params: Mapping[str, str | int] | None = None,
        path: str = "/logs",
    ) -> object:
        """``{broker}{path}`` of the partition's leader: the 2xx body, or a ``Fallback``."""
        request = PartitionRequest(partition_id, method, body, params, path)
        (result,) = self.call_many(topic, [request])
        if isinstance(result, RaftQClientError):
            raise result
        return result

    def call_many(self, topic: str, requests: Sequence[PartitionRequest]) -> list[object]:
        """The requests sent at once, each to its partition's leader. Each result is the
        2xx body, a ``Fallback``, or the ``RaftQClientError`` of a final answer (returned, not
        raised, so that one group's refusal does not hide another group's offsets)."""
        addresses = [self.maps.leader(topic, r.partition_id) for r in requests]
        sends = [
            Send(address, r.method, r.path, r.body, r.params)
            for address, r in zip(addresses, requests, strict=True)
            if address is not None
        ]
        replies = iter(self._sender.send_all(sends))
        results: list[object] = []
        for address, request in zip(addresses, requests, strict=True):
            if address is None:
                reason = f"no usable leader known for {topic}/{request.partition_id}"
                results.append(Fallback(reason, outcome_unknown=False))
            else:
                results.append(self._settle(topic, address, next(replies)))
        return results

    def close(self) -> None:
        self._sender.close()

    def _settle(self, topic: str, address: str, reply: Reply | Failure) -> object:
        try:
            failure = classify_broker_reply(reply)
        except ApiError as exc:
            return exc
        if failure is None:
            answer = reply.body if isinstance(reply, Reply) else None
            if answer is None:
                return ProtocolError(f"{address}: the answer is not JSON")
            self.answers += 1
            return answer
        self.maps.avoid(address)
        self.maps.refresh(topic)  # rate-limited: several failures of one batch fetch it once
        return Fallback(f"{address}: {failure.description}", failure.outcome_unknown)

    def via_lb(self, fallback: Fallback, call: Callable[[], _T]) -> _T:
        """Run ``call`` (the same request through the LB) and report a failure with the direct
        attempt's uncertainty added: if that attempt may have acted, so may the request."""
        self.fallbacks += 1
        try:
            return call()
        except UnavailableError as exc:
            if not fallback.outcome_unknown or exc.outcome_unknown:
                raise
            raise UnavailableError(
                f"{exc}; the first attempt, at a broker ({fallback.reason}), may have taken effect",
                outcome_unknown=True,
                attempts=exc.attempts + 1,
            ) from exc
        except ApiError as exc:
            exc.after_unknown_outcome = exc.after_unknown_outcome or fallback.outcome_unknown
            raise


def partition_maps(
    http: HttpTransport, limits: ClientLimits, clock: Callable[[], float] = time.monotonic
) -> PartitionMaps:
    """A map cache that fetches ``GET /partitions`` through the load balancer. The direct
    path routes with it; a client without the direct path still pins its partition counts
    with it (``partition_count`` in a request through the load balancer)."""

    def fetch(topic: str) -> list[PartitionInfo]:
        body = http.call(
            "GET",
            "/partitions",
            params={"topic": topic},
            idempotent=True,
            attempts_max=limits.partition_map_attempts_max,
            read_timeout_s=limits.partition_map_timeout_s,
        )
        return parse_partitions(body)

    return PartitionMaps(fetch, limits, clock)
