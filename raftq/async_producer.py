"""``AsyncProducer``: ``send`` returns a future at once; records are batched per partition by a
linger time and a size bound and sent by one sender thread (Kafka's ``KafkaProducer``).

The pure part is ``raftq.record_accumulator`` (which records form which batch, when, and how
much memory they hold); this module is the thin shell around it: a lock, a sender thread,
futures, and the transport, which is a synchronous ``Producer`` that only the sender thread
uses (``Producer.send_partition_batches``). So a batch goes where the ``Producer``'s own
groups go and as they do: to its partition leader's broker on the direct path, repeated
through the load balancer with its ``partition_id`` and sequence when the broker did not
take it.

Exactly once and in order, as the ``Producer``: every batch takes the next sequence of the
producer id when it is first sent and keeps it, and its partition, for every retry; the
partition stores a sequence once and answers a repeat with the first offsets. A partition
has one batch in flight at a time (``in_flight_batches_per_partition_max`` = 1): the next
batch of a partition leaves only once the previous one is acknowledged or has failed for
good, so records of one key are stored in the order of ``send``.

Threads: any number of threads may call ``send``, ``flush`` and ``close`` on one producer.
One sender thread (``raftq-async-producer``) forms the batches, sends them (a round of
ready batches at once, on the direct path's worker threads), retries, and completes the
futures; callbacks run on it, so they must not block (a callback that calls ``send`` on a
full buffer would wait for itself, up to ``max_block_ms``; one that calls ``flush`` or
``close`` would wait for itself for good).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TypeGuard

from protocol.errors import ErrorCode
from protocol.routing import partition_for_key
from protocol.types import NO_HEADERS, Durability, Headers, NewMessage, headers_of
from raftq.client_limits import ClientLimits
from raftq.errors import ApiError, BufferFullError, RaftQClientError, UnavailableError
from raftq.producer import PartitionBatch, Producer, message_bytes
from raftq.record_accumulator import ReadyBatch, RecordAccumulator
from raftq.records import PartitionOffset

Callback = Callable[[PartitionOffset | None, BaseException | None], None]
"""Called once per record with its acknowledgement or its failure (Kafka's ``onCompletion``)."""


@dataclass(slots=True)
class _Attempt:
    """A batch in flight: sent at least once, or waiting for its next try."""

    batch: ReadyBatch[Future[PartitionOffset]]
    sequence: int
    first_sent_s: float
    next_try_s: float
    tries: int = 0
    outcome_unknown: bool = False
    """Some attempt may have stored it (so a later final refusal proves nothing)."""
    messages: tuple[NewMessage, ...] = field(default=())


class AsyncProducer:
    """Thread-safe; registers with ``POST /producers`` on creation (as ``Producer``)."""

    def __init__(
        self,
        url: str,
        topic: str,
        *,
        linger_ms: float | None = None,
        batch_messages_max: int | None = None,
        batch_bytes_max: int | None = None,
        buffer_bytes_max: int | None = None,
        max_block_ms: float | None = None,
        limits: ClientLimits | None = None,
        producer_id: str | None = None,
        first_sequence: int = 0,
        direct: bool = True,
        durability: Durability | str = Durability.FSYNC,
        api_key: str | None = None,
        tls_ca: str | None = None,
    ) -> None:
        """The bounds default to ``limits``' (``ClientLimits``: ``linger_ms``,
        ``async_batch_messages_max``, ``async_batch_bytes_max``, ``buffer_bytes_max``,
        ``max_block_ms``); an argument given replaces its bound, checked the same way
        (``ValueError``). The rest is ``Producer``'s."""
        self.limits = _with_bounds(
            limits or ClientLimits(),
            linger_ms=linger_ms,
            async_batch_messages_max=batch_messages_max,
            async_batch_bytes_max=batch_bytes_max,
            buffer_bytes_max=buffer_bytes_max,
            max_block_ms=max_block_ms,
        )
        self.topic = topic
        self._clock = time.monotonic
        self._producer = Producer(
            url,
            topic,
            limits=self.limits,
            producer_id=producer_id,
            direct=direct,
            durability=durability,
            api_key=api_key,
            tls_ca=tls_ca,
        )
        self.producer_id = self._producer.producer_id
        self.direct_path = self._producer.direct_path
        count = self._producer.partition_count()
        if count is None:
            self._producer.close()
            raise UnavailableError(
                f"no partition map for topic {topic!r}", outcome_unknown=False, attempts=1
            )
        self._partition_count = count
        """Read by ``send`` without the sender's map; only ever grows (partitions are added,
        never removed), so a partition chosen by an older count still exists."""
        self._accumulator = _accumulator(self.limits)
        self._record_overhead_bytes = self.limits.record_overhead_bytes
        self.records_acknowledged = 0
        """Records stored so far (written by the sender thread only; for metrics, and for
        a caller that counts outcomes without keeping every future)."""
        self.records_failed = 0
        """Records whose future failed so far (the same)."""
        self._next_sequence = first_sequence
        self._waiting: list[_Attempt] = []
        self._closing = False
        self._lock = threading.Lock()
        self._wake_sender = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        """Notified when records complete: room in the buffer, flushes to check."""
        self._sender = threading.Thread(target=self._run, name="raftq-async-producer", daemon=True)
        self._sender.start()

    def send(
        self,
        value: str,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        partition_id: int | None = None,
        callback: Callback | None = None,
    ) -> Future[PartitionOffset]:
        """Queue one record; the future resolves to where it was stored, or to its failure
        (``ApiError``: refused; ``UnavailableError``: retries spent, see ``outcome_unknown``).
        Blocks at most ``max_block_ms`` while the buffer is full, then raises
        ``BufferFullError``."""
        if not isinstance(value, str) or not (key is None or isinstance(key, str)):
            raise TypeError("value must be a str, and key a str or None")
        message = NewMessage(value=value, key=key, headers=_headers(headers))
        size = message_bytes(message) + self._record_overhead_bytes
        future: Future[PartitionOffset] = Future()
        if callback is not None:
            future.add_done_callback(_calling(callback))
        with self._lock:
            if self._closing or not self._accumulator.has_room(size):
                self._wait_for_room(size)
            partition = self._partition_of(message, partition_id)
            if self._accumulator.append(partition, message, size, self._clock(), future):
                self._wake_sender.notify()
        return future

    def flush(self, timeout_s: float | None = None) -> None:
        """Send every record sent before this call at once (no linger) and wait until each
        is acknowledged or has failed (its future says which). ``TimeoutError`` after
        ``timeout_s``."""
        with self._lock:
            mark = self._accumulator.begin_flush()
            self._wake_sender.notify()
            try:
                done = self._progress.wait_for(
                    lambda: self._accumulator.flushed(mark) or not self._sender.is_alive(),
                    timeout_s,
                )
            finally:
                self._accumulator.end_flush()
        if not done:
            raise TimeoutError(f"flush: records still unacknowledged after {timeout_s} s")

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender thread, release the connections. ``send`` raises after."""
        with self._lock:
            self._closing = True
            self._wake_sender.notify()
        self._sender.join(timeout_s)
        if self._sender.is_alive():
            raise TimeoutError(f"close: records still unacknowledged after {timeout_s} s")
        self._producer.close()

    def __enter__(self) -> AsyncProducer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def buffered_bytes(self) -> int:
        """Bytes of records sent and not yet acknowledged or failed."""
        with self._lock:
            return self._accumulator.buffered_bytes

    def _wait_for_room(self, size: int) -> None:
        """Under the lock: until the record fits, at most ``max_block_ms``."""
        if self._closing:
            raise RuntimeError("send after close")
        if size > self._accumulator.buffer_bytes_max:
            raise BufferFullError(
                f"a record of {size} bytes can never fit buffer_bytes_max "
                f"({self._accumulator.buffer_bytes_max})"
            )
        block_s = self.limits.max_block_ms / 1000
        if not self._progress.wait_for(lambda: self._accumulator.has_room(size), block_s):
            raise BufferFullError(
                f"the buffer stayed full ({self._accumulator.buffered_bytes} of "
                f"buffer_bytes_max {self._accumulator.buffer_bytes_max} bytes unacknowledged) "
                f"for max_block_ms ({self.limits.max_block_ms:g} ms)"
            )
        if self._closing:
            raise RuntimeError("send after close")

    def _partition_of(self, message: NewMessage, partition_id: int | None) -> int:
        """Keyed records by the manager's rule (CRC-32 of the key), unkeyed ones sticky."""
        count = self._partition_count
        if partition_id is not None:
            if not 0 <= partition_id < count:
                raise ValueError(f"partition_id {partition_id} is not in 0..{count - 1}")
            return partition_id
        if message.key is not None:
            return partition_for_key(message.key, count)
        return self._accumulator.unkeyed_partition(count)

    # The sender thread.

    def _run(self) -> None:
        attempts: list[_Attempt] = []
        try:
            while True:
                with self._lock:
                    next_round = self._next_round()
                if next_round is None:
                    return
                attempts = next_round
                self._send_round(attempts)
                attempts = []
        except BaseException as exc:  # a bug: never leave a future hanging
            self._fail_everything(exc, attempts)

    def _next_round(self) -> list[_Attempt] | None:
        """Under the lock: the attempts to send now, waiting until there are some; ``None``
        once closing with nothing left."""
        while True:
            now = self._clock()
            for batch in self._accumulator.ready(now, closing=self._closing):
                messages = tuple(r.message for r in batch.records)
                attempt = _Attempt(batch, self._next_sequence, now, now, messages=messages)
                self._next_sequence += 1
                self._waiting.append(attempt)
            due = [a for a in self._waiting if a.next_try_s <= now]
            if due:
                self._waiting = [a for a in self._waiting if a.next_try_s > now]
                return due
            if self._closing and self._accumulator.is_empty:
                return None
            wakes = [a.next_try_s for a in self._waiting]
            linger_ends = self._accumulator.next_due_s()
            if linger_ends is not None:
                wakes.append(linger_ends)
            self._wake_sender.wait(max(0.0, min(wakes) - now) if wakes else None)

    def _send_round(self, attempts: list[_Attempt]) -> None:
        """Outside the lock: one try of each, then their futures or their next try."""
        batches = [PartitionBatch(a.batch.partition_id, a.sequence, a.messages) for a in attempts]
        results = self._producer.send_partition_batches(batches)
        count = self._producer.partition_count()
        if count is not None and count > self._partition_count:
            self._partition_count = count  # one int written by this thread only
        finished: list[_Attempt] = []
        for attempt, result in zip(attempts, results, strict=True):
            attempt.tries += 1
            outcome = self._judge(attempt, result) if _failed(result) else result
            if outcome is not None:
                _complete(attempt, outcome)
                finished.append(attempt)
                if isinstance(outcome, BaseException):
                    self.records_failed += len(attempt.batch.records)
                else:
                    self.records_acknowledged += len(attempt.batch.records)
        with self._lock:
            for attempt in finished:
                self._accumulator.done(attempt.batch)
            self._waiting.extend(a for a in attempts if a not in finished)
            if finished:
                self._progress.notify_all()

    def _judge(self, attempt: _Attempt, error: RaftQClientError) -> RaftQClientError | None:
        """The failure the batch ends with, or ``None`` and its next try is set."""
        unknown = attempt.outcome_unknown or _maybe_stored(error)
        attempt.outcome_unknown = unknown
        if isinstance(error, ApiError) and error.code is not ErrorCode.UNKNOWN_PRODUCER:
            error.after_unknown_outcome = error.after_unknown_outcome or unknown
            return error  # refused (4xx): repeating gets the same answer
        now = self._clock()
        if now - attempt.first_sent_s >= self.limits.delivery_timeout_ms / 1000:
            return UnavailableError(
                f"batch with sequence {attempt.sequence} to partition "
                f"{attempt.batch.partition_id} not acknowledged within delivery_timeout_ms "
                f"({attempt.tries} tries): {error}",
                outcome_unknown=unknown,
                attempts=attempt.tries,
            )
        # Also after UNKNOWN_PRODUCER (registered again meanwhile): a pause, so a producer
        # the managers keep forgetting does not spin.
        pause_s = self.limits.backoff_s_initial * 2 ** min(attempt.tries - 1, 16)
        attempt.next_try_s = now + min(pause_s, self.limits.backoff_s_max)
        return None

    def _fail_everything(self, exc: BaseException, sending: list[_Attempt]) -> None:
        """When the sender thread dies (a bug): every record's future fails with why, and
        ``send`` refuses from now on. Futures are completed outside the lock, as always
        (a callback may call ``send``)."""
        error = UnavailableError(
            f"the sender thread stopped: {exc!r}", outcome_unknown=True, attempts=0
        )
        error.__cause__ = exc  # the traceback of the bug, for whoever reads the failure
        with self._lock:
            self._closing = True
            attempts, self._waiting = sending + self._waiting, []
            queued = self._accumulator.drain()
            self._progress.notify_all()
        for attempt in attempts:
            _complete(attempt, error)
        for record in queued:
            if not record.token.done():
                record.token.set_exception(error)


def _complete(attempt: _Attempt, result: list[PartitionOffset] | BaseException) -> None:
    records = attempt.batch.records
    if isinstance(result, BaseException):
        for record in records:
            if not record.token.done():
                record.token.set_exception(result)
        return
    for record, offset in zip(records, result, strict=True):
        record.token.set_result(offset)


def _failed(result: list[PartitionOffset] | RaftQClientError) -> TypeGuard[RaftQClientError]:
    return isinstance(result, RaftQClientError)


def _maybe_stored(error: RaftQClientError) -> bool:
    if isinstance(error, UnavailableError):
        return error.outcome_unknown
    if isinstance(error, ApiError):
        return error.after_unknown_outcome
    return True  # a malformed answer: the request may have been carried out


def _accumulator(limits: ClientLimits) -> RecordAccumulator[Future[PartitionOffset]]:
    """The producer's accumulator; each record's token is its future."""
    return RecordAccumulator(
        linger_s=limits.linger_ms / 1000,
        batch_messages_max=limits.async_batch_messages_max,
        batch_bytes_max=limits.async_batch_bytes_max,
        buffer_bytes_max=limits.buffer_bytes_max,
        in_flight_batches_max=limits.in_flight_batches_per_partition_max,
    )


def _headers(headers: Mapping[str, str] | None) -> Headers:
    if not headers:
        return NO_HEADERS
    if not all(isinstance(n, str) and isinstance(v, str) for n, v in headers.items()):
        raise TypeError("headers must map str to str")
    return headers_of(dict(headers))


def _calling(callback: Callback) -> Callable[[Future[PartitionOffset]], None]:
    def done(future: Future[PartitionOffset]) -> None:
        error = future.exception()
        callback(None if error is not None else future.result(), error)

    return done


def _with_bounds(limits: ClientLimits, **bounds: float | int | None) -> ClientLimits:
    """``limits`` with each bound given replaced, validated (``ValueError``)."""
    given = {name: value for name, value in bounds.items() if value is not None}
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} must be a number")
    merged: ClientLimits = replace(limits, **given)  # type: ignore[arg-type]  # checked above
    return merged.validate()
