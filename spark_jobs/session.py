"""Building a SparkSession with the ``raftq`` data source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from spark_jobs.source import RaftQDataSource

LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
}
LOOPBACK_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
"""For local masters: no lookup of the machine's name, no port open beyond this host."""


def register(spark: SparkSession) -> None:
    """Make ``format("raftq")`` known to this session (Python data sources are registered
    per session)."""
    spark.dataSource.register(RaftQDataSource)


def build_session(
    app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A session with ``raftq`` registered. ``master`` ``None`` keeps what ``spark-submit``
    set (``local[*]`` when nothing did). Python workers use this interpreter unless
    PYSPARK_PYTHON says otherwise: the data source's planning runs in them and needs the
    same packages (pyarrow, raftq, spark_jobs)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    local = master is not None and master.startswith("local")
    if local:
        # The JVM resolves this machine's host name before it reads any setting; where the
        # name does not resolve (fresh machines, containers) Spark dies at start. Locally
        # everything is on loopback anyway.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("SPARK_LOCAL_HOSTNAME", "localhost")
    for key, value in {**LOCAL_CONF, **(LOOPBACK_CONF if local else {}), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def default_master() -> str | None:
    """``None`` under ``spark-submit`` (keep its ``--master``), else ``local[*]``. spark-submit
    starts the JVM first and tells the Python driver its port in PYSPARK_GATEWAY_PORT."""
    return None if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]"
