"""End-to-end latency: one message produced, until a consumer sees it. Two rows:

- ``SCENARIO``: produced through the load balancer, seen by a consumer that polls the
  partition by offset through it in a tight loop;
- ``STREAM_SCENARIO`` (issue 24): produced straight to the partition leader's broker, as the
  client library's direct path does, seen by a stream of the partition from that broker
  (``GET /logs/stream``: Server-Sent Events, one request kept open).

Two threads: the producer sends one message every ``SEND_PERIOD_S`` (paced, so the figure is
latency, not queueing behind our own load) and notes when each send started; the consumer
notes when each message arrives. Both use the same monotonic clock (one process). Every
request carries the API key ``measure`` is given.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import requests

from protocol import streams
from protocol.streams import EventReader
from stress_tests.bench_http import LightClient, end_offset, leader_address, new_id, post
from stress_tests.bench_report import RAFTQ, Row, percentile
from stress_tests.credentials import bearer, client_session

SEND_PERIOD_S = 0.02
POLL_PAUSE_S = 0.001
MESSAGES_MAX = 100_000
DRAIN_GRACE_S = 15.0
"""After the last send, how long the consumer may still wait for the last messages."""
SCENARIO = "end-to-end: produce 1 via LB -> seen by offset poll"
STREAM_SCENARIO = "end-to-end: produce 1 to the leader -> seen by a stream (SSE)"
STREAM_READ_TIMEOUT_S = 20.0


class _Probe:
    """Send times and arrival times by message number; shared by the two threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent_s: dict[int, float] = {}
        self.acked: set[int] = set()
        self.seen: set[int] = set()
        self.latencies_s: list[float] = []
        self.errors = 0
        self.producer_done = threading.Event()


def measure(lb: str, api_key: str, topic: str, seconds: float) -> Row:
    """The end-to-end row for ``topic``'s partition 0 through the load balancer (p50/p99 of
    the per-message latency)."""
    with client_session(api_key) as session:
        start = end_offset(session, lb, topic, 0)
        producer = post(session, f"{lb}/producers", {"topic": topic})["producer_id"]
    body = {"producer_id": producer, "topic": topic}
    target = _Target(SCENARIO, f"{lb}/logs", body, _consume, lb)
    return _run(target, api_key, topic, start, seconds)


def measure_stream(lb: str, api_key: str, topic: str, seconds: float) -> Row:
    """The end-to-end row of a stream of ``topic``'s partition 0 at its leader's broker."""
    with client_session(api_key) as session:
        start = end_offset(session, lb, topic, 0)
        leader = leader_address(session, lb, topic, 0)
    if leader is None:
        return Row(RAFTQ, STREAM_SCENARIO, error=f"the managers know no leader for {topic}/0")
    body = {"topic": topic, "partition_id": 0}
    target = _Target(STREAM_SCENARIO, f"{leader}/logs", body, _stream, leader)
    return _run(target, api_key, topic, start, seconds)


@dataclass(frozen=True, slots=True)
class _Target:
    scenario: str
    produce_url: str
    body: dict[str, object]
    """A produce's body, but its message."""
    consume: Consume
    consume_url: str


Consume = Callable[[str, str, str, int, str, "_Probe", float], None]
"""``(url, api_key, topic, offset, tag, probe, seconds)``: note every arrival in ``probe``."""


def _run(target: _Target, api_key: str, topic: str, start: int, seconds: float) -> Row:
    probe, tag = _Probe(), f"e2e-{new_id()[:8]}-"
    consumer = threading.Thread(
        target=target.consume,
        args=(target.consume_url, api_key, topic, start, tag, probe, seconds),
    )
    consumer.start()
    _produce(target, api_key, tag, probe, seconds)
    probe.producer_done.set()
    consumer.join(seconds + DRAIN_GRACE_S + 30.0)
    with probe.lock:
        latencies, errors = list(probe.latencies_s), probe.errors
        lost = len(probe.acked - probe.seen)  # acknowledged, never seen by the consumer
    if not latencies:
        return Row(RAFTQ, target.scenario, errors=errors, error="no message was seen")
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    note = f"n={len(latencies)}; sends >= {SEND_PERIOD_S * 1000:.0f} ms apart, each after an ack"
    return Row(RAFTQ, target.scenario, None, None, _ms(p50), _ms(p99), errors + lost, note)


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else value_s * 1000


