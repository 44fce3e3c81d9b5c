"""Who may do what, against a real cluster (issue 9): API keys with roles for clients, the
cluster secret's token for nodes, nothing stored from a refused request, no secret in any
answer or log, Raft ports that unpickle nothing from outsiders, listeners bound to the
configured host only, and no admin request that makes the cluster send a credential to an
address of the admin's choice (issue 23)."""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import requests
from pysyncobj import SyncObj, SyncObjConf

from protocol.node_auth import LEGACY_TOKEN_HEADER, SIGNATURE_HEADER, node_key
from raftq import Admin, ApiError, Consumer, Producer
from raftq.node_signing import NodeSigning
from stress_tests.polling import WaitTimeoutError, poll_until
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.cluster.recorder import Received, RecordingListener
from unit_tests.cluster.sniffer import Captured, LoopbackSniffer, can_capture
from unit_tests.ports import CLUSTER_BASE_PORTS, CLUSTER_PORT_SPAN, free_port, port_block
from unit_tests.stress.prerequisites import require

pytestmark = pytest.mark.cluster

WAIT_S = 30.0
KEY_CACHE_S = "1.0"
"""Brokers trust what they learnt about a key for this long (``key_cache_s``)."""
SIGNATURE_AGE_S = 5.0
"""A node's signed request is refused this long after it was signed
(``node_signature_age_s_max``): short, so a test sees a read-off request go stale."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["access"]
    limits = {"key_cache_s": KEY_CACHE_S, "node_signature_age_s_max": str(SIGNATURE_AGE_S)}
    yield from running_cluster(tmp_path_factory.mktemp("access"), port, limits)


@pytest.fixture(scope="module")
def keys(cluster: Cluster) -> dict[str, str]:
    """A producer and a consumer key for topic "granted" (and "other", which they lack)."""
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        admin.create_topic("granted", partitions=2)
        admin.create_topic("other", partitions=1)
        producer = admin.create_key("producer", ["granted"], "test producer")
        consumer = admin.create_key("consumer", ["gran*"], "test consumer")
    return {"producer": producer.key, "consumer": consumer.key}


def _leader_address(cluster: Cluster, topic: str, partition_id: int) -> str:
    """The HTTP address of the partition leader's broker, once one is known (bounded)."""

    def known() -> str | None:
        with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
            part = admin.partitions(topic)[partition_id]
        found = [r.address for r in part.replicas if r.broker_id == part.leader and r.address]
        return found[0] if found else None

    return poll_until(known, WAIT_S, f"a leader of {topic}/{partition_id}")


def _call(method: str, url: str, key: str | None, body: Any = None, **params: Any) -> Any:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return requests.request(method, url, json=body, params=params, headers=headers, timeout=30)


def _state(cluster: Cluster) -> tuple[Any, ...]:
    """What a refused request must leave as it was: topics, end offsets, keys, brokers."""
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        topics = sorted((t.name, t.partition_count) for t in admin.list_topics())
        ends = {name: admin.end_offsets(name) for name, _ in topics}
        listed = sorted(k.key_id for k in admin.list_keys())
        brokers = sorted((b.broker_id, b.address) for b in admin.brokers())
    return topics, ends, listed, brokers


CLIENT_CALLS = [
    ("POST", "/topics", {"name": "made-by-intruder", "partitions": 1}, "admin"),
    ("POST", "/partitions", {"topic": "granted"}, "admin"),
    ("POST", "/keys", {"role": "admin"}, "admin"),
    ("POST", "/keys/revoke", {"key_id": "0123456789ab"}, "admin"),
    ("GET", "/keys", None, "admin"),
    ("POST", "/producers", {"topic": "granted"}, "producer"),
    ("POST", "/logs", {"topic": "granted", "messages": [{"message": "x"}]}, "producer"),
    ("POST", "/consumers", {"topic": "granted"}, "consumer"),
    ("GET", "/topics", None, "any"),
    ("GET", "/cluster", None, "any"),
]


def _fake_key(real: str) -> str:
    """Well-formed, with the right key id, but not the key."""
    return real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB")


