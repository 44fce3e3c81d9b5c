"""RaftQ's redelivery after a group member's death (``stress_tests.redelivery``): two rows,
past the lease's end and from the kill.

A topic of 3 partitions and a group with a 1 s visibility timeout of their own. Each round
produces ``MESSAGES_PER_DEATH`` messages through the load balancer; a doomed member (this
module run as a process: ``python -m stress_tests.bench_redelivery --lb URL --topic T
--group G --count N``, the API key in ``RAFTQ_API_KEY``) receives them all in one receive
and reports them; the survivor, a thread here, long-polls (``wait_ms``) through the load
balancer and acks what it gets; the benchmark kill -9s the doomed member. Leases live in
the partitions' replicated state, not in a connection, so a death changes nothing until
the lease ends: the figure past its end is the service's (the managers ask the partitions
again every ``long_poll_period_s`` while a long poll waits, then the receive's commit).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence

from stress_tests import redelivery
from stress_tests.bench_http import VALUE, LightClient, create_topic, new_id
from stress_tests.bench_report import RAFTQ, Row
from stress_tests.bench_scenarios import create_group
from stress_tests.credentials import bearer, client_session
from stress_tests.redelivery import Doomed, Round, Taken

SCENARIO = redelivery.Scenario(
    RAFTQ,
    "redelivery after kill -9 of a member, 1 s lease, long poll via LB",
    redelivery.KEY_PAST_LEASE,
    redelivery.KEY_FROM_KILL,
)
WAIT_MS = 5000
"""The survivor's long poll (the managers' ``long_poll_wait_ms_max``)."""
API_KEY_VARIABLE = "RAFTQ_API_KEY"


def measure(lb: str, api_key: str, seconds: float, log: Callable[[str], None]) -> list[Row]:
    topic, group = f"bench-redeliver-{new_id()[:6]}", "survivors"
    with client_session(api_key) as session:
        create_topic(session, lb, topic, 3)
    create_group(lb, api_key, topic, group, "none", redelivery.VISIBILITY_TIMEOUT_MS)
    with contextlib.closing(LightClient(bearer(api_key))) as client:
        producer = client.post(f"{lb}/producers", {"topic": topic})["producer_id"]

        def one_round(number: int) -> Round:
            values = [f"{VALUE[:80]}-{number}-{i}" for i in range(redelivery.MESSAGES_PER_DEATH)]
            messages = [{"message": value, "key": None} for value in values]
            body = {"producer_id": producer, "topic": topic, "messages": messages}
            client.post(f"{lb}/logs", body)
            return _round(lb, api_key, topic, group)

        rounds = redelivery.run_rounds(seconds, one_round)
    log(f"    {len(rounds)} kills")
    return redelivery.rows(SCENARIO, rounds)


def _round(lb: str, api_key: str, topic: str, group: str) -> Round:
    args = ["--lb", lb, "--topic", topic, "--group", group]
    doomed = Doomed(__name__, args, {API_KEY_VARIABLE: api_key})
    try:
        taken = doomed.taken()
        lease_end_s = taken.sent_s + redelivery.VISIBILITY_TIMEOUT_MS / 1000
        record = Round(taken, killed_s=0.0, lease_end_s=lease_end_s)
        until_s = time.monotonic() + redelivery.REDELIVERY_WAIT_S + 2.0
        survivor = threading.Thread(
            target=_survive, args=(lb, api_key, topic, group, record, until_s), daemon=True
        )
        survivor.start()
        record.killed_s = doomed.kill()
        survivor.join(until_s - time.monotonic() + 30.0)
        return record
    finally:
        doomed.close()


def _survive(lb: str, api_key: str, topic: str, group: str, record: Round, until_s: float) -> None:
    """Long-poll until every message the doomed member took is back (noting when each
    arrived), acking whatever comes; a failed receive is asked again."""
    with contextlib.closing(LightClient(bearer(api_key))) as client:
        while record.missing and time.monotonic() < until_s:
            params: dict[str, str | int] = {
                "topic": topic,
                "max_messages": 100,
                "request_id": new_id(),
                "wait_ms": WAIT_MS,
            }
            try:
                messages = client.get(f"{lb}/groups/{group}/messages", params)["messages"]
            except Exception:  # the doomed member's leases stand: ask again
                time.sleep(0.05)
                continue
            arrived_s = time.monotonic()
            for message in messages:
                value = str(message.get("message"))
                if value in record.taken.values and value not in record.redelivered_s:
                    record.redelivered_s[value] = arrived_s
            if messages:
                body = {"topic": topic, "receipts": [m["receipt"] for m in messages]}
                with contextlib.suppress(Exception):  # unacked: delivered again, not counted
                    client.post(f"{lb}/groups/{group}/ack", body, status=200)


def doomed_main(argv: Sequence[str] | None = None) -> int:
    """The doomed member: one receive of everything there (up to 100), report, wait."""
    parser = argparse.ArgumentParser(prog="python -m stress_tests.bench_redelivery")
    for name in ("--lb", "--topic", "--group"):
        parser.add_argument(name, required=True)
    args = parser.parse_args(argv)
    client = LightClient(bearer(os.environ[API_KEY_VARIABLE]))
    params: dict[str, str | int] = {
        "topic": args.topic,
        "max_messages": 100,
        "request_id": new_id(),
    }
    sent_s = time.monotonic()
    messages = client.get(f"{args.lb}/groups/{args.group}/messages", params)["messages"]
    redelivery.report_taken(Taken(tuple(str(m["message"]) for m in messages), sent_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(doomed_main())
