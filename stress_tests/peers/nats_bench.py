"""NATS JetStream scenarios, matching RaftQ's comparable ones (same keys, payload, clients).

- produce 1/req: each publisher (its own connection) awaits every ``js.publish`` ack before
  the next, as a RaftQ client awaits each 201.
- produce N/req: each publisher sends N publishes at once and awaits all N acks (JetStream has
  no batch publish; N in flight then N acks is its nearest equivalent).
- consume 1000/req: a durable pull consumer (ack policy "all") fetches up to 1,000 messages
  and acknowledges the last one synchronously (one round trip, like a RaftQ pop that commits
  its consumer offset).
- receive+ack 100/req: a durable pull consumer of its own with explicit acks fetches up to
  100 messages and acks each, awaiting every ack (``ack_sync``), as a RaftQ group member
  receives 100 and acks their receipts.

nats-py is imported when a scenario runs (``importlib``), so neither the default install nor
mypy needs it. The asyncio loop runs on the calling thread; every await has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from stress_tests.bench_load import REQUESTS_PER_THREAD_MAX, Exhausted, Tally
from stress_tests.bench_report import Row, percentile

SYSTEM = "nats"
STREAM = "BENCH"
SUBJECT = "bench.messages"
PAYLOAD = b"x" * 100
ACK_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5
SETUP_TIMEOUT_S = 30.0
GRACE_S = 60.0
FETCH_TIMEOUT_S = 2.0


def _nats() -> Any:
    return importlib.import_module("nats")


async def connect(servers: list[str]) -> Any:
    return await _nats().connect(
        servers, connect_timeout=CONNECT_TIMEOUT_S, max_reconnect_attempts=3, allow_reconnect=True
    )


async def create_stream(servers: list[str]) -> None:
    """The stream (file storage, 3 replicas); retried until JetStream's meta leader answers."""
    api = importlib.import_module("nats.js.api")
    nc = await connect(servers)
    try:
        deadline_s = time.monotonic() + SETUP_TIMEOUT_S
        while True:
            try:
                await nc.jetstream(timeout=5).add_stream(
                    name=STREAM, subjects=[SUBJECT], storage=api.StorageType.FILE, num_replicas=3
                )
                return
            except Exception:
                if time.monotonic() >= deadline_s:
                    raise
                await asyncio.sleep(0.5)  # bounded retry: JetStream elects its meta leader
    finally:
        await nc.close()


def _publish_request(js: Any, batch: int) -> Callable[[], Awaitable[int]]:
    async def request() -> int:
        publishes = [js.publish(SUBJECT, PAYLOAD, timeout=ACK_TIMEOUT_S) for _ in range(batch)]
        await asyncio.gather(*publishes)
        return batch

    return request


def _fetch_request(
    subscription: Any, stored: int, batch: int, ack_each: bool
) -> Callable[[], Awaitable[int]]:
    """Fetches up to ``batch`` until ``stored`` (the stream's count at the start) are read,
    so the last fetch does not wait out its timeout on an empty stream; then acks the last
    message (ack policy "all": the whole batch) or, ``ack_each``, every message, awaiting
    each ack (explicit acks, as a RaftQ group member acks its receipts)."""
    timeout_error = importlib.import_module("nats.errors").TimeoutError
    remaining = [stored]

    async def request() -> int:
        if remaining[0] <= 0:
            raise Exhausted
        try:
            messages = await subscription.fetch(min(batch, remaining[0]), timeout=FETCH_TIMEOUT_S)
        except timeout_error:
            raise Exhausted from None  # fewer messages than counted
        acked = messages if ack_each else messages[-1:]
        await asyncio.gather(*(m.ack_sync(timeout=ACK_TIMEOUT_S) for m in acked))
        remaining[0] -= len(messages)
        return len(messages)

    return request


async def _publishers(servers: list[str], clients: int, batch: int, seconds: float) -> Tally:
    connections = [await connect(servers) for _ in range(clients)]
    requests = [_publish_request(nc.jetstream(timeout=ACK_TIMEOUT_S), batch) for nc in connections]
    try:
        return await _closed_loops(requests, seconds)
    finally:
        for nc in connections:
            await nc.close()


async def _consumer(
    servers: list[str], seconds: float, durable: str, batch: int, ack_each: bool
) -> Tally:
    """A durable pull consumer of its own (the stream keeps every message, so each reads
    from the start whatever another consumer took)."""
    api = importlib.import_module("nats.js.api")
    nc = await connect(servers)
    try:
        policy = api.AckPolicy.EXPLICIT if ack_each else api.AckPolicy.ALL
        config = api.ConsumerConfig(ack_policy=policy, max_ack_pending=20_000)
        js = nc.jetstream(timeout=ACK_TIMEOUT_S)
        subscription = await js.pull_subscribe(
            SUBJECT, durable=durable, stream=STREAM, config=config
        )
        stored = int((await js.stream_info(STREAM)).state.messages)
        request = _fetch_request(subscription, stored, batch, ack_each)
        return await _closed_loops([request], seconds)
    finally:
        await nc.close()


async def _closed_loops(requests: list[Callable[[], Awaitable[int]]], seconds: float) -> Tally:
    tally = Tally()
    started_s = time.monotonic()
    await asyncio.gather(*(_loop(request, started_s + seconds, tally) for request in requests))
    tally.elapsed_s = time.monotonic() - started_s
    return tally


async def _loop(request: Callable[[], Awaitable[int]], deadline_s: float, tally: Tally) -> None:
    """One client's closed loop, bounded in time and count (as ``bench_load``'s threads)."""
    for _ in range(REQUESTS_PER_THREAD_MAX):
        if time.monotonic() >= deadline_s:
            return
        started_s = time.monotonic()
        try:
            moved = await request()
        except Exhausted:
            return
        except Exception as exc:  # counted in the row
            tally.failed(exc)
            await asyncio.sleep(0.05)
            continue
        tally.add(time.monotonic() - started_s, moved)


