"""How a produced batch spreads over a topic's partitions: the one plan that the manager's
router and the client's direct path both drive, each with its own I/O. Pure.

- **Cut** (``cut``): the batch's partition groups (``routing.group_messages``). Keyed
  messages follow their key; the unkeyed ones go together to one partition, fixed by
  ``(producer_id, sequence)`` when the batch has both, so a retry on either path lands
  where the first attempt did (else by the router's round-robin counter).
- **Bodies** (``ProducePlan.body``): one group's ``POST /logs``, the same for a broker and
  for the load balancer (the client's fallback): the group's messages with the batch's
  producer id and sequence, so the partition recognises a repeat and answers the offsets
  it stored the first time.
- **Merge** (``ProducePlan.merge``): each message's offset in request order once every
  group stored its part; a group that stored is acknowledged even when another failed
  (``ProducePlan.acked``: the client reports those offsets with the failure).
- **The partial-failure rule** (``BatchFailure``): which answer the batch as a whole fails
  with. A group's failure speaks for the batch only when no group stored anything and no
  failure leaves its outcome open (``protocol.errors``' rule, read by the driver from its
  own failures), or when every failure is SEQUENCE_OUT_OF_ORDER: a partition answers that
  once it has seen a later sequence of the producer, which is sent only after this batch
  was acknowledged whole, so an earlier attempt stored every part (a replayed Spark task,
  which skips such a batch). Otherwise the batch is partly written: an unknown outcome,
  retried with the same sequence (the stored parts are recognised as duplicates; only a
  partition that forgot the producer, past its de-duplication bounds, appends again).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from protocol.errors import ErrorCode
from protocol.invariant import check
from protocol.routing import PartitionGroup, group_messages, unkeyed_salt
from protocol.types import Durability, NewMessage, PartitionId

OffsetT = TypeVar("OffsetT")
"""A stored message's offset, in the driver's form (JSON for the router, a record for the
client)."""
FailureT = TypeVar("FailureT", bound=Exception)
"""A group's failure, in the driver's form."""


@dataclass(frozen=True, slots=True)
class BatchFailure(Generic[FailureT]):
    """How a batch some of whose groups failed fails as a whole."""

    failure: FailureT
    """The group failure the batch answers with: an UNKNOWN_PRODUCER if there is one (the
    managers forgot the producer; it must register again, then resend the whole batch under
    the same sequence, before anything else helps), else the first."""
    speaks_for_batch: bool
    """``failure`` is true of the whole batch. When not, other groups stored their part or
    may have: the batch is partly written (``PARTIALLY_WRITTEN``), an unknown outcome."""
    stored_groups: int
    group_count: int

    @property
    def partly_written(self) -> str:
        """The message of a partly written batch."""
        return (
            f"{self.stored_groups} of {self.group_count} partitions stored their part of the "
            f"batch; retry it with the same sequence. First failure: {self.failure}"
        )


@dataclass(frozen=True, slots=True)
class ProducePlan:
    """A batch cut into partition groups, with what every group's body repeats."""

    topic: str
    messages: tuple[NewMessage, ...]
    producer_id: str | None
    sequence: int | None
    durability: Durability | None
    """Stated in every body; ``None`` leaves the service's default (``fsync``) unstated."""
    groups: tuple[PartitionGroup, ...]
    """Ordered by their first message; every message is in exactly one."""

    def body(self, group: PartitionGroup) -> dict[str, object]:
        """``POST /logs`` of one group, for a broker or the load balancer."""
        body: dict[str, object] = {
            "topic": self.topic,
            "partition_id": group.partition_id,
            "producer_id": self.producer_id,
            "sequence": self.sequence,
            "messages": [self.messages[i].to_json() for i in group.indexes],
        }
        if self.durability is not None:
            body["durability"] = self.durability.value
        return body

    def acked(self, results: Sequence[Sequence[OffsetT] | Exception]) -> tuple[OffsetT | None, ...]:
        """Each message's offset in request order where its group stored, else ``None``:
        ``results`` holds each group's offsets (in its order) or failure."""
        check(len(results) == len(self.groups), "one result per group")
        offsets: list[OffsetT | None] = [None] * len(self.messages)
        for group, found in zip(self.groups, results, strict=True):
            if not isinstance(found, Exception):
                for index, offset in zip(group.indexes, found, strict=True):
                    offsets[index] = offset
        return tuple(offsets)

    def merge(
        self,
        results: Sequence[Sequence[OffsetT] | FailureT],
        code: Callable[[FailureT], ErrorCode | None],
        nothing_done: Callable[[FailureT], bool],
    ) -> list[OffsetT] | BatchFailure[FailureT]:
        """Each message's offset in request order, or how the batch failed. ``code`` and
        ``nothing_done`` read a failure: its error code (if any), and whether it proves
        that its group stored nothing, on this attempt or any earlier one."""
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            return _judged(failures, len(results) - len(failures), code, nothing_done)
        offsets = [o for o in self.acked(results) if o is not None]
        check(len(offsets) == len(self.messages), "every message of a stored batch has its offset")
        return offsets


def cut(
    topic: str,
    messages: Sequence[NewMessage],
    partition_count: int,
    *,
    partition_id: PartitionId | None,
    producer_id: str | None,
    sequence: int | None,
    durability: Durability | None,
    round_robin: int,
) -> ProducePlan:
    """The plan of a batch over partitions ``0 .. partition_count-1`` (all to
    ``partition_id`` when given). ``round_robin`` places unkeyed messages of a batch
    without a sequence (the router's counter; a batch with one never reads it)."""
    salt = None if producer_id is None or sequence is None else unkeyed_salt(producer_id, sequence)
    groups = group_messages(
        messages,
        partition_count,
        partition_id=partition_id,
        unkeyed_salt=salt,
        round_robin=round_robin,
    )
    return ProducePlan(topic, tuple(messages), producer_id, sequence, durability, tuple(groups))


def _judged(
    failures: list[FailureT],
    stored_groups: int,
    code: Callable[[FailureT], ErrorCode | None],
    nothing_done: Callable[[FailureT], bool],
) -> BatchFailure[FailureT]:
    """The partial-failure rule (module docstring). A single failure with nothing stored is
    the batch's as it is, whatever it proves: it speaks of the only group that was sent."""
    forgotten = [f for f in failures if code(f) is ErrorCode.UNKNOWN_PRODUCER]
    failure = forgotten[0] if forgotten else failures[0]
    alone = stored_groups == 0 and (len(failures) == 1 or all(nothing_done(f) for f in failures))
    replayed = all(code(f) is ErrorCode.SEQUENCE_OUT_OF_ORDER for f in failures)
    return BatchFailure(failure, alone or replayed, stored_groups, stored_groups + len(failures))
