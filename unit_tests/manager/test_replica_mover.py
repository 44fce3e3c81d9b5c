"""ReplicaMover over the in-memory registry twin and a stub broker client: a gone broker's
replica moves step by step, a move begun by one manager leader is finished by the next from
the registry alone, a leaving replica that leads hands over first, and strays are dropped."""

from __future__ import annotations

import time

from manager.broker_client import BrokerClient
from manager.broker_monitor import BrokerMonitor
from manager.raft import RegistryTwin, registry_twin
from manager.registry.commands import (
    BeginTopic,
    DrainBroker,
    FinishPartitions,
    RegisterBroker,
    SetBrokerAlive,
)
from manager.registry.topics import PartitionRecord
from manager.replica_mover import ReplicaMover
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.types import BrokerId, PartitionId, ReplicaSpec
from runtime.http_client import PeerLink
from unit_tests.manager.in_memory_app import applied_names

LIMITS = Limits()


class StubBrokers(BrokerClient):
    """Records the calls; the partition leader's answer is ``members_match``."""

    def __init__(self) -> None:
        super().__init__(LIMITS, PeerLink(None, None))
        self.members_match = False
        self.leader = "http://b2"
        """The broker whose replica leads the partition (and alone answers for its group)."""
        self.failing: set[str] = set()
        """Brokers whose ``replace_member`` raises."""
        self.calls: list[tuple[str, str]] = []
        self.specs: list[ReplicaSpec] = []
        self.removed_alive: list[bool] = []
        self.transfers: list[str] = []

    def replace_member(
        self,
        address: str,
        spec: ReplicaSpec,
        moved_replica_id: int,
        removed: str,
        removed_alive: bool,
    ) -> dict[str, object]:
        self.calls.append(("members", address))
        self.removed_alive.append(removed_alive)
        if address in self.failing:
            raise RaftQError(ErrorCode.UNAVAILABLE, f"{address} does not answer")
        leads = address == self.leader
        return {"leader": leads, "members_match": leads and self.members_match}

    def host_replica(self, address: str, spec: ReplicaSpec) -> None:
        self.calls.append(("host", address))
        self.specs.append(spec)

    def transfer_leadership(
        self, address: str, topic: str, partition_id: int, raft_address: str
    ) -> None:
        self.calls.append(("transfer", address))
        self.transfers.append(raft_address)

    def drop_replica(self, address: str, topic: str, partition_id: int, raft_address: str) -> bool:
        self.calls.append(("drop", address))
        return True


def _registry() -> RegistryTwin:
    registry = registry_twin()
    for broker_id in (1, 2, 3, 4):
        registry.propose(RegisterBroker(broker_id, f"http://b{broker_id}", "h", 9000, 9099, 10))
    placement = tuple((BrokerId(b), f"h:{9000 + b}") for b in (1, 2, 3))
    registry.propose(BeginTopic("t", (placement,), 10, 8, 3, LIMITS.partition_limits()))
    registry.propose(FinishPartitions("t", (0,)))
    return registry


def _gone_for_long(monitor: BrokerMonitor, broker_id: int) -> None:
    now_s = time.monotonic()
    monitor.record_answer(BrokerId(broker_id), [], now_s - LIMITS.broker_replace_after_s - 1)
    monitor.record_silence(BrokerId(broker_id), now_s)


def _partition(registry: RegistryTwin) -> PartitionRecord:
    topic = registry.read(lambda s: s.topics.get("t"))
    assert topic is not None
    return topic.partitions[0]


def _report_caught_up(monitor: BrokerMonitor, flushed: list[int], evicted: int = 0) -> None:
    report = {
        "topic": "t",
        "partition_id": 0,
        "raft_address": "h:9000",  # broker 4's lowest free port on host h
        "caught_up": True,
        "flushed_offsets": flushed,
        "evicted_offset": evicted,
    }
    monitor.record_answer(BrokerId(4), [report], time.monotonic())


def test_a_move_begun_by_one_leader_is_finished_by_the_next() -> None:
    registry, brokers = _registry(), StubBrokers()
    registry.propose(SetBrokerAlive(1, False))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    _gone_for_long(monitor, 1)
    first = ReplicaMover(LIMITS, registry, brokers, monitor)
    first.tick()  # begins: broker 4 takes slot 0
    moving = _partition(registry)
    assert moving.moving is not None and moving.moving.removed.broker_id == 1
    assert [r.broker_id for r in moving.replicas] == [4, 2, 3]
    brokers.calls.clear()
    first.tick()  # the new replica is hosted before the leader is asked to add it
    assert brokers.calls[:2] == [("host", "http://b4"), ("members", "http://b4")]
    assert ("members", "http://b2") in brokers.calls
    assert brokers.removed_alive[-1] is False  # dead: removed before the new one joins

    # A new manager leader: a fresh monitor (it knows nothing of the broker polls yet).
    brokers.members_match = True
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    second = ReplicaMover(LIMITS, registry, brokers, monitor)
    second.tick()
    assert ("host", "http://b4") in brokers.calls
    assert _partition(registry).moving is not None  # not caught up: no report yet
    _report_caught_up(monitor, [0, 50, 40])
    second.tick()
    assert _partition(registry).moving is not None  # behind the slowest other replica
    _report_caught_up(monitor, [40, 50, 40], evicted=45)
    second.tick()
    assert _partition(registry).moving is not None  # only other databases hold [40, 45)
    _report_caught_up(monitor, [45, 50, 40], evicted=45)
    second.tick()
    done = _partition(registry)
    assert done.moving is None and [r.broker_id for r in done.replicas] == [4, 2, 3]
    assert applied_names(registry)[-1] == "finish_move"


