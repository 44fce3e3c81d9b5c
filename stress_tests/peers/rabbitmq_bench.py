"""RabbitMQ scenarios on a quorum queue, matching RaftQ's comparable ones (same keys, payload,
client threads), driven by pika's ``BlockingConnection``, one connection per thread.

- produce N/req (N = 1, 100, 1000): publish N persistent messages with publisher confirms,
  then wait until the broker has confirmed all N (a RaftQ request is answered when its batch
  is committed). pika's blocking channel waits for each confirm on its own, so a batch would
  be N round trips; instead confirms are counted from the underlying channel's callback
  (``channel._impl``: pika has no public batch-confirm API), the same way for every N.
- consume 1000/req: ``basic_consume`` with prefetch 1,000; a request is 1,000 deliveries,
  then one ``basic_ack(multiple=True)`` (like a RaftQ pop that commits its offset); it stops
  at the queue's message count from the start, instead of idling at the end.
- receive+ack 100/req: the same with prefetch 100 and a manual ``basic_ack(multiple=True)``
  per 100 deliveries, after 60,000 more messages were published (untimed).

pika is imported when a scenario runs (``importlib``), so neither the default install nor
mypy needs it.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable
from typing import Any

from stress_tests.bench_load import Exhausted, MakeStep, Step, run_load
from stress_tests.bench_report import Row

SYSTEM = "rabbitmq"
QUEUE = "raftq-bench"
PAYLOAD = b"x" * 100
CONFIRM_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
CONSUME_IDLE_S = 2.0
EVENTS_PERIOD_S = 0.05
HEARTBEAT_S = 15
"""Bounds every blocking AMQP call: a server that stops answering loses the connection
(pika's blocking calls have no timeout of their own)."""


def _pika() -> Any:
    return importlib.import_module("pika")


def connect(port: int) -> Any:
    pika = _pika()
    parameters = pika.ConnectionParameters(
        host="127.0.0.1",
        port=port,
        socket_timeout=CONNECT_TIMEOUT_S,
        blocked_connection_timeout=CONFIRM_TIMEOUT_S,
        heartbeat=HEARTBEAT_S,
    )
    return pika.BlockingConnection(parameters)


def declare_queue(port: int) -> None:
    """The durable quorum queue, replicated on all three nodes."""
    connection = connect(port)
    try:
        arguments = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}
        connection.channel().queue_declare(QUEUE, durable=True, arguments=arguments)
    finally:
        connection.close()


class Confirms:
    """Delivery tags published and not yet confirmed on one channel (one thread)."""

    def __init__(self) -> None:
        self.outstanding: set[int] = set()
        self.published = 0
        self.nacked = 0

    def on_frame(self, frame: Any) -> None:
        method = frame.method
        tag, multiple = int(method.delivery_tag), bool(method.multiple)
        done = {t for t in self.outstanding if t <= tag} if multiple else {tag}
        if type(method).__name__ == "Nack":
            self.nacked += len(done & self.outstanding)
        self.outstanding -= done


class Publisher:
    """One thread's connection and confirm-mode channel."""

    def __init__(self, port: int) -> None:
        self.connection = connect(port)
        self.channel = self.connection.channel()
        self.confirms = Confirms()
        self._properties = _pika().BasicProperties(delivery_mode=2)
        selected: list[bool] = []
        self.channel._impl.confirm_delivery(
            ack_nack_callback=self._on_confirm, callback=lambda _frame: selected.append(True)
        )
        self._pump_until(lambda: bool(selected))

    def _on_confirm(self, frame: Any) -> None:
        self.confirms.on_frame(frame)
        if not self.confirms.outstanding:
            # Wakes process_data_events at once, which would otherwise wait out its time
            # limit: confirms reach the channel's callback, not the blocking connection.
            self.connection.add_callback_threadsafe(lambda: None)

    def publish(self, count: int) -> int:
        """Publish ``count`` persistent messages and wait until all are confirmed."""
        for _ in range(count):
            self.confirms.published += 1
            self.confirms.outstanding.add(self.confirms.published)
            self.channel.basic_publish("", QUEUE, PAYLOAD, self._properties)
        self._pump_until(lambda: not self.confirms.outstanding)
        nacked, self.confirms.nacked = self.confirms.nacked, 0
        if nacked:
            raise RuntimeError(f"{nacked} of {count} messages nacked")
        return count

    def _pump_until(self, done: Callable[[], bool]) -> None:
        deadline_s = time.monotonic() + CONFIRM_TIMEOUT_S
        while not done():
            if time.monotonic() >= deadline_s:
                self.confirms.outstanding.clear()  # the row counts it; the next batch starts clean
                raise TimeoutError(f"no confirm within {CONFIRM_TIMEOUT_S:g} s")
            self.connection.process_data_events(time_limit=EVENTS_PERIOD_S)

    def close(self) -> None:
        """Best effort: a connection broken at the end changes no measured figure."""
        with contextlib.suppress(Exception):
            self.connection.close()


