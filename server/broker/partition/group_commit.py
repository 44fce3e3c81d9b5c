"""``GroupCommit``: concurrent commands to one partition share one Raft entry.

Every Raft entry costs a journal sync on each replica, a round trip to the followers and a
pass of pysyncobj's tick thread, whatever it holds. So callers do not propose one entry
each: they queue their command, and one of them (the *proposer*) proposes everything queued
as one group, waits for it to be applied, and hands each caller its own result. Commands
that arrive while a group is in flight form the next group, so the group size follows the
load by itself (no timer, no added latency when idle: a lone caller proposes at once).

The proposer role moves to the first waiting caller when a group is done (leader hand-off),
so no request thread keeps working for others after its own answer is ready.

Bounds: at most ``commands_max`` commands and ``messages_max`` messages per group; at most
``queued_max`` commands waiting (more get 429). A queued command that waits longer than
``queue_wait_s_max`` without being proposed is withdrawn and answered 429 (backpressure):
nothing was proposed, so the caller may safely retry it, here or elsewhere. A command whose
caller's ``Deadline`` passes while it is queued is withdrawn the same way (503 REFUSED: the
caller has gone, nothing was proposed), and one that arrives after it is not queued at all.

Threads: any number of callers (HTTP threads, the flusher); ``propose`` runs on whichever
caller is the proposer at the time.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from broker.partition.commands import Append, Command
from broker.partition.log import Result
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.invariant import check
from runtime.replication.machine import Entry

Propose = Callable[[Sequence[Command]], tuple[list[Result], Entry]]
"""Propose commands as one Raft entry; their results in order once applied locally, and the
entry. Raises ``RaftQError`` when the entry as a whole failed (for every command in it)."""


@dataclass(frozen=True, slots=True)
class GroupLimits:
    commands_max: int
    messages_max: int
    queued_max: int
    queue_wait_s_max: float
    answer_wait_s_max: float
    """Longest wait for a group already proposed (the proposer's own commit wait is bounded
    by the Raft timeouts; this only guards against a proposer that never returns)."""


@dataclass(eq=False, slots=True)
class _Slot:
    command: Command
    wake: threading.Event = field(default_factory=threading.Event)
    """Set when the slot is answered or its caller is to propose the next group."""
    answered: bool = False
    lead: bool = False
    result: Result | None = None
    entry: Entry | None = None
    error: RaftQError | None = None


class GroupCommit:
    def __init__(
        self,
        propose: Propose,
        limits: GroupLimits,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._propose = propose
        self._limits = limits
        self._clock_s = clock_s
        self._lock = threading.Lock()
        self._queue: deque[_Slot] = deque()
        self._proposing = False

    def submit(self, command: Command, deadline: Deadline | None = None) -> tuple[Result, Entry]:
        """Apply ``command`` in the next group; its result and the group's entry, or the
        group's ``RaftQError``."""
        slot = _Slot(command)
        wait_s = self._limits.queue_wait_s_max
        if deadline is not None:
            if deadline.expired(self._clock_s()):
                raise _caller_gone()
            wait_s = deadline.bound(wait_s, self._clock_s())
        with self._lock:
            if len(self._queue) >= self._limits.queued_max:
                raise RaftQError(
                    ErrorCode.BACKPRESSURE, "too many commands wait for this partition"
                )
            self._queue.append(slot)
            slot.lead = not self._proposing
            self._proposing = True
        if not slot.lead:
            self._await_turn(slot, wait_s, past_deadline=wait_s < self._limits.queue_wait_s_max)
        if slot.lead and not slot.answered:
            self._propose_groups_until(slot)
        if slot.error is not None:
            raise slot.error
        check(
            slot.result is not None and slot.entry is not None,
            "an answered slot has a result or an error",
        )
        return slot.result, slot.entry  # type: ignore[return-value]

    def _await_turn(self, slot: _Slot, wait_s: float, *, past_deadline: bool) -> None:
        """Wait until the slot is answered or its caller is to propose; withdraw it
        (nothing proposed) when it waited too long in the queue (``wait_s``: the queue's
        bound, or what was left of the caller's deadline when that is sooner)."""
        if slot.wake.wait(wait_s):
            return
        with self._lock:
            if slot.lead or slot.answered:
                return
            if slot in self._queue:
                self._queue.remove(slot)
                slot.answered = True
                # 429: the partition is too busy, and nothing was done (UNAVAILABLE would
                # not say that: a manager answers it when a broker's outcome is unknown).
                slot.error = (
                    _caller_gone()
                    if past_deadline
                    else RaftQError(
                        ErrorCode.BACKPRESSURE,
                        "queued behind a slow commit and withdrawn: nothing was proposed",
                    )
                )
                return
        # Already taken into a group that is being proposed: wait for its outcome.
        if not slot.wake.wait(self._limits.answer_wait_s_max):
            slot.error = RaftQError(
                ErrorCode.COMMIT_TIMEOUT,
                "no answer for a proposed group; the outcome is unknown, retry with the same "
                "sequence or request_id",
            )

    def _propose_groups_until(self, own: _Slot) -> None:
        """Propose groups until ``own`` is answered, then hand the proposer role on."""
        while True:
            with self._lock:
                group = self._take_group()
            self._run(group)
            with self._lock:
                if own.answered:
                    self._hand_off()
                    return

    def _take_group(self) -> list[_Slot]:
        group: list[_Slot] = []
        messages = 0
        while self._queue and len(group) < self._limits.commands_max:
            size = _messages(self._queue[0].command)
            if group and messages + size > self._limits.messages_max:
                break
            group.append(self._queue.popleft())
            messages += size
        return group

    def _run(self, group: list[_Slot]) -> None:
        try:
            results, entry = self._propose([slot.command for slot in group])
        except RaftQError as exc:
            for slot in group:
                slot.error = exc
        except Exception as exc:  # a bug must not leave the callers, or the queue, hanging
            for slot in group:
                slot.error = RaftQError(ErrorCode.INTERNAL, f"proposing a group failed: {exc}")
        else:
            for slot, result in zip(group, results, strict=True):
                slot.result = result
                slot.entry = entry
        for slot in group:
            slot.answered = True
            slot.wake.set()

    def _hand_off(self) -> None:
        """Under the lock: the first queued caller proposes next, or nobody is proposing."""
        if not self._queue:
            self._proposing = False
            return
        successor = self._queue[0]
        successor.lead = True
        successor.wake.set()


def _caller_gone() -> RaftQError:
    return RaftQError(
        ErrorCode.REFUSED, "the caller's deadline passed before proposing: nothing was proposed"
    )


def _messages(command: Command) -> int:
    return len(command.messages) if isinstance(command, Append) else 1