def _moving_off_dead_broker_1() -> tuple[RegistryTwin, StubBrokers, BrokerMonitor, ReplicaMover]:
    """Broker 1 dead past the replace time, and a mover whose first round began moving its
    slot 0 to broker 4."""
    registry, brokers = _registry(), StubBrokers()
    registry.propose(SetBrokerAlive(1, False))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    _gone_for_long(monitor, 1)
    mover = ReplicaMover(LIMITS, registry, brokers, monitor)
    mover.tick()  # begins: broker 4 takes slot 0
    return registry, brokers, monitor, mover


def test_a_move_whose_new_replica_leads_finishes() -> None:
    """Once a member, the new replica may be elected or handed the lead (the leader balance
    prefers it) before the move finishes; it is asked like the others, and the move ends.
    It used to be skipped: no other replica answered as leader, and the move waited for
    good (long tier, membership seed 61637)."""
    registry, brokers, monitor, mover = _moving_off_dead_broker_1()
    brokers.leader, brokers.members_match = "http://b4", True
    _report_caught_up(monitor, [50, 50, 50], evicted=50)
    mover.tick()
    assert _partition(registry).moving is None
    assert applied_names(registry)[-1] == "finish_move"


def test_a_member_that_fails_to_answer_does_not_keep_the_leader_unasked() -> None:
    """The new replica's broker (asked first: its slot is 0) fails; the leader is still
    asked in the same round, and the move finishes."""
    registry, brokers, monitor, mover = _moving_off_dead_broker_1()
    brokers.failing, brokers.members_match = {"http://b4"}, True
    _report_caught_up(monitor, [50, 50, 50], evicted=50)
    mover.tick()
    assert _partition(registry).moving is None


def _report(monitor: BrokerMonitor, broker_id: int, *, leads: bool, caught_up: bool) -> None:
    item = {
        "topic": "t",
        "partition_id": 0,
        "is_leader": leads,
        "caught_up": caught_up,
        "raft_address": f"h:{9000 + broker_id}",
    }
    monitor.record_answer(BrokerId(broker_id), [item], time.monotonic())


def test_a_draining_brokers_replica_that_leads_hands_over_first() -> None:
    registry, brokers = _registry(), StubBrokers()
    registry.propose(DrainBroker(1))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    _report(monitor, 1, leads=True, caught_up=True)
    _report(monitor, 2, leads=False, caught_up=True)
    _report(monitor, 3, leads=False, caught_up=True)
    mover = ReplicaMover(LIMITS, registry, brokers, monitor)
    mover.tick()  # begins at once: draining needs no wait
    assert _partition(registry).moving is not None
    brokers.calls.clear()
    mover.tick()
    # Not dropped (it has not left the group yet), not removed yet: asked to hand over.
    assert brokers.calls == [("transfer", "http://b1")]
    # Refused (the target lacked an entry): the next round asks the other live replica.
    mover.tick()
    assert brokers.transfers == ["h:9002", "h:9003"]


def test_a_hand_off_never_targets_a_dead_or_lagging_replica() -> None:
    registry, brokers = _registry(), StubBrokers()
    registry.propose(DrainBroker(1))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    _report(monitor, 1, leads=True, caught_up=True)
    _report(monitor, 3, leads=False, caught_up=False)
    mover = ReplicaMover(LIMITS, registry, brokers, monitor)
    mover.tick()
    registry.propose(SetBrokerAlive(2, False))  # dies after the move began
    for _ in range(3):
        mover.tick()
    assert brokers.transfers == []  # broker 2 dead, broker 3 behind: nobody to ask yet
    _report(monitor, 3, leads=False, caught_up=True)
    mover.tick()
    assert brokers.transfers == ["h:9003"]


def test_a_live_leaving_replica_is_removed_last() -> None:
    registry, brokers = _registry(), StubBrokers()
    registry.propose(DrainBroker(3))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    mover = ReplicaMover(LIMITS, registry, brokers, monitor)
    mover.tick()
    mover.tick()
    assert brokers.calls[:2] == [("host", "http://b4"), ("members", "http://b1")]
    assert brokers.removed_alive and all(brokers.removed_alive)