def _produce(target: _Target, api_key: str, tag: str, probe: _Probe, seconds: float) -> None:
    deadline_s = time.monotonic() + seconds
    with contextlib.closing(LightClient(bearer(api_key))) as client:
        for number in range(MESSAGES_MAX):
            started_s = time.monotonic()
            if started_s >= deadline_s:
                return
            with probe.lock:
                probe.sent_s[number] = started_s
            body = {**target.body, "message": f"{tag}{number}"}
            try:
                client.post(target.produce_url, body)
            except Exception:  # counted; the message may or may not arrive
                with probe.lock:
                    probe.errors += 1
            else:
                with probe.lock:
                    probe.acked.add(number)
            pause_s = started_s + SEND_PERIOD_S - time.monotonic()
            if pause_s > 0:
                time.sleep(pause_s)  # pacing, not waiting for a condition


def _consume(
    lb: str, api_key: str, topic: str, offset: int, tag: str, probe: _Probe, seconds: float
) -> None:
    """Fetches by offset through the load balancer in a tight loop."""
    deadline_s = time.monotonic() + seconds + DRAIN_GRACE_S
    with contextlib.closing(LightClient(bearer(api_key))) as client:
        while time.monotonic() < deadline_s:
            params: dict[str, str | int] = {
                "topic": topic,
                "partition_id": 0,
                "offset": offset,
                "max_messages": 100,
            }
            try:
                messages = client.get(f"{lb}/logs", params)["messages"]
            except Exception:
                messages = []
            arrived_s = time.monotonic()
            offset += len(messages)
            _note_arrivals(messages, tag, arrived_s, probe)
            with probe.lock:
                if probe.producer_done.is_set() and probe.acked <= probe.seen:
                    return
            if not messages:
                time.sleep(POLL_PAUSE_S)


def _stream(
    broker: str, api_key: str, topic: str, offset: int, tag: str, probe: _Probe, seconds: float
) -> None:
    """Streams (``GET /logs/stream``), opened again from the next offset when a stream ends,
    until every acknowledged message was seen or the drain's grace has passed."""
    deadline_s = time.monotonic() + seconds + DRAIN_GRACE_S
    with client_session(api_key) as session:
        while time.monotonic() < deadline_s and not _all_seen(probe):
            params: dict[str, str | int] = {
                "topic": topic,
                "partition_id": 0,
                "offset": offset,
                "max_messages": 1000,
            }
            try:
                offset = _read_stream(session, f"{broker}/logs/stream", params, tag, probe)
            except requests.RequestException:
                with probe.lock:
                    probe.errors += 1


def _read_stream(
    session: requests.Session, url: str, params: dict[str, str | int], tag: str, probe: _Probe
) -> int:
    """One stream until it ends or every acknowledged message was seen; the next offset."""
    offset = int(str(params["offset"]))
    timeout = (5.0, STREAM_READ_TIMEOUT_S)
    with session.get(url, params=params, stream=True, timeout=timeout) as response:
        response.raise_for_status()
        reader, tail = EventReader(), b""
        for chunk in response.iter_content(chunk_size=None):
            arrived_s = time.monotonic()
            *lines, tail = (tail + chunk).split(b"\n")
            for event in (e for line in lines for e in reader.feed(line)):
                if event.kind == streams.MESSAGES and isinstance(event.data, dict):
                    messages = event.data["messages"]
                    _note_arrivals(messages, tag, arrived_s, probe)
                    offset = int(event.event_id or offset)
                elif event.kind != streams.MESSAGES:
                    return offset
            if _all_seen(probe):
                return offset
    return offset


def _all_seen(probe: _Probe) -> bool:
    with probe.lock:
        return probe.producer_done.is_set() and probe.acked <= probe.seen


def _note_arrivals(messages: list[dict[str, object]], tag: str, at_s: float, probe: _Probe) -> None:
    with probe.lock:
        for message in messages:
            value = str(message.get("message", ""))
            if value.startswith(tag):
                number = int(value[len(tag) :])
                sent_s = probe.sent_s.get(number)
                if sent_s is not None and number not in probe.seen:
                    probe.seen.add(number)
                    probe.latencies_s.append(at_s - sent_s)
