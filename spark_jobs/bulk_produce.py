"""``bulk_produce``: files (CSV, JSON lines or Parquet) to a topic, with a progress report.

    spark-submit --master 'local[*]' --py-files raftq-spark.zip spark_jobs/bulk_produce.py \\
        --url http://127.0.0.1:17100 --topic orders --input /data/orders.csv

(or ``python -m spark_jobs.bulk_produce ...``; README.md says how to build the zip). The files
need a ``value`` column (or ``--value-column``) and may have a ``key`` column
(``--key-column``); CSV files need a header line. Rows are written with
``df.write.format("raftq")``, idempotently per task; give ``--job-id`` to make a rerun of a
crashed job write nothing twice (within the bounds in ``cluster_io.write_batches``).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from spark_jobs import cluster_io
from spark_jobs.options import Endpoint, add_api_key_option, api_key_from, endpoint_options
from spark_jobs.progress import TaskProgress
from spark_jobs.session import build_session, default_master

FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


@dataclass(frozen=True, slots=True)
class ProduceReport:
    rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / max(self.seconds, 1e-9)


def guess_format(path: str, given: str | None) -> str:
    if given:
        return given
    for suffix, name in FORMATS.items():
        if path.rstrip("/").endswith(suffix):
            return name
    raise ValueError(f"cannot tell the format of {path!r}: pass --format csv|json|parquet")


def load(spark: SparkSession, path: str, fmt: str, value: str, key: str | None) -> DataFrame:
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    frame = reader.load(path)
    columns = [sf.col(value).cast("string").alias("value")]
    if key is not None:
        columns.append(sf.col(key).cast("string").alias("key"))
    return frame.select(*columns)


def produce(
    frame: DataFrame, endpoint: Endpoint, topic: str, *, job_id: str | None, batch_messages_max: int
) -> None:
    writer = (
        frame.write.format("raftq")
        .options(**endpoint_options(endpoint))
        .option("topic", topic)
        .option("raftq.batchMessagesMax", str(batch_messages_max))
        .mode("append")
    )
    if job_id:
        writer = writer.option("raftq.jobId", job_id)
    writer.save()


class ProgressReporter:
    """Prints, every ``period_s``, how many messages the topic gained since the start (the
    sum of its end offsets), from a daemon thread of the driver. Runs on its own thread;
    ``stop`` joins it (bounded by one period plus one end-offset call)."""

    def __init__(self, endpoint: Endpoint, topic: str, period_s: float) -> None:
        self._endpoint, self._topic, self._period_s = endpoint, topic, period_s
        self._stop = threading.Event()
        self._base = self.total()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def total(self) -> int:
        return sum(cluster_io.end_offsets(self._endpoint, [self._topic])[self._topic].values())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(self._period_s + 60)
        return self.total() - self._base

    def _loop(self) -> None:
        while not self._stop.wait(self._period_s):
            try:
                added = self.total() - self._base
            except Exception as exc:  # a progress line is not worth failing the job for
                print(f"bulk_produce: progress unavailable: {exc}", flush=True)
                continue
            elapsed_s = time.monotonic() - self._started
            print(
                f"bulk_produce: {added:,} messages in {elapsed_s:.0f} s "
                f"({added / max(elapsed_s, 1e-9):,.0f}/s)",
                flush=True,
            )


def run(
    spark: SparkSession,
    endpoint: Endpoint,
    topic: str,
    frame: DataFrame,
    *,
    job_id: str | None = None,
    batch_messages_max: int = 1_000,
    progress_period_s: float = 5.0,
) -> ProduceReport:
    reporter = ProgressReporter(endpoint, topic, progress_period_s)
    started = time.monotonic()
    reporter.start()
    try:
        with TaskProgress(spark, f"bulk_produce {topic}"):
            produce(frame, endpoint, topic, job_id=job_id, batch_messages_max=batch_messages_max)
    finally:
        added = reporter.stop()
    return ProduceReport(added, time.monotonic() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bulk_produce", description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the load balancer's URL")
    add_api_key_option(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--input", required=True, help="a file or directory of files")
    parser.add_argument("--format", choices=sorted(set(FORMATS.values())), default=None)
    parser.add_argument("--value-column", default="value")
    parser.add_argument("--key-column", default=None)
    parser.add_argument("--job-id", default=None, help="stable id: a rerun repeats nothing")
    parser.add_argument("--batch-messages-max", type=int, default=1_000)
    parser.add_argument("--progress-s", type=float, default=5.0)
    parser.add_argument("--master", default=None, help="default: spark-submit's, else local[*]")
    args = parser.parse_args(argv)
    fmt = guess_format(args.input, args.format)
    spark = build_session("raftq-bulk-produce", args.master or default_master())
    try:
        frame = load(spark, args.input, fmt, args.value_column, args.key_column)
        report = run(
            spark,
            Endpoint(args.url, api_key_from(args, os.environ), args.tls_ca),
            args.topic,
            frame,
            job_id=args.job_id,
            batch_messages_max=args.batch_messages_max,
            progress_period_s=args.progress_s,
        )
    finally:
        spark.stop()
    print(
        f"bulk_produce: {report.rows:,} messages to {args.topic} in {report.seconds:.1f} s "
        f"({report.rows_per_s:,.0f} rows/s)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
