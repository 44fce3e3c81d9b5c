"""RaftQ's throughput and latency scenarios, each a ``Row`` of the table.

Every scenario is closed-loop (``bench_load.run_load``): each thread sends its next request
when the previous one is answered, for ``seconds``. Produce scenarios write 100-byte messages
without a sequence (plain produce), except "several producers", which registers one producer
per thread and numbers its batches, as an idempotent client does. Every produce asks for the
default durability (``fsync``) except the rows that name another: their ratio to the same
row at ``fsync`` is the cost of each durability level. Every request carries the API key
each function is given (``api_key``), through the load balancer and straight to a broker.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from stress_tests.bench_http import (
    VALUE,
    LightClient,
    create_topic,
    end_offset,
    leader_address,
    new_id,
)
from stress_tests.bench_load import Exhausted, MakeStep, Step, run_load
from stress_tests.bench_report import RAFTQ, Row
from stress_tests.credentials import bearer, client_session


@dataclass(frozen=True, slots=True)
class Topics:
    """The topics every scenario shares, created once per run."""

    one: str
    """1 partition: produce 1/request, fetch, end-to-end latency, failover."""
    three: str
    """3 partitions: batches, several producers, pop."""


def make_topics(lb: str, api_key: str) -> Topics:
    suffix = new_id()[:6]
    topics = Topics(f"bench1-{suffix}", f"bench3-{suffix}")
    with client_session(api_key) as session:
        create_topic(session, lb, topics.one, 1)
        create_topic(session, lb, topics.three, 3)
    return topics


def produce_via_lb(
    lb: str,
    credentials: Mapping[str, str],
    topic: str,
    batch: int,
    sequences: bool = False,
    durability: str = "fsync",
) -> MakeStep:
    """A step per thread: its own session and registered producer; ``sequences`` numbers the
    batches (idempotent produce)."""

    def make(opened: contextlib.ExitStack) -> Step:
        client = opened.enter_context(contextlib.closing(LightClient(credentials)))
        producer = client.post(f"{lb}/producers", {"topic": topic})["producer_id"]
        counter = itertools.count(1)

        def step() -> int:
            body: dict[str, object] = {
                "producer_id": producer,
                "topic": topic,
                "messages": [{"message": VALUE, "key": new_id()[:8]} for _ in range(batch)],
            }
            if sequences:
                body["sequence"] = next(counter)
            if durability != "fsync":
                body["durability"] = durability
            client.post(f"{lb}/logs", body)
            return batch

        return step

    return make


def produce_direct(broker: str | None, api_key: str, topic: str, partition_id: int) -> MakeStep:
    """1 message per request straight to the partition leader's broker (no LB, no manager);
    ``broker`` None (no leader known) fails the scenario, not the benchmark."""

    def make(opened: contextlib.ExitStack) -> Step:
        if broker is None:
            raise RuntimeError(f"the managers know no leader for {topic}/{partition_id}")
        client = opened.enter_context(contextlib.closing(LightClient(bearer(api_key))))
        body = {
            "topic": topic,
            "partition_id": partition_id,
            "messages": [{"message": VALUE, "key": None}],
        }

        def step() -> int:
            client.post(f"{broker}/logs", body)
            return 1

        return step

    return make


def pop(lb: str, api_key: str, topic: str, batch: int) -> MakeStep:
    """Each thread its own consumer (each reads the whole topic); a retry-safe request id per
    pop. An empty answer means the topic is drained: the thread stops."""

    def make(opened: contextlib.ExitStack) -> Step:
        client = opened.enter_context(contextlib.closing(LightClient(bearer(api_key))))
        consumer = client.post(f"{lb}/consumers", {"topic": topic})["consumer_id"]

        def step() -> int:
            params: dict[str, str | int] = {
                "consumer_id": consumer,
                "max_messages": batch,
                "request_id": new_id(),
            }
            moved = len(client.get(f"{lb}/logs", params)["messages"])
            if moved == 0:
                raise Exhausted
            return moved

        return step

    return make


def receive_ack(lb: str, api_key: str, topic: str, group: str, batch: int) -> MakeStep:
    """A member of a consumer group (issue 20): receive up to ``batch`` messages, then ack
    them all in one request, through the LB. An empty receive means the topic is drained."""

    def make(opened: contextlib.ExitStack) -> Step:
        client = opened.enter_context(contextlib.closing(LightClient(bearer(api_key))))

        def step() -> int:
            params: dict[str, str | int] = {
                "topic": topic,
                "max_messages": batch,
                "request_id": new_id(),
            }
            messages = client.get(f"{lb}/groups/{group}/messages", params)["messages"]
            if not messages:
                raise Exhausted
            body = {"topic": topic, "receipts": [m["receipt"] for m in messages]}
            client.post(f"{lb}/groups/{group}/ack", body, status=200)
            return len(messages)

        return step

    return make


def create_group(
    lb: str,
    api_key: str,
    topic: str,
    group: str,
    ordering: str,
    visibility_timeout_ms: int | None = None,
) -> None:
    """``visibility_timeout_ms`` None: the cluster's default lease."""
    with client_session(api_key) as session:
        body: dict[str, object] = {"topic": topic, "group": group, "ordering": ordering}
        if visibility_timeout_ms is not None:
            body["visibility_timeout_ms"] = visibility_timeout_ms
        with session.post(f"{lb}/groups", json=body, timeout=30) as response:
            if response.status_code not in (200, 201):
                raise RuntimeError(f"POST /groups: {response.status_code} {response.text}")


