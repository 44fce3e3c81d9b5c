"""A produced batch cut into per-partition groups by the client (the direct path), and the
groups' answers put back together. Pure.

The cut is ``protocol.routing.group_messages`` with the batch's ``(producer_id, sequence)``,
the manager's own rule, so a group repeated through the load balancer (with its
``partition_id`` and the same sequence) reaches the partition that may already hold it, and
the partition answers with the original offsets. The answers combine as the manager combines
them: a batch is refused outright only if no group stored anything and no failure leaves its
outcome open, or if every failure is SEQUENCE_OUT_OF_ORDER (every part was stored before);
otherwise it is "partially written", an unknown outcome the producer retries. A group that
was stored is acknowledged even when the batch as a whole failed (``acked_offsets``): the
producer reports its offsets with the failure, so that losing them later can be seen.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.errors import ErrorCode
from protocol.invariant import check
from protocol.routing import PartitionGroup, group_messages, unkeyed_salt
from protocol.types import NewMessage, PartitionId
from raftq.errors import ApiError, RaftQClientError, UnavailableError
from raftq.records import PartitionOffset

GroupResult = list[PartitionOffset] | RaftQClientError


def cut_batch(
    messages: Sequence[NewMessage],
    partition_count: int,
    partition_id: int | None,
    producer_id: str,
    sequence: int,
) -> list[PartitionGroup]:
    return group_messages(
        messages,
        partition_count,
        partition_id=None if partition_id is None else PartitionId(partition_id),
        unkeyed_salt=unkeyed_salt(producer_id, sequence),
        round_robin=0,  # unused: a batch always carries a sequence
    )


def group_body(
    topic: str,
    producer_id: str,
    sequence: int,
    messages: Sequence[NewMessage],
    group: PartitionGroup,
) -> dict[str, object]:
    """``POST /logs`` of one group: the same body for a broker and the load balancer."""
    return {
        "topic": topic,
        "partition_id": group.partition_id,
        "producer_id": producer_id,
        "sequence": sequence,
        "messages": [messages[i].to_json() for i in group.indexes],
    }


def merge_offsets(
    groups: Sequence[PartitionGroup], results: Sequence[GroupResult], message_count: int
) -> list[PartitionOffset]:
    """Each message's offset in request order, or raises what the batch as a whole failed
    with (``acked_offsets`` keeps what its stored groups were acknowledged with)."""
    failures = [r for r in results if isinstance(r, RaftQClientError)]
    if failures:
        raise _batch_failure(failures, stored_groups=len(results) - len(failures))
    offsets = [o for o in acked_offsets(groups, results, message_count) if o is not None]
    check(len(offsets) == message_count, "every message of a stored batch has its offset")
    return offsets


def acked_offsets(
    groups: Sequence[PartitionGroup], results: Sequence[GroupResult], message_count: int
) -> tuple[PartitionOffset | None, ...]:
    """Each message's offset in request order where its group was stored, else ``None``:
    a partition that answered has acknowledged its part, whatever the other groups did."""
    offsets: list[PartitionOffset | None] = [None] * message_count
    for group, found in zip(groups, results, strict=True):
        if isinstance(found, list):
            for index, offset in zip(group.indexes, found, strict=True):
                offsets[index] = offset
    return tuple(offsets)


def with_earlier_acks(
    earlier: Sequence[PartitionOffset | None], now: Sequence[PartitionOffset | None]
) -> tuple[PartitionOffset | None, ...]:
    """The acknowledgements of two attempts of one batch: a message acknowledged by either.
    An ack is never taken back (a resend of a stored group is recognised by its sequence
    and answered with the same offsets), so the earlier one is kept."""
    if not earlier:
        return tuple(now)
    check(len(earlier) == len(now), "two attempts of one batch have the same messages")
    return tuple(e if e is not None else n for e, n in zip(earlier, now, strict=True))


def _batch_failure(failures: list[RaftQClientError], stored_groups: int) -> RaftQClientError:
    """As the manager's router decides (``manager.log_router._produce_failure``), plus: a
    404 UNKNOWN_PRODUCER (a group repeated through the load balancer after the managers
    forgot the producer) comes first, so the producer registers again and resends the whole
    batch; it is marked ``after_unknown_outcome`` when another group may have stored."""
    unknown_producer = _unknown_producer(failures)
    if unknown_producer is not None:
        others = [f for f in failures if f is not unknown_producer]
        if stored_groups > 0 or not all(_nothing_done(f) for f in others):
            unknown_producer.after_unknown_outcome = True
        return unknown_producer
    if stored_groups == 0 and (len(failures) == 1 or all(_nothing_done(f) for f in failures)):
        return failures[0]
    if all(_code(f) is ErrorCode.SEQUENCE_OUT_OF_ORDER for f in failures):
        # Every part was stored by an earlier attempt: the partitions that answered 409 have
        # seen a later sequence, sent only after this batch was acknowledged whole, and the
        # others recognised their part (a replayed Spark task, which skips such a batch).
        return failures[0]
    return UnavailableError(
        f"{stored_groups} of {stored_groups + len(failures)} partitions stored their part of "
        f"the batch; resend it with the same sequence. First failure: {failures[0]}",
        outcome_unknown=True,
        attempts=1,
    )


def _unknown_producer(failures: list[RaftQClientError]) -> ApiError | None:
    for failure in failures:
        if isinstance(failure, ApiError) and failure.code is ErrorCode.UNKNOWN_PRODUCER:
            return failure
    return None


def _code(failure: RaftQClientError) -> ErrorCode | None:
    return failure.code if isinstance(failure, ApiError) else None


def _nothing_done(failure: RaftQClientError) -> bool:
    if isinstance(failure, ApiError):
        return failure.proves_nothing_done
    if isinstance(failure, UnavailableError):
        return not failure.outcome_unknown
    return False
