"""How a consume spreads over a topic's partitions: the one plan that the manager's router
and the client's direct path both drive, each with its own I/O (``ask``). Pure.

- **Visit** (``visit``): the partitions in order (``routing.pop_order``), each asked for
  what is still wanted, until enough are in hand; a failure with nothing in hand is the
  request's; after some partitions answered, the caller's rule says whether the failure
  ends the request with what is in hand or fails it as an unknown outcome.
- **Pop** drives ``visit`` with the pop's rule: only a refusal that proves this partition
  claimed nothing, with no earlier attempt of the pop whose outcome was unknown, ends the
  pop with the ranges claimed before; any other failure fails it, since the failing
  partition may have claimed a range whose answer was lost (the client repeats the pop with
  the same sequence, and every partition gives the same range back). The manager's router
  takes only a 4xx as such a refusal (a caller may not say that an earlier attempt was
  unknown; a 503's "nothing done" speaks of this attempt alone), the client's direct path
  any answer that proves nothing done (it knows its attempts).
- **Receive** (consumer groups, issue 20) visits the partitions in the order a pop does
  (``routing.pop_order``: from a hash of the request id, so a repeat asks the same
  partitions in the same order and each hands back the leases it gave the first time).
  A failure after some partitions leased ends the receive with those messages: a lease
  that never reached the member ends with its visibility timeout and the message is
  delivered again, so nothing is lost (a pop, which claims for good, must fail instead).
  A failure before any message was leased is the receive's failure: the caller repeats it
  with the same request id.
- **Settle** (ack, nack, extend) sends each partition its receipts in one request and
  answers the outcomes in the order of the receipts. One partition's failure fails the
  whole request: every action is idempotent by receipt, so repeating all of it is safe.
- **Long poll** (``PopWait``, issue 24): a pop of one partition hands its wait to that
  partition's broker, which waits on the partition, proposing nothing meanwhile; a pop of
  several asks each ``if_ready`` (a partition with nothing answers at once, without a Raft
  entry) and visits them again after a pause until the wait ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import DeliveryReceipt
from protocol.routing import pop_order
from protocol.types import PartitionId

T = TypeVar("T")


class PopWait:
    """How a pop waits for messages (``Pop.wait_ms``), with the time as an argument."""

    def __init__(self, wait_ms: int, now_s: float, *, single: bool, if_ready: bool) -> None:
        """``single``: the pop visits one partition; ``if_ready``: it was asked so itself."""
        self._until_s = now_s + wait_ms / 1000
        self._waits = wait_ms > 0
        self._single = single
        self._if_ready = if_ready

    def left_s(self, now_s: float) -> float:
        """What is left of a wait over several partitions (a broker waits for one)."""
        if not self._waits or self._single:
            return 0.0
        return self._until_s - now_s

    def params(self, now_s: float) -> dict[str, str]:
        """The query fields each partition is asked with."""
        spread = self._waits and not self._single
        params = {"if_ready": "true"} if self._if_ready or spread else {}
        if self._waits and self._single:
            params["wait_ms"] = str(max(0, int((self._until_s - now_s) * 1000)))
        return params


def receive_order(
    partition_count: int, group: str, request_id: str | None, round_robin: int
) -> list[PartitionId]:
    """The partitions a receive of ``group`` asks, in order."""
    partition_ids = [PartitionId(p) for p in range(partition_count)]
    return pop_order(partition_ids, f"group:{group}", request_id, round_robin)


def visit(
    order: Sequence[PartitionId],
    max_messages: int,
    ask: Callable[[PartitionId, int], list[T]],
    judged: tuple[type[Exception], ...],
    ends_it: Callable[[Exception], bool],
    after_claims: Callable[[PartitionId, Exception], Exception],
) -> list[T]:
    """Up to ``max_messages`` messages: ``ask(partition_id, wanted)`` of each partition in
    ``order`` until enough are in hand (it returns at most ``wanted``). A failure of a kind
    in ``judged`` with nothing in hand propagates; after others answered, it ends the
    visit with what is in hand when ``ends_it`` says so, else ``after_claims`` gives the
    error to raise (an unknown outcome). Other exceptions propagate untouched."""
    messages: list[T] = []
    for partition_id in order:
        wanted = max_messages - len(messages)
        if wanted <= 0:
            break
        try:
            found = ask(partition_id, wanted)
        except judged as failure:
            if not messages:
                raise
            if ends_it(failure):
                return messages
            error = after_claims(partition_id, failure)
            if error is failure:
                raise
            raise error from failure
        messages.extend(found[:wanted])
    return messages


def receive(
    order: Sequence[PartitionId],
    max_messages: int,
    ask: Callable[[PartitionId, int], list[T]],
) -> list[T]:
    """``visit`` with the receive's rule: any failure after some partitions leased ends it
    with those (the leases not answered end with their visibility timeout)."""
    return visit(order, max_messages, ask, (Exception,), lambda _failure: True, _unused)


def _unused(_partition_id: PartitionId, failure: Exception) -> Exception:
    return failure  # never called: every failure ends a receive


def settle(
    receipts: Sequence[DeliveryReceipt],
    ask: Callable[[PartitionId, tuple[DeliveryReceipt, ...]], Sequence[str]],
) -> list[tuple[DeliveryReceipt, str]]:
    """Each receipt with its outcome: ``ask(partition_id, its_receipts)`` of each partition
    the receipts name (in the order they first appear) returns one outcome per receipt."""
    by_partition: dict[PartitionId, list[DeliveryReceipt]] = {}
    for receipt in receipts:
        by_partition.setdefault(receipt.partition_id, []).append(receipt)
    outcomes: dict[DeliveryReceipt, str] = {}
    for partition_id, of_partition in by_partition.items():
        answered = ask(partition_id, tuple(of_partition))
        if len(answered) != len(of_partition):
            raise RaftQError(
                ErrorCode.INTERNAL,
                f"partition {partition_id} answered {len(answered)} outcomes "
                f"for {len(of_partition)} receipts",
            )
        outcomes.update(zip(of_partition, answered, strict=True))
    return [(receipt, outcomes[receipt]) for receipt in receipts]
