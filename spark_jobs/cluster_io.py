"""The data source's talk with RaftQ: topic metadata, fetching offset ranges, and the
idempotent writes of one Spark task. No Spark here; runs on the driver and the executors.

Not thread-safe: each function opens and closes its own client objects.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from protocol.errors import ErrorCode
from raftq.admin import Admin
from raftq.client_limits import ClientLimits
from raftq.consumer import Consumer
from raftq.errors import ApiError, ProduceError
from raftq.producer import Producer
from raftq.records import Record
from spark_jobs.offsets import DataLossError, TopicOffsets
from spark_jobs.options import Endpoint
from spark_jobs.planning import OffsetRange
from spark_jobs.rows import TopicBatch

log = logging.getLogger(__name__)

FETCH_ONLY_CONSUMER = "spark-fetch-only"
"""Passed as ``consumer_id`` so ``Consumer`` skips registering: fetch by offset is stateless
and never uses a consumer id."""
SHORT_FETCH_PAUSE_S_MAX = 1.0


def _admin(endpoint: Endpoint, limits: ClientLimits | None = None) -> Admin:
    return Admin(endpoint.url, limits=limits, api_key=endpoint.api_key, tls_ca=endpoint.tls_ca)


def partition_ids(endpoint: Endpoint, topics: Sequence[str]) -> dict[str, list[int]]:
    with _admin(endpoint) as admin:
        return {t: sorted(p.partition_id for p in admin.partitions(t)) for t in topics}


def end_offsets(endpoint: Endpoint, topics: Sequence[str]) -> TopicOffsets:
    with _admin(endpoint) as admin:
        return {t: admin.end_offsets(t) for t in topics}


def start_offsets(endpoint: Endpoint, topics: Sequence[str]) -> TopicOffsets:
    """Each partition's log start: where ``earliest`` begins (retention moves it)."""
    with _admin(endpoint) as admin:
        return {t: admin.start_offsets(t) for t in topics}


