"""A spark-submit app for the standalone test: a Structured Streaming query from one raftq
topic to another with a transform between (the value upper-cased), run until killed.

``standalone_stream.py URL API_KEY SOURCE TARGET CHECKPOINT``. Small micro-batches
(``maxOffsetsPerTrigger``) so that a kill lands between or inside them.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from spark_jobs.session import register

ROWS_PER_BATCH = "50"
TRIGGER = "1 second"


def main(url: str, api_key: str, source: str, target: str, checkpoint: str) -> None:
    spark = SparkSession.builder.appName("raftq-standalone-stream").getOrCreate()
    register(spark)
    options = {"raftq.url": url, "raftq.api_key": api_key}
    query = (
        spark.readStream.format("raftq")
        .options(**options)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", ROWS_PER_BATCH)
        .load()
        .select("key", sf.upper("value").alias("value"))
        .writeStream.format("raftq")
        .options(**options)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=TRIGGER)
        .start()
    )
    print("STREAM STARTED", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:6])
