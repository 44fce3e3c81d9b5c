"""``bulk_consume``: a topic's offset range to Parquet, exactly once.

    spark-submit --master 'local[*]' --py-files raftq-spark.zip spark_jobs/bulk_consume.py \\
        --url http://127.0.0.1:17100 --topic orders --output /data/orders

(or ``python -m spark_jobs.bulk_consume ...``; README.md says how to build the zip). Each run
reads ``[committed, end)`` of every partition, where ``committed`` is what the previous run
recorded (``--starting-offsets`` for the first run, earliest by default) and ``end`` is
``--ending-offsets`` (latest by default), and publishes it as ``OUTPUT/run=NNNNNN/*.parquet``
through ``commit_protocol``: a rerun after a crash at any step finishes the interrupted run
without losing or duplicating output.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from spark_jobs import cluster_io
from spark_jobs.commit_protocol import Hook, Layout, RunPlan, run_once
from spark_jobs.offsets import (
    EARLIEST,
    LATEST,
    TopicOffsets,
    offsets_to_json,
    parse_offset_spec,
    resolve,
)
from spark_jobs.options import Endpoint, add_api_key_option, api_key_from, endpoint_options
from spark_jobs.progress import TaskProgress
from spark_jobs.session import build_session, default_master


def plan_range(
    endpoint: Endpoint, topic: str, committed: TopicOffsets | None, starting: str, ending: str
) -> tuple[TopicOffsets, TopicOffsets]:
    """The next range: from the committed offsets (``starting`` before the first run) to
    ``ending``, both resolved against the topic's partitions now. A partition added since
    the last run starts at the log start."""
    ids = cluster_io.partition_ids(endpoint, [topic])
    ends = cluster_io.end_offsets(endpoint, [topic])
    starts = cluster_io.start_offsets(endpoint, [topic])
    if committed is None:
        spec = parse_offset_spec(starting, "--starting-offsets")
        start = resolve(spec, ids, ends, missing=EARLIEST, starts=starts)
    else:
        start = resolve(committed, ids, ends, missing=EARLIEST, starts=starts)
    end = resolve(parse_offset_spec(ending, "--ending-offsets"), ids, ends, missing=LATEST)
    for partition, offset in start[topic].items():
        if end[topic][partition] < offset:
            raise ValueError(f"{topic}/{partition}: ending offset is before {offset}")
    return start, end


def write_staging(spark: SparkSession, endpoint: Endpoint, topic: str, plan: RunPlan) -> None:
    """The run's range, read through the data source, written as Parquet to staging."""
    frame = (
        spark.read.format("raftq")
        .options(**endpoint_options(endpoint))
        .option("subscribe", topic)
        .option("startingOffsets", offsets_to_json(plan.start) if plan.start else "earliest")
        .option("endingOffsets", offsets_to_json(plan.end))
        .load()
    )
    with TaskProgress(spark, f"bulk_consume {topic} run {plan.run}"):
        frame.write.mode("overwrite").parquet(plan.staging)


def consume(
    spark: SparkSession,
    endpoint: Endpoint,
    topic: str,
    output: Path,
    *,
    starting: str = "earliest",
    ending: str = "latest",
    hook: Hook = lambda _point: None,
) -> RunPlan | None:
    """One exactly-once run (or the finish of an interrupted one); ``None`` if nothing new."""

    return run_once(
        Layout(output),
        lambda committed: plan_range(endpoint, topic, committed, starting, ending),
        lambda plan: write_staging(spark, endpoint, topic, plan),
        hook,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bulk_consume", description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the load balancer's URL")
    add_api_key_option(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, type=Path, help="local or shared POSIX path")
    parser.add_argument("--starting-offsets", default="earliest", help="first run only")
    parser.add_argument("--ending-offsets", default="latest", help="latest or Kafka JSON")
    parser.add_argument("--master", default=None, help="default: spark-submit's, else local[*]")
    parser.add_argument(
        "--kill-at",
        metavar="POINT",
        help="for crash tests: SIGKILL this process on reaching POINT (e.g. 'moved')",
    )
    args = parser.parse_args(argv)
    spark = build_session("raftq-bulk-consume", args.master or default_master())
    started = time.monotonic()
    try:
        plan = consume(
            spark,
            Endpoint(args.url, api_key_from(args, os.environ), args.tls_ca),
            args.topic,
            args.output.resolve(),
            starting=args.starting_offsets,
            ending=args.ending_offsets,
            hook=lambda point: _report(point, args.kill_at),
        )
    finally:
        spark.stop()
    elapsed_s = time.monotonic() - started
    if plan is None:
        print("bulk_consume: nothing new to read", flush=True)
        return 0
    print(
        f"bulk_consume: run {plan.run}: {plan.rows} rows to {plan.final} in {elapsed_s:.1f} s "
        f"({plan.rows / max(elapsed_s, 1e-9):,.0f} rows/s)",
        flush=True,
    )
    return 0


def _report(point: str, kill_at: str | None) -> None:
    print(f"bulk_consume: {point}", flush=True)
    if point == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
