"""Rows per second of ``bulk_produce`` and ``bulk_consume`` for many small rows.

    python -m stress_tests.spark_benchmark --rows 1000000            # starts its own local cluster
    python -m stress_tests.spark_benchmark --rows 1000000 --url URL  # or uses a running one

Writes a Parquet file of ``--rows`` rows (value ``message-<n>``, 14-20 bytes; key
``key-<n mod 1000>``), produces it to a new topic with ``bulk_produce``, then reads the whole
topic back to Parquet with ``bulk_consume``, and prints both rates. Times include Spark's job
planning but not the session start.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from ops.cluster import LocalCluster
from raftq import Admin
from spark_jobs import bulk_consume, bulk_produce
from spark_jobs.options import Endpoint, add_api_key_option, api_key_from
from spark_jobs.session import build_session

DEFAULT_BASE_PORT = 19500


def make_input(spark: SparkSession, rows: int, path: Path, partitions: int) -> None:
    frame = spark.range(rows, numPartitions=partitions).select(
        sf.concat(sf.lit("message-"), sf.col("id").cast("string")).alias("value"),
        sf.concat(sf.lit("key-"), (sf.col("id") % 1000).cast("string")).alias("key"),
    )
    frame.write.mode("overwrite").parquet(str(path))


def measure(spark: SparkSession, endpoint: Endpoint, args: argparse.Namespace, work: Path) -> None:
    topic = f"bench-{int(time.time())}"
    with Admin(endpoint.url, api_key=endpoint.api_key, tls_ca=endpoint.tls_ca) as admin:
        admin.create_topic(topic, partitions=args.partitions)
    make_input(spark, args.rows, work / "input", args.tasks)
    frame = bulk_produce.load(spark, str(work / "input"), "parquet", "value", "key")
    produced = bulk_produce.run(
        spark, endpoint, topic, frame, batch_messages_max=args.batch_messages_max
    )
    print(
        f"bulk_produce: {produced.rows:,} rows in {produced.seconds:.1f} s = "
        f"{produced.rows_per_s:,.0f} rows/s",
        flush=True,
    )
    started = time.monotonic()
    plan = bulk_consume.consume(spark, endpoint, topic, work / "output")
    elapsed_s = time.monotonic() - started
    rows = 0 if plan is None else plan.rows
    print(
        f"bulk_consume: {rows:,} rows in {elapsed_s:.1f} s = {rows / elapsed_s:,.0f} rows/s",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stress_tests.spark_benchmark", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--url", default=None, help="a running cluster (default: start one)")
    add_api_key_option(parser)
    parser.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT)
    parser.add_argument("--partitions", type=int, default=3, help="of the topic")
    parser.add_argument("--tasks", type=int, default=4, help="Spark partitions of the input")
    parser.add_argument("--batch-messages-max", type=int, default=5_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="raftq-bench-") as scratch:
        work = Path(scratch)
        cluster = None
        endpoint = Endpoint(args.url or "", api_key_from(args, os.environ), args.tls_ca)
        if args.url is None:
            cluster = LocalCluster(work / "cluster", base_port=args.base_port)
            cluster.up()
            endpoint = Endpoint(cluster.lb_url, cluster.admin_key)
        spark = build_session("raftq-benchmark", args.master)
        try:
            measure(spark, endpoint, args, work)
        finally:
            spark.stop()
            if cluster is not None:
                cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