PRODUCE = (
    ("publish 1/req, 1 publisher", "produce 1/req, 1 client", 1, 1),
    ("publish 1/req, 8 publishers", "produce 1/req, 8 clients", 8, 1),
    ("publish 100 in flight/req, 4 publishers", "produce 100/req, 4 clients", 4, 100),
    ("publish 1000 in flight/req, 4 publishers", "produce 1000/req, 4 clients", 4, 1000),
)
"""(scenario, comparable key, publishers, messages per request)."""
CONSUME = ("pull fetch 1000/req, ack all, 1 consumer", "consume 1000/req, 1 client")
LEASED = ("pull fetch 100/req, explicit ack each, 1 consumer", "receive+ack 100/req, 1 client")


def nats_rows(servers: list[str], seconds: float, log: Callable[[str], None]) -> list[Row]:
    """Every NATS scenario; one that fails becomes a FAILED row."""
    try:
        asyncio.run(asyncio.wait_for(create_stream(servers), SETUP_TIMEOUT_S + GRACE_S))
    except Exception as exc:
        return [Row(SYSTEM, "create stream (file, 3 replicas)", error=_why(exc))]
    rows = []
    for name, key, clients, batch in PRODUCE:
        log(f"  {SYSTEM}: {name} ...")
        rows.append(_run(name, key, _publishers(servers, clients, batch, seconds), seconds))
    log(f"  {SYSTEM}: {CONSUME[0]} ...")
    rows.append(_run(*CONSUME, _consumer(servers, seconds, "bench", 1000, False), seconds))
    log(f"  {SYSTEM}: {LEASED[0]} ...")
    leased = _consumer(servers, seconds, "bench-explicit", 100, True)
    rows.append(_run(*LEASED, leased, seconds))
    return rows


ASYNC = ("publish_async, 8 tasks sharing one connection", "async publish, 8 threads, 1 client")
ASYNC_TASKS = 8
ASYNC_PENDING_MAX = 4_000
"""nats-py's default bound on asynchronous publishes awaiting their ack."""
ASYNC_LATENCY_SAMPLE_EVERY = 64


def nats_async_rows(servers: list[str], seconds: float, log: Callable[[str], None]) -> list[Row]:
    """JetStream's asynchronous publish (``publish_async``: acks streamed back), the peer of
    RaftQ's ``AsyncProducer`` row: 8 tasks share one connection and publish for ``seconds``,
    then wait for every ack. Creates the stream if the other rows did not."""
    # Adding a stream that exists with the same settings succeeds; a failure here shows up
    # as the publishes' failure in the row.
    with contextlib.suppress(Exception):
        asyncio.run(asyncio.wait_for(create_stream(servers), SETUP_TIMEOUT_S + GRACE_S))
    log(f"  {SYSTEM}: {ASYNC[0]} ...")
    try:
        row = asyncio.run(asyncio.wait_for(_async_publish(servers, seconds), seconds + GRACE_S))
    except Exception as exc:
        return [Row(SYSTEM, ASYNC[0], key=ASYNC[1], error=_why(exc))]
    return [row]


async def _async_publish(servers: list[str], seconds: float) -> Row:
    """Throughput: acked messages over the time from the first publish to the last ack.
    Latency: publish to ack, sampled one in ``ASYNC_LATENCY_SAMPLE_EVERY``."""
    nc = await connect(servers)
    acked, failed, latencies_s = [0], [0], []

    def counted(sent_s: float | None) -> Callable[[asyncio.Future[Any]], None]:
        def done(future: asyncio.Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None:
                failed[0] += 1
                return
            acked[0] += 1
            if sent_s is not None:
                latencies_s.append(time.monotonic() - sent_s)

        return done

    try:
        js = nc.jetstream(timeout=ACK_TIMEOUT_S, publish_async_max_pending=ASYNC_PENDING_MAX)
        started_s = time.monotonic()
        deadline_s = started_s + seconds
        unsampled = counted(None)

        async def publisher() -> None:
            sent = 0
            while time.monotonic() < deadline_s:
                sampled = sent % ASYNC_LATENCY_SAMPLE_EVERY == 0
                future = await js.publish_async(SUBJECT, PAYLOAD, wait_stall=ACK_TIMEOUT_S)
                future.add_done_callback(counted(time.monotonic()) if sampled else unsampled)
                sent += 1

        await asyncio.gather(*(publisher() for _ in range(ASYNC_TASKS)))
        await asyncio.wait_for(js.publish_async_completed(), GRACE_S)
        elapsed_s = time.monotonic() - started_s
    finally:
        await nc.close()
    return _async_row(acked[0], failed[0], latencies_s, elapsed_s)


def _async_row(acked: int, failed: int, latencies_s: list[float], elapsed_s: float) -> Row:
    p50, p99 = percentile(latencies_s, 0.50), percentile(latencies_s, 0.99)
    return Row(
        SYSTEM,
        ASYNC[0],
        acked / elapsed_s,
        None,
        None if p50 is None else p50 * 1000,
        None if p99 is None else p99 * 1000,
        failed,
        "latency: publish_async returned to ack",
        ASYNC[1],
    )


def _run(name: str, key: str, scenario: Awaitable[Tally], seconds: float) -> Row:
    try:
        tally = asyncio.run(asyncio.wait_for(scenario, seconds + GRACE_S))
    except Exception as exc:
        return Row(SYSTEM, name, key=key, error=_why(exc))
    return tally.row(SYSTEM, name, key)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:160]
