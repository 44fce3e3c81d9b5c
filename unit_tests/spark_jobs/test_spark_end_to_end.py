"""The data source and the bulk jobs on a local Spark session against a real cluster."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from protocol.routing import partition_for_key
from raftq import Admin, ClientLimits, Consumer, PartitionOffset, ProduceError, Producer, Record
from spark_jobs import bulk_consume, bulk_produce
from spark_jobs.cluster_io import FETCH_ONLY_CONSUMER
from spark_jobs.commit_protocol import Layout, committed_offsets
from spark_jobs.options import Endpoint
from spark_jobs.progress import TaskProgress
from unit_tests.cluster.harness import Cluster, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.cluster]


def on(cluster: Cluster) -> dict[str, str]:
    """The data source options that reach the module's cluster with its admin key."""
    return {"raftq.url": cluster.lb_url, "raftq.api_key": cluster.admin_key}


def endpoint(cluster: Cluster) -> Endpoint:
    return Endpoint(cluster.lb_url, cluster.admin_key)


def create_topic(cluster: Cluster, name: str, partitions: int) -> None:
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        admin.create_topic(name, partitions=partitions)


def total_messages(cluster: Cluster, topic: str) -> int:
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        return sum(admin.end_offsets(topic).values())


def read(spark: SparkSession, cluster: Cluster, topic: str, **options: str) -> DataFrame:
    reader = spark.read.format("raftq").options(**on(cluster))
    return reader.option("subscribe", topic).options(**options).load()


def rows(spark: SparkSession, count: int) -> DataFrame:
    return spark.range(count, numPartitions=2).select(
        sf.col("id").cast("string").alias("value"), (sf.col("id") % 13).cast("string").alias("key")
    )


def test_write_100k_rows_and_read_the_same_rows_back(spark: SparkSession, cluster: Cluster) -> None:
    create_topic(cluster, "rows", 3)
    # Headers ride along: a map column written, the same map read back.
    trace = (sf.col("value").cast("long") % 5).cast("string")
    written = rows(spark, 100_000).withColumn("headers", sf.create_map(sf.lit("n"), trace))
    written.write.format("raftq").options(**on(cluster)).option("topic", "rows").option(
        "raftq.batchMessagesMax", "5000"
    ).mode("append").save()
    assert total_messages(cluster, "rows") == 100_000
    back = read(spark, cluster, "rows", minPartitions="4").cache()
    assert back.rdd.getNumPartitions() >= 4
    # Same rows: equal counts, distinct values, sums and a checksum of (key, value, header).
    assert fingerprint(back, headers=True) == fingerprint(written, headers=True)
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


