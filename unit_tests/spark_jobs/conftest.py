"""One real RaftQ cluster and one local Spark session for the Spark test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_jobs.session import build_session
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["spark"]
    yield from running_cluster(tmp_path_factory.mktemp("spark-cluster"), port)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # local[2,3]: two threads, and a failed task is tried up to 3 times (the retry test).
    session = build_session(
        "raftq-tests",
        "local[2,3]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "2000",
            "spark.sql.streaming.checkpointLocation": str(
                Path(tmp_path_factory.mktemp("checkpoints"))
            ),
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
