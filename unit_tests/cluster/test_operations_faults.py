"""Operations under faults with real processes (issue 19): a drain never removes a live
member before its replacement runs, a drain that could not finish is refused with nothing
changed, and a ``min_insync_replicas`` topic never acknowledges a write that fewer replicas
hold, not even in the seconds after its leader was killed (pysyncobj stamps every member
"answered just now" at an election).

Each test failed on the code before its fix: the replication-factor-2 drain never finished
(the leader removed the leaving member, then waited for a new one that was started only
afterwards, and lost its leadership for good); a drain of a lone replica was taken and
raised in the mover every round; the new leader of a min-3 topic acknowledged writes held
by two replicas."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from unit_tests.cluster.client_ops import (
    create_topic_answer,
    partition_brokers,
    partition_leader,
    produce,
    read_replica,
    register_producer,
)
from unit_tests.cluster.harness import Cluster, running_cluster, wait_until
from unit_tests.ports import CLUSTER_BASE_PORTS, free_port

WAIT_S = 60.0
REMOVE_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(
        tmp_path_factory.mktemp("operations_faults"),
        CLUSTER_BASE_PORTS["operations_faults"],
        up_args=["--brokers", "4", "--dead-broker-timeout-s", "2"],
    )


class _Writer:
    """Produces one batch after another to each partition of a topic on a thread, each
    retried with its sequence until acknowledged (``produce``), and keeps what was acked."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int) -> None:
        self._cluster, self._topic, self._partitions = cluster, topic, partitions
        self._producer = register_producer(cluster, topic)
        self.acked: dict[int, list[str]] = {p: [] for p in range(partitions)}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sequence = 0

    def batch(self) -> None:
        partition_id = self._sequence % self._partitions
        values = [f"{self._topic}-{self._sequence}-{i}" for i in range(10)]
        acks = produce(
            self._cluster,
            self._producer,
            self._sequence,
            [(None, v) for v in values],
            topic=self._topic,
            partition_id=partition_id,
            deadline_s=WAIT_S,
        )
        assert [a.value for a in acks] == values
        self.acked[partition_id].extend(values)
        self._sequence += 1

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.batch()
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S + 10)
        assert not self._thread.is_alive(), "the writer hung"
        assert not self.errors, self.errors


def test_a_drain_hands_leadership_to_a_replica_that_answers(cluster: Cluster) -> None:
    """The draining broker leads; the first other replica in slot order is paused. The
    hand-off used to target that replica every round (pysyncobj sends it TimeoutNow, it
    never acts) and the move never went on while it was paused. Now a live, caught-up
    replica takes the lead, and the partition moves with the paused one still paused."""
    create_topic_answer(cluster, {"name": "handoff", "partitions": 1, "replication_factor": 3})
    placed = partition_brokers(cluster, "handoff")[0]
    leaving = wait_until(lambda: partition_leader(cluster, "handoff", 0), WAIT_S, "a leader")
    paused = next(b for b in placed if b != leaving)
    cluster.kill(cluster.broker_name(paused), signal.SIGSTOP)
    try:
        assert _drain(cluster, leaving).status_code == 202
        wait_until(lambda: _moved_off(cluster, "handoff", leaving), WAIT_S, "handoff/0 to move")
    finally:
        cluster.kill(cluster.broker_name(paused), signal.SIGCONT)
    out = cluster.cli(
        "broker", "remove", str(leaving), "--dir", str(cluster.directory), "--timeout-s", "120"
    )
    assert f"broker {leaving} removed" in out, out
    cluster.add_broker()  # four again, for the tests below


def _moved_off(cluster: Cluster, topic: str, broker_id: int) -> bool:
    """The partition's move is finished and no replica is on ``broker_id``."""
    partitions = [p for p in cluster.get("/overview").json()["partitions"] if p["topic"] == topic]
    return bool(partitions) and all(
        p["moving"] is None and broker_id not in [r["broker_id"] for r in p["replicas"]]
        for p in partitions
    )


def test_a_drain_is_cancelled_and_the_broker_takes_replicas_again(cluster: Cluster) -> None:
    """``raftq broker remove ID --cancel`` after a drain began: the broker is no longer
    draining, and a topic created afterwards places a replica on it (the least loaded)."""
    spare = max(b["broker_id"] for b in cluster.get("/brokers").json()["brokers"])
    assert _drain(cluster, spare).status_code == 202
    out = cluster.cli("broker", "remove", str(spare), "--cancel", "--dir", str(cluster.directory))
    assert f"broker {spare} stays" in out, out
    brokers = {b["broker_id"]: b for b in cluster.get("/brokers").json()["brokers"]}
    assert brokers[spare]["draining"] is False
    # Placement takes the least loaded first: the spare holds nothing yet.
    create_topic_answer(cluster, {"name": "warm", "partitions": 1, "replication_factor": 3})
    assert spare in partition_brokers(cluster, "warm")[0]
    create_topic_answer(cluster, {"name": "back", "partitions": 1, "replication_factor": 3})


