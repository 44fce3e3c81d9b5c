"""Operations with real processes (issue 10).

Retention: a topic's retention by size and by age moves the log start on every replica and
removes the older rows from every broker's database, and nothing else; a fetch below the log
start answers 416 with the valid range; a new consumer starts at the log start.

Consumer lag: in messages and seconds per consumer and partition, through the API, the CLI
and the brokers' ``/metrics``, matching what was produced and popped.

Leader balance: after a broker is killed and comes back (leading nothing), the brokers again
lead within one partition of each other.

The dashboard: headless Chromium loads ``/ui`` and shows what the cluster holds.
``min_insync_replicas``: a partition with fewer replicas in sync refuses writes."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftq import Admin, Consumer, ConsumerLag, GroupMember, Producer
from stress_tests.cluster_view import replica_status
from stress_tests.polling import poll_until
from unit_tests.cluster.browser import ARTIFACTS, browser, dashboard_cells
from unit_tests.cluster.client_ops import (
    checksums,
    create_topic_answer,
    partition_brokers,
    partition_leader,
    pop_all,
    produce,
    register_consumer,
    register_producer,
)
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

WAIT_S = 60.0
LIMITS = {"retention_check_period_s": "0.2", "leader_balance_period_s": "0.5"}
VALUE_CHARS = 10
RETENTION_BYTES = 1_000
"""100 messages of 10 characters."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["operations"]
    yield from running_cluster(tmp_path_factory.mktemp("operations"), port, LIMITS)


def _create(cluster: Cluster, topic: str, **settings: int) -> None:
    create_topic_answer(cluster, {"name": topic, "partitions": 1, **settings})


def _produce(cluster: Cluster, topic: str, count: int, *, keyed: bool = False) -> None:
    values = [f"{i:0{VALUE_CHARS}d}" for i in range(count)]
    with Producer(cluster.lb_url, topic, api_key=cluster.admin_key) as producer:
        acks = producer.produce_batch((v, v if keyed else None) for v in values)
    if not keyed:
        assert [a.offset for a in acks] == list(range(count))


def _everywhere(cluster: Cluster, topic: str, log_start: int, end: int) -> bool:
    """Every replica's log starts at ``log_start`` and its database holds exactly
    ``[log_start, end)``, the same rows on each."""
    statuses = replica_status(cluster.local, cluster.http, topic, 0)
    if len(statuses) != 3 or any(s["log_start_offset"] != log_start for s in statuses.values()):
        return False
    below, kept = checksums(cluster, topic, 0, log_start), checksums(cluster, topic, 0, end)
    counts_below = {count for count, _, _ in below.values()}
    kept_rows = {(count, digest) for count, digest, _ in kept.values()}
    return counts_below == {0} and len(kept_rows) == 1 and kept_rows.pop()[0] == end - log_start


def test_retention_by_size_keeps_the_newest_bytes_on_every_replica(cluster: Cluster) -> None:
    _create(cluster, "sized", retention_bytes=RETENTION_BYTES)
    _produce(cluster, "sized", 300)
    poll_until(lambda: _everywhere(cluster, "sized", 200, 300), WAIT_S, "retention by size")
    leader_url = cluster.broker_url(partition_leader(cluster, "sized", 0))
    query = "topic=sized&partition_id=0&offset=150&max_messages=10"
    below = cluster.http.get(f"{leader_url}/logs?{query}", timeout=10)
    assert below.status_code == 416, below.text
    assert "valid offsets are 200 to 300" in below.json()["message"]
    with Consumer(cluster.lb_url, "sized", api_key=cluster.admin_key) as consumer:
        first = poll_until(lambda: consumer.poll(10), WAIT_S, "a pop to answer")
    assert first[0].offset == 200


def test_retention_by_age_removes_old_messages_and_only_those(cluster: Cluster) -> None:
    # As a user would: the CLI, with the cluster's directory.
    cluster._cli(
        "topic", "create", "aged", "--retention-ms", "2000", "--dir", str(cluster.directory)
    )
    _create(cluster, "kept")  # no retention: a neighbour that must keep everything
    _produce(cluster, "aged", 50)
    _produce(cluster, "kept", 50)
    poll_until(lambda: _everywhere(cluster, "aged", 50, 50), WAIT_S, "retention by age")
    assert _everywhere(cluster, "kept", 0, 50)


