"""Consumer groups with leased delivery (issue 20) on a real cluster (SQLite: the group
logic is the partitions', whatever the database; the PostgreSQL paths a group reads
through are the end-to-end module's): leases, acks and redelivery across a partition
leader's kill, long polling on both paths, and poison messages reaching the dead-letter
topic once across a manager leader's kill. The dashboard's message browser, in headless
Chromium: a range of a dead-letter topic with its headers, and the server's errors."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from protocol.errors import ErrorCode
from raftq import Admin, Delivery, GroupMember
from unit_tests.cluster.browser import (
    ARTIFACTS,
    BrowserTab,
    browser,
    dump_dom,
    element_text,
    table_rows,
)
from unit_tests.cluster.client_ops import (
    create_topic,
    create_topic_answer,
    headers_of_index,
    partition_leader,
    produce,
    register,
)
from unit_tests.cluster.harness import Cluster, running_cluster, wait_until
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["groups"]
    yield from running_cluster(tmp_path_factory.mktemp("groups"), port)


GROUP_VISIBILITY_MS = 1_500
REDELIVERY_WAIT_S = 30.0
"""A lease that ended is handed out again once its visibility timeout has passed: well
within this, even across the partition leader's failover."""


def test_a_group_leases_acks_and_redelivers_across_a_leader_kill(cluster: Cluster) -> None:
    """Consumer groups with leased delivery (issue 20), on the direct path with the load
    balancer to fall back on: a member
    acks some deliveries, nacks some, and holds two whose leases end; the leader of one
    partition is killed; another member then gets every message not acked, none acked
    before, the nacked and expired ones on a later delivery. The first member's late acks
    of its expired leases settle nothing."""
    create_topic(cluster, "leased", 2)
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        group = admin.create_group("leased", "workers", visibility_timeout_ms=GROUP_VISIBILITY_MS)
        assert (
            admin.create_group("leased", "workers", visibility_timeout_ms=GROUP_VISIBILITY_MS)
            == group
        )
        known = [(g.group, g.visibility_timeout_ms, g.lag_messages) for g in admin.groups("leased")]
        assert known == [(group.group, GROUP_VISIBILITY_MS, 0)]
    producer = register(cluster, "producer", {"topic": "leased"})
    acks = produce(cluster, producer, 0, [(f"k{i}", f"g{i}") for i in range(40)], topic="leased")
    everything = {(a.partition_id, a.offset) for a in acks}
    key = cluster.admin_key
    with (
        GroupMember(cluster.lb_url, "leased", "workers", api_key=key) as first,
        GroupMember(cluster.lb_url, "leased", "workers", api_key=key) as second,
    ):
        held = first.receive(10)
        assert len(held) == 10 and all(d.delivery_count == 1 for d in held)
        assert [o for _, o in first.ack(held[:6])] == ["done"] * 6
        assert [o for _, o in first.nack(held[6:8])] == ["done"] * 2
        cluster.kill(cluster.broker_name(partition_leader(cluster, "leased", 0)))
        try:
            _take_the_rest(first, second, held, everything)
        finally:
            cluster.up()  # the killed broker comes back, whatever happened

    def settled_everywhere() -> bool:
        body = cluster.get("/groups", topic="leased").json()
        (figures,) = body["groups"]
        answered = body["unavailable_partitions"] == []
        return answered and (figures["lag_messages"], figures["in_flight"]) == (0, 0)

    wait_until(settled_everywhere, 30, "the group's figures to show nothing left")
    where = ("--dir", str(cluster.directory))
    listed = cluster.cli("group", "list", "--topic", "leased", *where)
    assert "workers" in listed and f"visibility {GROUP_VISIBILITY_MS} ms" in listed
    assert "lag 0 " in listed and "in flight 0" in listed
    # Every partition's leader must answer the describe (CI saw one row missing: a leader
    # changed between the list above and the describe, after the killed broker came back).
    described = wait_until(
        lambda: cluster.cli("group", "describe", "workers", "--topic", "leased", *where),
        30,
        "every partition's leader to answer the describe (it exits 1 until then)",
    )
    rows = [line.split("\t") for line in described.splitlines()[2:]]
    assert [(row[0], row[3], row[5]) for row in rows] == [("0", "0", "0"), ("1", "0", "0")]
    assert sum(int(row[1]) for row in rows) == 40  # the floors: every message settled
    assert cluster.cli("receive", "--topic", "leased", "--group", "workers", *where) == ""