def test_removing_a_broker_of_a_replication_factor_2_topic_keeps_it_writable(
    cluster: Cluster,
) -> None:
    """``raftq broker remove`` of a broker holding a replica of a replication-factor-2
    topic, while a producer writes: the drain finishes, every partition keeps taking
    writes, and each replica's database holds exactly what was acknowledged, in order."""
    create_topic_answer(cluster, {"name": "pair", "partitions": 2, "replication_factor": 2})
    placed = partition_brokers(cluster, "pair")
    leaving = placed[0][0]
    writer = _Writer(cluster, "pair", 2)
    for _ in range(4):
        writer.batch()
    writer.start()
    try:
        out = cluster.cli(
            "broker",
            "remove",
            str(leaving),
            "--dir",
            str(cluster.directory),
            "--timeout-s",
            str(REMOVE_TIMEOUT_S),
        )
    finally:
        writer.stop()
    assert f"broker {leaving} removed" in out, out
    writer.batch()  # writable after the move too
    moved = partition_brokers(cluster, "pair")
    for partition_id, brokers in moved.items():
        assert leaving not in brokers and len(set(brokers)) == 2, moved
        for broker_id in brokers:
            wait_until(
                partial(_holds, cluster, broker_id, partition_id, writer.acked[partition_id]),
                WAIT_S,
                f"broker {broker_id}'s database of pair/{partition_id}",
            )


def _holds(cluster: Cluster, broker_id: int, partition_id: int, acked: list[str]) -> bool:
    """The replica's database holds exactly what was acknowledged, in order."""
    stored = [e.value for e in read_replica(cluster, broker_id, "pair", partition_id)]
    return stored == acked


def _drain(cluster: Cluster, broker_id: int) -> Any:
    return cluster.post("/brokers/drain", {"broker_id": broker_id})


def test_a_drain_that_could_not_finish_is_refused_and_changes_nothing(cluster: Cluster) -> None:
    """Three brokers are left: a drain of the broker holding a replication-factor-1
    topic's only replica, and one of any broker while a replication-factor-3 topic has
    nowhere else to go, are refused with 409 CANNOT_MOVE; no broker is draining after."""
    create_topic_answer(cluster, {"name": "solo", "partitions": 1, "replication_factor": 1})
    lone = partition_brokers(cluster, "solo")[0][0]
    refused = _drain(cluster, lone)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error_code"] == 40906
    assert "replication factor 1" in refused.json()["message"]
    create_topic_answer(cluster, {"name": "triple", "partitions": 1, "replication_factor": 3})
    other = next(b for b in partition_brokers(cluster, "triple")[0] if b != lone)
    refused = _drain(cluster, other)
    assert refused.status_code == 409, refused.text
    assert "no other live broker can take" in refused.json()["message"]
    brokers = cluster.get("/brokers").json()["brokers"]
    assert not any(b.get("draining") for b in brokers), brokers


def test_a_min_insync_topic_acknowledges_nothing_two_replicas_hold_after_a_leader_kill(
    cluster: Cluster,
) -> None:
    """``min_insync_replicas`` 3 on three replicas: right after a kill -9 of the partition
    leader, the new leader must not acknowledge any write (two replicas live); it refuses
    (50308, nothing stored) or stores without acknowledging (50309). Once the killed
    broker is back, writes are acknowledged again, held by three replicas."""
    create_topic_answer(
        cluster,
        {"name": "strict3", "partitions": 1, "replication_factor": 3, "min_insync_replicas": 3},
    )
    producer = register_producer(cluster, "strict3")
    produce(cluster, producer, 0, [(None, "first")], topic="strict3", partition_id=0)
    leader = partition_leader(cluster, "strict3", 0)
    cluster.kill(cluster.broker_name(leader), signal.SIGKILL)
    answers: list[tuple[int, int | None]] = []

    def probe() -> bool:
        """One produce of a new sequence; done after 20 answers from a new leader."""
        body = {
            "producer_id": producer,
            "topic": "strict3",
            "partition_id": 0,
            "sequence": len(answers) + 1,
            "messages": [{"message": f"probe-{len(answers)}"}],
        }
        response = cluster.post("/logs", body)
        code = response.json().get("error_code") if response.status_code != 201 else None
        answers.append((response.status_code, code))
        if response.status_code == 201:
            return True  # a violation: checked below
        return sum(1 for _, c in answers if c in (50308, 50309)) >= 20

    wait_until(probe, WAIT_S, "20 answers from a new leader", period_s=0.05)
    assert all(status != 201 for status, _ in answers), f"acknowledged by two: {answers}"
    cluster.local.start_node(cluster.broker_name(leader))  # the killed broker comes back
    sequence = len(answers) + 1
    acks = produce(
        cluster,
        producer,
        sequence,
        [(None, "last")],
        topic="strict3",
        partition_id=0,
        deadline_s=WAIT_S,
    )
    assert acks[0].value == "last"


def test_managers_that_never_started_are_not_added(cluster: Cluster) -> None:
    """Three quick ``POST /managers`` of managers that never start used to stop the
    managers' group for good (each was recorded and counted as a Raft member before it
    ran). Since issue 23 a manager must answer the leader's address check before anything
    is recorded: each add is refused at once (400, nothing done), the group keeps working
    and still has its three members."""
    for manager_id in (4, 5, 6):
        body = {
            "manager_id": manager_id,
            "http_url": f"http://127.0.0.1:{free_port()}",  # nothing listens: never started
            "raft_address": f"127.0.0.1:{free_port()}",
        }
        added = cluster.post("/managers", body)
        assert added.status_code == 400, added.text
        assert "did not answer the address check" in added.json()["message"]
    assert cluster.get("/topics").status_code == 200
    listed = cluster.get("/cluster").json()["managers"]
    assert sorted(m["id"] for m in listed) == [1, 2, 3]