def test_a_drains_new_replica_is_told_the_leaving_one() -> None:
    """``ReplicaSpec.leaving``: a drain's leaving replica stays a member until its
    replacement caught up, so the new one's Raft node must know it (a loss during the drain
    may need its vote: simulator, moves seed 8) and copy from it. A dead one is named to no
    one (it was removed first)."""
    registry, brokers = _registry(), StubBrokers()
    registry.propose(DrainBroker(3))
    mover = ReplicaMover(LIMITS, registry, brokers, BrokerMonitor(LIMITS.broker_dead_after_s))
    mover.tick()  # begins
    mover.tick()  # hosts the new replica, then asks the members
    leaving = brokers.specs[-1].leaving
    assert leaving is not None
    assert (leaving.broker_id, leaving.raft_address) == (3, "h:9003")
    assert "h:9003" in brokers.specs[-1].raft_partners
    registry.propose(SetBrokerAlive(3, False))
    mover.tick()
    assert brokers.specs[-1].leaving is None


def test_a_dead_replica_moves_before_a_draining_one_and_a_drain_waits_for_it() -> None:
    registry, brokers = _registry(), StubBrokers()
    registry.propose(RegisterBroker(5, "http://b5", "h", 9000, 9099, 10))
    registry.propose(DrainBroker(1))
    registry.propose(SetBrokerAlive(2, False))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    now_s = time.monotonic()
    monitor.record_answer(BrokerId(2), [], now_s - LIMITS.broker_replace_after_s / 2)
    monitor.record_silence(BrokerId(2), now_s)
    mover = ReplicaMover(LIMITS, registry, brokers, monitor)
    mover.tick()
    # Broker 2 is down but not gone yet: the drain of 1 waits (it would leave 1 live of 3).
    assert _partition(registry).moving is None
    _gone_for_long(monitor, 2)
    mover.tick()
    moving = _partition(registry).moving
    assert moving is not None and moving.removed.broker_id == 2


def test_a_stalled_move_lets_another_partition_move() -> None:
    registry, brokers = _registry(), StubBrokers()
    placement = tuple((BrokerId(b), f"h:{9010 + b}") for b in (1, 2, 3))
    registry.propose(BeginTopic("u", (placement,), 10, 8, 3, LIMITS.partition_limits()))
    registry.propose(FinishPartitions("u", (0,)))
    registry.propose(SetBrokerAlive(1, False))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    _gone_for_long(monitor, 1)
    clock = [1000.0]
    mover = ReplicaMover(LIMITS, registry, brokers, monitor, clock_s=lambda: clock[0])
    mover.tick()
    moving = registry.read(lambda s: [t.name for t in s.topics.all() if t.moving])
    assert len(moving) == 1  # one at a time (replica_moves_max)
    mover.tick()
    assert registry.read(lambda s: sum(len(t.moving) for t in s.topics.all())) == 1
    clock[0] += LIMITS.replica_move_stall_s  # the first one never progresses
    mover.tick()
    assert registry.read(lambda s: sum(len(t.moving) for t in s.topics.all())) == 2


def test_a_dead_broker_keeps_its_replicas_until_broker_replace_after_s() -> None:
    registry, brokers = _registry(), StubBrokers()
    registry.propose(SetBrokerAlive(1, False))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    now_s = time.monotonic()
    monitor.record_answer(BrokerId(1), [], now_s - LIMITS.broker_replace_after_s / 2)
    monitor.record_silence(BrokerId(1), now_s)
    ReplicaMover(LIMITS, registry, brokers, monitor).tick()
    assert _partition(registry).moving is None and brokers.calls == []


def test_a_replica_no_partition_has_is_dropped() -> None:
    registry, brokers = _registry(), StubBrokers()
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    stray = {"topic": "gone", "partition_id": 0, "raft_address": "h:9050"}
    kept = {"topic": "t", "partition_id": PartitionId(0), "raft_address": "h:9003"}
    monitor.record_answer(BrokerId(3), [stray, kept], time.monotonic())
    ReplicaMover(LIMITS, registry, brokers, monitor).tick()
    assert brokers.calls == [("drop", "http://b3")]


def test_a_move_whose_new_broker_is_gone_goes_elsewhere() -> None:
    registry, brokers = _registry(), StubBrokers()
    registry.propose(RegisterBroker(5, "http://b5", "h", 9000, 9099, 10))
    registry.propose(SetBrokerAlive(1, False))
    monitor = BrokerMonitor(LIMITS.broker_dead_after_s)
    _gone_for_long(monitor, 1)
    mover = ReplicaMover(LIMITS, registry, brokers, monitor)
    mover.tick()
    assert [r.broker_id for r in _partition(registry).replicas] == [4, 2, 3]
    registry.propose(SetBrokerAlive(4, False))  # the new broker dies before it caught up
    _gone_for_long(monitor, 4)
    mover.tick()
    moved = _partition(registry)
    assert moved.moving is not None and moved.moving.removed.broker_id == 1
    assert [r.broker_id for r in moved.replicas] == [5, 2, 3]
    assert applied_names(registry)[-1] == "retarget_move"