def _take_the_rest(
    first: GroupMember,
    second: GroupMember,
    held: list[Delivery],
    everything: set[tuple[int, int]],
) -> None:
    """The second member gets every message the first did not ack, none acked before; the
    first member's late acks of its expired leases settle nothing. (Whether the second
    went direct depends on where leadership went after the kill: the long-poll test checks
    the direct path without a fault.)"""
    acked = {_where(d) for d in held[:6]}
    counts: dict[tuple[int, int], list[int]] = defaultdict(list)

    def took_the_rest() -> bool:
        for delivery in second.receive(20):
            assert _where(delivery) not in acked, f"{delivery} was acked before"
            counts[_where(delivery)].append(delivery.delivery_count)
            assert [o for _, o in second.ack([delivery])] == ["done"]
            acked.add(_where(delivery))
        return acked == everything

    wait_until(took_the_rest, REDELIVERY_WAIT_S, "every message acked", period_s=0.2)
    # Each message the second member got came once (it acked at once); the nacked and
    # expired ones on a later delivery. (A receive whose answer was lost in the failover
    # leaves leases that end: those messages come with one delivery more.)
    again = {_where(d) for d in held[6:]}
    assert all(len(found) == 1 for found in counts.values()), counts
    assert all(counts[where][0] >= 2 for where in again), counts
    late = {outcome for _, outcome in first.ack(held[8:])}
    assert late <= {"stale", "already"}, late


def _where(delivery: Delivery) -> tuple[int, int]:
    return delivery.record.partition_id, delivery.record.offset


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "via-lb"])
def test_a_long_poll_returns_when_a_message_arrives(cluster: Cluster, direct: bool) -> None:
    """``wait_ms``: a receive of an empty group waits, and answers as soon as a message
    is produced (each ask that found nothing cost the partition no Raft entry)."""
    topic, key = f"polled-{int(direct)}", cluster.admin_key
    create_topic(cluster, topic, 2)
    with Admin(cluster.lb_url, api_key=key) as admin:
        admin.create_group(topic, "waiters")
    producer = register(cluster, "producer", {"topic": topic})
    with GroupMember(cluster.lb_url, topic, "waiters", api_key=key, direct=direct) as member:
        assert member.receive(1) == []
        started = time.monotonic()
        assert member.receive(1, wait_ms=300) == []
        assert time.monotonic() - started >= 0.3
        timer = threading.Timer(
            1.0, lambda: produce(cluster, producer, 0, [(None, "late")], topic=topic)
        )
        timer.start()
        try:
            started = time.monotonic()
            got = member.receive(1, wait_ms=4_000)
            waited_s = time.monotonic() - started
        finally:
            timer.join()
        assert [d.record.value for d in got] == ["late"]
        assert 0.9 <= waited_s < 3.5, waited_s


POISON_COUNT = 24
DEAD_LETTER_WAIT_S = 60.0
"""Dead letters move each reconcile round (0.5 s); this also covers a manager failover."""


