"""NATS JetStream's redelivery after a pull consumer's death (``stress_tests.redelivery``):
past AckWait's end and from the kill, comparable with RaftQ's rows.

A stream of its own (file storage, 3 replicas) and a durable pull consumer with explicit
acks and ``ack_wait`` 1 s (RaftQ's visibility timeout). Each round publishes
``MESSAGES_PER_DEATH`` messages; a doomed member (this module run as a process: ``python
-m stress_tests.peers.nats_redelivery --servers URL,... ``) fetches them all and reports
them; the survivor, here, has a pull request waiting for as many messages (each timed as
it arrives, in the subscription's callback) when the benchmark kill -9s the doomed
member, and acks each. JetStream does not watch a consumer's connection: a message comes
back when its AckWait ends.

nats-py is imported when the scenario runs (``importlib``), as in ``nats_bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import time
from collections.abc import Sequence
from typing import Any

from stress_tests import redelivery
from stress_tests.bench_report import Row
from stress_tests.peers.nats_bench import ACK_TIMEOUT_S, SETUP_TIMEOUT_S, SYSTEM, connect
from stress_tests.redelivery import Doomed, Round, Taken

STREAM = "REDELIVERY"
SUBJECT = "bench.redelivery"
DURABLE = "redelivery"
SCENARIO = redelivery.Scenario(
    SYSTEM,
    "redelivery after kill -9 of a pull consumer, AckWait 1 s",
    redelivery.KEY_PAST_LEASE,
    redelivery.KEY_FROM_KILL,
)
FETCH_TIMEOUT_S = 10.0
GRACE_S = 60.0


async def _setup(servers: list[str]) -> None:
    """The stream and the durable consumer; retried until JetStream's meta leader answers."""
    api = importlib.import_module("nats.js.api")
    nc = await connect(servers)
    try:
        js = nc.jetstream(timeout=5)
        deadline_s = time.monotonic() + SETUP_TIMEOUT_S
        while True:
            try:
                await js.add_stream(
                    name=STREAM, subjects=[SUBJECT], storage=api.StorageType.FILE, num_replicas=3
                )
                break
            except Exception:
                if time.monotonic() >= deadline_s:
                    raise
                await asyncio.sleep(0.5)  # bounded retry: JetStream elects its meta leader
        config = api.ConsumerConfig(
            durable_name=DURABLE,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=redelivery.VISIBILITY_TIMEOUT_MS / 1000,
            max_ack_pending=1000,
        )
        await js.add_consumer(STREAM, config)
    finally:
        await nc.close()


def rows(servers: list[str], seconds: float) -> list[Row]:
    """The two rows; a failure to set up or to run becomes one FAILED row."""
    try:
        asyncio.run(asyncio.wait_for(_setup(servers), SETUP_TIMEOUT_S + GRACE_S))
        rounds = redelivery.run_rounds(seconds, lambda n: asyncio.run(_round(servers, n)))
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"[:160]
        return [Row(SYSTEM, SCENARIO.name, key=SCENARIO.key_past_lease, error=why)]
    return redelivery.rows(SCENARIO, rounds)


async def _round(servers: list[str], number: int) -> Round:
    nc = await connect(servers)
    try:
        js = nc.jetstream(timeout=ACK_TIMEOUT_S)
        for i in range(redelivery.MESSAGES_PER_DEATH):
            await js.publish(SUBJECT, f"{number}-{i}".encode(), timeout=ACK_TIMEOUT_S)
        doomed = Doomed(__name__, ["--servers", ",".join(servers)])
        try:
            taken = doomed.taken()  # blocks the loop; nothing of this round is pending yet
            lease_end_s = taken.sent_s + redelivery.VISIBILITY_TIMEOUT_MS / 1000
            record = Round(taken, killed_s=0.0, lease_end_s=lease_end_s)
            subscription = await _pull(nc, record)
            record.killed_s = doomed.kill()
            until_s = time.monotonic() + redelivery.REDELIVERY_WAIT_S
            while record.missing and time.monotonic() < until_s:
                await asyncio.sleep(0.01)
            await subscription.unsubscribe()
            return record
        finally:
            doomed.close()
    finally:
        await nc.close()


async def _pull(nc: Any, record: Round) -> Any:
    """A pull request for as many messages as the doomed member holds, its answers timed in
    the callback as they arrive; each acked (status messages and others are ignored)."""

    async def arrived(msg: Any) -> None:
        at_s = time.monotonic()
        value = msg.data.decode(errors="replace")
        if value in record.taken.values and value not in record.redelivered_s:
            record.redelivered_s[value] = at_s
        if msg.reply:
            await msg.ack()

    inbox = nc.new_inbox()
    subscription = await nc.subscribe(inbox, cb=arrived)
    request = {
        "batch": len(record.taken.values),
        "expires": int(redelivery.REDELIVERY_WAIT_S * 1_000_000_000),
    }
    subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{DURABLE}"
    await nc.publish(subject, json.dumps(request).encode(), reply=inbox)
    await nc.flush()
    return subscription


async def _doomed(servers: list[str]) -> None:
    """Fetch, report, and wait to be killed with the connection open (blocking the loop:
    the server pings a client every two minutes, past ``DOOMED_LIFETIME_S``)."""
    nc = await connect(servers)
    js = nc.jetstream(timeout=ACK_TIMEOUT_S)
    subscription = await js.pull_subscribe_bind(consumer=DURABLE, stream=STREAM)
    sent_s = time.monotonic()
    messages = await subscription.fetch(redelivery.MESSAGES_PER_DEATH, timeout=FETCH_TIMEOUT_S)
    redelivery.report_taken(Taken(tuple(m.data.decode(errors="replace") for m in messages), sent_s))


def doomed_main(argv: Sequence[str] | None = None) -> int:
    """The doomed member: fetch the round's messages, report, wait (never acking)."""
    parser = argparse.ArgumentParser(prog="python -m stress_tests.peers.nats_redelivery")
    parser.add_argument("--servers", required=True, help="comma-separated nats:// URLs")
    servers = parser.parse_args(argv).servers.split(",")
    asyncio.run(_doomed(servers))
    return 0


if __name__ == "__main__":
    raise SystemExit(doomed_main())
