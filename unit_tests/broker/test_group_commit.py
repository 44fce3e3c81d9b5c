"""GroupCommit: concurrent commands share entries, every caller gets its own result, a failed
entry fails each of its commands, and nothing waits without a bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker.partition.commands import Append, Command, Consume
from broker.partition.group_commit import GroupCommit, GroupLimits
from broker.partition.log import Appended, Result
from broker.partition.raft import partition_twin
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import PartitionLimits
from protocol.types import Offset
from runtime.replication.machine import Entry

PARTITION_LIMITS = PartitionLimits(
    unflushed_messages_max=100_000,
    unflushed_bytes_max=10_000_000,
    replica_lag_messages_max=50_000,
    producers_max=100,
    sequences_remembered=4,
    consumers_max=100,
)
LIMITS = GroupLimits(
    commands_max=50, messages_max=500, queued_max=1_000, queue_wait_s_max=5, answer_wait_s_max=5
)
WAIT_S = 10.0


def append(value: str, producer: str | None = None, sequence: int | None = None) -> Append:
    return Append(((None, value),), 1, producer, sequence)


class GatedConsensus:
    """A twin whose first proposal blocks until the test opens the gate, so that callers
    pile up behind it; records every proposed group."""

    def __init__(self) -> None:
        self.inner = partition_twin("t/0", 3, PARTITION_LIMITS)
        self.groups: list[int] = []
        self.gate = threading.Event()
        self.first_entered = threading.Event()

    def propose(self, commands: Sequence[Command]) -> tuple[list[Result], Entry]:
        self.groups.append(len(commands))
        self.first_entered.set()
        if not self.gate.wait(WAIT_S):
            raise RaftQError(ErrorCode.COMMIT_TIMEOUT, "gate never opened")
        return self.inner.propose(commands)


def test_a_lone_command_is_proposed_at_once_alone() -> None:
    consensus = GatedConsensus()
    consensus.gate.set()
    result, entry = GroupCommit(consensus.propose, LIMITS).submit(append("a"))
    assert result == Appended(Offset(0), Offset(1), duplicate=False)
    assert entry == Entry(term=1, index=1, replicas_synced=1)
    assert consensus.groups == [1]


def test_commands_that_arrive_during_a_commit_share_the_next_entry() -> None:
    consensus = GatedConsensus()
    group = GroupCommit(consensus.propose, LIMITS)
    with ThreadPoolExecutor(max_workers=21) as pool:
        first = pool.submit(group.submit, append("first"))
        assert consensus.first_entered.wait(WAIT_S)
        rest = [pool.submit(group.submit, append(f"m{i}")) for i in range(20)]
        _wait_until(lambda: len(group._queue) == 20)
        consensus.gate.set()
        answers = [first.result(WAIT_S)] + [f.result(WAIT_S) for f in rest]
    assert consensus.groups == [1, 20]
    results = [result for result, _ in answers]
    assert {entry.index for _, entry in answers[1:]} == {2}, "the 20 share one entry"
    offsets = sorted(r.start for r in results if isinstance(r, Appended))
    assert offsets == list(range(21)), "every caller got its own offset"


def test_a_group_respects_its_command_and_message_bounds() -> None:
    consensus = GatedConsensus()
    limits = GroupLimits(
        commands_max=4, messages_max=5, queued_max=100, queue_wait_s_max=5, answer_wait_s_max=5
    )
    group = GroupCommit(consensus.propose, limits)
    with ThreadPoolExecutor(max_workers=11) as pool:
        pool.submit(group.submit, append("first"))
        assert consensus.first_entered.wait(WAIT_S)
        big = Append(tuple((None, str(i)) for i in range(5)), 1, None, None)
        futures = [pool.submit(group.submit, append(str(i))) for i in range(9)]
        _wait_until(lambda: len(group._queue) == 9)
        futures.append(pool.submit(group.submit, big))
        _wait_until(lambda: len(group._queue) == 10)
        consensus.gate.set()
        for future in futures:
            future.result(WAIT_S)
    assert consensus.groups == [1, 4, 4, 1, 1], "4 commands max, then 5 messages max"


def test_a_failed_entry_fails_each_of_its_commands_and_the_next_group_still_runs() -> None:
    calls: list[int] = []
    twin = partition_twin("t/0", 3, PARTITION_LIMITS)

    def propose(commands: Sequence[Command]) -> tuple[list[Result], Entry]:
        calls.append(len(commands))
        if len(calls) == 1:
            raise RaftQError(ErrorCode.NO_LEADER, "no leader")
        return twin.propose(commands)

    group = GroupCommit(propose, LIMITS)
    with pytest.raises(RaftQError) as failed:
        group.submit(append("a"))
    assert failed.value.code is ErrorCode.NO_LEADER
    assert group.submit(append("b"))[0] == Appended(Offset(0), Offset(1), duplicate=False)


def test_a_bug_in_propose_becomes_an_error_and_does_not_wedge_the_partition() -> None:
    def propose(commands: Sequence[Command]) -> tuple[list[Result], Entry]:
        raise ZeroDivisionError("bug")

    group = GroupCommit(propose, LIMITS)
    for _ in range(2):
        with pytest.raises(RaftQError) as failed:
            group.submit(append("a"))
        assert failed.value.code is ErrorCode.INTERNAL


def test_a_command_queued_too_long_is_withdrawn_unproposed() -> None:
    consensus = GatedConsensus()
    limits = GroupLimits(
        commands_max=10, messages_max=100, queued_max=10, queue_wait_s_max=0.2, answer_wait_s_max=5
    )
    group = GroupCommit(consensus.propose, limits)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(group.submit, append("first"))
        assert consensus.first_entered.wait(WAIT_S)
        with pytest.raises(RaftQError) as withdrawn:
            group.submit(append("late"))
        assert withdrawn.value.code is ErrorCode.BACKPRESSURE
        consensus.gate.set()
        first.result(WAIT_S)
    assert consensus.groups == [1], "the withdrawn command was never proposed"
    assert consensus.inner.read(lambda log: log.end_offset) == 1


def test_a_full_queue_answers_backpressure() -> None:
    consensus = GatedConsensus()
    limits = GroupLimits(
        commands_max=10, messages_max=100, queued_max=2, queue_wait_s_max=5, answer_wait_s_max=5
    )
    group = GroupCommit(consensus.propose, limits)
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(group.submit, append("first"))]
        assert consensus.first_entered.wait(WAIT_S)
        futures += [pool.submit(group.submit, append(str(i))) for i in range(2)]
        _wait_until(lambda: len(group._queue) == 2)
        with pytest.raises(RaftQError) as full:
            group.submit(append("one too many"))
        assert full.value.code is ErrorCode.BACKPRESSURE
        consensus.gate.set()
        for future in futures:
            future.result(WAIT_S)


def test_mixed_commands_in_one_group_each_get_their_own_kind_of_result() -> None:
    twin = partition_twin("t/0", 3, PARTITION_LIMITS)
    results, _ = twin.propose([append("a", "p", 1), Consume("c", 5, "r1"), append("a", "p", 1)])
    assert results[0] == Appended(Offset(0), Offset(1), duplicate=False)
    assert results[2] == Appended(Offset(0), Offset(1), duplicate=True), "a retry inside one group"
    assert twin.read(lambda log: log.consumers["c"].offset) == 1


def test_many_threads_get_contiguous_distinct_offsets() -> None:
    twin = partition_twin("t/0", 3, PARTITION_LIMITS)
    group = GroupCommit(twin.propose, LIMITS)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: group.submit(append(str(i)))[0], range(400)))
    starts = sorted(r.start for r in results if isinstance(r, Appended))
    assert starts == list(range(400))
    assert twin.status().commit_index <= 400


def _wait_until(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_a_command_whose_caller_gave_up_while_queued_is_withdrawn_unproposed() -> None:
    consensus = GatedConsensus()
    group = GroupCommit(consensus.propose, LIMITS)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(group.submit, append("first"))
        assert consensus.first_entered.wait(WAIT_S)
        with pytest.raises(RaftQError) as gone:
            group.submit(append("late"), Deadline.after(0.05, time.monotonic()))
        assert gone.value.code is ErrorCode.REFUSED
        assert gone.value.code.proves_nothing_done
        consensus.gate.set()
        first.result(WAIT_S)
    assert consensus.groups == [1], "the withdrawn command was never proposed"


def test_a_command_arriving_after_its_deadline_is_not_queued() -> None:
    consensus = GatedConsensus()
    consensus.gate.set()
    group = GroupCommit(consensus.propose, LIMITS, clock_s=lambda: 100.0)
    with pytest.raises(RaftQError) as gone:
        group.submit(append("late"), Deadline(at_s=99.0))
    assert gone.value.code is ErrorCode.REFUSED
    assert consensus.groups == []
    assert group.submit(append("on time"), Deadline(at_s=101.0))[0] == Appended(
        Offset(0), Offset(1), duplicate=False
    )
