"""Rows <-> RaftQ messages, and the deterministic batches a write task sends. Pure.

RaftQ keys and values are strings (JSON text on the wire), where Kafka's are bytes. So the
source's ``key`` and ``value`` columns are strings; a writer accepts string columns, or binary
ones that hold UTF-8 (decoded strictly: invalid UTF-8 fails the task, naming the row).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from protocol.types import NO_HEADERS, Headers, NewMessage, headers_of
from raftq.producer import take_batch
from raftq.records import Record

READ_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")
READ_SCHEMA_DDL = (
    "key STRING, value STRING, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "headers MAP<STRING, STRING>"
)
"""Spark's Kafka source schema, with ``key``/``value`` as strings (and no
``timestampType``: RaftQ stamps every message when it is appended). ``headers`` is always
there (an empty map for a message without), as a map: RaftQ's header names are unique,
where Kafka's ``includeHeaders`` gives an array of pairs."""
WRITE_VALUE, WRITE_KEY, WRITE_TOPIC, WRITE_HEADERS = "value", "key", "topic", "headers"
WRITE_COLUMNS = (WRITE_VALUE, WRITE_KEY, WRITE_TOPIC, WRITE_HEADERS)


class RowError(ValueError):
    """A row cannot become a RaftQ message; the message says which and why."""


def records_to_columns(records: Sequence[Record]) -> dict[str, list[object]]:
    """Column lists in ``READ_COLUMNS`` order; timestamps in microseconds since the epoch
    (UTC), the unit of Spark's TIMESTAMP."""
    return {
        "key": [r.key for r in records],
        "value": [r.value for r in records],
        "topic": [r.topic for r in records],
        "partition": [r.partition_id for r in records],
        "offset": [r.offset for r in records],
        "timestamp": [r.timestamp_ms * 1000 for r in records],
        "headers": [list(r.headers.items()) for r in records],
    }


def check_write_columns(names: Sequence[str], types: Mapping[str, str], topic: str | None) -> None:
    """Refuse a schema a write cannot use, before any task runs. ``types`` maps column name to
    Spark's simple type name (``string``, ``binary``, ...)."""
    if WRITE_VALUE not in names:
        raise RowError("a RaftQ write needs a 'value' column (string or binary)")
    if topic is None and WRITE_TOPIC not in names:
        raise RowError("a RaftQ write needs the 'topic' option or a 'topic' column")
    for column, allowed in ((WRITE_VALUE, ("string", "binary")), (WRITE_KEY, ("string", "binary"))):
        if column in types and types[column] not in allowed:
            raise RowError(f"column {column!r} must be string or binary, not {types[column]}")
    if topic is None and types.get(WRITE_TOPIC) != "string":
        raise RowError("column 'topic' must be a string")
    if WRITE_HEADERS in types and types[WRITE_HEADERS] != "map<string,string>":
        raise RowError(f"column 'headers' must be map<string,string>, not {types[WRITE_HEADERS]}")


def messages_from_columns(
    columns: Mapping[str, Sequence[object]], topic: str | None, first_row: int = 0
) -> Iterator[tuple[str, NewMessage]]:
    """``(topic, message)`` per row. The ``topic`` option overrides a ``topic`` column, as in
    Spark's Kafka sink."""
    values = columns[WRITE_VALUE]
    keys = columns.get(WRITE_KEY) or [None] * len(values)
    topics = columns.get(WRITE_TOPIC) or [None] * len(values)
    headers = columns.get(WRITE_HEADERS) or [None] * len(values)
    rows = zip(values, keys, topics, headers, strict=True)
    for index, (value, key, row_topic, row_headers) in enumerate(rows):
        where = f"row {first_row + index}"
        name = topic if topic is not None else row_topic
        if not isinstance(name, str) or not name:
            raise RowError(f"{where}: no topic (null 'topic' column and no 'topic' option)")
        if value is None:
            raise RowError(f"{where}: 'value' is null; RaftQ messages are strings")
        yield (
            name,
            NewMessage(
                value=_text(value, where, "value"),
                key=_opt_text(key, where),
                headers=_headers(row_headers, where),
            ),
        )


@dataclass(frozen=True, slots=True)
class TopicBatch:
    topic: str
    messages: tuple[NewMessage, ...]


def cut_batches(
    messages: Iterable[tuple[str, NewMessage]], messages_max: int, bytes_max: int
) -> Iterator[TopicBatch]:
    """Deterministic batches: the same rows in the same order give the same batches. A
    topic's batch is cut once it holds ``messages_max`` messages; what is left goes out at the
    end, topic by topic in sorted order. Byte bounds use the producer's own ``take_batch``, so
    the producer sends each batch as exactly one request."""
    pending: dict[str, list[NewMessage]] = {}
    for topic, message in messages:
        buffer = pending.setdefault(topic, [])
        buffer.append(message)
        if len(buffer) >= messages_max:
            yield from _drain(topic, buffer, messages_max, bytes_max)
    for topic in sorted(pending):
        yield from _drain(topic, pending[topic], messages_max, bytes_max)


def _drain(
    topic: str, buffer: list[NewMessage], messages_max: int, bytes_max: int
) -> Iterator[TopicBatch]:
    queue = deque(buffer)
    buffer.clear()
    while queue:
        yield TopicBatch(topic, tuple(take_batch(queue, messages_max, bytes_max)))


def _text(value: object, where: str, column: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RowError(f"{where}: {column!r} is not UTF-8 ({exc.reason})") from None
    raise RowError(
        f"{where}: {column!r} must be a string or UTF-8 bytes, not {type(value).__name__}"
    )


def _headers(value: object, where: str) -> Headers:
    """A ``headers`` cell: Arrow gives a map as ``(name, value)`` pairs (null: none)."""
    if value is None:
        return NO_HEADERS
    pairs = list(value.items()) if isinstance(value, dict) else value
    found: dict[str, str] = {}
    for pair in pairs if isinstance(pairs, list) else ():
        name, header_value = pair
        if not isinstance(name, str) or not isinstance(header_value, str):
            raise RowError(f"{where}: header {name!r} must map a string to a string, not null")
        found[name] = header_value
    return headers_of(found)


def _opt_text(value: object, where: str) -> str | None:
    return None if value is None else _text(value, where, "key")