def _lag(cluster: Cluster, topic: str, consumer_id: str) -> dict[int, ConsumerLag]:
    """The consumer's lag per partition, once every partition's leader is known to the
    managers (they learn it from their poll of the brokers, a moment after creation)."""

    def answered() -> dict[int, ConsumerLag] | None:
        with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
            lag = admin.consumer_lag(topic)
        if lag.unavailable_partitions:
            return None
        return {c.partition_id: c for c in lag.consumers if c.consumer_id == consumer_id}

    return poll_until(answered, WAIT_S, f"every partition of {topic} to answer for its lag")


def _metric(cluster: Cluster, broker_id: int, name: str, consumer_id: str) -> dict[str, float]:
    """partition -> value of ``raftq_broker_<name>`` for the consumer, at one broker."""
    text = cluster.http.get(f"{cluster.broker_url(broker_id)}/metrics", timeout=10).text
    found = {}
    for line in text.splitlines():
        if line.startswith(f"raftq_broker_{name}{{") and f'consumer="{consumer_id}"' in line:
            labels, value = line.rsplit(" ", 1)
            partition = labels.split('partition="', 1)[1].split('"', 1)[0]
            found[partition] = float(value)
    return found


def test_consumer_lag_matches_what_was_produced_and_popped(cluster: Cluster) -> None:
    _create(cluster, "lagging", partitions=2)
    with Consumer(cluster.lb_url, "lagging", api_key=cluster.admin_key) as consumer:
        me = consumer.consumer_id
        _produce(cluster, "lagging", 30, keyed=True)
        before = _lag(cluster, "lagging", me)  # not popped anywhere: it would read it all
        assert sum(c.lag_messages for c in before.values()) == 30 and len(before) == 2
        popped: list[int] = []

        def popped_twelve() -> bool:
            popped.extend(r.offset for r in consumer.poll(12 - len(popped)))
            return len(popped) >= 12

        poll_until(popped_twelve, WAIT_S, "12 messages popped")
    after = _lag(cluster, "lagging", me)
    assert sum(c.lag_messages for c in after.values()) == 30 - 12
    for lag in after.values():
        assert lag.end_offset - lag.offset == lag.lag_messages
        assert (lag.lag_s > 0) == (lag.lag_messages > 0) and lag.lag_s < WAIT_S * 10
    out = cluster._cli(
        "lag", "--topic", "lagging", "--output", "json", "--dir", str(cluster.directory)
    )
    lines = [json.loads(line) for line in out.splitlines()]
    assert sum(line["lag_messages"] for line in lines if line["consumer_id"] == me) == 18
    described = cluster._cli("topic", "describe", "lagging", "--dir", str(cluster.directory))
    rows = [line.split() for line in described.splitlines()]
    partition_rows = [r for r in rows if len(r) == 5 and r[0] in ("0", "1")]
    assert sum(int(r[4]) for r in partition_rows) == 30, described  # the end offsets
    assert sum(int(r[4]) for r in rows if r[0] == me) == 18, described  # the consumer's lag
    as_json = json.loads(
        cluster._cli(
            "topic", "describe", "lagging", "--output", "json", "--dir", str(cluster.directory)
        )
    )
    assert sum(p["end_offset"] for p in as_json["partitions"]) == 30
    # The leaders' /metrics show the partitions where the consumer has an offset (it has
    # popped there; 12 pops made at least one).
    shown = 0
    for partition_id, lag in after.items():
        leader = partition_leader(cluster, "lagging", partition_id)
        metric = _metric(cluster, leader, "consumer_lag_messages", me)
        if str(partition_id) in metric:
            assert metric[str(partition_id)] == lag.lag_messages
            shown += 1
    assert shown >= 1


def _overview_shows(cluster: Cluster, topic: str, end: int) -> bool:
    body = cluster.get("/overview").json()
    return any(p["topic"] == topic and p["end_offset"] == end for p in body["partitions"])