def test_poison_messages_reach_the_dead_letter_topic_once_across_a_manager_kill(
    cluster: Cluster,
) -> None:
    """Issue 20's dead-letter step with real processes: messages nacked ``max_deliveries``
    times go to the group's dead-letter topic with their key, value and headers and
    RaftQ's own headers naming where they came from; the manager leader is killed while
    the step runs, and its successor repeats it: each dead letter is stored exactly once,
    and the group counts it dead-lettered."""
    create_topic(cluster, "poisoned", 2)
    create_topic(cluster, "poisoned-dead", 2)
    key = cluster.admin_key
    with Admin(cluster.lb_url, api_key=key) as admin:
        admin.create_group(
            "poisoned", "workers", max_deliveries=2, dead_letter_topic="poisoned-dead"
        )
    producer = register(cluster, "producer", {"topic": "poisoned"})
    batch = [(f"k{i % 5}", f"p{i}") for i in range(POISON_COUNT)]
    acks = produce(cluster, producer, 0, batch, topic="poisoned", headers=headers_of_index)
    origin = {(a.partition_id, a.offset): a for a in acks}
    with GroupMember(cluster.lb_url, "poisoned", "workers", api_key=key) as member:
        for _ in range(2):  # max_deliveries: each nack of the second delivery kills it
            held = _receive_all(member, POISON_COUNT)
            # ``ended``: a nack applied, then repeated once its answer was lost (the
            # leaders move after the cluster's restart by the test before).
            assert {o for _, o in member.nack(held)} <= {"done", "ended"}
    cluster.kill(cluster.manager_leader())
    try:
        copies = _dead_letters_when_all_moved(cluster)
    finally:
        cluster.up()
    seen = [
        (int(m["headers"]["raftq-origin-partition"]), int(m["headers"]["raftq-origin-offset"]))
        for m in copies
    ]
    assert sorted(seen) == sorted(origin), "each dead letter exactly once"
    for message in copies:
        where = (
            int(message["headers"]["raftq-origin-partition"]),
            int(message["headers"]["raftq-origin-offset"]),
        )
        index = int(origin[where].value[1:])
        assert (message["key"], message["message"]) == (origin[where].key, origin[where].value)
        own = {n: v for n, v in message["headers"].items() if not n.startswith("raftq-")}
        assert own == headers_of_index(index)
        assert message["headers"]["raftq-group"] == "workers"
        assert message["headers"]["raftq-origin-topic"] == "poisoned"
        assert message["headers"]["raftq-delivery-count"] == "2"
        assert message["headers"]["raftq-reason"] == "max_deliveries"


def _receive_all(member: GroupMember, count: int) -> list[Delivery]:
    held: list[Delivery] = []

    def all_held() -> bool:
        held.extend(member.receive(count - len(held)))
        return len(held) == count

    wait_until(all_held, 30, "every message delivered", period_s=0.1)
    return held


def _dead_letters_when_all_moved(cluster: Cluster) -> list[dict[str, Any]]:
    def figures() -> dict[str, Any] | None:
        body = cluster.get("/groups", topic="poisoned").json()
        if body.get("unavailable_partitions") != []:
            return None
        (group,) = body["groups"]
        moved = (group["dead_lettered"], group["dead_letters_pending"], group["lag_messages"])
        return group if moved == (POISON_COUNT, 0, 0) else None

    wait_until(figures, DEAD_LETTER_WAIT_S, "every dead letter moved and counted")
    copies: list[dict[str, Any]] = []
    for partition_id in (0, 1):
        response = cluster.get(
            "/logs", topic="poisoned-dead", partition_id=partition_id, offset=0, max_messages=100
        )
        assert response.status_code == 200, response.text
        copies.extend(response.json()["messages"])
    return copies


REDRIVEN_COUNT = 12


