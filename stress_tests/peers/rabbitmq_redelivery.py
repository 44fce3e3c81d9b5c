"""RabbitMQ's redelivery after a consumer's death (``stress_tests.redelivery``): from the
kill only, since RabbitMQ has no lease to end.

A quorum queue of its own (3 replicas). Each round publishes ``MESSAGES_PER_DEATH``
persistent messages with confirms; a doomed consumer (this module run as a process:
``python -m stress_tests.peers.rabbitmq_redelivery --port P``) with prefetch
``MESSAGES_PER_DEATH`` and manual acks takes them all and reports them; the survivor, here,
starts consuming (prefetch 100) on a channel of its own and the benchmark kill -9s the
doomed consumer. Its connection closes with the process, and the queue requeues its
unacknowledged messages at once: the survivor gets them (``redelivered``), each timed as
its delivery is handled, and acks each. Not compared with RaftQ (no key): RaftQ's leases
are replicated state, not tied to a connection, so a death is seen only when the lease
ends (its rows past the lease's end are the comparable figure).

pika is imported when the scenario runs (``importlib``), as in ``rabbitmq_bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import time
from collections.abc import Sequence
from typing import Any

from stress_tests import redelivery
from stress_tests.bench_report import Row
from stress_tests.peers.rabbitmq_bench import SYSTEM, connect
from stress_tests.redelivery import Doomed, Round, Taken

QUEUE = "raftq-bench-redelivery"
SCENARIO = redelivery.Scenario(
    SYSTEM,
    f"redelivery after kill -9 of a consumer (prefetch {redelivery.MESSAGES_PER_DEATH})",
    None,
    None,
    "requeued when its connection closes; not compared: no lease",
)
EVENTS_PERIOD_S = 0.005
CONSUME_IDLE_S = 10.0


def rows(port: int, seconds: float) -> list[Row]:
    """The row; a failure to set up or to run becomes a FAILED row."""
    try:
        connection = connect(port)
    except Exception as exc:
        return [Row(SYSTEM, SCENARIO.name, error=f"{type(exc).__name__}: {exc}"[:160])]
    try:
        channel = connection.channel()
        arguments = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}
        channel.queue_declare(QUEUE, durable=True, arguments=arguments)
        channel.confirm_delivery()
        rounds = redelivery.run_rounds(seconds, lambda n: _round(connection, channel, port, n))
    except Exception as exc:
        return [Row(SYSTEM, SCENARIO.name, error=f"{type(exc).__name__}: {exc}"[:160])]
    finally:
        with contextlib.suppress(Exception):
            connection.close()
    return redelivery.rows(SCENARIO, rounds)


def _round(connection: Any, publisher: Any, port: int, number: int) -> Round:
    properties = importlib.import_module("pika").BasicProperties(delivery_mode=2)
    for i in range(redelivery.MESSAGES_PER_DEATH):
        publisher.basic_publish("", QUEUE, f"{number}-{i}".encode(), properties)  # confirmed
    doomed = Doomed(__name__, ["--port", str(port)])
    try:
        record = Round(doomed.taken(), killed_s=0.0, lease_end_s=None)
        channel = connection.channel()
        channel.basic_qos(prefetch_count=100)

        def arrived(ch: Any, method: Any, _properties: Any, body: bytes) -> None:
            at_s = time.monotonic()
            value = body.decode(errors="replace")
            if value in record.taken.values and value not in record.redelivered_s:
                record.redelivered_s[value] = at_s
            ch.basic_ack(method.delivery_tag)

        channel.basic_consume(QUEUE, arrived)
        record.killed_s = doomed.kill()
        until_s = time.monotonic() + redelivery.REDELIVERY_WAIT_S
        while record.missing and time.monotonic() < until_s:
            connection.process_data_events(time_limit=EVENTS_PERIOD_S)
        channel.close()
        return record
    finally:
        doomed.close()


def doomed_main(argv: Sequence[str] | None = None) -> int:
    """The doomed consumer: take the round's messages, report, wait (never acking)."""
    parser = argparse.ArgumentParser(prog="python -m stress_tests.peers.rabbitmq_redelivery")
    parser.add_argument("--port", type=int, required=True)
    connection = connect(parser.parse_args(argv).port)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=redelivery.MESSAGES_PER_DEATH)
    sent_s = time.monotonic()
    values: list[str] = []
    for method, _properties, body in channel.consume(QUEUE, inactivity_timeout=CONSUME_IDLE_S):
        if method is None:
            break  # fewer messages than a round puts there: report what it has
        values.append(body.decode(errors="replace"))
        if len(values) >= redelivery.MESSAGES_PER_DEATH:
            break
    redelivery.report_taken(Taken(tuple(values), sent_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(doomed_main())
