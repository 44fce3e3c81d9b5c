"""``Redriver``: ``POST /groups/{group}/redrive`` (issue 20): a consumer group's dead messages
made deliverable to it again, in place (the original message at its offset, for this group
only: the topic's other groups and consumers see nothing new).

* **A group without a dead-letter topic** keeps its dead messages parked in its partitions.
  Each partition's leader makes up to what is left of ``max_messages`` of them deliverable
  again (``Redrive`` without letters), in the order they died; with the request's id, so a
  retry whose answer was lost does nothing twice.
* **A group with a dead-letter topic.** Its letters there (copies naming their origin in
  ``raftq-*`` headers, ``protocol.dead_letters``) are read partition by partition from
  where the group's last redrive stopped (``GroupRegistry.redriven_to``, in the managers'
  Raft state), a recorded three-part step per range read: the managers record the range
  as planned (``PlanRedrive``), each origin partition's leader reopens the messages its
  letters name (``Redrive`` with letters, under a request id derived from the range), and
  the managers record the range as done (``FinishRedrive``). A failure or a failover in
  between repeats exactly the planned range: the origin partitions recognise its request
  ids, so each letter is redriven once. Letters of other groups or topics that share the
  dead-letter topic are passed over. The letters stay in the dead-letter topic, a log like
  any other (SQS deletes them from its queue; a topic's other readers keep them here).

Thread: an HTTP thread of the manager leader.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass

from manager.log_router import LogRouter
from manager.raft import RegistryMachine
from manager.registry.commands import FinishRedrive, PlanRedrive
from manager.registry.topics import TopicRecord
from manager.services import check_outcome
from protocol.dead_letters import (
    DELIVERY_COUNT,
    GROUP,
    ORIGIN_OFFSET,
    ORIGIN_PARTITION,
    ORIGIN_TOPIC,
)
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import GroupRedrive, RedriveLetter, RedriveRequest
from protocol.limits import Limits
from protocol.requests import Fetch
from protocol.types import Offset, PartitionId, RequestId


@dataclass(slots=True)
class _Tally:
    """What a redrive did so far."""

    left: int
    """Letters it may still redrive (``max_messages`` less those done)."""
    redriven: int = 0
    gone: int = 0
    scanned: int = 0
    more: bool = False
    """It stopped before reading every dead-letter partition to its end."""


@dataclass(frozen=True, slots=True)
class _Range:
    """``[start, end)`` of a dead-letter partition: its letters of this group by origin
    partition."""

    letters: dict[int, list[RedriveLetter]]
    start: int
    end: int


class Redriver:
    def __init__(self, limits: Limits, raft: RegistryMachine, router: LogRouter) -> None:
        self._limits = limits
        self._raft = raft
        self._router = router

    def redrive(self, request: RedriveRequest, deadline: Deadline | None) -> dict[str, object]:
        """``{"redriven", "gone", "more"}``: messages made deliverable again, letters whose
        message retention had removed, and whether there may be more to redrive (call
        again)."""
        entry = self._raft.read(lambda s: s.groups.get(request.topic, request.group))
        if entry is None:
            raise RaftQError(
                ErrorCode.NOT_FOUND,
                f"topic {request.topic!r} has no consumer group {request.group!r}",
            )
        topic = self._active(request.topic)
        tally = _Tally(left=request.max_messages)
        if entry.dead_letter_topic is None:
            self._parked(topic, request, tally, deadline)
        else:
            self._from_letters(self._active(entry.dead_letter_topic), request, tally, deadline)
        return {"redriven": tally.redriven, "gone": tally.gone, "more": tally.more}

    def _parked(
        self,
        topic: TopicRecord,
        request: RedriveRequest,
        tally: _Tally,
        deadline: Deadline | None,
    ) -> None:
        for partition_id in range(topic.active_count):
            if tally.left <= 0:
                tally.more = True
                return
            request_id = (
                None
                if request.request_id is None
                else _hashed(f"{request.request_id}\x00{partition_id}")
            )
            part = GroupRedrive(
                topic.name, PartitionId(partition_id), request.group, tally.left, request_id
            )
            redriven, _ = self._router.redrive(part, deadline)
            tally.redriven += redriven
            tally.left -= redriven

    def _from_letters(
        self,
        dead_letter_topic: TopicRecord,
        request: RedriveRequest,
        tally: _Tally,
        deadline: Deadline | None,
    ) -> None:
        for partition_id in range(dead_letter_topic.active_count):
            while True:
                if self._must_stop(tally, deadline):
                    tally.more = True
                    return
                read = self._next_range(
                    dead_letter_topic.name, partition_id, request, tally, deadline
                )
                if read is None:
                    break  # this dead-letter partition is read to its end
                self._reopen(dead_letter_topic.name, partition_id, read, request, tally, deadline)
                finish = FinishRedrive(request.topic, request.group, partition_id, read.end)
                check_outcome(self._raft.propose(finish), "the redrive's progress")

    def _must_stop(self, tally: _Tally, deadline: Deadline | None) -> bool:
        """Done what was asked, read what one redrive may, or out of the caller's time
        (with a margin for one more range: a range's step is repeated, not lost, if cut)."""
        if tally.left <= 0 or tally.scanned >= self._limits.group_redrive_scan_max:
            return True
        margin_s = self._limits.http_timeout_s / 2
        return deadline is not None and deadline.remaining_s(time.monotonic()) < margin_s

    def _next_range(
        self,
        dead_letter_topic: str,
        partition_id: int,
        request: RedriveRequest,
        tally: _Tally,
        deadline: Deadline | None,
    ) -> _Range | None:
        """The range of the dead-letter partition to redrive next: the one planned, if a
        redrive stopped inside it; else the next read, planned now. ``None`` at the end."""
        progress = self._raft.read(
            lambda s: s.groups.redrive_progress(request.topic, request.group, partition_id)
        )
        if progress.planned is not None:
            start, end = progress.planned
            read = self._read(
                dead_letter_topic, partition_id, start, end - start, request, deadline
            )
            tally.scanned += end - start
            return _Range(read.letters if read else {}, start, end)
        most = min(self._limits.dead_letter_batch_max, tally.left)
        read = self._read(
            dead_letter_topic, partition_id, progress.done_to, most, request, deadline
        )
        if read is None:
            return None
        tally.scanned += read.end - read.start
        plan = PlanRedrive(request.topic, request.group, partition_id, read.start, read.end)
        check_outcome(self._raft.propose(plan), "the redrive's plan")
        return read

    def _read(
        self,
        dead_letter_topic: str,
        partition_id: int,
        start: int,
        most: int,
        request: RedriveRequest,
        deadline: Deadline | None,
    ) -> _Range | None:
        """Up to ``most`` messages of the dead-letter partition from ``start`` (from its log
        start if retention removed ``start``): its letters of the group by origin
        partition. ``None`` when there are none (the partition's end)."""
        fetch = Fetch(dead_letter_topic, PartitionId(partition_id), Offset(start), most, True)
        messages = self._router.fetch(fetch, deadline)["messages"]
        if not isinstance(messages, list) or not messages:
            return None
        letters: dict[int, list[RedriveLetter]] = {}
        for message in messages:
            letter = _letter_of(message, request)
            if letter is not None:
                letters.setdefault(letter[0], []).append(letter[1])
        return _Range(letters, start, _offset(messages[-1]) + 1)

    def _reopen(
        self,
        dead_letter_topic: str,
        partition_id: int,
        read: _Range,
        request: RedriveRequest,
        tally: _Tally,
        deadline: Deadline | None,
    ) -> None:
        topic = self._active(request.topic)
        for origin, letters in sorted(read.letters.items()):
            if origin >= topic.active_count:
                continue  # a letter naming a partition the topic does not have: not ours
            request_id = _request_id(dead_letter_topic, partition_id, read, origin)
            part = GroupRedrive(
                topic.name,
                PartitionId(origin),
                request.group,
                len(letters),
                request_id,
                tuple(letters),
            )
            redriven, gone = self._router.redrive(part, deadline)
            tally.redriven += redriven
            tally.gone += gone
            tally.left -= len(letters)

    def _active(self, name: str) -> TopicRecord:
        topic = self._raft.read(lambda s: s.topics.get(name))
        if topic is None or not topic.is_active:
            raise RaftQError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        return topic


def _offset(message: object) -> int:
    offset = message.get("offset") if isinstance(message, dict) else None
    if not isinstance(offset, int):
        raise RaftQError(ErrorCode.INTERNAL, "a broker answered a fetch without offsets")
    return offset


def _letter_of(message: object, request: RedriveRequest) -> tuple[int, RedriveLetter] | None:
    """``(origin partition, letter)`` when ``message`` is a copy of one of the group's dead
    messages (only nodes may write ``raftq-*`` headers, so they are trusted)."""
    headers = message.get("headers") if isinstance(message, dict) else None
    if not isinstance(headers, Mapping) or not isinstance(message, dict):
        return None
    if headers.get(GROUP) != request.group or headers.get(ORIGIN_TOPIC) != request.topic:
        return None
    numbers = [headers.get(name) for name in (ORIGIN_PARTITION, ORIGIN_OFFSET, DELIVERY_COUNT)]
    if not all(isinstance(n, str) and n.isdigit() and n.isascii() for n in numbers):
        return None
    partition, offset, count = (int(str(n)) for n in numbers)
    key = message.get("key")
    return partition, RedriveLetter(Offset(offset), count, key if isinstance(key, str) else None)


def _request_id(dead_letter_topic: str, partition_id: int, read: _Range, origin: int) -> RequestId:
    """The same for every repeat of one range's step (a failure before its progress was
    recorded): the origin partition then does nothing again."""
    text = f"{dead_letter_topic}\x00{partition_id}\x00{read.start}\x00{read.end}\x00{origin}"
    return _hashed(text)


def _hashed(text: str) -> RequestId:
    """A request id of bounded length (``id_chars_max``), whatever the names' lengths."""
    return RequestId("raftq-redrive-" + hashlib.sha256(text.encode()).hexdigest()[:40])