def test_a_redrive_brings_each_dead_letter_back_once_across_a_manager_kill(
    cluster: Cluster,
) -> None:
    """Issue 20's redrive with real processes: messages nacked into the dead-letter topic
    are redriven in two calls with the manager leader killed between them; the group gets
    each back exactly once, at its offset, with its delivery count going on (a receipt from
    before the redrive is stale); a redrive after that finds nothing, and the letters stay
    in the dead-letter topic. A group without a dead-letter topic redrives its parked
    messages (``raftq group redrive``)."""
    create_topic(cluster, "redriven", 2)
    create_topic(cluster, "redriven-dead", 2)
    key = cluster.admin_key
    with Admin(cluster.lb_url, api_key=key) as admin:
        admin.create_group(
            "redriven", "workers", max_deliveries=1, dead_letter_topic="redriven-dead"
        )
    producer = register(cluster, "producer", {"topic": "redriven"})
    batch = [(f"k{i % 3}", f"r{i}") for i in range(REDRIVEN_COUNT)]
    acks = produce(cluster, producer, 0, batch, topic="redriven")
    everything = {(a.partition_id, a.offset) for a in acks}
    with GroupMember(cluster.lb_url, "redriven", "workers", api_key=key) as member:
        before = _receive_all(member, REDRIVEN_COUNT)
        assert {o for _, o in member.nack(before)} <= {"done", "ended"}
        _wait_for_figures(cluster, "redriven", dead_lettered=REDRIVEN_COUNT, pending=0)
        with Admin(cluster.lb_url, api_key=key) as admin:
            first = admin.redrive("redriven", "workers", max_messages=5)
            assert (first.redriven, first.gone, first.more) == (5, 0, True)
            cluster.kill(cluster.manager_leader())
            try:
                rest = admin.redrive("redriven", "workers")
            finally:
                cluster.up()
            assert (rest.redriven, rest.gone, rest.more) == (REDRIVEN_COUNT - 5, 0, False)
            assert admin.redrive("redriven", "workers").redriven == 0
        assert {o for _, o in member.ack(before)} == {"stale"}  # not these deliveries
        again = _receive_all(member, REDRIVEN_COUNT)
        assert {_where(d) for d in again} == everything, "each back exactly once"
        assert {d.delivery_count for d in again} == {2}
        assert {o for _, o in member.ack(again)} == {"done"}
        assert member.receive(REDRIVEN_COUNT, wait_ms=500) == []
    _wait_for_figures(cluster, "redriven", dead_lettered=REDRIVEN_COUNT, pending=0)
    stored = [
        cluster.get("/logs", topic="redriven-dead", partition_id=p, offset=0).json()["messages"]
        for p in (0, 1)
    ]
    assert sum(len(m) for m in stored) == REDRIVEN_COUNT  # the letters stay
    _redrive_parked(cluster)


def _redrive_parked(cluster: Cluster) -> None:
    create_topic(cluster, "parked", 1)
    key = cluster.admin_key
    with Admin(cluster.lb_url, api_key=key) as admin:
        admin.create_group("parked", "workers", max_deliveries=1)
    producer = register(cluster, "producer", {"topic": "parked"})
    produce(cluster, producer, 0, [(None, f"q{i}") for i in range(6)], topic="parked")
    with GroupMember(cluster.lb_url, "parked", "workers", api_key=key) as member:
        member.nack(_receive_all(member, 6))
        _wait_for_figures(cluster, "parked", dead_lettered=0, pending=6)
        where = ("--dir", str(cluster.directory))
        assert cluster.cli("group", "redrive", "workers", "--topic", "parked", *where) == (
            "redriven 6\tgone (removed by retention) 0\n"
        )
        again = _receive_all(member, 6)
        assert sorted(d.record.offset for d in again) == list(range(6))
        member.ack(again)
    _wait_for_figures(cluster, "parked", dead_lettered=0, pending=0)


def _wait_for_figures(cluster: Cluster, topic: str, *, dead_lettered: int, pending: int) -> None:
    def shown() -> bool:
        body = cluster.get("/groups", topic=topic).json()
        if body.get("unavailable_partitions") != []:
            return False
        (group,) = body["groups"]
        return (group["dead_lettered"], group["dead_letters_pending"]) == (dead_lettered, pending)

    wait_until(
        shown, DEAD_LETTER_WAIT_S, f"{topic}: {dead_lettered} dead-lettered, {pending} parked"
    )


MARKUP = (
    "<img src=x onerror=\"document.title='injected'\"> & </td>"
    "<script>document.title='injected'</script>"
)
"""In every browsed value and header: shown as text, it changes nothing; made HTML, the
image's error handler (or the script) would change the page's title."""


def _browsed_headers(index: int) -> dict[str, str]:
    return {"trace": f"t{index} {MARKUP}"}


def _messages(cluster: Cluster, topic: str, count: int) -> list[dict[str, Any]] | None:
    """Partition 0 of ``topic`` from offset 0, through the load balancer, once it holds
    ``count`` messages."""
    response = cluster.get("/logs", topic=topic, partition_id=0, offset=0, max_messages=100)
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages if len(messages) == count else None