def fingerprint(frame: DataFrame, *, headers: bool = False) -> tuple[object, ...]:
    parts = [sf.col("key"), sf.col("value")]
    if headers:
        parts.append(sf.col("headers")["n"])
    row = frame.agg(
        sf.count("*"),
        sf.countDistinct("value"),
        sf.sum(sf.col("value").cast("long")),
        sf.sum(sf.crc32(sf.concat_ws("|", *parts))),
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
    frame.write.format("raftq").options(**on(cluster)).option("topic", "retry").option(
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
    with Producer(cluster.lb_url, "events", api_key=cluster.admin_key) as producer:
        producer.produce_batch([(f"e{i}", f"k{i % 5}") for i in range(500)])

    def run_to_parquet() -> int:
        stream = (
            spark.readStream.format("raftq")
            .options(**on(cluster))
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
    with Producer(cluster.lb_url, "events", api_key=cluster.admin_key) as producer:
        producer.produce_batch([(f"f{i}", None) for i in range(300)])
    run_to_parquet()
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.count() == 800
    assert out.select("partition", "offset").distinct().count() == 800

    copy = (
        spark.readStream.format("raftq")
        .options(**on(cluster))
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value")
        .writeStream.format("raftq")
        .options(**on(cluster))
        .option("topic", "events-copy")
        .option("checkpointLocation", str(tmp_path / "copy-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert copy.awaitTermination(120)
    assert total_messages(cluster, "events-copy") == 800


def test_a_micro_batch_replayed_after_a_partition_was_added_writes_nothing_twice(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    """The driver dies after a micro-batch's write, before Spark records it as committed;
    meanwhile the output topic gains a partition. The restarted query replays the batch and
    reads three partitions where its first attempt saw two: its producers must still cut
    the rows as before, where the partitions recognise them."""
    create_topic(cluster, "replay-src", 2)
    create_topic(cluster, "replay-dst", 2)
    with Producer(cluster.lb_url, "replay-src", api_key=cluster.admin_key) as producer:
        producer.produce_batch([(f"r{i}", f"k{i % 17}") for i in range(600)])
    checkpoint = tmp_path / "checkpoint"

    def run() -> int:
        query = (
            spark.readStream.format("raftq")
            .options(**on(cluster))
            .option("subscribe", "replay-src")
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "value")
            .writeStream.format("raftq")
            .options(**on(cluster))
            .option("topic", "replay-dst")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        return sum(p["numInputRows"] for p in query.recentProgress)

    assert run() == 600
    assert total_messages(cluster, "replay-dst") == 600
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        assert admin.add_partition("replay-dst").partition_id == 2
    leader_name(cluster, "replay-dst", 2)
    assert run() > 0  # the uncommitted batch ran again
    assert total_messages(cluster, "replay-dst") == 600
    copied = read(spark, cluster, "replay-dst").select("value")
    assert copied.distinct().count() == 600


def test_bulk_produce_then_bulk_consume_killed_at_each_step(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster, "bulk", 2)
    source = tmp_path / "input.csv"
    source.write_text("id,body\n" + "".join(f"{i},row {i}\n" for i in range(300)))
    frame = bulk_produce.load(spark, str(source), "csv", "body", "id")
    report = bulk_produce.run(spark, endpoint(cluster), "bulk", frame, progress_period_s=0.5)
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
            bulk_consume.consume(spark, endpoint(cluster), "bulk", output, hook=crash)
        finished = bulk_consume.consume(spark, endpoint(cluster), "bulk", output)
        assert finished is not None and finished.run == 1, point
        published = sorted(p.relative_to(output).parts[0] for p in output.rglob("*.parquet"))
        assert set(published) == {"run=000001"}, point
        values = sorted(pq.read_table(output / "run=000001").column("value").to_pylist())
        assert values == expected, point
        assert sorted(p.name for p in output.iterdir()) == ["_raftq", "run=000001"], point
        assert committed_offsets(Layout(output)) == {"bulk": finished.end["bulk"]}
        assert bulk_consume.consume(spark, endpoint(cluster), "bulk", output) is None


def test_bulk_consume_process_killed_with_sigkill_then_rerun(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The job as a user runs it, killed for real (SIGKILL) at two steps, then rerun."""
    create_topic(cluster, "killed", 1)
    with Producer(cluster.lb_url, "killed", api_key=cluster.admin_key) as producer:
        producer.produce_batch(f"k{i}" for i in range(200))
    output = tmp_path / "killed-output"
    command = [
        sys.executable, "-m", "spark_jobs.bulk_consume", "--url", cluster.lb_url,
        "--topic", "killed", "--output", str(output), "--master", "local[1]",
    ]  # fmt: skip
    env = {**os.environ, "RAFTQ_API_KEY": cluster.admin_key}
    for point in ("staging written", "moved"):
        killed = subprocess.run(
            [*command, "--kill-at", point],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in output.iterdir()) == ["_raftq", "run=000001"]
    values = sorted(pq.read_table(output / "run=000001").column("value").to_pylist())
    assert values == sorted(f"k{i}" for i in range(200))


# --- the client's direct path (raftq/direct_path.py) on this module's cluster ----------------
# Spark reads and writes above already go direct (raftq.direct defaults to true); these drive
# the client library directly and check that the path is used and what faults do to it.

LONG_LIVED_MAP = ClientLimits(partition_map_age_s_max=600.0)
"""No refresh by age during a test: only refusals (and missing partitions) refresh the map."""


def read_partition(
    cluster: Cluster, topic: str, partition_id: int, *, direct: bool
) -> list[Record]:
    """Every message of the partition, by offset from 0 to its end offset."""
    lb_url, key = cluster.lb_url, cluster.admin_key
    with Admin(lb_url, api_key=key) as admin:
        end = admin.end_offsets(topic)[partition_id]
    records: list[Record] = []
    with Consumer(
        lb_url, topic, consumer_id=FETCH_ONLY_CONSUMER, direct=direct, api_key=key
    ) as reader:
        for _ in range(end + 1):  # bounded: each page brings at least one message
            if len(records) >= end:
                break
            records += reader.fetch(topic, partition_id, len(records), 1_000)
    assert [r.offset for r in records] == list(range(end))
    return records


def leader_name(cluster: Cluster, topic: str, partition_id: int) -> str:
    def leader() -> int | None:
        with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
            return admin.partitions(topic)[partition_id].leader

    return cluster.broker_name(wait_until(leader, 30, f"a leader of {topic}/{partition_id}"))


def test_the_direct_path_produces_pops_and_fetches_while_the_load_balancer_is_paused(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "direct", 3)
    for partition_id in range(3):  # the maps must name every leader before the LB pauses
        leader_name(cluster, "direct", partition_id)
    messages = [(f"d{i}", f"key-{i % 7}") for i in range(300)]
    with (
        Producer(
            cluster.lb_url, "direct", limits=LONG_LIVED_MAP, api_key=cluster.admin_key
        ) as producer,
        Consumer(
            cluster.lb_url, "direct", limits=LONG_LIVED_MAP, api_key=cluster.admin_key
        ) as consumer,
    ):
        acked = producer.produce_batch(messages[:150])
        assert consumer.fetch("direct", 0, 0, 1)  # the consumer's map, while the LB answers
        cluster.kill("lb", signal.SIGSTOP)  # accepts connections, never answers
        try:
            acked += producer.produce_batch(messages[150:])
            popped: list[Record] = []
            for _ in range(30):
                popped += consumer.poll(100)
                if len(popped) >= len(messages):
                    break
            fetched = [r for pid in range(3) for r in consumer.fetch("direct", pid, 0, 1_000)]
        finally:
            cluster.kill("lb", signal.SIGCONT)
        assert producer.direct_path is not None and consumer.direct_path is not None
        assert producer.direct_path.fallbacks == consumer.direct_path.fallbacks == 0
        assert producer.direct_path.answers >= 3 and consumer.direct_path.answers >= 3
    # Routed as the load balancer routes: CRC-32 of the key.
    assert [o.partition_id for o in acked] == [partition_for_key(k, 3) for _, k in messages]
    where = dict(zip((v for v, _ in messages), acked, strict=True))
    assert sorted(r.value for r in popped) == sorted(where)
    assert {r.value: PartitionOffset(r.partition_id, r.offset) for r in fetched} == where
    through_lb = [
        r for pid in range(3) for r in read_partition(cluster, "direct", pid, direct=False)
    ]
    assert {r.value: PartitionOffset(r.partition_id, r.offset) for r in through_lb} == where


def send_until_acked(producer: Producer, batch: Sequence[tuple[str, str]]) -> list[PartitionOffset]:
    """A batch whose retries are spent stays queued with its sequence: flush it again."""
    deadline_s = time.monotonic() + 90
    try:
        return producer.produce_batch(batch)
    except ProduceError as exc:
        assert exc.retained, exc
    while True:
        try:
            return producer.flush()
        except ProduceError as exc:
            assert exc.retained and time.monotonic() < deadline_s, exc


def test_acknowledged_direct_writes_survive_kill_9_and_pause_of_partition_leaders(
    cluster: Cluster,
) -> None:
    topic = "direct-faults"
    create_topic(cluster, topic, 2)
    acked: dict[str, PartitionOffset] = {}

    def produce(producer: Producer, first: int, last: int) -> None:
        for number in range(first, last):
            batch = [(f"f{number}-{i}", f"k{i % 5}") for i in range(20)]
            for (value, _), offset in zip(batch, send_until_acked(producer, batch), strict=True):
                acked[value] = offset

    with Producer(cluster.lb_url, topic, api_key=cluster.admin_key) as producer:
        produce(producer, 0, 10)
        killed = leader_name(cluster, topic, 0)
        cluster.kill(killed)  # kill -9 of the whole process group
        produce(producer, 10, 25)
        path = producer.direct_path
        assert path is not None and path.fallbacks > 0  # refused by the dead broker
        fallbacks_after_kill = path.fallbacks
        cluster.up()  # restarts the killed broker, waits until it is registered
        paused = leader_name(cluster, topic, 1)
        cluster.kill(paused, signal.SIGSTOP)
        try:
            produce(producer, 25, 35)
        finally:
            cluster.kill(paused, signal.SIGCONT)
        assert path.fallbacks > fallbacks_after_kill  # timed out at the paused one
        answers_before = path.answers
        batches = iter(range(35, 1_000))

        def back_to_the_brokers() -> bool:
            # A batch at a time: after the pause the direct path may wait out its backoff
            # before it asks the broker again (CI under load sent five batches within it).
            number = next(batches)
            produce(producer, number, number + 1)
            return path.answers > answers_before

        wait_until(back_to_the_brokers, 60, "a direct answer after the pause ended")
    assert len(acked) >= 720 and len(acked) % 20 == 0  # 35 batches, then until a direct answer
    for direct in (False, True):  # through the load balancer, then from the leaders
        stored = [r for pid in (0, 1) for r in read_partition(cluster, topic, pid, direct=direct)]
        values = [r.value for r in stored]
        assert len(values) == len(set(values)), "a message is stored twice"
        assert {r.value: PartitionOffset(r.partition_id, r.offset) for r in stored} == acked


def test_a_stale_map_after_a_partition_is_added_still_routes_correctly(cluster: Cluster) -> None:
    topic = "direct-grow"
    create_topic(cluster, topic, 2)
    quick = ClientLimits(partition_map_age_s_max=1.0, partition_map_refresh_s_min=0.5)
    with (
        Producer(
            cluster.lb_url, topic, partition_id=2, limits=LONG_LIVED_MAP, api_key=cluster.admin_key
        ) as to_new,
        Producer(cluster.lb_url, topic, limits=quick, api_key=cluster.admin_key) as keyed,
        Producer(cluster.lb_url, topic, direct=False, api_key=cluster.admin_key) as through_lb,
        Consumer(
            cluster.lb_url,
            topic,
            consumer_id=FETCH_ONLY_CONSUMER,
            limits=LONG_LIVED_MAP,
            api_key=cluster.admin_key,
        ) as reader,
    ):
        for client in (to_new, keyed, reader):
            assert client.direct_path is not None
            found = client.direct_path.maps.get(topic)
            assert found is not None and found.partition_count == 2  # maps fetched before
        with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
            assert admin.add_partition(topic).partition_id == 2
        leader_name(cluster, topic, 2)
        # A partition missing from a map refreshes it, then goes straight to its leader.
        (landed,) = to_new.produce_batch(["to the new partition"])
        assert landed.partition_id == 2
        (read,) = reader.fetch(topic, 2, landed.offset, 1)
        assert read.value == "to the new partition"
        assert to_new.direct_path is not None and reader.direct_path is not None
        assert to_new.direct_path.fallbacks == reader.direct_path.fallbacks == 0
        assert to_new.direct_path.answers == reader.direct_path.answers == 1
        # A map older than partition_map_age_s_max is fetched again: keys then route over
        # three partitions, exactly as through the load balancer.
        wait_until(
            lambda: keyed.direct_path is not None
            and (found := keyed.direct_path.maps.get(topic)) is not None
            and found.partition_count == 3,
            10,
            "the keyed producer's map to show 3 partitions",
        )
        batch = [("v", f"key-{i}") for i in range(30)]
        direct_offsets = keyed.produce_batch(batch)
        lb_offsets = through_lb.produce_batch(batch)
    assert [o.partition_id for o in direct_offsets] == [o.partition_id for o in lb_offsets]
    assert {o.partition_id for o in direct_offsets} == {0, 1, 2}


def test_a_read_from_earliest_starts_at_the_log_start_after_retention(
    spark: SparkSession, cluster: Cluster
) -> None:
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        admin.create_topic("retained", partitions=1, retention_bytes=100)  # 10 x 10 characters
        with Producer(cluster.lb_url, "retained", api_key=cluster.admin_key) as producer:
            producer.produce_batch((f"{i:010d}", None) for i in range(50))
        wait_until(lambda: admin.start_offsets("retained")[0] == 40, 60, "retention to act")
    back = read(spark, cluster, "retained").collect()
    assert sorted(row.offset for row in back) == list(range(40, 50))
    below = '{"retained": {"0": 5}}'
    with pytest.raises(Exception) as lost:
        read(spark, cluster, "retained", startingOffsets=below).collect()
    assert "below the log start 40" in str(lost.value)
    skipped = read(spark, cluster, "retained", startingOffsets=below, failOnDataLoss="false")
    assert sorted(row.offset for row in skipped.collect()) == list(range(40, 50))


def test_the_bulk_jobs_progress_bar_counts_tasks_with_rate_and_eta(spark: SparkSession) -> None:
    out = io.StringIO()
    with TaskProgress(spark, "counting", period_s=0.05, out=out, show=True):
        assert spark.range(60_000, numPartitions=6).selectExpr("sum(id)").collect()
    text = out.getvalue()
    last = text.replace("\r", "\n").strip().splitlines()[-1]
    # e.g. "counting: 100%|██████████| 7/7 [00:01<00:00,  5.9task/s]": done of total, the
    # elapsed time < the time left, and the rate.
    assert re.search(r"counting: 100%.* (\d+)/\1 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+task/s\]", last), (
        text
    )