def fetch_range(
    endpoint: Endpoint,
    r: OffsetRange,
    page_messages_max: int,
    *,
    retries_max: int,
    fail_on_data_loss: bool,
    direct: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[list[Record]]:
    """Pages of ``[r.start, r.end)`` in offset order. A page may come back short when the
    replica that served it lags: asked again after a pause, at most ``retries_max`` times in
    a row. A gap in the offsets is data loss. ``direct``: pages come from the partition
    leader's broker, or through the load balancer when it does not answer."""
    offset, short_in_a_row = r.start, 0
    with Consumer(
        endpoint.url,
        r.topic,
        consumer_id=FETCH_ONLY_CONSUMER,
        direct=direct,
        api_key=endpoint.api_key,
        tls_ca=endpoint.tls_ca,
    ) as consumer:
        while offset < r.end:
            wanted = min(page_messages_max, r.end - offset)
            try:
                page = consumer.fetch(r.topic, r.partition_id, offset, wanted)
            except ApiError as exc:
                if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise
                offset = _past_retention(endpoint, r, offset, fail_on_data_loss, exc)
                continue
            page = _check_page(r, offset, page, fail_on_data_loss)
            if page:
                offset, short_in_a_row = page[-1].offset + 1, 0
                yield page
                continue
            short_in_a_row += 1
            if short_in_a_row > retries_max:
                _short_read(r, offset, fail_on_data_loss)
                return
            sleep(min(SHORT_FETCH_PAUSE_S_MAX, 0.05 * 2**short_in_a_row))


def _past_retention(
    endpoint: Endpoint, r: OffsetRange, offset: int, fail_on_data_loss: bool, exc: ApiError
) -> int:
    """The fetch was refused as out of range: retention moved the log start past ``offset``
    after the read was planned (data loss), so go on from the log start, or raise."""
    first = start_offsets(endpoint, [r.topic])[r.topic][r.partition_id]
    if first <= offset:
        raise exc  # not below the log start: beyond the end, which planning rules out
    problem = (
        f"{r.topic}/{r.partition_id}: offsets [{offset}, {min(first, r.end)}) were removed "
        "by retention before they were read"
    )
    if fail_on_data_loss:
        raise DataLossError(problem + " (set failOnDataLoss=false to go on)") from exc
    log.warning("%s; skipping them (failOnDataLoss=false)", problem)
    return min(first, r.end)


def _check_page(
    r: OffsetRange, offset: int, page: list[Record], fail_on_data_loss: bool
) -> list[Record]:
    """The page's offsets must run ``offset, offset+1, ...`` and stay below ``r.end``."""
    expected = list(range(offset, offset + len(page)))
    if [m.offset for m in page] == expected and (not page or page[-1].offset < r.end):
        return page
    problem = (
        f"{r.topic}/{r.partition_id}: asked from offset {offset}, got offsets "
        f"{page[0].offset}..{page[-1].offset} (not contiguous, or beyond {r.end})"
    )
    if fail_on_data_loss:
        raise DataLossError(problem)
    log.warning("%s; keeping the part in range", problem)
    return [m for m in page if offset <= m.offset < r.end]


def _short_read(r: OffsetRange, offset: int, fail_on_data_loss: bool) -> None:
    problem = (
        f"{r.topic}/{r.partition_id}: offsets [{offset}, {r.end}) stay unreadable; they were "
        "below the end offset when the read was planned"
    )
    if fail_on_data_loss:
        raise DataLossError(problem)
    log.warning("%s; skipping them (failOnDataLoss=false)", problem)


@dataclass(frozen=True, slots=True)
class TaskWriteSummary:
    """What one task attempt did: rows it covered, batches it appended, and batches that an
    earlier attempt had already written (answered from the partition's memory, or 40902)."""

    rows: int = 0
    batches_acknowledged: int = 0
    batches_skipped: int = 0


def producer_id(job_id: str, partition_id: int, topic: str | None) -> str:
    """``spark-{job}-{partition}``, the same for every attempt of a task. With a ``topic``
    column a task writes to several topics and needs one producer per topic (a producer id
    is registered for one topic), so the topic is appended."""
    base = f"spark-{job_id}-{partition_id}"
    if topic is None:
        return base
    named = f"{base}-{topic}"
    # Producer ids are at most 200 characters (protocol limits); a long topic name is hashed.
    return named if len(named) <= 200 else f"{base}-{hashlib.sha256(topic.encode()).hexdigest()}"


def active_partition_count(endpoint: Endpoint, topic: str, limits: ClientLimits) -> int:
    """The topic's active partitions now (the prefix that takes messages), read once by the
    driver to fix the routing of a whole write."""
    with _admin(endpoint, limits) as admin:
        partitions = sorted(admin.partitions(topic), key=lambda p: p.partition_id)
    count = len(list(itertools.takewhile(lambda p: p.active, partitions)))
    if count == 0:
        raise ValueError(f"topic {topic!r} has no active partition yet")
    return count


def active_partition_counts(endpoint: Endpoint, limits: ClientLimits) -> dict[str, int]:
    """Every topic's active partition count now (one ``GET /topics``), read once by the
    driver of a write to a ``topic`` column; topics still being created are left out."""
    with _admin(endpoint, limits) as admin:
        return {
            t.name: t.active_partition_count
            for t in admin.list_topics()
            if t.active_partition_count
        }


def write_batches(
    endpoint: Endpoint,
    batches: Iterable[TopicBatch],
    producer_ids: Callable[[str], str],
    limits: ClientLimits,
    *,
    direct: bool = True,
    partition_counts: Mapping[str, int] | None = None,
) -> TaskWriteSummary:
    """Send ``batches`` strictly one after another (each acknowledged before the next), batch
    *i* of a topic with sequence *i* of that topic's producer.

    Why a retried task writes nothing twice: its batches are the same (same rows, same order,
    deterministic cut) with the same producer id and sequences. A replayed batch whose
    ``(producer id, sequence)`` the partition still remembers returns its original offsets
    and appends nothing. 40902 (SEQUENCE_OUT_OF_ORDER) means the partition has already seen a
    later sequence of this producer; since batch *i+1* is sent only after batch *i* was
    acknowledged, batch *i* was then fully written, so it is skipped. Bounds: a partition
    remembers at most ``partition_producers_max`` (10,000) producers, least recently used
    forgotten; a producer forgotten there starts afresh and its replay would append again.
    ``partition_counts`` proposes, per topic, the partition count batches are cut with (the
    driver's; a topic without one, created after the driver read them, gets its active
    count now). The manager pins it to the producer id at the id's first registration and
    answers the pinned count to every later one (``Producer``), so a retry or a replayed
    micro-batch after a partition was added still reaches the same partitions, whatever
    its driver read.
    """
    producers: dict[str, Producer] = {}
    rows = sent = skipped = 0
    try:
        for batch in batches:
            producer = producers.get(batch.topic)
            if producer is None:
                producer = Producer(
                    endpoint.url,
                    batch.topic,
                    producer_id=producer_ids(batch.topic),
                    limits=limits,
                    direct=direct,
                    partition_count=(partition_counts or {}).get(batch.topic)
                    or active_partition_count(endpoint, batch.topic, limits),
                    api_key=endpoint.api_key,
                    tls_ca=endpoint.tls_ca,
                )
                producers[batch.topic] = producer
            written = _send_once(producer, batch)
            rows += len(batch.messages)
            sent, skipped = sent + written, skipped + (1 - written)
    finally:
        for producer in producers.values():
            producer.close()
    return TaskWriteSummary(rows, sent, skipped)


def _send_once(producer: Producer, batch: TopicBatch) -> int:
    """1 if this call appended or confirmed the batch, 0 if it was written long ago (40902)."""
    try:
        producer.produce_batch(batch.messages)
        return 1
    except ProduceError as exc:
        cause = exc.__cause__
        if (
            isinstance(cause, ApiError)
            and cause.code is ErrorCode.SEQUENCE_OUT_OF_ORDER
            and not exc.retained
            and producer.pending_messages == 0
        ):
            return 0
        raise