def _shown_time(timestamp_ms: int) -> str:
    """A timestamp as the page shows it (JavaScript's ``toISOString``: UTC, milliseconds)."""
    moment = datetime.fromtimestamp(timestamp_ms // 1000, UTC)
    moment += timedelta(milliseconds=timestamp_ms % 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _browse_page(cluster: Cluster, query: str) -> str:
    return f"{cluster.lb_url}/ui#key={cluster.admin_key}&{query}"


def test_the_dashboard_browses_a_dead_letter_topic_by_offset(cluster: Cluster) -> None:
    """Issue 20's message browser: headless Chromium opens the dashboard with a topic,
    partition, offset and count in its address; the page fills its form, fetches that
    range by offset through the load balancer (the clients' ``GET /logs``) and shows each
    message's offset, key, value, timestamp and headers: the producer's and those RaftQ
    adds to a dead letter. Markup in values and headers is shown as text, never made HTML."""
    create_topic(cluster, "browsed", 1)
    create_topic(cluster, "browsed-dead", 1)
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        admin.create_group("browsed", "readers", max_deliveries=1, dead_letter_topic="browsed-dead")
    producer = register(cluster, "producer", {"topic": "browsed"})
    batch = [(f"k{i}", f"v{i} {MARKUP}") for i in range(4)]
    acks = produce(cluster, producer, 0, batch, topic="browsed", headers=_browsed_headers)
    origin_offsets = {a.value: a.offset for a in acks}
    with GroupMember(cluster.lb_url, "browsed", "readers", api_key=cluster.admin_key) as member:
        held = _receive_all(member, len(batch))
        # max_deliveries 1: a nack of the first delivery makes the message a dead letter.
        assert {o for _, o in member.nack(held)} <= {"done", "ended"}
    stored = wait_until(
        lambda: _messages(cluster, "browsed-dead", len(batch)),
        DEAD_LETTER_WAIT_S,
        "the dead letters stored in browsed-dead",
    )
    page = _browse_page(cluster, "topic=browsed-dead&partition=0&offset=1&count=2")
    dom = dump_dom(page)
    assert element_text(dom, "browse-error") == ""
    assert element_text(dom, "browse-status") == "offsets 1 to 2 of browsed-dead/0 (2 messages)"
    rows = table_rows(dom, "messages")
    assert [row[0] for row in rows] == [["1"], ["2"]], rows  # the range asked, no more
    for row, message in zip(rows, stored[1:3], strict=True):
        offset, key, value, timestamp, headers = row
        assert offset == [str(message["offset"])], row
        index = int(value[0][1 : value[0].index(" ")])
        assert (key, value) == ([f"k{index}"], [f"v{index} {MARKUP}"]), row
        assert timestamp == [_shown_time(message["timestamp_ms"])], row
        shown = dict(line.split(": ", 1) for line in headers)
        assert shown["trace"] == f"t{index} {MARKUP}", row
        assert shown["raftq-origin-topic"] == "browsed", row
        assert shown["raftq-origin-offset"] == str(origin_offsets[value[0]]), row
        assert shown["raftq-group"] == "readers" and shown["raftq-delivery-count"] == "1", row
        assert shown == message["headers"], row  # every header, none added or dropped
    # The markup stayed text: no element made of it, and neither handler ran.
    assert "<img" not in dom and "<title>RaftQ</title>" in dom
    _page_through(cluster)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard-messages.png"
    shot.unlink(missing_ok=True)
    browser(f"--screenshot={shot}", page)
    assert shot.stat().st_size > 10_000  # a rendered page, not an empty one


_FILL_AND_FETCH = """(() => {
  const fields = {topic: "browsed-dead", partition: "0", offset: "0", count: "2"};
  for (const [field, value] of Object.entries(fields)) {
    document.getElementById("browse-" + field).value = value;
  }
  document.querySelector("#browse button:not([type])").click();
})()"""


def _page_through(cluster: Cluster) -> None:
    """The browser as a user works it, in a live page: the topic offered in its form, the
    form filled and sent, then its next and previous buttons, up to the partition's end;
    the address keeps what is shown (a reload or a copied link shows it again)."""
    with BrowserTab(f"{cluster.lb_url}/ui#key={cluster.admin_key}") as tab:
        offered = "[...document.querySelectorAll('#topic-names option')].map(o => o.value)"
        tab.wait_for(f"{offered}.includes('browsed-dead')", "the topic offered in the form")
        tab.evaluate(_FILL_AND_FETCH)
        first, second = (f"offsets {o} to {o + 1} of browsed-dead/0 (2 messages)" for o in (0, 2))
        the_end = "no messages in browsed-dead/0 from offset 4 (its end: nothing newer yet)"
        assert _shown_offsets(tab, first) == [0, 1]
        steps = [("next", second, [2, 3]), ("previous", first, [0, 1])]
        steps += [("next", second, [2, 3]), ("next", the_end, [])]
        for button, status, offsets in steps:
            tab.evaluate(f"document.getElementById('browse-{button}').click()")
            assert _shown_offsets(tab, status) == offsets, button
        hash_ = tab.evaluate("location.hash")
        assert hash_.endswith("&topic=browsed-dead&partition=0&offset=4&count=2"), hash_


def _shown_offsets(tab: BrowserTab, status: str) -> list[int]:
    """The offsets in the browser's rows once its status line says ``status``."""
    tab.wait_for(
        f"document.getElementById('browse-status').textContent === {json.dumps(status)}",
        f"the browser to show {status!r}",
    )
    rows = table_rows(tab.evaluate("document.getElementById('messages').outerHTML"), "messages")
    return [int(row[0][0]) for row in rows]


RETENTION_WAIT_S = 60.0
"""Retention runs every ``retention_check_period_s`` (5 s) on the partition's leader."""


def test_the_dashboard_browser_shows_the_servers_errors(cluster: Cluster) -> None:
    """A bad request in the message browser shows the server's error (status, RaftQ code,
    message) and no rows, never a blank page: a negative offset, an unknown topic, and an
    offset below the log start (retention removed it)."""
    create_topic_answer(
        cluster, {"name": "browsed-trimmed", "partitions": 1, "retention_bytes": 50}
    )
    producer = register(cluster, "producer", {"topic": "browsed-trimmed"})
    produce(cluster, producer, 0, [(None, f"{i:010d}") for i in range(20)], topic="browsed-trimmed")

    def log_started_later() -> bool:
        response = cluster.get("/logs", topic="browsed-trimmed", partition_id=0, offset=0)
        return response.status_code == 416

    wait_until(log_started_later, RETENTION_WAIT_S, "retention to move the log start")
    skipping = cluster.get(
        "/logs", topic="browsed-trimmed", partition_id=0, offset=0, skip_removed="true"
    )
    assert skipping.status_code == 200, skipping.text
    first = skipping.json()["messages"][0]["offset"]  # from the log start on
    assert 0 < first < 20 and skipping.json()["messages"][-1]["offset"] == 19
    cases = [
        (
            "topic=browsed-trimmed&partition=0&offset=-1&count=5",
            f"HTTP 400 (error {ErrorCode.INVALID_FIELD.value}): ",
            "field 'offset' must be between 0 and",
        ),
        (
            "topic=nowhere&partition=0&offset=0&count=5",
            f"HTTP 404 (error {ErrorCode.UNKNOWN_TOPIC.value}): ",
            "unknown topic 'nowhere'",
        ),
        (
            "topic=browsed-trimmed&partition=0&offset=0&count=5",
            f"HTTP 416 (error {ErrorCode.OFFSET_OUT_OF_RANGE.value}): ",
            "is below its log start",
        ),
    ]
    for query, status, reason in cases:
        dom = dump_dom(_browse_page(cluster, query))
        shown = element_text(dom, "browse-error")
        assert shown.startswith(status) and reason in shown, (query, shown)
        assert table_rows(dom, "messages") == [], query
