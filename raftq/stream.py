"""``stream_partition``: a partition's messages as they come, over one open request to the
partition's leader (``GET /logs/stream``, Server-Sent Events: ``protocol.streams``; issue
24). A message reaches the reader as soon as its broker has applied it, without polling.

The stream is opened again, from the next offset, when it ends (``stream_s_max``), when its
broker stops serving the partition, and when the connection drops or brings nothing for
``stream_read_timeout_s`` (an idle stream's broker sends a heartbeat every few seconds):
then at the leader of a refreshed partition map. While no broker is known, it reads through
the load balancer with long-polling fetches (``wait_ms``), so a reader goes on through a
broker's death. A refusal that another try would not change (an offset out of range, an
unknown topic, a key that may not read it) is raised. Reads only: nothing is claimed, so
an interrupted stream loses nothing and repeats nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import requests

from protocol import streams
from protocol.errors import ErrorCode
from raftq.client_limits import ClientLimits
from raftq.errors import ApiError, ProtocolError
from raftq.http import HttpTransport, api_error
from raftq.partition_map import PartitionMaps
from raftq.records import Record, parse_records

FetchFrom = Callable[[int], list[Record]]
"""A long-polling fetch through the load balancer from an offset (the fallback)."""

_OTHER_REPLICA = frozenset(
    code.value for code in (ErrorCode.UNKNOWN_PARTITION, ErrorCode.REFUSED, ErrorCode.NOT_LEADER)
)
"""Refusals of one broker that another replica, or a later try, may not give."""


def stream_partition(
    http: HttpTransport,
    maps: PartitionMaps,
    where: tuple[str, int],
    offset: int,
    fetch_via_lb: FetchFrom,
    limits: ClientLimits,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Record]:
    """Every message of partition ``where`` (topic, partition id) from ``offset`` on, in
    order, for as long as the caller iterates."""
    topic, partition_id = where
    next_offset = offset
    while True:
        address = maps.leader(topic, partition_id)
        if address is None:
            for record in fetch_via_lb(next_offset):
                next_offset = record.offset + 1
                yield record
            continue
        try:
            for record in _from_broker(http, address, where, next_offset, limits):
                next_offset = record.offset + 1
                yield record
        except ApiError as exc:
            if exc.error_code not in _OTHER_REPLICA and exc.status < 500:
                raise
            _elsewhere(maps, address, topic, sleep, limits)
        except (requests.RequestException, ProtocolError):
            _elsewhere(maps, address, topic, sleep, limits)


def _from_broker(
    http: HttpTransport, address: str, where: tuple[str, int], offset: int, limits: ClientLimits
) -> Iterator[Record]:
    """One stream at one broker, until its ``end`` event; its ``error`` event raised."""
    topic, partition_id = where
    params: dict[str, str | int] = {
        "topic": topic,
        "partition_id": partition_id,
        "offset": offset,
        "max_messages": limits.stream_messages_max,
    }
    events = http.events(address, "/logs/stream", params)
    try:
        for event in events:
            if event.kind == streams.MESSAGES:
                yield from parse_records(event.data)
            elif event.kind == streams.END:
                return
            elif event.kind == streams.ERROR:
                code = event.data.get("error_code") if isinstance(event.data, dict) else None
                status = code // 100 if isinstance(code, int) else 503
                raise api_error(status, event.data, after_unknown_outcome=False)
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


def _elsewhere(
    maps: PartitionMaps,
    address: str,
    topic: str,
    sleep: Callable[[float], None],
    limits: ClientLimits,
) -> None:
    """This broker could not stream: route around it, look for the leader again, pause."""
    maps.avoid(address)
    maps.refresh(topic)
    sleep(limits.stream_retry_pause_s)