def fetch(lb: str, api_key: str, topic: str, batch: int, end: int) -> MakeStep:
    """Fetch by offset through the LB, walking ``[0, end)`` and wrapping around."""

    def make(opened: contextlib.ExitStack) -> Step:
        client = opened.enter_context(contextlib.closing(LightClient(bearer(api_key))))
        offsets = itertools.count(0, batch)

        def step() -> int:
            params: dict[str, str | int] = {
                "topic": topic,
                "partition_id": 0,
                "offset": next(offsets) % max(end, 1),
                "max_messages": batch,
            }
            return len(client.get(f"{lb}/logs", params)["messages"])

        return step

    return make


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    key: str | None
    """The comparable scenario of the peers (None: RaftQ only)."""
    threads: int
    make: MakeStep
    """Called per thread when the scenario starts, so its setup (and its failure) belongs
    to it."""


def produce_plan(lb: str, api_key: str, topics: Topics, leader: str | None) -> list[Scenario]:
    one, three = topics.one, topics.three
    direct = produce_direct(leader, api_key, one, 0)
    return [
        Scenario(
            "produce 1/req via LB, 1 thread",
            "produce 1/req, 1 client",
            1,
            produce_via_lb(lb, bearer(api_key), one, 1),
        ),
        Scenario(
            "produce 1/req via LB, 8 threads",
            "produce 1/req, 8 clients",
            8,
            produce_via_lb(lb, bearer(api_key), one, 1),
        ),
        Scenario("produce 1/req to leader broker, 1 thread", "produce 1/req, 1 client", 1, direct),
        Scenario(
            "produce 1/req to leader broker, 8 threads", "produce 1/req, 8 clients", 8, direct
        ),
        Scenario(
            "produce 100/req via LB, 3 partitions, 4 threads",
            "produce 100/req, 4 clients",
            4,
            produce_via_lb(lb, bearer(api_key), three, 100),
        ),
        Scenario(
            "produce 1000/req via LB, 3 partitions, 4 threads",
            "produce 1000/req, 4 clients",
            4,
            produce_via_lb(lb, bearer(api_key), three, 1000),
        ),
        Scenario(
            "4 producers with sequences, 100/req, 4 threads",
            None,
            4,
            produce_via_lb(lb, bearer(api_key), three, 100, sequences=True),
        ),
        *durability_plan(lb, api_key, topics),
    ]


def durability_plan(lb: str, api_key: str, topics: Topics) -> list[Scenario]:
    """The other two durability levels, each beside a default (``fsync``) row above."""
    return [
        Scenario(
            f"{where}, durability {level}",
            None,
            threads,
            produce_via_lb(lb, bearer(api_key), topic, batch, durability=level),
        )
        for level in ("replicated", "flushed")
        for where, batch, threads, topic in (
            ("produce 1/req via LB, 1 thread", 1, 1, topics.one),
            ("produce 100/req via LB, 3 partitions, 4 threads", 100, 4, topics.three),
        )
    ]


def throughput_rows(
    lb: str,
    api_key: str,
    topics: Topics,
    seconds: float,
    log: Callable[[str], None],
) -> list[Row]:
    """Every throughput scenario in order: produce first, so pop and fetch find data."""
    with client_session(api_key) as session:
        leader = leader_address(session, lb, topics.one, 0)
    rows = [_measure(s, seconds, log) for s in produce_plan(lb, api_key, topics, leader)]
    pop_1000 = Scenario(
        "pop 1000/req via LB, 3 partitions, 1 thread",
        "consume 1000/req, 1 client",
        1,
        pop(lb, api_key, topics.three, 1000),
    )
    rows.append(_measure(pop_1000, seconds, log))
    rows += [_measure(s, seconds, log) for s in group_scenarios(lb, api_key, topics)]
    with client_session(api_key) as session:
        end = end_offset(session, lb, topics.one, 0)
    fetch_1000 = Scenario(
        "fetch 1000/req by offset via LB, 1 partition, 2 threads",
        None,
        2,
        fetch(lb, api_key, topics.one, 1000, end),
    )
    rows.append(_measure(fetch_1000, seconds, log))
    return rows


def group_scenarios(lb: str, api_key: str, topics: Topics) -> list[Scenario]:
    """Receive + ack in batches of 100 (a consumer group: its own state, beside the pops'),
    without and with per-key ordering: their ratio is the cost of ordering (the messages
    here have no key: the cost of checking for one)."""
    scenarios = []
    for ordering in ("none", "key"):
        group = f"bench-{ordering}-{new_id()[:6]}"
        create_group(lb, api_key, topics.three, group, ordering)
        name = "receive 100 + ack via LB, 3 partitions, 1 thread"
        if ordering == "key":
            name += ", per-key ordering"
        key = "receive+ack 100/req, 1 client" if ordering == "none" else None
        scenarios.append(Scenario(name, key, 1, receive_ack(lb, api_key, topics.three, group, 100)))
    return scenarios


def _measure(scenario: Scenario, seconds: float, log: Callable[[str], None]) -> Row:
    """One scenario; a scenario that cannot even start becomes a FAILED row, not a crash."""
    log(f"  {scenario.name} ...")
    try:
        tally = run_load(scenario.threads, seconds, scenario.make)
    except Exception as exc:  # the row says why; the other scenarios still run
        error = f"{type(exc).__name__}: {exc}"[:160]
        return Row(RAFTQ, scenario.name, key=scenario.key, error=error)
    return tally.row(RAFTQ, scenario.name, scenario.key)