class QueueConsumer:
    """One thread's consumer: prefetch 1,000, one multiple-ack per 1,000 deliveries."""

    def __init__(self, port: int, batch: int) -> None:
        self.connection = connect(port)
        self.channel = self.connection.channel()
        self.channel.basic_qos(prefetch_count=batch)
        self.batch = batch
        self.remaining = int(self.channel.queue_declare(QUEUE, passive=True).method.message_count)
        """What the queue holds now: reading stops there instead of idling at the end."""
        self.deliveries = self.channel.consume(QUEUE, inactivity_timeout=CONSUME_IDLE_S)

    def take(self) -> int:
        wanted = min(self.batch, self.remaining)
        count, last_tag = 0, None
        for method, _properties, _body in self.deliveries if wanted else ():
            if method is None:
                break  # idle for CONSUME_IDLE_S: fewer messages than counted
            count, last_tag = count + 1, method.delivery_tag
            if count >= wanted:
                break
        if last_tag is None:
            raise Exhausted
        self.channel.basic_ack(delivery_tag=last_tag, multiple=True)
        self.remaining -= count
        return count

    def close(self) -> None:
        """Best effort, as ``Publisher.close``; unacknowledged deliveries are requeued."""
        with contextlib.suppress(Exception):
            self.channel.cancel()
        with contextlib.suppress(Exception):
            self.connection.close()


PRODUCE = (
    ("publish 1/req with confirm, 1 thread", "produce 1/req, 1 client", 1, 1),
    ("publish 1/req with confirm, 8 threads", "produce 1/req, 8 clients", 8, 1),
    ("publish 100, confirm all/req, 4 threads", "produce 100/req, 4 clients", 4, 100),
    ("publish 1000, confirm all/req, 4 threads", "produce 1000/req, 4 clients", 4, 1000),
)
"""(scenario, comparable key, threads, messages per request)."""
CONSUME = ("consume prefetch 1000, ack 1000/req, 1 thread", "consume 1000/req, 1 client")
LEASED = ("consume prefetch 100, manual ack 100/req, 1 thread", "receive+ack 100/req, 1 client")
LEASED_FILL = 60_000
"""Messages published (untimed) before the leased scenario: the one before it may have
drained the queue."""


def rabbitmq_rows(ports: list[int], seconds: float, log: Callable[[str], None]) -> list[Row]:
    """Every RabbitMQ scenario, clients on the first node; one that fails is a FAILED row."""
    try:
        declare_queue(ports[0])
    except Exception as exc:
        return [Row(SYSTEM, "declare quorum queue (3 replicas)", error=_why(exc))]
    rows = []
    for name, key, threads, batch in PRODUCE:
        log(f"  {SYSTEM}: {name} ...")
        rows.append(_run(name, key, threads, seconds, _publisher(ports[0], batch)))
    log(f"  {SYSTEM}: {CONSUME[0]} ...")
    rows.append(_run(*CONSUME, 1, seconds, _consumer(ports[0])))
    log(f"  {SYSTEM}: {LEASED[0]} ...")
    try:
        _fill(ports[0], LEASED_FILL)
    except Exception as exc:
        return [*rows, Row(SYSTEM, LEASED[0], key=LEASED[1], error=_why(exc))]
    rows.append(_run(*LEASED, 1, seconds, _consumer(ports[0], 100)))
    return rows


def _fill(port: int, count: int) -> None:
    publisher = Publisher(port)
    try:
        for _ in range(count // 1000):
            publisher.publish(1000)
    finally:
        publisher.close()


def _publisher(port: int, batch: int) -> MakeStep:
    def make(opened: contextlib.ExitStack) -> Step:
        publisher = Publisher(port)
        opened.callback(publisher.close)
        return lambda: publisher.publish(batch)

    return make


def _consumer(port: int, batch: int = 1000) -> MakeStep:
    def make(opened: contextlib.ExitStack) -> Step:
        consumer = QueueConsumer(port, batch)
        opened.callback(consumer.close)
        return consumer.take

    return make


def _run(name: str, key: str, threads: int, seconds: float, make: MakeStep) -> Row:
    try:
        tally = run_load(threads, seconds, make)
    except Exception as exc:
        return Row(SYSTEM, name, key=key, error=_why(exc))
    return tally.row(SYSTEM, name, key)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:160]
