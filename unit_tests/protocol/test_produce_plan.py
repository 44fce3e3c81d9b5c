"""The produce plan both paths drive (``protocol.produce_plan``): the cut, each group's body,
the merged offsets and the partial-failure rule, without I/O."""

from __future__ import annotations

from protocol.errors import ErrorCode, RaftQError
from protocol.produce_plan import BatchFailure, ProducePlan, cut
from protocol.routing import (
    PartitionGroup,
    partition_for_key,
    partition_for_unkeyed,
    unkeyed_salt,
)
from protocol.types import Durability, NewMessage, PartitionId

MESSAGES = (
    NewMessage(value="a", key="k1"),
    NewMessage(value="b"),
    NewMessage(value="c", key="k2"),
    NewMessage(value="d"),
)


def _plan(
    messages: tuple[NewMessage, ...] = MESSAGES,
    *,
    count: int = 8,
    partition_id: int | None = None,
    sequence: int | None = 7,
    durability: Durability | None = None,
    round_robin: int = 0,
) -> ProducePlan:
    return cut(
        "t",
        messages,
        count,
        partition_id=None if partition_id is None else PartitionId(partition_id),
        producer_id="p",
        sequence=sequence,
        durability=durability,
        round_robin=round_robin,
    )


def _where(plan: ProducePlan) -> dict[int, int]:
    return {i: g.partition_id for g in plan.groups for i in g.indexes}


# --- the cut -----------------------------------------------------------------------------


def test_keyed_messages_follow_their_key_and_unkeyed_ones_the_producer_and_sequence() -> None:
    plan = _plan()
    where = _where(plan)
    assert sorted(where) == [0, 1, 2, 3]  # every message in exactly one group
    assert where[0] == partition_for_key("k1", 8)
    assert where[2] == partition_for_key("k2", 8)
    assert where[1] == where[3] == partition_for_unkeyed(unkeyed_salt("p", 7), 8)
    # A retry with the same sequence lands where the first attempt did, whatever the counter.
    assert _plan(round_robin=5).groups == plan.groups


def test_a_batch_without_a_sequence_places_its_unkeyed_messages_by_the_counter() -> None:
    unkeyed = (NewMessage(value="a"), NewMessage(value="b"))
    plan = _plan(unkeyed, count=3, sequence=None, round_robin=4)
    assert [(g.partition_id, g.indexes) for g in plan.groups] == [(1, (0, 1))]


def test_a_batch_for_one_partition_is_one_group_in_request_order() -> None:
    plan = _plan(partition_id=2)
    assert [(g.partition_id, g.indexes) for g in plan.groups] == [(2, (0, 1, 2, 3))]


# --- the bodies --------------------------------------------------------------------------


def test_a_group_body_carries_its_messages_with_the_batch_producer_and_sequence() -> None:
    plan = _plan(partition_id=None)
    group = next(g for g in plan.groups if 0 in g.indexes)
    assert plan.body(group) == {
        "topic": "t",
        "partition_id": group.partition_id,
        "producer_id": "p",
        "sequence": 7,
        "messages": [MESSAGES[i].to_json() for i in group.indexes],
    }


def test_durability_is_stated_only_when_the_driver_states_it() -> None:
    (group,) = _plan(partition_id=0).groups
    assert "durability" not in _plan(partition_id=0).body(group)
    stated = _plan(partition_id=0, durability=Durability.FSYNC).body(group)
    assert stated["durability"] == "fsync"


# --- the merge ---------------------------------------------------------------------------

Result = list[str] | RaftQError


def _two_groups() -> ProducePlan:
    """Messages 0 and 2 in partition 0, message 1 in partition 1."""
    keys = {int(partition_for_key(f"k{i}", 2)): f"k{i}" for i in range(20)}
    messages = tuple(NewMessage(value=v, key=keys[p]) for v, p in (("a", 0), ("b", 1), ("c", 0)))
    plan = _plan(messages, count=2)
    assert [(g.partition_id, g.indexes) for g in plan.groups] == [(0, (0, 2)), (1, (1,))]
    return plan


