"""End-to-end latency: one message produced through the load balancer, until a consumer that
polls the partition by offset sees it.

Two threads: the producer sends one message every ``SEND_PERIOD_S`` (paced, so the figure is
latency, not queueing behind our own load) and notes when each send started; the consumer
fetches from the next offset in a tight loop and notes when each message arrives. Both use
the same monotonic clock (one process). Every request carries the API key ``measure`` is
given.
"""

from __future__ import annotations

import contextlib
import threading
import time

from stress_tests.bench_http import LightClient, end_offset, new_id, post
from stress_tests.bench_report import RAFTQ, Row, percentile
from stress_tests.credentials import bearer, client_session

SEND_PERIOD_S = 0.02
POLL_PAUSE_S = 0.001
MESSAGES_MAX = 100_000
DRAIN_GRACE_S = 15.0
"""After the last send, how long the consumer may still wait for the last messages."""
SCENARIO = "end-to-end: produce 1 via LB -> seen by offset poll"


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
    """The end-to-end row for ``topic``'s partition 0 (p50/p99 of the per-message latency)."""
    with client_session(api_key) as session:
        start = end_offset(session, lb, topic, 0)
        producer = post(session, f"{lb}/producers", {"topic": topic})["producer_id"]
    probe, tag = _Probe(), f"e2e-{new_id()[:8]}-"
    consumer = threading.Thread(
        target=_consume, args=(lb, api_key, topic, start, tag, probe, seconds)
    )
    consumer.start()
    _produce(lb, api_key, topic, producer, tag, probe, seconds)
    probe.producer_done.set()
    consumer.join(seconds + DRAIN_GRACE_S + 30.0)
    with probe.lock:
        latencies, errors = list(probe.latencies_s), probe.errors
        lost = len(probe.acked - probe.seen)  # acknowledged, never seen by the consumer
    if not latencies:
        return Row(RAFTQ, SCENARIO, errors=errors, error="no message was seen by the consumer")
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    note = f"n={len(latencies)}; sends >= {SEND_PERIOD_S * 1000:.0f} ms apart, each after an ack"
    return Row(RAFTQ, SCENARIO, None, None, _ms(p50), _ms(p99), errors + lost, note)


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else value_s * 1000


def _produce(
    lb: str, api_key: str, topic: str, producer: str, tag: str, probe: _Probe, seconds: float
) -> None:
    deadline_s = time.monotonic() + seconds
    with contextlib.closing(LightClient(bearer(api_key))) as client:
        for number in range(MESSAGES_MAX):
            started_s = time.monotonic()
            if started_s >= deadline_s:
                return
            with probe.lock:
                probe.sent_s[number] = started_s
            body = {"producer_id": producer, "topic": topic, "message": f"{tag}{number}"}
            try:
                client.post(f"{lb}/logs", body)
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
