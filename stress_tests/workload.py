"""Producers and consumers that record everything they see into a ``Recorder``.

Each worker is a step machine (``step()`` does one request cycle), so the same workers run
one per thread (``stress_threaded``) or all in turn on one thread (``stress``). A worker is
used by one thread at a time. Every value is unique (``<run>/<worker>/<n>``), so the checker
can tell each message apart. Each worker's ``Producer`` or ``Consumer`` carries the API key
it is given (``api_key``) on every request, through the load balancer and on the direct path.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from raftq import ClientLimits, Consumer, ProduceError, Producer, RaftQClientError
from raftq.errors import ApiError
from raftq.records import PartitionOffset
from stress_tests.history import Outcome, Position, Read, Recorder, Send

KEYS = 16
"""Distinct keys: spreads batches over every partition, each key always to the same one."""
CAUGHT_UP_EMPTY_POPS = 2
"""Successful empty pops in a row after which a draining consumer counts as caught up."""


class ProducerClient(Protocol):
    """What a ``ProducerWorker`` needs of ``raftq.Producer`` (tests pass a fake)."""

    def produce_batch(
        self, messages: Iterable[tuple[str, str | None]]
    ) -> Sequence[PartitionOffset]: ...

    def flush(self) -> Sequence[PartitionOffset]: ...

    def close(self) -> None: ...


def message_key(value: str) -> str:
    return f"k{zlib.crc32(value.encode()) % KEYS}"


@dataclass
class PendingBatch:
    sequence: int
    values: tuple[str, ...]
    first_try_s: float
    sent: bool = False
    """Handed to the ``Producer`` once; later attempts ``flush`` its retained batch."""
    detail: str = ""
    unknown: bool = False
    """Some attempt may have taken effect (so giving up means UNKNOWN, not FAILED)."""
    acked: tuple[Position | None, ...] = ()
    """Per value, where its partition acknowledged it on some attempt (the direct path
    sends a batch's partition groups separately), else ``None``; empty: none was."""

    @classmethod
    def numbered(cls, producer: str, sequence: int, batch_messages: int) -> PendingBatch:
        """Batch ``sequence`` (1, 2, ...) of ``producer``, started now: values
        ``<producer>/<n>`` numbered on from the batches before it (each ``batch_messages``
        long), so every value is unique."""
        first = (sequence - 1) * batch_messages
        values = tuple(f"{producer}/{first + i}" for i in range(batch_messages))
        return cls(sequence, values, time.monotonic())

    def as_send(
        self,
        producer: str,
        outcome: Outcome,
        positions: tuple[Position, ...] = (),
        replicas_synced: int | None = None,
    ) -> Send:
        """The history's record of this batch, ending now with ``outcome`` (an acknowledged
        one carries no error detail)."""
        return Send(
            producer,
            self.sequence,
            self.values,
            outcome,
            positions,
            self.first_try_s,
            time.monotonic(),
            "" if outcome is Outcome.ACKED else self.detail,
            replicas_synced,
        )


class ProducerWorker:
    def __init__(
        self,
        name: str,
        url: str,
        topic: str,
        recorder: Recorder,
        *,
        api_key: str,
        batch_messages: int,
        limits: ClientLimits,
        give_up_s: float,
        partition_id: int | None = None,
        direct: bool = True,
        connect: Callable[[int], ProducerClient] | None = None,
    ) -> None:
        """``connect(first_sequence)``: how to make the client (default: a ``raftq.Producer``
        with this worker's settings)."""
        self.name = name
        self._direct = direct
        self._url, self._topic, self._recorder = url, topic, recorder
        self._api_key = api_key
        self._batch_messages, self._limits, self._give_up_s = batch_messages, limits, give_up_s
        self._partition_id = partition_id
        self._connect = connect or self._raftq_producer
        self._producer: ProducerClient | None = None
        self._pending: PendingBatch | None = None
        self._sequence = 0
        self.acked_messages = 0

    def step(self) -> bool:
        """Send a new batch, or resend the pending one with its sequence; True when a batch
        was acknowledged."""
        producer = self._ensure_producer()
        if producer is None:
            return False
        if self._pending is None:
            self._pending = self._new_batch()
        pending = self._pending
        try:
            if pending.sent:
                offsets = producer.flush()
            else:
                pending.sent = True
                offsets = producer.produce_batch((v, message_key(v)) for v in pending.values)
        except ProduceError as exc:
            self._failed(pending, exc)
            return False
        positions = tuple(Position(o.partition_id, o.offset) for o in offsets)
        self._record(pending, Outcome.ACKED, positions)
        return True

    def give_up(self) -> None:
        """Record a still-pending batch as it stands (at the end of a run)."""
        if self._pending is not None:
            outcome = Outcome.UNKNOWN if self._pending.unknown else Outcome.FAILED
            self._record(self._pending, outcome)
        self.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def _new_batch(self) -> PendingBatch:
        self._sequence += 1
        return PendingBatch.numbered(self.name, self._sequence, self._batch_messages)

    def _ensure_producer(self) -> ProducerClient | None:
        if self._producer is None:
            try:
                self._producer = self._connect(self._sequence + 1)
            except RaftQClientError:
                return None
        return self._producer

    def _raftq_producer(self, first_sequence: int) -> ProducerClient:
        # Our own producer id and sequences: the checker's history names them.
        return Producer(
            self._url,
            self._topic,
            partition_id=self._partition_id,
            batch_messages_max=self._batch_messages,
            limits=self._limits,
            producer_id=self.name,
            first_sequence=first_sequence,
            direct=self._direct,
            api_key=self._api_key,
        )

    def _failed(self, pending: PendingBatch, exc: ProduceError) -> None:
        self._record_completed(pending, exc.completed)
        if any(o is not None for o in exc.acked_in_batch):
            pending.acked = tuple(
                None if o is None else Position(o.partition_id, o.offset)
                for o in exc.acked_in_batch
            )
        cause = exc.__cause__
        pending.detail = str(exc)[:300]
        pending.unknown = (
            pending.unknown
            or exc.outcome_unknown
            or (isinstance(cause, ApiError) and cause.after_unknown_outcome)
        )
        if not exc.retained:
            self._record(pending, Outcome.UNKNOWN if pending.unknown else Outcome.FAILED)
        elif time.monotonic() - pending.first_try_s > self._give_up_s:
            self.give_up()  # the retained batch must not be resent by a new batch's flush

    def _record_acked_part(self, pending: PendingBatch) -> None:
        """A batch given up whose partition groups were partly acknowledged: those values are
        acked (their loss must be seen), the rest keeps the batch's outcome."""
        pairs = list(zip(pending.values, pending.acked, strict=False))
        acked = [(v, p) for v, p in pairs if p is not None]
        self._recorder.send(
            Send(
                self.name,
                pending.sequence,
                tuple(v for v, _ in acked),
                Outcome.ACKED,
                tuple(p for _, p in acked),
                pending.first_try_s,
                time.monotonic(),
            )
        )
        self.acked_messages += len(acked)
        taken = {v for v, _ in acked}
        pending.values = tuple(v for v in pending.values if v not in taken)

    def _record_completed(
        self, pending: PendingBatch, completed: Sequence[PartitionOffset]
    ) -> None:
        """The messages the client acknowledged before the failure (its first ones, in send
        order: the client sends a batch's messages in order) are acked, whatever becomes of
        the rest; the rest stays pending."""
        if not completed:
            return
        done = len(completed)
        positions = tuple(Position(o.partition_id, o.offset) for o in completed)
        self._recorder.send(
            Send(
                self.name,
                pending.sequence,
                pending.values[:done],
                Outcome.ACKED,
                positions,
                pending.first_try_s,
                time.monotonic(),
            )
        )
        self.acked_messages += done
        pending.values = pending.values[done:]

    def _record(
        self, pending: PendingBatch, outcome: Outcome, positions: tuple[Position, ...] = ()
    ) -> None:
        if outcome is not Outcome.ACKED and pending.acked:
            self._record_acked_part(pending)
        self._recorder.send(pending.as_send(self.name, outcome, positions))
        if outcome is Outcome.ACKED:
            self.acked_messages += len(pending.values)
        self._pending = None


class ConsumerWorker:
    def __init__(
        self,
        name: str,
        url: str,
        topic: str,
        recorder: Recorder,
        *,
        api_key: str,
        limits: ClientLimits,
        poll_messages: int,
        direct: bool = True,
    ) -> None:
        self.name = name
        self._direct = direct
        self._url, self._topic, self._recorder, self._limits = url, topic, recorder, limits
        self._api_key = api_key
        self._poll_messages = poll_messages
        self._consumer: Consumer | None = None
        self.errors = 0
        """Pops (or registrations) that failed; the runner judges them (``validity.py``)."""
        self.last_error = ""

    def step(self) -> int:
        """Pop once; the number of messages, or -1 after an error. Reads are recorded under
        this worker's name."""
        try:
            if self._consumer is None:
                self._consumer = Consumer(
                    self._url,
                    self._topic,
                    limits=self._limits,
                    direct=self._direct,
                    api_key=self._api_key,
                )
            records = self._consumer.poll(self._poll_messages)
        except RaftQClientError as exc:
            self.errors += 1
            self.last_error = str(exc)[:300]
            return -1
        now_s = time.monotonic()
        self._recorder.reads(
            [Read(self.name, r.partition_id, r.offset, r.value, now_s) for r in records]
        )
        return len(records)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()


def run_bounded(
    step: Callable[[], object], stop: threading.Event, deadline_s: float, pause_s: float
) -> None:
    """Call ``step`` until ``stop`` is set or the monotonic deadline passes."""
    while not stop.is_set() and time.monotonic() < deadline_s:
        step()
        stop.wait(pause_s)


class ResendingProducer(Protocol):
    """What ``resend_pending`` needs of a ``ProducerWorker`` (tests pass a fake)."""

    @property
    def pending(self) -> bool: ...

    def step(self) -> bool: ...

    def give_up(self) -> None: ...


def resend_pending(producers: Sequence[ResendingProducer], deadline_s: float) -> None:
    """Resend every producer's pending batch until acknowledged or ``deadline_s`` (a
    monotonic time), then give up on what is left (recorded as such)."""
    for worker in producers:
        while worker.pending and time.monotonic() < deadline_s:
            worker.step()
        worker.give_up()


class DrainingConsumer(Protocol):
    """What ``pop_until_caught_up`` needs of a ``ConsumerWorker`` (tests pass a fake)."""

    name: str
    errors: int
    last_error: str

    def step(self) -> int: ...

    def close(self) -> None: ...


def pop_until_caught_up(
    consumers: Sequence[DrainingConsumer],
    deadline_s: float,
    clock: Callable[[], float] = time.monotonic,
    idle_s_min: float = 0.0,
) -> list[str]:
    """Pop with every consumer, round after round, until each consumer's last
    ``CAUGHT_UP_EMPTY_POPS`` pops succeeded and brought nothing (an error is not empty) over
    at least ``idle_s_min`` seconds, or until ``deadline_s`` on ``clock``; then close them.
    ``idle_s_min``: a run that added partitions gives the consumers' partition maps time to
    be fetched again (``partition_map_age_s_max``): an empty pop over a map without the
    newest partition is not caught up (membership seed 87512: the partition added by its
    last operation was never popped). Returns the names of those not caught up then (the
    caller reports them: a drain that timed out is a problem, not silence)."""
    empty_in_a_row = [0] * len(consumers)
    idle_since: list[float | None] = [None] * len(consumers)

    def caught_up(index: int) -> bool:
        since = idle_since[index]
        long_enough = since is not None and clock() - since >= idle_s_min
        return empty_in_a_row[index] >= CAUGHT_UP_EMPTY_POPS and long_enough

    while not all(caught_up(index) for index in range(len(consumers))):
        if clock() >= deadline_s:
            break
        for index, consumer in enumerate(consumers):
            started = clock()
            empty = consumer.step() == 0
            empty_in_a_row[index] = empty_in_a_row[index] + 1 if empty else 0
            if not empty:
                idle_since[index] = None
            elif idle_since[index] is None:
                idle_since[index] = started
    for consumer in consumers:
        consumer.close()
    return [consumer.name for index, consumer in enumerate(consumers) if not caught_up(index)]