def test_client_endpoints_refuse_missing_wrong_and_underprivileged_keys(
    cluster: Cluster, keys: dict[str, str]
) -> None:
    before = _state(cluster)
    for method, path, body, needs in CLIENT_CALLS:
        url = cluster.lb_url + path
        for key, expected in ((None, 401), (_fake_key(keys["producer"]), 401), ("junk", 401)):
            answer = _call(method, url, key, body)
            assert answer.status_code == expected, (method, path, key, answer.text)
            assert answer.json()["error_code"] == 40101
        if needs == "admin":
            for role in ("producer", "consumer"):
                answer = _call(method, url, keys[role], body)
                assert answer.status_code == 403, (method, path, role, answer.text)
                assert answer.json()["error_code"] == 40301
        elif needs in ("producer", "consumer"):
            other = "consumer" if needs == "producer" else "producer"
            assert _call(method, url, keys[other], body).status_code == 403, (method, path)
    # A producer key for "granted" may not touch "other"; a consumer key may not write.
    denied = _call("POST", cluster.lb_url + "/producers", keys["producer"], {"topic": "other"})
    assert denied.status_code == 403 and "other" in denied.json()["message"]
    assert _state(cluster) == before


def test_each_role_does_its_part_on_both_paths(cluster: Cluster, keys: dict[str, str]) -> None:
    values = [f"v{i}" for i in range(20)]
    for direct in (True, False):
        with Producer(cluster.lb_url, "granted", api_key=keys["producer"], direct=direct) as p:
            p.produce_batch((v, f"k{v}") for v in values)
    with Consumer(cluster.lb_url, "granted", api_key=keys["consumer"]) as consumer:
        popped = poll_until(
            lambda: got if len(got := consumer.poll(100)) else None, WAIT_S, "a pop to answer"
        )
        fetched = consumer.fetch("granted", popped[0].partition_id, 0, 10)
    assert popped and fetched
    with pytest.raises(ApiError) as refused:
        Producer(cluster.lb_url, "granted", api_key=keys["consumer"])
    assert refused.value.status == 403
    with pytest.raises(ApiError) as refused:
        Consumer(cluster.lb_url, "other", api_key=keys["consumer"])
    assert refused.value.status == 403


def test_a_broker_refuses_what_the_key_may_not_do(cluster: Cluster, keys: dict[str, str]) -> None:
    leader = _leader_address(cluster, "other", 0)
    body = {"topic": "other", "partition_id": 0, "messages": [{"message": "x"}]}
    assert _call("POST", f"{leader}/logs", None, body).status_code == 401
    assert _call("POST", f"{leader}/logs", keys["producer"], body).status_code == 403
    read = {"topic": "other", "partition_id": "0", "offset": "0"}
    assert _call("GET", f"{leader}/logs", keys["consumer"], **read).status_code == 403
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        assert admin.end_offsets("other") == {0: 0}


def test_internal_endpoints_answer_only_nodes(cluster: Cluster, keys: dict[str, str]) -> None:
    before = _state(cluster)
    broker = cluster.broker_url(1)
    manager = cluster.node("manager-1")["http_address"]
    spec = {"topic": "granted", "partition_id": 9, "replicas": []}
    register = {"broker_id": 9, "address": "http://127.0.0.1:1", "raft_host": "127.0.0.1"}
    register |= {"raft_port_min": 1, "raft_port_max": 2}
    leader = cluster.node(cluster.manager_leader())["http_address"]
    calls = [
        ("POST", f"{leader}/brokers", register),
        ("POST", f"{broker}/partitions", spec),
        ("GET", f"{broker}/checksum", None),
        ("GET", f"{broker}/raft_status", None),
        ("POST", f"{leader}/keys/verify", {"key_id": "0123456789ab", "key_hash": "0"}),
    ]
    another_cluster = NodeSigning.of("another-clusters-secret-0123", "manager-1")
    for method, url, body in calls:
        assert _call(method, url, None, body).status_code == 401, url
        assert _call(method, url, cluster.admin_key, body).status_code == 403, url
        for headers in ({LEGACY_TOKEN_HEADER: "0" * 64}, {SIGNATURE_HEADER: "v1 junk"}):
            wrong = requests.request(method, url, json=body, headers=headers, timeout=30)
            assert wrong.status_code == 401, (url, headers)
        forged = requests.request(method, url, json=body, auth=another_cluster, timeout=30)
        assert forged.status_code == 401 and "does not hold" in forged.text, url
    # Through the load balancer, node-only operations go nowhere: an API key is refused by
    # the manager, and a node's credential by the load balancer itself.
    for method, path, body in (("POST", "/brokers", register), ("POST", "/keys/verify", {})):
        assert _call(method, cluster.lb_url + path, cluster.admin_key, body).status_code == 403
        signed = requests.request(
            method, cluster.lb_url + path, json=body, auth=cluster.internal.auth, timeout=30
        )
        assert signed.status_code == 403 and "forwards no node request" in signed.text
    public = _call("GET", f"{manager}/raft_status", None).json()
    assert set(public) <= {"id", "is_leader", "state", "leader_address", "term"} | {
        "uptime_s",
        "version",
    }
    assert "commit_index" in cluster.internal.get(f"{manager}/raft_status", timeout=10).json()
    assert _state(cluster) == before


