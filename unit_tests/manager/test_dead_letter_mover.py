"""DeadLetterMover over the in-memory registry twin, a stub broker client and a stub router:
each group's letters are produced alone, in the order they died, under the group's producer
id and dead sequence; a failure stops that group's chain for the round; a copy the
dead-letter partition already holds (``SEQUENCE_OUT_OF_ORDER``) counts as stored; only the
stored ones are marked; a group without a dead-letter topic keeps its letters parked."""

from __future__ import annotations

from manager.broker_client import BrokerClient
from manager.dead_letter_mover import DeadLetterMover
from manager.log_router import LogRouter
from manager.raft import RegistryTwin, registry_twin
from manager.registry.commands import BeginTopic, DefineGroup, FinishPartitions, RegisterBroker
from protocol import dead_letters
from protocol.dead_letters import PendingDeadLetter, dead_letter_producer_id
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import MarkDeadLettered
from protocol.limits import Limits
from protocol.requests import Produce
from protocol.types import BrokerId, Offset, PartitionId, StoredMessage
from runtime.http_client import PeerLink

LIMITS = Limits()


class StubBrokers(BrokerClient):
    def __init__(self, pending: list[PendingDeadLetter]) -> None:
        super().__init__(LIMITS, PeerLink(None, None))
        self.pending = pending
        self.marked: list[tuple[str, MarkDeadLettered]] = []

    def dead_letters(self, address: str, most: int) -> list[PendingDeadLetter]:
        return self.pending[:most]

    def mark_dead_lettered(self, address: str, request: MarkDeadLettered) -> None:
        self.marked.append((address, request))


class StubRouter(LogRouter):
    """Records each produce; ``answers`` pops an error to raise per call (None: stored)."""

    def __init__(self, answers: list[RaftQError | None]) -> None:
        self.produced: list[Produce] = []
        self.answers = answers

    def produce_unregistered(
        self, request: Produce, deadline: Deadline | None = None
    ) -> dict[str, object]:
        self.produced.append(request)
        failure = self.answers.pop(0) if self.answers else None
        if failure is not None:
            raise failure
        return {"partition_id": 0, "offset": len(self.produced) - 1}


def letter(offset: int, sequence: int, group: str = "workers") -> PendingDeadLetter:
    message = StoredMessage(
        offset=Offset(offset), key="k", value=f"v{offset}", timestamp_ms=7, headers=(("h", "x"),)
    )
    return PendingDeadLetter("orders", PartitionId(1), group, 3, sequence, message)


def registry() -> RegistryTwin:
    raft = registry_twin()
    raft.propose(RegisterBroker(BrokerId(1), "http://b1", "h", 9000, 9099, 10))
    for port, topic in enumerate(("orders", "orders-dead"), start=9001):
        placement = ((BrokerId(1), f"h:{port}"),)
        raft.propose(BeginTopic(topic, (placement,), 10, 8, 1, LIMITS.partition_limits()))
        raft.propose(FinishPartitions(topic, (0,)))
    for group, dead_letter_topic in (("workers", "orders-dead"), ("parked", None)):
        raft.propose(
            DefineGroup(
                "orders", group, 30_000, 3, dead_letter_topic, "none", 100, 43_200_000, 1_000, 10
            )
        )
    assert raft.read(lambda s: len(s.groups)) == 2
    return raft


def run(
    pending: list[PendingDeadLetter], answers: list[RaftQError | None]
) -> tuple[StubBrokers, StubRouter]:
    brokers, router = StubBrokers(pending), StubRouter(answers)
    DeadLetterMover(LIMITS, registry(), brokers, router).tick()
    return brokers, router


def test_letters_go_alone_in_death_order_under_the_groups_producer_id() -> None:
    brokers, router = run([letter(9, 2), letter(4, 1)], [])
    assert [(r.sequence, r.messages[0].value) for r in router.produced] == [(1, "v4"), (2, "v9")]
    producer = dead_letter_producer_id("orders", 1, "workers")
    assert {r.producer_id for r in router.produced} == {producer}
    assert all(r.topic == "orders-dead" and r.partition_id is None for r in router.produced)
    copy = dict(router.produced[0].messages[0].headers)
    assert copy == {
        "h": "x",
        dead_letters.ORIGIN_TOPIC: "orders",
        dead_letters.ORIGIN_PARTITION: "1",
        dead_letters.ORIGIN_OFFSET: "4",
        dead_letters.ORIGIN_TIMESTAMP_MS: "7",
        dead_letters.GROUP: "workers",
        dead_letters.DELIVERY_COUNT: "3",
        dead_letters.REASON: dead_letters.REASON_MAX_DELIVERIES,
    }
    assert brokers.marked == [
        ("http://b1", MarkDeadLettered("orders", PartitionId(1), "workers", (Offset(4), Offset(9))))
    ]


def test_a_failure_stops_the_chain_and_only_what_was_stored_is_marked() -> None:
    unavailable = RaftQError(ErrorCode.UNAVAILABLE, "no leader")
    brokers, router = run([letter(1, 1), letter(2, 2), letter(3, 3)], [None, unavailable])
    assert [r.sequence for r in router.produced] == [1, 2]  # 3 waits for the next round
    assert [m.offsets for _, m in brokers.marked] == [(Offset(1),)]


def test_a_copy_stored_before_counts_as_stored() -> None:
    """A repeat after a failover: a later sequence reached the partition, so this one did."""
    later_seen = RaftQError(ErrorCode.SEQUENCE_OUT_OF_ORDER, "sequence 1 is not above 2")
    brokers, _ = run([letter(1, 1), letter(2, 2)], [later_seen])
    assert [m.offsets for _, m in brokers.marked] == [(Offset(1), Offset(2))]


def test_nothing_stored_marks_nothing_and_a_group_without_a_topic_stays_parked() -> None:
    unavailable = RaftQError(ErrorCode.UNAVAILABLE, "no leader")
    brokers, router = run([letter(5, 1, group="parked"), letter(1, 1)], [unavailable])
    assert [r.messages[0].value for r in router.produced] == ["v1"]  # none of the parked
    assert brokers.marked == []
