"""The wire form of a stream of a partition's messages (``GET /logs/stream`` at brokers):
Server-Sent Events (the WHATWG ``text/event-stream`` format). Pure: the broker writes
events with ``event``, the client library reads them back with ``EventReader``.

Events, each ``event: <kind>`` and one ``data:`` line of JSON:

- ``messages``: ``{"messages": [...]}``, the messages of a fetch, in offset order, with
  ``id: <the next offset>`` (a reconnecting client starts there);
- ``end``: ``{"next_offset": N, "reason": "..."}``: the stream ends (its time ran out,
  ``stream_s_max``); go on from ``next_offset``;
- ``error``: ``{"error_code", "message"}`` as any error answer: the stream ends with it
  (retention removed what it was to send next, or this replica stopped serving).

A line starting ``:`` is a comment: the heartbeat of an idle stream (``stream_heartbeat_s``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import orjson

CONTENT_TYPE = "text/event-stream"
MESSAGES = "messages"
END = "end"
ERROR = "error"
HEARTBEAT = b": keep-alive\n\n"


def event(kind: str, data: object, event_id: int | None = None) -> bytes:
    """One event: its kind, its id when it has one, and its data as one line of JSON."""
    head = b"" if event_id is None else b"id: %d\n" % event_id
    return head + b"event: " + kind.encode("ascii") + b"\ndata: " + orjson.dumps(data) + b"\n\n"


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    data: object
    event_id: str | None = None


class EventReader:
    """Events from the lines of a stream, in order; comments and unknown fields skipped.
    A malformed ``data`` line raises ``ValueError`` (the peer is not a RaftQ broker)."""

    def __init__(self) -> None:
        self._kind = "message"
        self._data: list[bytes] = []
        self._id: str | None = None

    def feed(self, line: bytes) -> Iterator[Event]:
        """Take one line (without its line break); yields the event it completes."""
        if not line:
            if self._data:
                yield Event(self._kind, orjson.loads(b"\n".join(self._data)), self._id)
            self._kind, self._data, self._id = "message", [], None
            return
        if line.startswith(b":"):
            return
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"event":
            self._kind = value.decode("utf-8")
        elif name == b"data":
            self._data.append(value)
        elif name == b"id":
            self._id = value.decode("utf-8")