def test_a_revoked_key_stops_working_on_both_paths(cluster: Cluster) -> None:
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        made = admin.create_key("producer", ["granted"], "soon revoked")
    leader = _leader_address(cluster, "granted", 0)
    body = {"topic": "granted", "partition_id": 0, "messages": [{"message": "r"}]}
    poll_until(  # the broker learns the key (and caches it); bounded, in case leadership moved
        lambda: _call(
            "POST", f"{_leader_address(cluster, 'granted', 0)}/logs", made.key, body
        ).status_code
        == 201,
        WAIT_S,
        "the broker to take the new key",
    )
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        admin.revoke_key(made.info.key_id)
        assert made.info.key_id not in {k.key_id for k in admin.list_keys()}
    assert _call("POST", f"{cluster.lb_url}/logs", made.key, body).status_code == 401
    poll_until(
        lambda: _call("POST", f"{leader}/logs", made.key, body).status_code == 401,
        float(KEY_CACHE_S) + WAIT_S,
        "the broker to forget the revoked key",
    )


def test_no_secret_or_key_appears_in_answers_metrics_or_logs(
    cluster: Cluster, keys: dict[str, str]
) -> None:
    secret = Path(cluster.info["secret_file"]).read_text().strip()
    names = [n["name"] for n in cluster.info["nodes"] if n["role"] != "load_balancer"]
    node_keys = [node_key(secret, name).hex() for name in (*names, "tool-cli", "tool-test")]
    texts = [_call("GET", f"{cluster.lb_url}/cluster", cluster.admin_key).text]
    texts.append(_call("GET", f"{cluster.lb_url}/keys", cluster.admin_key).text)
    for node in cluster.info["nodes"]:
        texts.append(cluster.http.get(f"{node['http_address']}/metrics", timeout=10).text)
        texts.append(Path(node["log_file"]).read_text(errors="replace"))
    for text in texts:
        for value in (secret, *node_keys, cluster.admin_key, *keys.values()):
            assert value not in text


def test_metrics_refuse_an_unauthenticated_scrape_and_client_keys(
    cluster: Cluster, keys: dict[str, str]
) -> None:
    """Issue 23, hole 3: every broker's and manager's /metrics needs a metrics (or admin)
    key; without one it answers 401 and shows no topic or consumer; producer and consumer
    keys get 403. Scraping changes nothing."""
    with Consumer(cluster.lb_url, "granted", api_key=keys["consumer"]) as consumer:
        poll_until(lambda: consumer.poll(1) is not None, WAIT_S, "a pop")  # a consumer id
        me = consumer.consumer_id
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        scraper = admin.create_key("metrics", [], "prometheus")
    before = _state(cluster)
    nodes = [n for n in cluster.info["nodes"] if n["role"] in ("broker", "manager")]
    # A manager that follows knows a key once it applied its creation (the keys before
    # it too: one log). Until then it answers 401, as to any key it does not know (CI saw a
    # producer key refused so by a follower, right after the keys were made).
    for node in nodes:
        url = f"{node['http_address']}/metrics"
        poll_until(partial(_scrapes, url, scraper.key), WAIT_S, f"{url} to know the new keys")
    for node in nodes:
        url = f"{node['http_address']}/metrics"
        for key in (None, "junk", _fake_key(scraper.key)):
            refused = _call("GET", url, key)
            assert refused.status_code == 401, (url, key)
            assert "granted" not in refused.text and me not in refused.text
        for role in ("producer", "consumer"):
            assert _call("GET", url, keys[role]).status_code == 403, (url, role)
    shown = [_call("GET", f"{n['http_address']}/metrics", scraper.key) for n in nodes]
    assert all(answer.status_code == 200 for answer in shown)
    assert any('topic="granted"' in answer.text for answer in shown)
    # The metrics key reads metrics, nothing else.
    assert _call("GET", f"{cluster.lb_url}/topics", scraper.key).status_code == 200  # describe
    assert (
        _call("POST", f"{cluster.lb_url}/producers", scraper.key, {"topic": "granted"}).status_code
        == 403
    )
    assert _state(cluster)[:2] == before[:2] and _state(cluster)[3] == before[3]


