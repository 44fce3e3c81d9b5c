"""The PySpark data source ``raftq``: batch and streaming reads and writes.

Where each part runs: ``RaftQDataSource`` and the readers' planning methods (``partitions``,
``initialOffset``, ``latestOffset``) run on the driver, in a Python worker process Spark
starts; ``read`` and ``write`` run in the executors' Python workers, on copies pickled from
the driver. The logic lives in plain modules (``options``, ``offsets``, ``planning``,
``rows``, ``cluster_io``); this module only adapts them to Spark's interfaces.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from protocol.types import NewMessage
from raftq.client_limits import ClientLimits
from spark_jobs import cluster_io
from spark_jobs.cluster_io import TaskWriteSummary
from spark_jobs.offsets import (
    EARLIEST,
    LATEST,
    TopicOffsets,
    cap_offsets,
    check_start,
    offsets_from_json,
    resolve,
    to_stream_dict,
)
from spark_jobs.options import (
    OptionError,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from spark_jobs.planning import OffsetRange, offset_ranges, plan
from spark_jobs.rows import (
    READ_SCHEMA_DDL,
    WRITE_COLUMNS,
    check_write_columns,
    cut_batches,
    messages_from_columns,
    records_to_columns,
)

log = logging.getLogger(__name__)

ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("value", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", pa.map_(pa.string(), pa.string())),
    ]
)
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark's local property with a streaming query's id, kept in its checkpoint."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Spark's local property with the micro-batch id being run."""


class RaftQDataSource(DataSource):
    """``spark.read.format("raftq")``, ``readStream``, ``write`` and ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "raftq"

    def schema(self) -> str:
        return READ_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return RaftQBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RaftQStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> RaftQBatchWriter:
        return RaftQBatchWriter(_pin_routing(_write_options(self.options, schema, overwrite)))

    def streamWriter(self, schema: StructType, overwrite: bool) -> RaftQStreamWriter:
        return RaftQStreamWriter(_pin_routing(_write_options(self.options, schema, overwrite)))


def _pin_routing(options: WriteOptions) -> WriteOptions:
    """On the driver: the partition count of every topic the write may reach
    (``WriteOptions.partition_counts``), proposed by each task's producer at its first
    registration. A streaming query reads them when it starts; a micro-batch replayed after
    a restart still routes as its first attempt did, because the manager answers each
    producer id the count it first registered with (``cluster_io.write_batches``)."""
    limits = ClientLimits()
    if options.topic is None:
        counts = cluster_io.active_partition_counts(options.endpoint, limits)
    else:
        counts = {
            options.topic: cluster_io.active_partition_count(
                options.endpoint, options.topic, limits
            )
        }
    return replace(options, partition_counts=counts)


def _write_options(options: Mapping[str, str], schema: StructType, overwrite: bool) -> WriteOptions:
    if overwrite:
        raise OptionError("a RaftQ topic is append-only: use mode('append')")
    parsed = parse_write_options(options)
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    check_write_columns(schema.fieldNames(), types, parsed.topic)
    return parsed


# --- reading --------------------------------------------------------------------------------


def plan_batch(options: ReadOptions) -> list[OffsetRange]:
    """Resolve ``startingOffsets``/``endingOffsets`` against the cluster and plan the tasks."""
    ids = cluster_io.partition_ids(options.endpoint, options.topics)
    ends = cluster_io.end_offsets(options.endpoint, options.topics)
    starts = cluster_io.start_offsets(options.endpoint, options.topics)
    start = resolve(options.starting_offsets, ids, ends, missing=EARLIEST, starts=starts)
    start, warnings = check_start(
        start, ends, fail_on_data_loss=options.fail_on_data_loss, starts=starts
    )
    for warning in warnings:
        log.warning("%s", warning)
    end = resolve(options.ending_offsets, ids, ends, missing=LATEST)
    for topic, partitions in end.items():
        for partition, offset in partitions.items():
            if offset > ends[topic][partition]:
                raise OptionError(
                    f"endingOffsets {topic}/{partition}={offset} is beyond the partition's "
                    f"end offset {ends[topic][partition]}"
                )
    return plan(offset_ranges(start, end), options.min_partitions)


def _as_partitions(ranges: Sequence[OffsetRange]) -> list[InputPartition]:
    return [InputPartition(r) for r in ranges]


def read_range(options: ReadOptions, value: object) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one planned range: one per fetched page, no per-row Python objects
    on the way into Spark."""
    if not isinstance(value, OffsetRange):
        raise TypeError(f"expected an OffsetRange partition, got {type(value).__name__}")
    pages = cluster_io.fetch_range(
        options.endpoint,
        value,
        options.fetch_messages_max,
        retries_max=options.fetch_retries_max,
        fail_on_data_loss=options.fail_on_data_loss,
        direct=options.direct,
    )
    for page in pages:
        yield pa.RecordBatch.from_pydict(records_to_columns(page), schema=ARROW_SCHEMA)


class RaftQBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return _as_partitions(plan_batch(self.options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition.value)


class RaftQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are Kafka's JSON form, ``{"topic": {"0": 42}}``, each the end of what the
    batch read (exclusive). Runs on the driver; Spark keeps this object for the query's
    life, so ``_available_now_target`` persists between calls."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._available_now_target: TopicOffsets | None = None

    def initialOffset(self) -> dict[str, dict[str, int]]:
        ids = cluster_io.partition_ids(self.options.endpoint, self.options.topics)
        ends = cluster_io.end_offsets(self.options.endpoint, self.options.topics)
        starts = cluster_io.start_offsets(self.options.endpoint, self.options.topics)
        spec = self.options.starting_offsets
        return to_stream_dict(resolve(spec, ids, ends, missing=LATEST, starts=starts))

    def getDefaultReadLimit(self) -> ReadLimit:
        rows_max = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if rows_max is None else ReadMaxRows(rows_max)

    def prepareForTriggerAvailableNow(self) -> None:
        # AvailableNow reads what exists now and stops, however many batches that takes.
        self._available_now_target = cluster_io.end_offsets(
            self.options.endpoint, self.options.topics
        )

    def latestOffset(self, start: dict[str, object], limit: ReadLimit) -> dict[str, dict[str, int]]:
        ends = cluster_io.end_offsets(self.options.endpoint, self.options.topics)
        begin, warnings = check_start(
            offsets_from_json(start), ends, fail_on_data_loss=self.options.fail_on_data_loss
        )
        for warning in warnings:
            log.warning("%s", warning)
        latest = _cap_to(ends, self._available_now_target)
        if isinstance(limit, ReadMaxRows):
            latest = cap_offsets(begin, latest, limit.max_rows)
        return to_stream_dict(latest)

    def reportLatestOffset(self) -> dict[str, dict[str, int]]:
        return to_stream_dict(cluster_io.end_offsets(self.options.endpoint, self.options.topics))

    def partitions(
        self, start: dict[str, object], end: dict[str, object]
    ) -> Sequence[InputPartition]:
        stop = offsets_from_json(end)
        # A start beyond the end was reported (or refused) by latestOffset already.
        begin, _ = check_start(offsets_from_json(start), stop, fail_on_data_loss=False)
        return _as_partitions(plan(offset_ranges(begin, stop), self.options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition.value)


def _cap_to(ends: TopicOffsets, target: TopicOffsets | None) -> TopicOffsets:
    """``ends`` no further than ``target`` (the AvailableNow snapshot), when there is one."""
    if target is None:
        return ends
    return {
        topic: {p: min(end, target[topic][p]) for p, end in parts.items() if p in target[topic]}
        for topic, parts in ends.items()
    }


# --- writing --------------------------------------------------------------------------------


@dataclass
class RaftQCommitMessage(WriterCommitMessage):
    summary: TaskWriteSummary


def write_task(
    options: WriteOptions, job_id: str, partition_id: int, batches: Iterator[pa.RecordBatch]
) -> RaftQCommitMessage:
    """One task's rows to RaftQ, idempotently (see ``cluster_io.write_batches``)."""
    limits = ClientLimits(
        batch_messages_max=options.batch_messages_max,
        buffer_messages_max=max(ClientLimits().buffer_messages_max, options.batch_messages_max),
    ).validate()

    def messages() -> Iterator[tuple[str, NewMessage]]:
        first_row = 0
        for batch in batches:
            names = batch.schema.names
            columns = {c: batch.column(c).to_pylist() for c in WRITE_COLUMNS if c in names}
            yield from messages_from_columns(columns, options.topic, first_row)
            first_row += batch.num_rows

    summary = cluster_io.write_batches(
        options.endpoint,
        cut_batches(messages(), limits.batch_messages_max, limits.batch_bytes_max),
        lambda topic: cluster_io.producer_id(
            job_id, partition_id, None if options.topic else topic
        ),
        limits,
        direct=options.direct,
        partition_counts=options.partition_counts,
    )
    return RaftQCommitMessage(summary)


def _log_commit(what: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    summaries = [m.summary for m in messages if isinstance(m, RaftQCommitMessage)]
    log.info(
        "%s: %d rows from %d tasks; %d batches acknowledged, %d already written earlier",
        what,
        sum(s.rows for s in summaries),
        len(summaries),
        sum(s.batches_acknowledged for s in summaries),
        sum(s.batches_skipped for s in summaries),
    )


class RaftQBatchWriter(DataSourceArrowWriter):
    """Runs ``write`` on the executors. RaftQ has no transactions: rows a failed job's tasks
    acknowledged stay in the topic; a rerun with the same ``raftq.jobId`` does not repeat
    them (within the bounds in ``cluster_io.write_batches``)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftQCommitMessage:
        context = TaskContext.get()
        partition_id = 0 if context is None else context.partitionId()
        return write_task(self.options, self.options.job_id, partition_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(f"write {self.options.job_id} committed", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(f"write {self.options.job_id} aborted (acknowledged rows stay)", messages)


class RaftQStreamWriter(DataSourceStreamArrowWriter):
    """Producer ids come from the query id (kept in the checkpoint) and the micro-batch id,
    so a micro-batch that Spark replays after a restart writes nothing twice either."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RaftQCommitMessage:
        context = TaskContext.get()
        if context is None:
            raise RuntimeError("RaftQStreamWriter.write runs only inside a Spark task")
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) or self.options.job_id
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) or "0"
        job_id = f"{query_id}-{batch_id}"
        return write_task(self.options, job_id, context.partitionId(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        _log_commit(f"micro-batch {batch_id} committed", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        _log_commit(f"micro-batch {batch_id} aborted (acknowledged rows stay)", messages)