def _merged(plan: ProducePlan, results: list[Result]) -> list[str] | BatchFailure[RaftQError]:
    return plan.merge(results, lambda f: f.code, lambda f: f.code.proves_nothing_done)


def test_stored_groups_give_each_message_its_offset_in_request_order() -> None:
    plan = _two_groups()
    assert _merged(plan, [["0:7", "0:8"], ["1:4"]]) == ["0:7", "1:4", "0:8"]


def test_the_stored_groups_of_a_failed_batch_keep_their_offsets() -> None:
    plan = _two_groups()
    results: list[Result] = [["0:7", "0:8"], _failed(ErrorCode.UNAVAILABLE)]
    assert plan.acked(results) == ("0:7", None, "0:8")
    assert isinstance(_merged(plan, results), BatchFailure)


# --- the partial-failure rule ------------------------------------------------------------

STORED = ["0:7"]


def _failed(code: ErrorCode) -> RaftQError:
    return RaftQError(code, code.name)


def _judged(results: list[Result]) -> BatchFailure[RaftQError]:
    """``results`` judged as those of a batch with one message per group."""
    groups = tuple(PartitionGroup(PartitionId(i), (i,)) for i in range(len(results)))
    messages = tuple(NewMessage(value=str(i)) for i in range(len(results)))
    merged = _merged(ProducePlan("t", messages, "p", 7, None, groups), results)
    assert isinstance(merged, BatchFailure)
    return merged


def test_the_only_group_failing_is_the_batch_failure_whatever_it_proves() -> None:
    for code in (ErrorCode.BACKPRESSURE, ErrorCode.COMMIT_TIMEOUT):
        failure = _failed(code)
        judged = _judged([failure])
        assert judged.failure is failure and judged.speaks_for_batch


def test_nothing_stored_and_every_failure_proving_it_fails_with_the_first() -> None:
    first, second = _failed(ErrorCode.NO_LEADER), _failed(ErrorCode.BACKPRESSURE)
    judged = _judged([first, second])
    assert judged.failure is first and judged.speaks_for_batch


def test_a_failure_beside_a_stored_or_unknown_group_leaves_the_batch_partly_written() -> None:
    # A 429 beside a stored part: the batch is not "refused, nothing done".
    judged = _judged([STORED, _failed(ErrorCode.BACKPRESSURE)])
    assert not judged.speaks_for_batch
    assert (judged.stored_groups, judged.group_count) == (1, 2)
    assert judged.partly_written.startswith("1 of 2 partitions stored their part of the batch")
    # Nothing stored, but one failure leaves its group's outcome open.
    unknown = _judged([_failed(ErrorCode.NO_LEADER), _failed(ErrorCode.COMMIT_TIMEOUT)])
    assert not unknown.speaks_for_batch and unknown.stored_groups == 0


def test_a_replayed_batch_with_every_part_stored_before_is_out_of_order() -> None:
    out_of_order = _failed(ErrorCode.SEQUENCE_OUT_OF_ORDER)
    judged = _judged([STORED, out_of_order, _failed(ErrorCode.SEQUENCE_OUT_OF_ORDER)])
    assert judged.failure is out_of_order and judged.speaks_for_batch
    assert not _judged([STORED, out_of_order, _failed(ErrorCode.UNAVAILABLE)]).speaks_for_batch


def test_an_unknown_producer_comes_first_and_speaks_for_the_batch_only_alone() -> None:
    forgotten = _failed(ErrorCode.UNKNOWN_PRODUCER)
    beside_stored = _judged([STORED, _failed(ErrorCode.NO_LEADER), forgotten])
    assert beside_stored.failure is forgotten and not beside_stored.speaks_for_batch
    beside_refusal = _judged([_failed(ErrorCode.NO_LEADER), forgotten])
    assert beside_refusal.failure is forgotten and beside_refusal.speaks_for_batch
