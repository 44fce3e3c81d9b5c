"""The data source's options, parsed once into frozen dataclasses. Pure: no Spark, no I/O.

Option names are case-insensitive (as in Spark); values are strings. Names follow Spark's
Kafka source where one exists (``subscribe``, ``startingOffsets``, ``endingOffsets``,
``failOnDataLoss``, ``minPartitions``, ``maxOffsetsPerTrigger``); RaftQ's own are prefixed
``raftq.`` (``raftq.url`` plays the part of ``kafka.bootstrap.servers``).
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from protocol.limits import Limits
from spark_jobs.offsets import OffsetSpec, parse_offset_spec

_SERVER = Limits()

URL = "raftq.url"
API_KEY = "raftq.api_key"
TLS_CA = "raftq.tls_ca"
SUBSCRIBE = "subscribe"
STARTING_OFFSETS = "startingoffsets"
ENDING_OFFSETS = "endingoffsets"
FAIL_ON_DATA_LOSS = "failondataloss"
MIN_PARTITIONS = "minpartitions"
MAX_OFFSETS_PER_TRIGGER = "maxoffsetspertrigger"
FETCH_MESSAGES_MAX = "raftq.fetchmessagesmax"
FETCH_RETRIES_MAX = "raftq.fetchretriesmax"
TOPIC = "topic"
BATCH_MESSAGES_MAX = "raftq.batchmessagesmax"
JOB_ID = "raftq.jobid"
DIRECT = "raftq.direct"

READ_OPTIONS = frozenset(
    {
        URL,
        API_KEY,
        TLS_CA,
        SUBSCRIBE,
        STARTING_OFFSETS,
        ENDING_OFFSETS,
        FAIL_ON_DATA_LOSS,
        MIN_PARTITIONS,
        MAX_OFFSETS_PER_TRIGGER,
        FETCH_MESSAGES_MAX,
        FETCH_RETRIES_MAX,
        DIRECT,
    }
)
WRITE_OPTIONS = frozenset({URL, API_KEY, TLS_CA, TOPIC, BATCH_MESSAGES_MAX, JOB_ID, DIRECT})
UNSUPPORTED_KAFKA = frozenset({"assign", "subscribepattern", "includeheaders"})


class OptionError(ValueError):
    """An option is missing, unknown or malformed; the message names it."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the cluster is, the API key to show it (never in a repr or a log line) and the
    CA bundle its ``https://`` certificate is checked against (a path on every executor)."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    tls_ca: str | None = None


@dataclass(frozen=True, slots=True)
class ReadOptions:
    endpoint: Endpoint
    topics: tuple[str, ...]
    starting_offsets: OffsetSpec
    """Default: earliest for a batch read, latest for a stream (as Kafka's source)."""
    ending_offsets: OffsetSpec
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    fetch_messages_max: int = _SERVER.fetch_messages_max
    """Messages asked for per ``GET /logs`` (the service returns at most 10,000)."""
    fetch_retries_max: int = 20
    """Fetches in a row that may come back short (a lagging replica) before giving up."""
    direct: bool = True
    """Fetch from each partition's leader broker (falling back to the load balancer)."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    endpoint: Endpoint
    topic: str | None
    """``None``: each row's ``topic`` column names its topic."""
    batch_messages_max: int = 1_000
    job_id: str = ""
    """Names the write's producers (``spark-{job_id}-{partition}``). Fixed by the driver, so
    every attempt of a task uses the same producer id. Give a stable one to make a rerun of
    the whole job write nothing twice."""
    direct: bool = True
    """Send each batch's partition groups to the leaders' brokers (falling back to the LB)."""
    partition_counts: Mapping[str, int] | None = None
    """Each topic's active partition count when the driver planned the write (the ``topic``'s,
    or with a ``topic`` column every topic's), proposed by each task's producer at its first
    registration; the manager keeps the count a producer id first registered with, so every
    attempt of a task (also a micro-batch replayed by a restarted query) cuts its batches
    the same way and reaches the partitions that remember them. A topic created after the
    write started gets its active count when a task first writes to it."""


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """Lower-case names; refuse two spellings of one name with different values."""
    result: dict[str, str] = {}
    for name, value in options.items():
        key = name.lower()
        if key in result and result[key] != value:
            raise OptionError(f"option {key!r} is given twice with different values")
        result[key] = str(value)
    return result


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    given = _known(options, READ_OPTIONS)
    if streaming and ENDING_OFFSETS in given:
        raise OptionError("endingOffsets is for batch reads only (as in Spark's Kafka source)")
    if not streaming and MAX_OFFSETS_PER_TRIGGER in given:
        raise OptionError("maxOffsetsPerTrigger is for streaming reads only")
    topics = tuple(t.strip() for t in _required(given, SUBSCRIBE).split(",") if t.strip())
    if not topics or len(set(topics)) != len(topics):
        raise OptionError("subscribe must list distinct topics, comma-separated")
    starting = parse_offset_spec(
        given.get(STARTING_OFFSETS, "latest" if streaming else "earliest"), "startingOffsets"
    )
    ending = parse_offset_spec(given.get(ENDING_OFFSETS, "latest"), "endingOffsets")
    if ending == "earliest":
        raise OptionError("endingOffsets may not be 'earliest' (as in Spark's Kafka source)")
    return ReadOptions(
        endpoint=_endpoint(given),
        topics=topics,
        starting_offsets=starting,
        ending_offsets=ending,
        fail_on_data_loss=_bool(given, FAIL_ON_DATA_LOSS, default=True),
        min_partitions=_int_or_none(given, MIN_PARTITIONS, 1, 100_000),
        max_offsets_per_trigger=_int_or_none(given, MAX_OFFSETS_PER_TRIGGER, 1, 2**62),
        fetch_messages_max=_int(given, FETCH_MESSAGES_MAX, 1, _SERVER.fetch_messages_max),
        fetch_retries_max=_int(given, FETCH_RETRIES_MAX, 0, 1_000, default=20),
        direct=_bool(given, DIRECT, default=True),
    )