def test_the_dashboard_shows_the_cluster(cluster: Cluster) -> None:
    _create(cluster, "shown")
    _produce(cluster, "shown", 25)
    with Consumer(cluster.lb_url, "shown", api_key=cluster.admin_key) as consumer:
        me = consumer.consumer_id
        poll_until(lambda: consumer.poll(5) or None, WAIT_S, "a pop")
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        admin.create_group("shown", "billing", visibility_timeout_ms=60_000, ordering="key")
    with GroupMember(cluster.lb_url, "shown", "billing", api_key=cluster.admin_key) as member:
        # Held, so in flight (an empty answer is no lease: ask again).
        poll_until(lambda: member.receive(3) or None, WAIT_S, "a receive")
    poll_until(lambda: _overview_shows(cluster, "shown", 25), WAIT_S, "the overview")
    page = f"{cluster.lb_url}/ui#key={cluster.admin_key}"
    text = dashboard_cells(page)
    assert text.count("leader ★") == 1, text  # one manager leads, and it is marked
    for broker_id in (1, 2, 3):
        # Alive, replicas, leads, stored msgs/s in what it leads (a number from the second
        # refresh on), unflushed messages of its replicas.
        row = rf"broker {broker_id} \| [^|]+ \| alive \| \d+ \| \d+ \| \d+ \| \d+ \|"
        assert re.search(row, text) and "DOWN" not in text, text
    # The partition: topic, id, its leader, log start 0 and end offset 25.
    assert re.search(r"shown \| 0 \| broker \d \| 0 \| 25 \| ", text), text
    # The consumer popped 5 of 25 (one pop may claim fewer: its row says how many are left).
    lag = re.search(rf"shown \| {me} \| 0 \| (\d+) \| (\d+) \| ", text)
    assert lag is not None and int(lag[1]) + int(lag[2]) == 25 and int(lag[1]) > 0, text
    # The group: its settings (no dead-letter topic), 25 not settled (and the oldest's
    # age), the 3 it holds leased, none dead.
    group = re.search(
        r"shown \| billing \| 60000 \| no limit \| [^|]+ \| key \| 25 \| [\d.]+ \| 3 \| 0", text
    )
    assert group is not None, text
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)
    browser(f"--screenshot={shot}", page)
    assert shot.stat().st_size > 10_000  # a rendered page, not an empty one


def _leaders(cluster: Cluster) -> dict[int, int] | None:
    """Partitions led per broker, once every partition's leader is known."""
    partitions = cluster.get("/overview").json()["partitions"]
    if any(p["leader"] is None for p in partitions):
        return None
    counts = dict.fromkeys((1, 2, 3), 0)
    for partition in partitions:
        counts[partition["leader"]] += 1
    return counts


def _balanced(cluster: Cluster) -> dict[int, int] | None:
    counts = _leaders(cluster)
    return counts if counts and max(counts.values()) - min(counts.values()) <= 1 else None


def test_leadership_is_spread_again_after_a_broker_comes_back(cluster: Cluster) -> None:
    _create(cluster, "balanced", partitions=6)
    poll_until(lambda: _balanced(cluster), WAIT_S, "balanced leaders")
    cluster.kill("broker-1")
    # Its partitions elect leaders among brokers 2 and 3, and it leads nothing.
    poll_until(
        lambda: (counts := _leaders(cluster)) and counts[1] == 0, WAIT_S, "broker 1 to lead none"
    )
    cluster.up()  # broker-1 back: it leads nothing until leadership is handed to it
    counts = poll_until(lambda: _balanced(cluster), WAIT_S, "balanced leaders again")
    assert counts[1] >= sum(counts.values()) // 3 - 1


