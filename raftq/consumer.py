"""``Consumer``: pops messages for a registered consumer, or fetches by offset.

Each logical ``poll`` carries a fresh ``request_id``; its retries carry the same one, so the
partition hands back the same range instead of advancing twice. A poll whose retries are spent
keeps its request id, and the next ``poll`` asks with it again: a lost answer never makes the
consumer skip messages.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from types import TracebackType

from raftq.client_limits import ClientLimits
from raftq.errors import ApiError, ProtocolError
from raftq.http import HttpTransport
from raftq.records import Record, parse_records


@dataclass(frozen=True, slots=True)
class PendingPoll:
    request_id: str
    max_messages: int


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
    ) -> None:
        self.topic = topic
        self.partition_id = partition_id
        self._http = HttpTransport(url, (limits or ClientLimits()).validate())
        self._pending: PendingPoll | None = None
        try:
            self.consumer_id = consumer_id or self._register()
        except BaseException:
            self._http.close()
            raise

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def poll(self, max_messages: int = 100) -> list[Record]:
        """Pop up to ``max_messages`` (fewer, maybe none, when the partition has no more)."""
        if self._pending is None:
            self._pending = PendingPoll(str(uuid.uuid4()), max_messages)
        pending = self._pending
        params: dict[str, str | int] = {
            "consumer_id": self.consumer_id,
            "max_messages": pending.max_messages,
            "request_id": pending.request_id,
        }
        try:
            body = self._http.call("GET", "/logs", params=params, idempotent=True)
        except ApiError:
            self._pending = None  # refused outright (e.g. unknown consumer): nothing claimed
            raise
        # Any other failure keeps the pending request id, so the next poll repeats it and
        # gets back the range this one may have claimed.
        records = parse_records(body)
        self._pending = None
        return records

    def fetch(
        self, topic: str, partition_id: int, offset: int, max_messages: int = 100
    ) -> list[Record]:
        """Read committed messages ``[offset, offset + max_messages)`` without moving any
        consumer offset."""
        params: dict[str, str | int] = {
            "topic": topic,
            "partition_id": partition_id,
            "offset": offset,
            "max_messages": max_messages,
        }
        return parse_records(self._http.call("GET", "/logs", params=params, idempotent=True))

    def _register(self) -> str:
        body: dict[str, object] = {"topic": self.topic}
        if self.partition_id is not None:
            body["partition_id"] = self.partition_id
        # Retrying may register a second, unused consumer: harmless, so idempotent=True.
        answer = self._http.call("POST", "/consumers", body=body, idempotent=True)
        if not isinstance(answer, dict) or not isinstance(answer.get("consumer_id"), str):
            raise ProtocolError("POST /consumers: expected {'consumer_id': str}")
        consumer_id: str = answer["consumer_id"]
        return consumer_id