def parse_write_options(options: Mapping[str, str], *, default_job_id: str = "") -> WriteOptions:
    given = _known(options, WRITE_OPTIONS)
    topic = given.get(TOPIC)
    if topic is not None and not topic.strip():
        raise OptionError("topic must not be empty")
    return WriteOptions(
        endpoint=_endpoint(given),
        topic=topic,
        batch_messages_max=_int(
            given, BATCH_MESSAGES_MAX, 1, _SERVER.request_messages_max, default=1_000
        ),
        job_id=given.get(JOB_ID) or default_job_id or uuid.uuid4().hex,
        direct=_bool(given, DIRECT, default=True),
    )


def _known(options: Mapping[str, str], allowed: frozenset[str]) -> dict[str, str]:
    """The options this source reads. Spark hands over its own too (``path``,
    ``checkpointLocation``, ...), so other names are ignored, as Kafka's source does, except
    a misspelt ``raftq.`` option or a Kafka option this source does not offer."""
    given = {k: v for k, v in normalize(options).items() if k in allowed}
    refused = sorted(
        k
        for k in normalize(options)
        if k not in allowed and (k.startswith(("raftq.", "kafka.")) or k in UNSUPPORTED_KAFKA)
    )
    if refused:
        raise OptionError(f"unsupported option(s) {refused}; known: {sorted(allowed)}")
    return given


def _required(given: Mapping[str, str], name: str) -> str:
    value = given.get(name, "").strip()
    if not value:
        raise OptionError(f"option {name!r} is required")
    return value


def _endpoint(given: Mapping[str, str]) -> Endpoint:
    url = _required(given, URL)
    if not url.startswith(("http://", "https://")):
        raise OptionError(f"raftq.url must be an http(s) URL of the load balancer, not {url!r}")
    key = given.get(API_KEY, "").strip()
    ca = given.get(TLS_CA, "").strip()
    return Endpoint(url.rstrip("/"), key or None, ca or None)


def _bool(given: Mapping[str, str], name: str, *, default: bool) -> bool:
    value = given.get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def _int(
    given: Mapping[str, str], name: str, low: int, high: int, *, default: int | None = None
) -> int:
    parsed = _int_or_none(given, name, low, high)
    if parsed is not None:
        return parsed
    return high if default is None else default


def _int_or_none(given: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    value = given.get(name)
    if value is None:
        return None
    try:
        parsed = int(value.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {value!r}") from None
    if not low <= parsed <= high:
        raise OptionError(f"option {name!r} must be in [{low}, {high}], not {parsed}")
    return parsed


def endpoint_options(endpoint: Endpoint) -> dict[str, str]:
    """The data source options that name ``endpoint`` (for the bulk jobs' reads and writes)."""
    options = {URL: endpoint.url}
    if endpoint.api_key is not None:
        options[API_KEY] = endpoint.api_key
    if endpoint.tls_ca is not None:
        options[TLS_CA] = endpoint.tls_ca
    return options


def add_api_key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key-file",
        help="file holding the API key (else $RAFTQ_API_KEY; a key on the command line "
        "would show in the process list)",
    )
    parser.add_argument(
        "--tls-ca", help="CA bundle (PEM) for an https:// URL, on the driver and every executor"
    )


def api_key_from(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The bulk jobs' key: ``--api-key-file``, else ``$RAFTQ_API_KEY`` (read in ``main``)."""
    if args.api_key_file:
        return Path(args.api_key_file).read_text(encoding="utf-8").strip() or None
    return environ.get("RAFTQ_API_KEY") or None
