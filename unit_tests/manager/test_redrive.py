"""``Redriver`` over the in-memory registry twin and a stub router whose partitions remember
request ids as real ones do: letters of the group are sent to their origin partitions,
others' are passed over; each range is planned, reopened, then finished, so a redrive that
failed part way repeats exactly that range and no letter is redriven twice; ``max_messages``
bounds a call and ``more`` says so; parked messages are asked of each partition in turn."""

from __future__ import annotations

import pytest

from manager.log_router import LogRouter
from manager.raft import RegistryTwin, registry_twin
from manager.redrive import Redriver
from manager.registry.commands import BeginTopic, DefineGroup, FinishPartitions, RegisterBroker
from manager.registry.groups import RedriveProgress
from protocol import dead_letters
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import GroupRedrive, RedriveRequest
from protocol.limits import Limits
from protocol.requests import Fetch
from protocol.types import BrokerId, RequestId

LIMITS = Limits(dead_letter_batch_max=3)
"""Ranges of three dead-letter messages: several ranges in a short history."""


class StubRouter(LogRouter):
    """The dead-letter topic's messages by partition; origin partitions that apply each
    request id once (``reopened``: every letter applied, in order) and can be made to fail."""

    def __init__(self, dead: dict[int, list[dict[str, object]]]) -> None:
        self.dead = dead
        self.reopened: list[tuple[int, int]] = []
        self.asked: list[GroupRedrive] = []
        self.seen: dict[str, tuple[int, int]] = {}
        self.fail_at: int | None = None

    def fetch(self, request: Fetch, deadline: Deadline | None = None) -> dict[str, object]:
        found = [
            m
            for m in self.dead.get(request.partition_id, [])
            if request.offset <= _offset(m) < request.offset + request.max_messages
        ]
        return {"messages": found}

    def redrive(self, request: GroupRedrive, deadline: Deadline | None = None) -> tuple[int, int]:
        self.asked.append(request)
        if self.fail_at is not None and len(self.asked) == self.fail_at:
            raise RaftQError(ErrorCode.UNAVAILABLE, "the partition leader died")
        if request.request_id is not None and request.request_id in self.seen:
            return self.seen[request.request_id]
        self.reopened += [(request.partition_id, letter.offset) for letter in request.letters]
        done = (len(request.letters), 0) if request.letters else (min(2, request.max_messages), 0)
        if request.request_id is not None:
            self.seen[request.request_id] = done
        return done


def _offset(message: dict[str, object]) -> int:
    offset = message["offset"]
    assert isinstance(offset, int)
    return offset


def copy_of(offset: int, origin: tuple[int, int], group: str = "workers") -> dict[str, object]:
    """A dead-letter message at ``offset`` naming ``origin`` (partition, offset)."""
    headers = {
        dead_letters.ORIGIN_TOPIC: "orders",
        dead_letters.ORIGIN_PARTITION: str(origin[0]),
        dead_letters.ORIGIN_OFFSET: str(origin[1]),
        dead_letters.GROUP: group,
        dead_letters.DELIVERY_COUNT: "3",
        "h": "x",
    }
    return {"offset": offset, "key": None, "message": "v", "headers": headers}


def registry() -> RegistryTwin:
    raft = registry_twin()
    raft.propose(RegisterBroker(BrokerId(1), "http://b1", "h", 9000, 9099, 10))
    for port, (topic, count) in enumerate((("orders", 2), ("orders-dead", 1)), start=9001):
        placements = tuple(((BrokerId(1), f"h:{port}{p}"),) for p in range(count))
        raft.propose(BeginTopic(topic, placements, 10, 8, 1, LIMITS.partition_limits()))
        raft.propose(FinishPartitions(topic, tuple(range(count))))
    for group, dead_letter_topic in (("workers", "orders-dead"), ("parked", None)):
        raft.propose(
            DefineGroup(
                "orders", group, 30_000, 3, dead_letter_topic, "none", 100, 43_200_000, 1_000, 10
            )
        )
    return raft


def redrive(
    raft: RegistryTwin, router: StubRouter, group: str = "workers", most: int = 100
) -> dict[str, object]:
    request = RedriveRequest("orders", group, most, RequestId("r1"))
    return Redriver(LIMITS, raft, router).redrive(request, None)


HISTORY = [
    copy_of(0, (0, 10)),
    copy_of(1, (1, 4)),
    copy_of(2, (0, 11), group="others"),
    copy_of(3, (0, 12)),
    copy_of(4, (1, 5)),
]


def test_the_groups_letters_go_to_their_origin_partitions_once() -> None:
    raft, router = registry(), StubRouter({0: list(HISTORY)})
    assert redrive(raft, router) == {"redriven": 4, "gone": 0, "more": False}
    assert sorted(router.reopened) == [(0, 10), (0, 12), (1, 4), (1, 5)]
    assert raft.read(lambda s: s.groups.redrive_progress("orders", "workers", 0)) == (
        RedriveProgress(5)
    )
    assert redrive(raft, router) == {"redriven": 0, "gone": 0, "more": False}
    router.dead[0].append(copy_of(5, (1, 6)))  # a new death since
    assert redrive(raft, router)["redriven"] == 1 and router.reopened[-1] == (1, 6)


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4])
def test_a_redrive_cut_short_repeats_its_range_and_redrives_each_letter_once(
    fail_at: int,
) -> None:
    raft, router = registry(), StubRouter({0: list(HISTORY)})
    router.fail_at = fail_at
    with pytest.raises(RaftQError):
        redrive(raft, router)
    router.fail_at = None
    router.dead[0].append(copy_of(5, (0, 13)))  # arrives before the retry: a longer read
    redrive(raft, router)
    assert sorted(router.reopened) == [(0, 10), (0, 12), (0, 13), (1, 4), (1, 5)]


def test_max_messages_bounds_a_call_and_more_says_so() -> None:
    raft, router = registry(), StubRouter({0: list(HISTORY)})
    assert redrive(raft, router, most=2) == {"redriven": 2, "gone": 0, "more": True}
    assert sorted(router.reopened) == [(0, 10), (1, 4)]
    assert redrive(raft, router, most=100)["redriven"] == 2
    assert sorted(router.reopened) == [(0, 10), (0, 12), (1, 4), (1, 5)]


def test_parked_messages_are_asked_of_each_partition_with_what_is_left() -> None:
    raft, router = registry(), StubRouter({})
    assert redrive(raft, router, group="parked", most=3) == {
        "redriven": 3,
        "gone": 0,
        "more": False,
    }
    asked = [(r.partition_id, r.max_messages) for r in router.asked]
    assert asked == [(0, 3), (1, 1)]
    request_ids = {r.request_id for r in router.asked}
    assert len(request_ids) == 2 and None not in request_ids  # a retry does nothing twice
    assert redrive(raft, router, group="parked", most=3)["redriven"] == 3  # the same answers
    assert {r.request_id for r in router.asked} == request_ids
    assert all(r.letters == () for r in router.asked)


def test_a_group_never_created_is_not_found() -> None:
    with pytest.raises(RaftQError) as missing:
        redrive(registry(), StubRouter({}), group="nobody")
    assert missing.value.code is ErrorCode.NOT_FOUND