def _scrape(cluster: Cluster, url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = cluster.http.get(f"{url}/metrics", timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_what_was_produced_and_consumed(cluster: Cluster) -> None:
    _create(cluster, "counted", partitions=2)
    _produce(cluster, "counted", 40, keyed=True)
    with Consumer(cluster.lb_url, "counted", api_key=cluster.admin_key) as consumer:
        popped: list[int] = []

        def all_popped() -> bool:
            popped.extend(r.offset for r in consumer.poll(40 - len(popped)))
            return len(popped) >= 40

        poll_until(all_popped, WAIT_S, "every message popped")
    topic = (("topic", "counted"),)
    brokers = [_scrape(cluster, cluster.broker_url(b)) for b in (1, 2, 3)]
    # Every message counted; a request the client repeated (a lost answer on a loaded
    # machine) is answered, and counted, again (CI saw 60 pops counted for 40).
    assert sum(s.get(("raftq_broker_produced_messages_total", topic), 0) for s in brokers) >= 40
    assert sum(s.get(("raftq_broker_popped_messages_total", topic), 0) for s in brokers) >= 40
    led = [s for s in brokers if any(k[0] == "raftq_broker_partition_raft_term" for k in s)]
    assert led and all(
        v >= 1 for s in led for k, v in s.items() if k[0] == "raftq_broker_partition_raft_term"
    )
    leader = _scrape(cluster, cluster.node(cluster.manager_leader())["http_address"])
    assert leader[("raftq_manager_is_leader", ())] == 1
    assert leader[("raftq_manager_raft_term", ())] >= 1
    assert leader[("raftq_manager_under_replicated_partitions", ())] == 0
    balancer = _scrape(cluster, cluster.lb_url)
    forwarded = [v for k, v in balancer.items() if k[0] == "raftq_lb_http_request_seconds_count"]
    assert sum(forwarded) >= 1  # every request the load balancer forwarded was timed


def test_a_partition_below_min_insync_replicas_refuses_writes_and_stores_nothing(
    cluster: Cluster,
) -> None:
    """A topic with ``min_insync_replicas`` 3: once a paused follower has not answered its
    leader for ``raft_leader_fallback_timeout_s``, a produce is refused at once (503
    NOT_ENOUGH_REPLICAS, outcome known: nothing stored) rather than taken by two replicas;
    a topic with the default (a majority) goes on taking writes; once the follower is back,
    writes are taken again."""
    _create(cluster, "strict", min_insync_replicas=3)
    _create(cluster, "relaxed")
    producer = register_producer(cluster, "strict")
    produce(cluster, producer, 0, [(None, "first")], topic="strict", partition_id=0)
    leader = partition_leader(cluster, "strict", 0)
    follower = next(b for b in partition_brokers(cluster, "strict")[0] if b != leader)
    sent: list[str] = ["first"]
    cluster.kill(cluster.broker_name(follower), signal.SIGSTOP)
    try:

        def refused() -> dict[str, object] | None:
            """One produce, a new sequence each once stored: taken until the paused
            follower stops acknowledging, then stored but not acknowledged (50309
            NOT_ENOUGH_REPLICAS_AFTER_APPEND: committed by two replicas, not held by
            three) until the leader counts the follower out of sync, then refused before
            anything is stored (50308 NOT_ENOUGH_REPLICAS)."""
            value = f"probe-{len(sent)}"
            body = {
                "producer_id": producer,
                "topic": "strict",
                "partition_id": 0,
                "sequence": len(sent),
                "messages": [{"message": value}],
            }
            answer = cluster.post("/logs", body)
            if answer.status_code == 201:
                sent.append(value)
                return None
            assert answer.status_code == 503, answer.text
            if answer.json()["error_code"] == 50309:
                sent.append(value)  # committed (a majority holds it), not acknowledged
                return None
            if answer.json()["error_code"] != 50308:
                return None  # say the paused broker held it up: repeat the same sequence
            return {**answer.json(), "value": value}

        error = poll_until(refused, WAIT_S, "a produce to be refused")
        expected = "2 of 3 replicas are in sync, its topic's min_insync_replicas is 3"
        assert expected in str(error["message"]), error
        relaxed = register_producer(cluster, "relaxed")
        acks = produce(cluster, relaxed, 0, [(None, "taken")], topic="relaxed", partition_id=0)
        assert acks[0].offset == 0
    finally:
        cluster.kill(cluster.broker_name(follower), signal.SIGCONT)
    sequence = len(sent) + 1  # past the refused one's
    acks = produce(cluster, producer, sequence, [(None, "last")], topic="strict", partition_id=0)
    assert acks[0].offset == len(sent)  # the refused produce stored nothing
    consumer = register_consumer(cluster, "strict", 0)
    assert [m["message"] for m in pop_all(cluster, consumer)] == [*sent, "last"]
    assert error["value"] not in sent
