"""One worker of a consumer group, as its own process, for the at-least-once run
(``lease_run``): ``python -m stress_tests.lease_worker --url U --topic T --group G
--ledger FILE --seed N`` (the API key in ``RAFTQ_API_KEY``).

It receives, and for each delivery (drawn from its seed): works a little, writes to its
ledger that it finished, then acks; or nacks it; or extends its lease, works longer, then
finishes and acks. A poison message (value ``poison-…``) it nacks, every time up to the
group's ``max_deliveries``; past them (the run redrove it from the dead-letter topic) it
works it like any other. Every
receive and every settle is written to the ledger too, with the
wall-clock times before and after (the run's processes share one clock). One JSON object
per line, flushed as written: a kill -9 loses at most the line being written, never one
written before (the kernel keeps a killed process's written pages).

Runs until SIGTERM. The nemesis kill -9s it, or stops it (SIGSTOP) past the visibility
timeout, wherever it is: between a receive and its ack is the point.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from typing import IO, Any

from raftq import Delivery, GroupMember
from raftq.errors import RaftQClientError

RECEIVE_MESSAGES = 10
WAIT_MS = 500
"""A receive's long poll: the run's stop signal is seen within it."""
ERROR_PAUSE_S = 0.2
WORK_S_MAX = 0.02
ACK_ATTEMPTS_MAX = 20
"""Per delivery: an ack whose answer was lost is asked again (idempotent by receipt) until
one comes (``already`` when the lost one had acted)."""
POISON_PREFIX = "poison-"
"""A message every worker fails (nacks): it must end in the dead-letter topic."""
NACK_SHARE = 0.05
EXTEND_SHARE = 0.05


def now_ms() -> int:
    return int(time.time() * 1000)


class Worker:
    def __init__(self, member: GroupMember, ledger: IO[str], name: str, seed: int) -> None:
        self._member, self._ledger, self._name = member, ledger, name
        self._random = random.Random(seed)
        self.stopping = False
        self._first_sent_ms: int | None = None
        """When the receive being repeated was first sent: ``GroupMember`` repeats a failed
        receive's request id, and the leases it answers may date from that first attempt."""

    def run(self) -> None:
        while not self.stopping:
            if self._first_sent_ms is None:
                self._first_sent_ms = now_ms()
            sent = self._first_sent_ms
            try:
                deliveries = self._member.receive(RECEIVE_MESSAGES, WAIT_MS)
            except RaftQClientError:
                time.sleep(ERROR_PAUSE_S)
                continue
            self._first_sent_ms = None
            at = now_ms()
            for d in deliveries:
                self._write("received", d, sent_ms=sent, at_ms=at, receipt=d.receipt)
            self._write_line(
                kind="receive",
                worker=self._name,
                sent_ms=sent,
                at_ms=at,
                asked=RECEIVE_MESSAGES,
                got=len(deliveries),
            )
            for d in deliveries:
                self._handle(d)

    def _handle(self, delivery: Delivery) -> None:
        if self._fails(delivery):
            self._settle("nack", delivery, 0)
            return
        draw = self._random.random()
        if draw < NACK_SHARE:
            self._settle("nack", delivery, 0)
            return
        if draw < NACK_SHARE + EXTEND_SHARE:
            self._settle("extend", delivery, self._member.visibility_timeout_ms)
            time.sleep(WORK_S_MAX * 5)
        time.sleep(self._random.random() * WORK_S_MAX)
        self._write("finished", delivery, at_ms=now_ms())
        for _ in range(ACK_ATTEMPTS_MAX):  # an ack nobody heard answered proves nothing
            if self._settle("ack", delivery, 0) != "error":
                return
            time.sleep(ERROR_PAUSE_S)

    def _fails(self, delivery: Delivery) -> bool:
        """A poison message fails whoever takes it, until it died once: a redriven one (its
        delivery count past ``max_deliveries``) is worked."""
        most = self._member.settings.max_deliveries
        poison = delivery.record.value.startswith(POISON_PREFIX)
        return poison and (most == 0 or delivery.delivery_count <= most)

    def _settle(self, action: str, delivery: Delivery, duration_ms: int) -> str:
        sent = now_ms()
        try:
            if action == "ack":
                answered = self._member.ack([delivery])
            elif action == "nack":
                answered = self._member.nack([delivery], duration_ms)
            else:
                answered = self._member.extend([delivery], duration_ms)
            outcome = answered[0][1]
        except RaftQClientError:
            outcome = "error"
        self._write(
            "settled",
            delivery,
            action=action,
            outcome=outcome,
            sent_ms=sent,
            at_ms=now_ms(),
            duration_ms=duration_ms,
        )
        return outcome

    def _write(self, kind: str, delivery: Delivery, **fields: Any) -> None:
        self._write_line(
            kind=kind,
            worker=self._name,
            partition_id=delivery.record.partition_id,
            offset=delivery.record.offset,
            delivery_count=delivery.delivery_count,
            **fields,
        )

    def _write_line(self, **fields: Any) -> None:
        self._ledger.write(json.dumps(fields) + "\n")
        self._ledger.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args(argv)
    api_key = os.environ.get("RAFTQ_API_KEY")
    with (
        open(args.ledger, "a", encoding="utf-8") as ledger,
        GroupMember(args.url, args.topic, args.group, api_key=api_key) as member,
    ):
        worker = Worker(member, ledger, args.name, args.seed)

        def stop(_signum: int, _frame: object) -> None:
            worker.stopping = True

        signal.signal(signal.SIGTERM, stop)
        worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
