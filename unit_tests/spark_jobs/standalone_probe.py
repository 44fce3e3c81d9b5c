"""A spark-submit app for the standalone test: which Python each task runs in, and where that
Python found ``raftq`` (the zip given with ``--py-files``). Prints one JSON line."""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

TASKS = 2


def _where(_: int) -> tuple[str, str]:
    import raftq  # noqa: PLC0415 (in the task: the executor's Python, not the driver's)

    return sys.executable, str(raftq.__file__)


def main() -> None:
    spark = SparkSession.builder.appName("raftq-standalone-probe").getOrCreate()
    try:
        found = spark.sparkContext.parallelize(range(TASKS), TASKS).map(_where).collect()
    finally:
        spark.stop()
    print("PROBE " + json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
