"""The data source and the bulk jobs on a local Spark session against a real cluster."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from raftq import Admin, Producer
from spark_jobs import bulk_consume, bulk_produce
from spark_jobs.commit_protocol import Layout, committed_offsets
from unit_tests.cluster.harness import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster]


def create_topic(cluster: Cluster, name: str, partitions: int) -> None:
    with Admin(cluster.lb_url) as admin:
        admin.create_topic(name, partitions=partitions)


def total_messages(cluster: Cluster, topic: str) -> int:
    with Admin(cluster.lb_url) as admin:
        return sum(admin.end_offsets(topic).values())


def read(spark: SparkSession, cluster: Cluster, topic: str, **options: str) -> DataFrame:
    reader = spark.read.format("raftq").option("raftq.url", cluster.lb_url)
    return reader.option("subscribe", topic).options(**options).load()


def rows(spark: SparkSession, count: int) -> DataFrame:
    return spark.range(count, numPartitions=2).select(
        sf.col("id").cast("string").alias("value"), (sf.col("id") % 13).cast("string").alias("key")
    )


def test_write_100k_rows_and_read_the_same_rows_back(spark: SparkSession, cluster: Cluster) -> None:
    create_topic(cluster, "rows", 3)
    written = rows(spark, 100_000)
    written.write.format("raftq").option("raftq.url", cluster.lb_url).option(
        "topic", "rows"
    ).option("raftq.batchMessagesMax", "5000").mode("append").save()
    assert total_messages(cluster, "rows") == 100_000
    back = read(spark, cluster, "rows", minPartitions="4").cache()
    assert back.rdd.getNumPartitions() >= 4
    # Same rows: equal counts, distinct values, sums and a checksum of (key, value) pairs.
    assert fingerprint(back) == fingerprint(written)
    # Offsets are contiguous from 0 in every partition, and a key always maps to one partition.
    per_partition = back.groupBy("partition").agg(
        sf.count("*").alias("n"), sf.max("offset").alias("last")
    )
    assert all(r["n"] == r["last"] + 1 for r in per_partition.collect())
    assert (
        back.groupBy("key").agg(sf.countDistinct("partition").alias("p")).filter("p > 1").count()
        == 0
    )
    back.unpersist()
    some = read(
        spark,
        cluster,
        "rows",
        startingOffsets='{"rows": {"0": 10}}',
        endingOffsets='{"rows": {"0": 20, "1": 0, "2": 0}}',
    )
    assert sorted(r["offset"] for r in some.collect()) == list(range(10, 20))


def fingerprint(frame: DataFrame) -> tuple[object, ...]:
    row = frame.agg(
        sf.count("*"),
        sf.countDistinct("value"),
        sf.sum(sf.col("value").cast("long")),
        sf.sum(sf.crc32(sf.concat_ws("|", "key", "value"))),
    ).collect()[0]
    return tuple(row)


def test_a_retried_task_leaves_no_duplicates(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster, "retry", 2)
    marker = tmp_path / "failed-once"

    def fail_first_attempt(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        seen = 0
        for batch in batches:
            seen += batch.num_rows
            if (
                context
                and context.partitionId() == 0
                and context.attemptNumber() == 0
                and seen > 12_000
            ):
                marker.touch()
                raise RuntimeError("injected failure after 12,000 rows")
            yield batch

    frame = rows(spark, 40_000).mapInArrow(fail_first_attempt, "value string, key string")
    frame.write.format("raftq").option("raftq.url", cluster.lb_url).option("topic", "retry").option(
        "raftq.batchMessagesMax", "1000"
    ).mode("append").save()
    assert marker.exists()
    assert total_messages(cluster, "retry") == 40_000
    assert read(spark, cluster, "retry").select("value").distinct().count() == 40_000


def test_available_now_stream_resumes_from_its_checkpoint(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster, "events", 2)
    create_topic(cluster, "events-copy", 2)
    with Producer(cluster.lb_url, "events") as producer:
        producer.produce_batch([(f"e{i}", f"k{i % 5}") for i in range(500)])

    def run_to_parquet() -> int:
        stream = (
            spark.readStream.format("raftq")
            .option("raftq.url", cluster.lb_url)
            .option("subscribe", "events")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "200")
            .load()
        )
        query = (
            stream.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        return len([p for p in query.recentProgress if p["numInputRows"] > 0])

    assert run_to_parquet() >= 3  # 500 rows, at most 200 per micro-batch
    with Producer(cluster.lb_url, "events") as producer:
        producer.produce_batch([(f"f{i}", None) for i in range(300)])
    run_to_parquet()
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.count() == 800
    assert out.select("partition", "offset").distinct().count() == 800

    copy = (
        spark.readStream.format("raftq")
        .option("raftq.url", cluster.lb_url)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value")
        .writeStream.format("raftq")
        .option("raftq.url", cluster.lb_url)
        .option("topic", "events-copy")
        .option("checkpointLocation", str(tmp_path / "copy-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert copy.awaitTermination(120)
    assert total_messages(cluster, "events-copy") == 800


def test_bulk_produce_then_bulk_consume_killed_at_each_step(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster, "bulk", 2)
    source = tmp_path / "input.csv"
    source.write_text("id,body\n" + "".join(f"{i},row {i}\n" for i in range(300)))
    frame = bulk_produce.load(spark, str(source), "csv", "body", "id")
    report = bulk_produce.run(spark, cluster.lb_url, "bulk", frame, progress_period_s=0.5)
    assert report.rows == 300

    expected = sorted(f"row {i}" for i in range(300))
    for point in (
        "staging written",
        "recorded written",
        "moved",
        "offsets committed",
        "recorded committed",
        "cleaned up",
    ):
        output = tmp_path / point.replace(" ", "-")

        def crash(reached: str, point: str = point) -> None:
            if reached == point:
                raise KeyboardInterrupt(point)  # like a kill: nothing after it runs

        with pytest.raises(KeyboardInterrupt):
            bulk_consume.consume(spark, cluster.lb_url, "bulk", output, hook=crash)
        finished = bulk_consume.consume(spark, cluster.lb_url, "bulk", output)
        assert finished is not None and finished.run == 1, point
        published = sorted(p.relative_to(output).parts[0] for p in output.rglob("*.parquet"))
        assert set(published) == {"run=000001"}, point
        values = sorted(pq.read_table(output / "run=000001").column("value").to_pylist())
        assert values == expected, point
        assert sorted(p.name for p in output.iterdir()) == ["_raftq", "run=000001"], point
        assert committed_offsets(Layout(output)) == {"bulk": finished.end["bulk"]}
        assert bulk_consume.consume(spark, cluster.lb_url, "bulk", output) is None


def test_bulk_consume_process_killed_with_sigkill_then_rerun(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The job as a user runs it, killed for real (SIGKILL) at two steps, then rerun."""
    create_topic(cluster, "killed", 1)
    with Producer(cluster.lb_url, "killed") as producer:
        producer.produce_batch(f"k{i}" for i in range(200))
    output = tmp_path / "killed-output"
    command = [
        sys.executable, "-m", "spark_jobs.bulk_consume", "--url", cluster.lb_url,
        "--topic", "killed", "--output", str(output), "--master", "local[1]",
    ]  # fmt: skip
    for point in ("staging written", "moved"):
        killed = subprocess.run(
            [*command, "--kill-at", point], check=False, capture_output=True, text=True, timeout=300
        )
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in output.iterdir()) == ["_raftq", "run=000001"]
    values = sorted(pq.read_table(output / "run=000001").column("value").to_pylist())
    assert values == sorted(f"k{i}" for i in range(200))