def _scrapes(url: str, key: str) -> bool:
    return bool(_call("GET", url, key).status_code == 200)


def _consumer_count(cluster: Cluster, broker_url: str, topic: str, partition_id: int) -> float:
    """``partition_consumers`` of a partition at its leader's broker (scraped as admin)."""
    text = cluster.http.get(f"{broker_url}/metrics", timeout=10).text
    label = f'raftq_broker_partition_consumers{{partition="{partition_id}",topic="{topic}"}} '
    found = [line for line in text.splitlines() if line.startswith(label)]
    return float(found[0].rsplit(" ", 1)[1]) if found else 0.0


def test_ids_belong_to_their_key_and_made_up_ids_are_refused(
    cluster: Cluster, keys: dict[str, str]
) -> None:
    """Issue 23, hole 4, against real processes: another consumer key pops as a victim's
    consumer (stealing its messages) and sends it a pop with sequence 2^63-1 (which would
    refuse every later pop of the victim), on the direct path and through the load
    balancer, and registers the victim's id as its own; keys send made-up consumer and
    producer ids straight to the partition leader. Every attack is refused, and the
    victim then pops every message; nothing was stored or changed."""
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        mallory = admin.create_key("consumer", ["granted"], "another tenant").key
    victim = {"topic": "granted", "consumer_id": "victim", "partition_id": 0}
    assert _call("POST", f"{cluster.lb_url}/consumers", keys["consumer"], victim).status_code == 201
    with Producer(cluster.lb_url, "granted", api_key=keys["producer"], direct=False) as producer:
        producer.produce_batch((f"for the victim {i}", "k") for i in range(10))
    leader = _leader_address(cluster, "granted", 0)
    consumers_before = _consumer_count(cluster, leader, "granted", 0)
    before = _state(cluster)
    huge = 2**63 - 1
    pop = {"topic": "granted", "partition_id": "0", "consumer_id": "victim"}
    for sequence in (None, huge):
        extra = {"max_messages": "100"} | ({} if sequence is None else {"sequence": str(sequence)})
        direct = _call("GET", f"{leader}/logs", mallory, **pop, **extra)
        assert direct.status_code == 403, direct.text
        via_lb = _call("GET", f"{cluster.lb_url}/logs", mallory, consumer_id="victim", **extra)
        assert via_lb.status_code == 403, via_lb.text
    taken = _call("POST", f"{cluster.lb_url}/consumers", mallory, victim)
    assert taken.status_code == 409 and taken.json()["error_code"] == 40904, taken.text
    # The owner itself cannot lock its consumer out either.
    own = _call(
        "GET", f"{leader}/logs", keys["consumer"], **pop, max_messages="1", sequence=str(huge)
    )
    assert own.status_code == 400, own.text
    made_up = {
        "topic": "granted",
        "partition_id": "0",
        "consumer_id": "made-up",
        "max_messages": "1",
    }
    assert _call("GET", f"{leader}/logs", mallory, **made_up).status_code == 404
    body = {"topic": "granted", "partition_id": 0, "messages": [{"message": "x"}]}
    forged = body | {"producer_id": "made-up", "sequence": 1}
    assert _call("POST", f"{leader}/logs", keys["producer"], forged).status_code == 404
    assert _state(cluster) == before
    assert _consumer_count(cluster, leader, "granted", 0) == consumers_before
    # The victim gets every message of its partition, from the log start.
    end = before[1]["granted"][0]
    got: list[int] = []

    def popped_all() -> bool:
        answer = _call(
            "GET", f"{cluster.lb_url}/logs", keys["consumer"], consumer_id="victim",
            max_messages="100", sequence=str(time.time_ns() // 1000),
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        got.extend(m["offset"] for m in answer.json()["messages"])
        return bool(len(got) >= end)

    poll_until(popped_all, WAIT_S, "the victim to pop its partition")
    assert got == list(range(end))


def _old_token(secret: str) -> str:
    """The static node token every node sent with every call before signed requests (and a
    node of an older version still sends): an HMAC of a fixed label."""
    return hmac.new(secret.encode(), b"raftq node http v1", hashlib.sha256).hexdigest()


def _resend(url: str, sent: Captured, body: bytes | None = None) -> requests.Response:
    """``sent`` again, byte for byte (its headers, its body unless ``body``), to ``url``."""
    headers = {
        name: value
        for name, value in sent.headers
        if name.lower() not in ("host", "content-length", "connection")
    }
    data = sent.body if body is None else body
    return requests.request(sent.method, url + sent.target, data=data, headers=headers, timeout=30)


def _node_urls(cluster: Cluster) -> dict[int, str]:
    """HTTP port -> address of every manager and broker."""
    return {
        int(str(n["http_address"]).rsplit(":", 1)[1]): str(n["http_address"])
        for n in cluster.info["nodes"]
        if n["role"] in ("manager", "broker")
    }


def _read_off_the_wire(cluster: Cluster, keys: dict[str, str]) -> list[Captured]:
    """Every request on the cluster's ports while clients produce through the load balancer
    and on the direct path with a key new to the brokers (the leader broker then asks the
    managers about it), until brokers' own calls and managers' calls to brokers were seen."""
    with LoopbackSniffer(port_block("access")) as sniffer:
        with Producer(cluster.lb_url, "granted", api_key=keys["producer"], direct=False) as p:
            p.produce_batch((f"seen on the wire {i}", "k") for i in range(5))
        with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
            fresh = admin.create_key("producer", ["granted"], "new to every broker").key
        body = {"topic": "granted", "partition_id": 0, "messages": [{"message": "direct"}]}
        leader = _leader_address(cluster, "granted", 0)
        assert _call("POST", f"{leader}/logs", fresh, body).status_code == 201

        wanted = {("POST", "/brokers"), ("POST", "/keys/verify"), ("POST", "/logs")}
        paths: set[tuple[str, str]] = set()

        def seen() -> bool:
            paths.update((c.method, c.target.split("?")[0]) for c in sniffer.requests())
            return wanted <= paths

        try:
            poll_until(seen, WAIT_S, "a broker's registration, key check and forwarded produce")
        except WaitTimeoutError as exc:
            raise AssertionError(f"{exc}; read: {sorted(paths)}") from None
        return sniffer.requests()


def test_node_requests_read_off_the_wire_are_refused_when_sent_again(
    cluster: Cluster, keys: dict[str, str]
) -> None:
    """Issue 23, hole 1, against real processes: everything sent to the cluster's ports is
    read off the loopback interface while clients produce (through the load balancer and
    on the direct path) and the nodes call each other. No node credential crosses the load
    balancer. Each node request read (brokers registering and asking about keys and ids,
    managers forwarding produces and polling brokers) is sent again, byte for byte: to its
    own node (refused: taken once), to every other node (refused: signed for another) and
    through the load balancer (refused); with another body (refused: the signature does not
    hold); and once older than ``node_signature_age_s_max`` (refused: stale). The static
    token of older versions is refused everywhere, saying to upgrade. Nothing stored or
    changed."""
    require(None if can_capture() else "reading the wire needs CAP_NET_RAW (root)")
    captured = _read_off_the_wire(cluster, keys)
    lb_port = int(cluster.lb_url.rsplit(":", 1)[1])
    through_lb = [c for c in captured if c.server_port == lb_port]
    assert any(c.target.startswith("/logs") for c in through_lb)  # clients' traffic was read
    for request in through_lb:
        assert request.header(SIGNATURE_HEADER) is None, request
        assert request.header(LEGACY_TOKEN_HEADER) is None, request
    nodes = _node_urls(cluster)
    signed = [c for c in captured if c.header(SIGNATURE_HEADER) and c.server_port in nodes]
    one_of_each = {(c.server_port, c.method, c.target.split("?")[0]): c for c in signed}
    assert len(one_of_each) >= 5, sorted(one_of_each)
    before = _state(cluster)
    leader_port = int(cluster.node(cluster.manager_leader())["http_address"].rsplit(":", 1)[1])
    managers = {
        int(str(n["http_address"]).rsplit(":", 1)[1])
        for n in cluster.info["nodes"]
        if n["role"] == "manager"
    }
    for (port, _method, _path), sent in sorted(one_of_each.items()):
        assert _refused(_resend(nodes[port], sent), "replay", "old"), sent
        for other_port, other in nodes.items():
            if other_port != port:
                assert _refused(_resend(other, sent), "signed for"), (sent, other)
        if port != leader_port and port in managers:  # the leader checks what it was not sent
            assert _resend(nodes[leader_port], sent).status_code == 401
        assert _resend(cluster.lb_url, sent).status_code == 403
    produce = next(c for c in signed if c.method == "POST" and c.target.startswith("/logs"))
    changed = _resend(nodes[produce.server_port], produce, produce.body.replace(b"wire", b"evil"))
    assert _refused(changed, "does not hold"), changed.text
    secret = Path(cluster.info["secret_file"]).read_text().strip()
    old_token = {LEGACY_TOKEN_HEADER: _old_token(secret)}
    for url in (*(f"{node}/raft_status" for node in nodes.values()), f"{cluster.lb_url}/brokers"):
        old = requests.request(
            "GET" if "raft" in url else "POST", url, headers=old_token, timeout=30
        )
        assert old.status_code in (401, 403) and "upgrade it" in old.text, (url, old.text)
    newest = max(signed, key=lambda c: _signed_at_ms(c))
    poll_until(
        lambda: time.time() * 1000 > _signed_at_ms(newest) + SIGNATURE_AGE_S * 1000,
        WAIT_S,
        "the newest request read to be older than node_signature_age_s_max",
    )
    stale = _resend(nodes[newest.server_port], newest)
    assert _refused(stale, "old"), stale.text
    assert _state(cluster) == before


def _refused(answer: requests.Response, *reasons: str) -> bool:
    """401 for one of ``reasons``, or 503 NOT_LEADER from a manager that does not lead (it
    refuses every request but a few before it reads a credential), or 404/405 from a node
    without that route: nothing done either way."""
    if answer.status_code == 503:
        return bool(answer.json()["error_code"] == 50302)
    if answer.status_code in (404, 405):
        return answer.json()["error_code"] in (40405, 40501)
    return answer.status_code == 401 and any(reason in answer.text for reason in reasons)


def _signed_at_ms(request: Captured) -> int:
    value = request.header(SIGNATURE_HEADER) or ""
    return int(value.split(" ts=", 1)[1].split(" ", 1)[0])


def _managers(cluster: Cluster) -> tuple[Any, ...]:
    """Who the managers are: as ``/cluster`` lists them, and the leader's Raft members."""
    listed = _call("GET", f"{cluster.lb_url}/cluster", cluster.admin_key).json()["managers"]
    leader = cluster.node(cluster.manager_leader())["http_address"]
    status = cluster.internal.get(f"{leader}/raft_status", timeout=10).json()
    return sorted((m["id"], m["address"]) for m in listed), status["partners"], status["peers"]


def _relay_to(manager_url: str) -> Callable[[Received], tuple[int, bytes]]:
    """A listener's answer that hands each address challenge to a real manager."""

    def relay(request: Received) -> tuple[int, bytes]:
        if request.path != "/managers/proof":
            return 200, b"{}"
        answer = requests.post(f"{manager_url}/managers/proof", data=request.body, timeout=10)
        return answer.status_code, answer.content

    return relay


def test_an_admin_key_cannot_make_the_cluster_send_a_credential_to_its_listener(
    cluster: Cluster, keys: dict[str, str]
) -> None:
    """Issue 23, hole 2, against real processes: an admin key adds a "manager" whose HTTP
    URL is a listener of the test's (one that answers anything, then one that relays the
    leader's challenge to a real manager) and whose Raft address is another. Each add is
    refused (400: it did not prove its address), the listener gets the challenge alone,
    with no credential, and no connection reaches the Raft address; afterwards ``GET
    /cluster``, which made the leader call every listed manager with the node token,
    sends the listener nothing; the managers, their Raft group and the rest are as they
    were."""
    before, managers_before = _state(cluster), _managers(cluster)
    raft = socket.create_server(("127.0.0.1", 0))
    raft.setblocking(False)
    real = cluster.node("manager-2")["http_address"]
    with RecordingListener() as plain, RecordingListener(_relay_to(real)) as relay, raft:
        for listener, refusal in ((plain, "did not answer the address check as a manager"),
                                  (relay, "says it is manager 2")):  # fmt: skip
            body = {
                "manager_id": 7,
                "http_url": listener.url,
                "raft_address": f"127.0.0.1:{raft.getsockname()[1]}",
            }
            added = _call("POST", f"{cluster.lb_url}/managers", cluster.admin_key, body)
            assert added.status_code == 400, added.text
            assert refusal in added.json()["message"], added.text
        for _ in range(3):
            shown = _call("GET", f"{cluster.lb_url}/cluster", cluster.admin_key)
            assert shown.status_code == 200 and "managers" in shown.json()
        assert _managers(cluster) == managers_before
        for listener in (plain, relay):
            assert [(r.method, r.path) for r in listener.received] == [
                ("POST", "/managers/proof")
            ], listener.received
            for request in listener.received:
                assert "authorization" not in request.header_names()
                assert not any(n.startswith("x-raftq-node") for n in request.header_names())
        with pytest.raises(BlockingIOError):
            raft.accept()  # nobody connected to the Raft address
    assert _state(cluster) == before


def _evil_frame(marker: Path) -> bytes:
    """What pysyncobj reads from a peer without a password: length, then zlib(pickle). This
    pickle calls ``os.mkdir(marker)`` when loaded."""

    class Evil:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return os.mkdir, (str(marker),)

    data = zlib.compress(pickle.dumps(Evil()), 3)
    return struct.pack("i", len(data)) + data


def _send(address: str, frame: bytes, *, hang_up_within_s: float) -> None:
    """Send ``frame`` and wait until the node hangs up on it (it has read and refused it
    by then)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(frame)
        sock.settimeout(hang_up_within_s)
        assert sock.recv(1024) == b"", f"{address} answered the payload"


def test_the_evil_pickle_runs_on_a_raft_node_without_a_password(tmp_path: Path) -> None:
    """The control for the next test: the payload does what it says where nothing stops it."""
    marker = tmp_path / "pwned"
    address = f"127.0.0.1:{free_port()}"
    node = SyncObj(address, [], SyncObjConf(bindAddress=address, autoTick=True))
    try:
        poll_until(lambda: node.isReady() or None, WAIT_S, "the bare node to start")
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(_evil_frame(marker))  # open until read: a hang-up may come first
            poll_until(marker.exists, WAIT_S, "the payload to run on the bare node")
    finally:
        node.destroy()


def test_a_pickled_payload_to_every_raft_port_runs_nothing(
    cluster: Cluster, keys: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        addresses = {r.raft_address for t in ("granted", "other") for p in admin.partitions(t)
                     for r in p.replicas}  # fmt: skip
    addresses |= {n["raft_address"] for n in cluster.info["nodes"] if n["role"] == "manager"}
    assert len(addresses) == 3 * 3 + 3
    frame = _evil_frame(marker)
    for address in sorted(addresses):
        _send(address, frame, hang_up_within_s=WAIT_S)
    # Each send returned once the node had read the frame and hung up on it (a node that
    # loaded the pickle would have made the marker by then).
    with Producer(cluster.lb_url, "granted", api_key=keys["producer"]) as producer:
        producer.produce_batch(["after the payload"])  # every group still commits
    for node in cluster.info["nodes"]:
        assert requests.get(node["http_address"] + "/", timeout=10).status_code == 200
    assert not marker.exists()


def test_every_listener_is_bound_to_the_configured_host(cluster: Cluster) -> None:
    low = cluster.base_port
    listening = _listening_ports()
    ours = {addr for addr, port in listening if low <= port < low + CLUSTER_PORT_SPAN}
    assert ours == {"127.0.0.1"}, listening


def _listening_ports() -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN, from /proc/net/tcp and tcp6 (an IPv6
    address is kept as its hex: any of them on our ports is a failure)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state != "0A":  # LISTEN
                continue
            hex_addr, hex_port = local.split(":")
            address = hex_addr
            if table == "tcp":
                address = ".".join(str(int(hex_addr[i : i + 2], 16)) for i in (6, 4, 2, 0))
            found.add((address, int(hex_port, 16)))
    return found
