"""``BrokerService``: what a broker does, independent of HTTP.

Holds the replicas this broker hosts (``(topic, partition_id)`` → ``HostedReplica``), rebuilds
them from the store at start, and serves produce, pop, fetch and checksum. Thread-safe: HTTP
threads call it concurrently; Raft calls block until the command is applied locally.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from broker.hosted_replica import HostedReplica
from broker.partition.commands import DeadLettered, KeyValue, Receive, Redrive, Settle
from broker.partition.group_leases import (
    DeadLetter,
    GroupFigures,
    GroupRequest,
    GroupSettings,
    Receipt,
    Redriven,
)
from broker.partition.log import PartitionLog
from broker.persistence.store import MessageStore, RangeChecksum
from protocol import streams
from protocol.dead_letters import PendingDeadLetter
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import GroupRedrive, Outcome
from protocol.limits import Limits, PartitionLimits
from protocol.types import (
    Ack,
    Durability,
    NewMessage,
    Offset,
    PartitionId,
    RaftRole,
    ReplicaId,
    ReplicaSpec,
    StoredMessage,
)
from runtime.replication.machine import Entry

_log = logging.getLogger(__name__)


def _last_sequence(log: PartitionLog, producer_id: str) -> int | None:
    producer = log.producers.get(producer_id)
    return None if producer is None else producer.last_sequence


def _check_pop_sequence(sequence: int | None, now_ms: int, ahead_s_max: float) -> None:
    """Refuse (400, nothing claimed) a pop sequence further ahead of this broker's clock
    than ``pop_sequence_ahead_s_max``: the partition would refuse every later pop of its
    consumer until the clock caught up (issue 23)."""
    if sequence is None:
        return
    bound_us = (now_ms + int(ahead_s_max * 1000)) * 1000
    if sequence > bound_us:
        raise RaftQError(
            ErrorCode.INVALID_FIELD,
            f"pop sequence {sequence} is more than {ahead_s_max:g} s ahead of this broker's "
            "clock in microseconds since the epoch (pop_sequence_ahead_s_max): use the "
            "current time in microseconds, or a counter",
        )


def _pending_dead(log: PartitionLog, most: int) -> list[tuple[str, DeadLetter]]:
    return log.groups.pending_dead(most)


@dataclass(frozen=True, slots=True)
class LongPoll:
    """How a pop waits for something to claim (``protocol.requests.Pop``)."""

    wait_s: float = 0.0
    if_ready: bool = False
    """Claim only if there is something to claim: else answer nothing, proposing nothing."""


NO_WAIT = LongPoll()


class EventStream(Iterator[bytes]):
    """A stream's events, and its place among the broker's streams, given back once when
    it ends or is closed (also before its first event: a generator that never started
    runs no ``finally``)."""

    def __init__(self, events: Iterator[bytes], ended: Callable[[], None]) -> None:
        self._events = events
        self._ended: Callable[[], None] | None = ended

    def __next__(self) -> bytes:
        try:
            return next(self._events)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        ended, self._ended = self._ended, None
        if ended is not None:
            close = getattr(self._events, "close", None)
            if close is not None:
                close()
            ended()


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    spec: ReplicaSpec
    is_leader: bool
    leader_raft_address: str | None
    end_offset: int
    log_start_offset: int
    """First offset still readable: retention moved it past older messages."""
    flushed_offsets: list[Offset]
    evicted_offset: int
    """Messages below it have left memory: only databases hold them."""
    has_quorum: bool
    caught_up: bool
    """Its state holds every committed entry (its end offset is not stale)."""
    limits: PartitionLimits
    """What its apply checks (the spec's, or for a replica created before specs carried
    them, its broker's own)."""

    def to_json(self) -> dict[str, object]:
        return {
            **self.spec.to_json(),
            "limits": self.limits.to_json(),
            "is_leader": self.is_leader,
            "leader_raft_address": self.leader_raft_address,
            "end_offset": self.end_offset,
            "log_start_offset": self.log_start_offset,
            "flushed_offsets": self.flushed_offsets,
            "evicted_offset": self.evicted_offset,
            "has_quorum": self.has_quorum,
            "caught_up": self.caught_up,
        }


ReplicaFactory = Callable[[ReplicaSpec], HostedReplica]


class BrokerService:
    def __init__(
        self,
        store: MessageStore,
        make_replica: ReplicaFactory,
        limits: Limits,
        clock_ms: Callable[[], int],
    ) -> None:
        self._store = store
        self._make_replica = make_replica
        self._limits = limits
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._replicas: dict[tuple[str, int], HostedReplica] = {}
        self._streams = 0
        """Streams being served (``stream``), at most ``streams_max``."""

    def start(self) -> None:
        """Rebuild every replica recorded in the store; they rejoin their Raft groups."""
        for spec in self._store.load_replicas():
            self._replicas[(spec.topic, spec.partition_id)] = self._make_replica(spec)

    def close(self) -> None:
        with self._lock:
            replicas = list(self._replicas.values())
            self._replicas.clear()
        for replica in replicas:
            replica.close()

    # --- partitions -----------------------------------------------------------------------

    def host(self, spec: ReplicaSpec) -> bool:
        """Host a replica; idempotent. True when it was created now."""
        with self._lock:
            existing = self._replicas.get((spec.topic, spec.partition_id))
            if existing is not None:
                if existing.spec != spec:
                    raise RaftQError(
                        ErrorCode.TOPIC_EXISTS,
                        f"{spec.topic}/{spec.partition_id} is hosted here with another spec",
                    )
                return False
            # Recorded before the Raft node starts, so a crash right after still rebuilds it.
            self._store.save_replica(spec)
            self._replicas[(spec.topic, spec.partition_id)] = self._make_replica(spec)
            return True

    def replace_member(
        self, spec: ReplicaSpec, slot: ReplicaId, leaving: str, leaving_alive: bool
    ) -> dict[str, object]:
        """Re-replication, on every live replica of the partition: keep ``spec`` (the
        partition's replicas, replica ``slot`` now a new one) for restarts, and on the
        leader make the Raft group's members match it (``PartitionReplica.
        replace_member``: ``leaving`` is the replica the slot had, still running when
        ``leaving_alive``). Idempotent: the manager repeats it until the leader answers
        ``"members_match": true``."""
        replica = self._replica(spec.topic, spec.partition_id)
        mine = (replica.spec.replica_id, replica.spec.raft_address)
        if mine != (spec.replica_id, spec.raft_address):
            raise RaftQError(
                ErrorCode.INVALID_FIELD,
                f"{replica.partition.name} is replica {mine[0]} at {mine[1]}: the request "
                f"names replica {spec.replica_id} at {spec.raft_address}",
            )
        # ``slot`` may be this replica's own: the new one, asked in case it leads already.
        if replica.spec != spec:
            self._store.update_replica(spec)
            replica.respec(spec)
        leads = replica.partition.status().role is RaftRole.LEADER
        matched = replica.partition.replace_member(slot, leaving, leaving_alive) if leads else False
        return {
            "topic": spec.topic,
            "partition_id": spec.partition_id,
            "leader": leads,
            "members_match": matched,
        }

    def drop(self, topic: str, partition_id: PartitionId, raft_address: str) -> bool:
        """Stop hosting the replica of ``topic/partition_id`` at ``raft_address`` and
        delete its Raft files, then its record and rows (in that order: a crash between
        leaves a record whose replica starts empty and is dropped again). Idempotent: False
        when no such replica is hosted here."""
        with self._lock:
            replica = self._replicas.get((topic, partition_id))
            if replica is None or replica.spec.raft_address != raft_address:
                return False
            del self._replicas[(topic, partition_id)]
        replica.discard()
        self._store.forget_replica(topic, partition_id)
        return True

    def statuses(self) -> list[ReplicaStatus]:
        with self._lock:
            replicas = list(self._replicas.values())
        return [self._status(replica) for replica in replicas]

    def raft_statuses(self) -> list[dict[str, object]]:
        with self._lock:
            replicas = list(self._replicas.values())
        return [
            {
                "topic": r.spec.topic,
                "partition_id": r.spec.partition_id,
                **r.partition.status().to_json(),
            }
            for r in replicas
        ]

    # --- data -----------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition_id: PartitionId,
        messages: tuple[NewMessage, ...],
        producer_id: str | None,
        sequence: int | None,
        deadline: Deadline | None = None,
        durability: Durability = Durability.FSYNC,
    ) -> tuple[list[Offset], Ack]:
        """The batch's offsets and what its acknowledgement achieved (``Ack``)."""
        replica = self._replica(topic, partition_id)
        if producer_id is not None and sequence is not None:
            step_max = self._limits.producer_sequence_step_max
            last = replica.partition.read(lambda log: _last_sequence(log, producer_id))
            if last is not None and sequence - last > step_max:
                raise RaftQError(
                    ErrorCode.INVALID_FIELD,
                    f"sequence {sequence} is more than {step_max} past producer "
                    f"{producer_id!r}'s last ({last}) in this partition "
                    "(producer_sequence_step_max)",
                )
        if not _stored(replica, producer_id, sequence):  # a repeat is answered, not refused
            self._check_in_sync(replica)
        batch: list[KeyValue] = [
            (m.key, m.value, m.headers) if m.headers else (m.key, m.value) for m in messages
        ]
        appended, entry = replica.partition.append(
            batch,
            self._clock_ms(),
            producer_id,
            sequence,
            deadline,
            synced=durability is not Durability.REPLICATED,
        )
        holding = self._wait_in_sync(replica, entry, deadline)
        flushed = self._replicas_flushed(replica, appended.end)
        if durability is Durability.FLUSHED and flushed <= len(replica.spec.replicas) // 2:
            flushed = self._wait_flushed(replica, appended.end, entry, deadline)
        ack = Ack(
            partition_id=partition_id,
            durability=durability,
            raft_term=entry.term,
            raft_index=entry.index,
            replicas_synced=_synced(entry, holding),
            replicas_flushed=flushed,
        )
        return [Offset(o) for o in range(appended.start, appended.end)], ack

    def _check_in_sync(self, replica: HostedReplica) -> None:
        """Refuse a produce, before proposing anything, while fewer replicas are in sync
        than the topic's ``min_insync_replicas``. Only the leader knows how many are: a
        follower (which would forward the produce to the leader unchecked) refuses with
        NOT_LEADER when the topic asks for more than the majority a commit needs anyway."""
        wanted = replica.partition.read(lambda log: log.limits.min_insync_replicas)
        if wanted <= 1:
            return
        in_sync = replica.partition.replicas_in_sync()
        if in_sync == 0:
            if wanted > len(replica.spec.replicas) // 2 + 1:
                raise RaftQError(
                    ErrorCode.NOT_LEADER,
                    f"{replica.partition.name} does not lead, and only its leader takes a "
                    f"produce for a topic with min_insync_replicas {wanted} (it alone knows "
                    "which replicas are in sync)",
                )
            return
        if in_sync < wanted:
            raise RaftQError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{replica.partition.name}: {in_sync} of {len(replica.spec.replicas)} replicas "
                f"are in sync, its topic's min_insync_replicas is {wanted}: nothing was "
                "stored; retry once the others are back",
            )

    def _wait_in_sync(self, replica: HostedReplica, entry: Entry, deadline: Deadline | None) -> int:
        """An acknowledgement of a topic with ``min_insync_replicas`` = n means n replicas
        hold the entry (Kafka's acks=all), not that a check before proposing passed: the
        leader's view of who answered lags a death by up to its fallback timeout, and a
        commit needs only a majority. Wait (bounded) until n replicas acknowledged it; how
        many hold it then (0: not waited for)."""
        wanted = replica.partition.read(lambda log: log.limits.min_insync_replicas)
        if wanted <= len(replica.spec.replicas) // 2 + 1:
            return 0  # the commit itself proves a majority holds it

        def refusal(holding: int, _wait_s: float) -> RaftQError:
            return RaftQError(
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                f"{replica.partition.name}: the batch is committed (Raft term "
                f"{entry.term}, index {entry.index}) but {holding} of "
                f"{len(replica.spec.replicas)} replicas hold it, and its topic's "
                f"min_insync_replicas is {wanted}: not acknowledged; retry with the same "
                "sequence",
            )

        return self._wait_for_replicas(
            lambda: replica.partition.replicas_holding(entry),
            wanted,
            self._limits.min_insync_ack_wait_s_max,
            deadline,
            refusal,
        )

    def _replicas_flushed(self, replica: HostedReplica, end: int) -> int:
        flushed = replica.partition.read(lambda log: list(log.flushed_offsets))
        return sum(1 for offset in flushed if offset >= end)

    def _wait_flushed(
        self, replica: HostedReplica, end: int, entry: Entry, deadline: Deadline | None
    ) -> int:
        """Wait (bounded) until a majority of replicas flushed up to ``end``."""
        majority = len(replica.spec.replicas) // 2 + 1

        def refusal(flushed: int, wait_s: float) -> RaftQError:
            return RaftQError(
                ErrorCode.COMMIT_TIMEOUT,
                f"{replica.partition.name}: the batch is stored and synced (Raft term "
                f"{entry.term}, index {entry.index}) but {flushed} of "
                f"{len(replica.spec.replicas)} replicas flushed it within {wait_s:.1f} s; "
                "retry with the same sequence to wait again",
            )

        return self._wait_for_replicas(
            lambda: self._replicas_flushed(replica, end),
            majority,
            self._limits.flushed_ack_wait_s_max,
            deadline,
            refusal,
        )

    def _wait_for_replicas(
        self,
        count: Callable[[], int],
        wanted: int,
        wait_s: float,
        deadline: Deadline | None,
        refusal: Callable[[int, float], RaftQError],
    ) -> int:
        """Poll ``count`` until it reaches ``wanted``, for at most ``wait_s`` and never past
        the caller's deadline; the count then. On expiry raises ``refusal(count, wait_s)``."""
        if deadline is not None:
            wait_s = deadline.bound(wait_s, time.monotonic())
        until_s = time.monotonic() + wait_s
        while (found := count()) < wanted:
            if time.monotonic() >= until_s:
                raise refusal(found, wait_s)
            time.sleep(self._limits.flushed_ack_poll_s)
        return found

    def pop(
        self,
        topic: str,
        partition_id: PartitionId,
        consumer_id: str,
        max_messages: int,
        request_id: str | None,
        sequence: int | None = None,
        deadline: Deadline | None = None,
        wait: LongPoll = NO_WAIT,
    ) -> list[StoredMessage]:
        """The consumer's next messages. Refused before anything is claimed when this replica
        could not read them (its database lags behind what left memory); once the pop is
        applied, a failed read is an unknown outcome (see ``_read``). ``wait``: a long poll
        waits for something to claim, proposing nothing meanwhile."""
        now_ms = self._clock_ms()
        _check_pop_sequence(sequence, now_ms, self._limits.pop_sequence_ahead_s_max)
        if wait.wait_s > 0 or wait.if_ready:
            ready = self._wait_for(
                self._replica(topic, partition_id),
                lambda log: log.pop_may_claim(consumer_id, request_id, sequence),
                wait.wait_s,
                deadline,
            )
            if not ready and wait.if_ready:
                return []  # nothing to claim: no entry proposed (see ``Pop.if_ready``)
            now_ms = self._clock_ms()
        replica = self._readable_replica(topic, partition_id)
        consumed = replica.partition.consume(
            consumer_id, max_messages, request_id, now_ms, sequence, deadline
        )
        return self._read(replica, consumed.start, consumed.end, claimed=True)

    def _wait_for(
        self,
        replica: HostedReplica,
        ready: Callable[[PartitionLog], bool],
        wait_s: float,
        deadline: Deadline | None,
        slice_s: Callable[[PartitionLog], float] | None = None,
    ) -> bool:
        """Whether ``ready`` holds on the replica's state now or within ``wait_s`` (never
        past the caller's deadline, less the time its answer needs): woken by each command
        applied here (``AppliedSignal``), and every ``stream_poll_s`` for what a follower
        applies."""
        now_s = time.monotonic()
        if deadline is not None:
            left_s = deadline.remaining_s(now_s) - self._limits.deadline_reply_margin_s
            wait_s = min(wait_s, max(0.0, left_s))
        until_s = now_s + wait_s
        signal = replica.partition.applied
        seen = signal.count()
        while not replica.partition.read(ready):
            left_s = until_s - time.monotonic()
            if left_s <= 0:
                return False
            step_s = self._limits.stream_poll_s
            if slice_s is not None:
                step_s = replica.partition.read(slice_s)
            seen = signal.wait_past(seen, min(left_s, step_s))
        return True

    def receive(
        self,
        topic: str,
        partition_id: PartitionId,
        group: str,
        settings: GroupSettings,
        max_messages: int,
        request_id: str | None,
        deadline: Deadline | None = None,
        wait_s: float = 0.0,
    ) -> list[tuple[StoredMessage, int]]:
        """Lease messages to a member of consumer ``group`` (issue 20): each with its
        delivery count; waiting up to ``wait_s`` for one when none is deliverable (a long
        poll, proposing nothing meanwhile). Refused as ``pop`` is while this replica could
        not read them; once the receive is applied, a failed read is an unknown outcome
        (the leases stand and end with their visibility timeout; the same request id gets
        them again)."""
        replica = self._readable_replica(topic, partition_id)
        request = GroupRequest(max_messages, 0, request_id)
        if not self._wait_deliverable(replica, group, settings, request, wait_s, deadline):
            return []  # nothing to hand out: no entry proposed (long polls ask again)
        now_ms = self._clock_ms()
        keys = self._keys_ahead(replica, group, max_messages) if settings.ordered_by_key else ()
        command = Receive(
            group,
            max_messages,
            now_ms,
            request_id,
            settings.visibility_timeout_ms,
            settings.max_deliveries,
            settings.ordered_by_key,
            keys,
        )
        leased = replica.partition.receive(command, deadline)
        counts = dict(leased.leases)
        messages: list[tuple[StoredMessage, int]] = []
        for start, end in _runs(sorted(counts)):
            read = self._read(replica, start, end, claimed=True)
            messages.extend((m, counts[m.offset]) for m in read)
        order = {offset: index for index, (offset, _) in enumerate(leased.leases)}
        return sorted(messages, key=lambda pair: order[pair[0].offset])

    def _wait_deliverable(
        self,
        replica: HostedReplica,
        group: str,
        settings: GroupSettings,
        request: GroupRequest,
        wait_s: float,
        deadline: Deadline | None,
    ) -> bool:
        """Whether a receive could lease something now or within ``wait_s``: woken by each
        command applied here, and when the group's next lease ends or nacked message is
        ready (``ConsumerGroups.next_change_ms``)."""

        def may_deliver(log: PartitionLog) -> bool:
            now_ms = max(self._clock_ms(), log.clock_ms)
            return log.groups.may_deliver(
                group,
                GroupRequest(request.max_messages, now_ms, request.request_id),
                settings.ordered_by_key,
                log.log_start_offset,
                log.end_offset,
                log.limits.group_scan_max,
            )

        def slice_s(log: PartitionLog) -> float:
            """Until the group's next change by time alone, at most ``stream_poll_s``."""
            now_ms = max(self._clock_ms(), log.clock_ms)
            next_ms = log.groups.next_change_ms(group, now_ms)
            step_s = self._limits.stream_poll_s
            return step_s if next_ms is None else min(step_s, max(0.0, next_ms - now_ms) / 1000)

        return self._wait_for(replica, may_deliver, wait_s, deadline, slice_s)

    def _keys_ahead(
        self, replica: HostedReplica, group: str, max_messages: int
    ) -> tuple[tuple[int, str | None], ...]:
        """For per-key ordering: the keys of the messages a receive of ``group`` reaches
        first, from memory or the database: twice what it asks for (messages held back by
        their key are looked at too), at most ``group_key_window_max``. Also those still in
        memory: they may leave it before the receive is applied, and a key the partition
        cannot see stops an ordered receive (an empty answer with messages there, seen by
        the dashboard test when a flush evicted them in between)."""
        start, end_offset = replica.partition.read(
            lambda log: (log.groups.next_offset(group, log.log_start_offset), log.end_offset)
        )
        window = min(self._limits.group_key_window_max, 2 * max_messages)
        end = min(end_offset, start + window)
        if start >= end:
            return ()
        return tuple((m.offset, m.key) for m in self._read(replica, start, end))

    def settle(
        self,
        topic: str,
        partition_id: PartitionId,
        group: str,
        action: str,
        receipts: list[Receipt],
        duration_ms: int,
        deadline: Deadline | None = None,
    ) -> list[Outcome]:
        """Ack, nack (``duration_ms``: the delay) or extend (``duration_ms``: the new
        visibility timeout) deliveries of ``group`` by receipt; what each did."""
        replica = self._replica(topic, partition_id)
        pairs = tuple((r.offset, r.delivery_count) for r in receipts)
        command = Settle(group, action, pairs, self._clock_ms(), duration_ms)
        return list(replica.partition.settle(command, deadline).outcomes)

    def dead_letters(self, most: int) -> list[PendingDeadLetter]:
        """Up to ``most`` messages past their group's ``max_deliveries`` in the partitions
        this broker leads with current state, each group's in the order they died
        (``protocol.dead_letters``: the managers' dead-letter step reads them here). A
        partition whose messages cannot be read now is left for the next round."""
        with self._lock:
            replicas = list(self._replicas.values())
        found: list[PendingDeadLetter] = []
        for replica in replicas:
            left = most - len(found)
            if left <= 0:
                break
            if replica.partition.status().role is not RaftRole.LEADER:
                continue
            if not replica.partition.caught_up():
                continue
            pending = replica.partition.read(partial(_pending_dead, most=left))
            try:
                found.extend(self._dead_letter(replica, group, d) for group, d in pending)
            except RaftQError as exc:
                _log.warning("%s: dead letters not read: %s", replica.partition.name, exc.message)
        return found

    def _dead_letter(
        self, replica: HostedReplica, group: str, dead: DeadLetter
    ) -> PendingDeadLetter:
        (message,) = self._read(replica, dead.offset, dead.offset + 1)
        spec = replica.spec
        return PendingDeadLetter(
            spec.topic, spec.partition_id, group, dead.delivery_count, dead.sequence, message
        )

    def mark_dead_lettered(
        self,
        topic: str,
        partition_id: PartitionId,
        group: str,
        offsets: tuple[Offset, ...],
        deadline: Deadline | None = None,
    ) -> None:
        """The dead-letter topic holds copies of these messages of ``group``: settled."""
        replica = self._replica(topic, partition_id)
        replica.partition.settle(DeadLettered(group, offsets), deadline)

    def redrive(
        self,
        topic: str,
        partition_id: PartitionId,
        group: str,
        request: GroupRedrive,
        deadline: Deadline | None = None,
    ) -> Redriven:
        """Make dead messages of ``group`` deliverable again (``Redrive``)."""
        replica = self._replica(topic, partition_id)
        letters = tuple((o.offset, o.delivery_count, o.key) for o in request.letters)
        command = Redrive(
            group, request.request_id, self._clock_ms(), request.max_messages, letters
        )
        return replica.partition.redrive(command, deadline)

    def fetch(
        self,
        topic: str,
        partition_id: PartitionId,
        offset: int,
        max_messages: int,
        skip_removed: bool = False,
        wait_s: float = 0.0,
        deadline: Deadline | None = None,
    ) -> list[StoredMessage]:
        """Committed messages ``[offset, offset + max_messages)`` this replica has applied
        (from the log start if retention removed ``offset`` and ``skip_removed``), waiting up
        to ``wait_s`` for the first when there is none yet (a long poll); 503 REFUSED while
        its state may be stale (``caught_up``)."""
        replica = self._replica(topic, partition_id)
        start, log_end = self._fetch_start(replica, offset, skip_removed)
        if start >= log_end and wait_s > 0:
            self._wait_for(replica, lambda log: log.end_offset > start, wait_s, deadline)
            log_end = replica.partition.read(lambda log: log.end_offset)
        end = min(start + max_messages, log_end)
        return self._read(replica, start, end) if start < end else []

    def stream(
        self,
        topic: str,
        partition_id: PartitionId,
        offset: int,
        max_messages: int,
        skip_removed: bool = False,
    ) -> EventStream:
        """A stream of the partition's messages from ``offset`` on, as they are applied
        here (``protocol.streams``: Server-Sent Events): ``fetch``'s refusals come at once;
        then events of up to ``max_messages`` until ``stream_s_max``. At most
        ``streams_max`` at once (503 REFUSED beyond)."""
        replica = self._replica(topic, partition_id)
        self._fetch_start(replica, offset, skip_removed)
        with self._lock:
            if self._streams >= self._limits.streams_max:
                raise RaftQError(
                    ErrorCode.REFUSED,
                    f"this broker serves {self._limits.streams_max} streams already: another "
                    "replica, or later",
                )
            self._streams += 1
        events = self._events(topic, partition_id, offset, max_messages, skip_removed)
        return EventStream(events, self._stream_ended)

    def _stream_ended(self) -> None:
        with self._lock:
            self._streams -= 1

    def _events(
        self,
        topic: str,
        partition_id: PartitionId,
        offset: int,
        max_messages: int,
        skip_removed: bool,
    ) -> Iterator[bytes]:
        until_s = time.monotonic() + self._limits.stream_s_max
        while (left_s := until_s - time.monotonic()) > 0:
            wait_s = min(left_s, self._limits.stream_heartbeat_s)
            try:
                found = self.fetch(topic, partition_id, offset, max_messages, skip_removed, wait_s)
            except RaftQError as exc:
                yield streams.event(streams.ERROR, exc.to_json())
                return
            if not found:
                yield streams.HEARTBEAT
                continue
            offset = found[-1].offset + 1
            body = {"messages": [m.to_json(topic, partition_id) for m in found]}
            yield streams.event(streams.MESSAGES, body, offset)
        reason = "stream_s_max: reconnect from next_offset"
        yield streams.event(streams.END, {"next_offset": offset, "reason": reason})

    def _fetch_start(
        self, replica: HostedReplica, offset: int, skip_removed: bool
    ) -> tuple[int, int]:
        """Where a fetch from ``offset`` starts, and the end offset; the refusals of a
        replica whose state may be stale and of an offset out of range."""
        if not replica.partition.caught_up():
            raise RaftQError(
                ErrorCode.REFUSED,
                f"{replica.partition.name} has not applied an entry of its current Raft term "
                "yet (just restarted, or an election): its state may be stale; try another "
                "replica or again",
            )
        log_start, log_end = replica.partition.read(
            lambda log: (log.log_start_offset, log.end_offset)
        )
        if offset < log_start and not skip_removed:
            raise RaftQError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} of {replica.partition.name} is below its log start: "
                f"retention removed older messages; valid offsets are {log_start} to {log_end}",
            )
        if offset > log_end and replica.partition.status().role is RaftRole.LEADER:
            # Only the leader knows the end: a follower may just lag (the reader retries).
            raise RaftQError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is beyond the end of {replica.partition.name}: valid "
                f"offsets are {log_start} to {log_end} (the end: wait for new messages)",
            )
        return max(offset, log_start), log_end

    def transfer_leadership(
        self, topic: str, partition_id: PartitionId, raft_address: str
    ) -> dict[str, object]:
        """Ask this broker's replica, which must lead, to hand leadership to the replica at
        ``raft_address`` (one of the partition's); asynchronous: the answer says it was
        asked, ``GET /partitions`` later shows who leads."""
        replica = self._replica(topic, partition_id)
        if raft_address not in replica.partition.status().partners:
            raise RaftQError(
                ErrorCode.INVALID_FIELD,
                f"{raft_address!r} is not another replica of {replica.partition.name}",
            )
        if replica.partition.status().role is not RaftRole.LEADER:
            raise RaftQError(ErrorCode.NOT_LEADER, f"{replica.partition.name} does not lead")
        replica.partition.transfer_leadership(raft_address)
        return {"topic": topic, "partition_id": partition_id, "to": raft_address}

    def consumer_lag(self, topic: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """For each partition of ``topic`` this broker leads (the leader's figures are the
        current ones): per consumer that has popped there, its position, the partition's
        end, the messages it has not popped and the age in seconds of the oldest of those
        (0 when none); and the partition's own figures, which a consumer that has not popped
        there yet has (it would start at the log start)."""
        with self._lock:
            replicas = [r for (name, _), r in self._replicas.items() if name == topic]
        consumers: list[dict[str, object]] = []
        partitions: list[dict[str, object]] = []
        for replica in replicas:
            if replica.partition.status().role is not RaftRole.LEADER:
                continue
            start, end, positions = replica.partition.read(
                lambda log: (
                    log.log_start_offset,
                    log.end_offset,
                    {c: max(s.offset, log.log_start_offset) for c, s in log.consumers.items()},
                )
            )
            for consumer_id, offset in sorted(positions.items()):
                consumers.append(self._lag_of(replica, consumer_id, offset, end))
            partitions.append(self._lag_of(replica, None, start, end))
        return consumers, partitions

    def lag_figures(
        self, consumers_max: int
    ) -> tuple[list[dict[str, object]], dict[tuple[str, int], int]]:
        """For ``/metrics``: in each partition this broker leads, the ``consumers_max`` most
        lagging consumers' figures (as ``consumer_lag`` gives them: one database read each,
        for the age), and each partition's consumer count. Bounded by the partitions led,
        not by the consumers anyone registered (the pick is one pass over the offsets in
        memory)."""
        with self._lock:
            replicas = list(self._replicas.values())
        shown: list[dict[str, object]] = []
        counts: dict[tuple[str, int], int] = {}
        for replica in replicas:
            if replica.partition.status().role is not RaftRole.LEADER:
                continue
            end, count, lowest = replica.partition.read(
                lambda log: (
                    log.end_offset,
                    len(log.consumers),
                    heapq.nsmallest(
                        consumers_max,
                        (
                            (max(s.offset, log.log_start_offset), c)
                            for c, s in log.consumers.items()
                        ),
                    ),
                )
            )
            counts[(replica.spec.topic, replica.spec.partition_id)] = count
            shown.extend(self._lag_of(replica, c, offset, end) for offset, c in lowest)
        return shown, counts

    def group_figures(self, topic: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """For each partition of ``topic`` this broker leads: each consumer group's figures
        there (``GroupFigures``, as of the group's last receive: a lease that ended since
        still counts in flight), with the age in seconds of its oldest unsettled message;
        and the partition's own figures, which a group that has not received there yet
        has (everything from the log start is unsettled)."""
        with self._lock:
            replicas = [r for (name, _), r in self._replicas.items() if name == topic]
        groups: list[dict[str, object]] = []
        partitions: list[dict[str, object]] = []
        for replica in replicas:
            if replica.partition.status().role is not RaftRole.LEADER:
                continue
            start, end, figures = replica.partition.read(
                lambda log: (
                    log.log_start_offset,
                    log.end_offset,
                    log.groups.figures(log.end_offset),
                )
            )
            for group, f in figures:
                groups.append(self._group_figure(replica, group, start, end, f))
            own = GroupFigures(start, end - start, 0, 0)
            partitions.append(self._group_figure(replica, None, start, end, own))
        return groups, partitions

    def _group_figure(
        self, replica: HostedReplica, group: str | None, start: int, end: int, f: GroupFigures
    ) -> dict[str, object]:
        floor = max(f.floor, start)
        return {
            "topic": replica.spec.topic,
            "partition_id": replica.spec.partition_id,
            "group": group,
            "offset": floor,
            "end_offset": end,
            "lag_messages": f.unsettled,
            "lag_s": self._oldest_age_s(replica, floor, end) if f.unsettled else 0.0,
            "in_flight": f.in_flight,
            "dead_letters_pending": f.dead,
            "dead_lettered": f.dead_lettered,
        }

    def _oldest_age_s(self, replica: HostedReplica, offset: int, end: int) -> float:
        """Age of the message at ``offset`` (0 when there is none below ``end``)."""
        oldest = self._read(replica, offset, offset + 1) if offset < end else []
        return max(0, self._clock_ms() - oldest[0].timestamp_ms) / 1000 if oldest else 0.0

    def _lag_of(
        self, replica: HostedReplica, consumer_id: str | None, offset: int, end: int
    ) -> dict[str, object]:
        return {
            "topic": replica.spec.topic,
            "partition_id": replica.spec.partition_id,
            "consumer_id": consumer_id,
            "offset": offset,
            "end_offset": end,
            "lag_messages": end - offset,
            "lag_s": self._oldest_age_s(replica, offset, end),
        }

    def checksum(
        self, topic: str, partition_id: PartitionId, start: int, end: int
    ) -> tuple[RangeChecksum, int]:
        """Checksum of this replica's database rows in ``[start, end)``, and its flushed
        offset (rows at or past it may still be missing)."""
        replica = self._replica(topic, partition_id)
        replica_id = replica.spec.replica_id
        flushed = replica.partition.read(lambda log: log.flushed_offsets[replica_id])
        return self._store.checksum(topic, partition_id, start, end), flushed

    def check_hosted(self, topic: str, partition_id: PartitionId) -> None:
        self._replica(topic, partition_id)

    # --- internals ------------------------------------------------------------------------

    def _replica(self, topic: str, partition_id: PartitionId) -> HostedReplica:
        with self._lock:
            replica = self._replicas.get((topic, partition_id))
        if replica is None:
            raise RaftQError(
                ErrorCode.UNKNOWN_PARTITION, f"partition {topic}/{partition_id} is not hosted here"
            )
        return replica

    def _readable_replica(self, topic: str, partition_id: PartitionId) -> HostedReplica:
        """The hosted replica, refused (503 REFUSED, before anything is claimed or leased)
        while its database lags behind what left memory: it could not read what it hands
        out."""
        replica = self._replica(topic, partition_id)
        slot = replica.spec.replica_id
        if replica.partition.read(lambda log: log.lagging(slot)):
            raise RaftQError(
                ErrorCode.REFUSED,
                f"{replica.partition.name} is still copying what left memory from a peer: "
                "nothing was claimed; try another replica",
            )
        return replica

    def _read(
        self, replica: HostedReplica, start: int, end: int, *, claimed: bool = False
    ) -> list[StoredMessage]:
        """Messages ``[start, end)``: the part every replica has flushed from the database,
        the rest from ``msg_dict``. ``claimed``: a pop already moved its consumer past them,
        so a failure here is answered as an unknown outcome (503 UNAVAILABLE), never as
        REFUSED ("nothing done"): a client told that would start a new pop and skip the
        range, where repeating the same pop (same sequence or request id) gets it again."""
        evicted, in_memory = replica.partition.read(
            lambda log: (log.evicted_offset, log.read(start, end))
        )
        messages: list[StoredMessage] = []
        if start < evicted:
            spec = replica.spec
            messages = self._store.read_messages(
                spec.topic, spec.partition_id, start, min(evicted, end)
            )
        messages.extend(
            StoredMessage(
                offset=Offset(offset),
                value=value,
                key=key,
                timestamp_ms=timestamp_ms,
                headers=headers,
            )
            for offset, (key, value, timestamp_ms, headers) in in_memory
        )
        if len(messages) != end - start or (messages and messages[0].offset != start):
            if claimed:
                raise RaftQError(
                    ErrorCode.UNAVAILABLE,
                    f"{replica.partition.name} claimed [{start}, {end}) for this pop but "
                    "cannot read it yet: repeat the same pop (same sequence or request id)",
                )
            raise RaftQError(
                ErrorCode.REFUSED,
                f"{replica.partition.name} cannot read [{start}, {end}) yet: try another replica",
            )
        return messages

    def _status(self, replica: HostedReplica) -> ReplicaStatus:
        raft = replica.partition.status()
        end_offset, log_start, flushed, evicted, limits = replica.partition.read(
            lambda log: (
                log.end_offset,
                log.log_start_offset,
                list(log.flushed_offsets),
                log.evicted_offset,
                log.limits,
            )
        )
        return ReplicaStatus(
            spec=replica.spec,
            is_leader=raft.role is RaftRole.LEADER,
            leader_raft_address=raft.leader,
            end_offset=end_offset,
            log_start_offset=log_start,
            flushed_offsets=flushed,
            evicted_offset=evicted,
            has_quorum=raft.has_quorum,
            caught_up=replica.partition.caught_up(),
            limits=limits,
        )


def _runs(offsets: list[Offset]) -> list[tuple[int, int]]:
    """Sorted offsets as half-open ranges of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][1] == offset:
            runs[-1] = (runs[-1][0], offset + 1)
        else:
            runs.append((offset, offset + 1))
    return runs


def _synced(entry: Entry, holding: int) -> int:
    """How many replicas synced the entry to their journals, as its ack reports it: 0 for
    an entry proposed unsynced (``durability=replicated``), else what the wait for
    ``min_insync_replicas`` saw (``holding``) when that is more than the proposal knew."""
    if entry.replicas_synced == 0:
        return 0
    return max(entry.replicas_synced, holding)


def _stored(replica: HostedReplica, producer_id: str | None, sequence: int | None) -> bool:
    """The partition already holds this producer's batch ``sequence``: a repeat (of an
    attempt whose answer was lost, or not acknowledged) is answered as the duplicate it
    is, never refused as if nothing had been stored."""
    if producer_id is None or sequence is None:
        return False
    return replica.partition.read(lambda log: log.holds_batch(producer_id, sequence))
