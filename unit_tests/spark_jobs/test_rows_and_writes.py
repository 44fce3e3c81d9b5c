"""Row mapping, batching, and a retried task's idempotent writes against a fake service
that remembers sequences like a partition does (no Spark)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from protocol.types import NewMessage
from raftq.admin import pick_end_offsets
from raftq.client_limits import ClientLimits
from raftq.errors import UnavailableError
from raftq.records import PartitionInfo, Record, Replica
from spark_jobs.cluster_io import fetch_range, producer_id, write_batches
from spark_jobs.offsets import DataLossError
from spark_jobs.options import Endpoint
from spark_jobs.planning import OffsetRange
from spark_jobs.rows import (
    RowError,
    TopicBatch,
    check_write_columns,
    cut_batches,
    messages_from_columns,
    records_to_columns,
)
from unit_tests.raftq.fake_service import FakeService

FAST = ClientLimits(
    connect_timeout_s=0.5,
    request_timeout_s=2.0,
    attempts_max=3,
    backoff_s_initial=0.001,
    backoff_s_max=0.01,
    batch_messages_max=2,
)


def test_records_become_columns_in_the_kafka_schema_order() -> None:
    columns = records_to_columns(
        [Record("t", 1, 7, None, "v", 1_500), Record("t", 1, 8, "k", "w", 1_600, {"h": "x"})]
    )
    assert columns == {
        "key": [None, "k"],
        "value": ["v", "w"],
        "topic": ["t", "t"],
        "partition": [1, 1],
        "offset": [7, 8],
        "timestamp": [1_500_000, 1_600_000],
        "headers": [[], [("h", "x")]],
    }


def test_rows_become_messages_and_bad_rows_are_named() -> None:
    columns: dict[str, list[object]] = {
        "value": ["a", b"b"],
        "key": [None, b"k"],
        "topic": ["x", "y"],
    }
    assert list(messages_from_columns(columns, None)) == [
        ("x", NewMessage(value="a")),
        ("y", NewMessage(value="b", key="k")),
    ]
    assert [t for t, _ in messages_from_columns(columns, "forced")] == ["forced", "forced"]
    # Arrow gives a map cell as (name, value) pairs; a null cell is no headers.
    tagged: dict[str, list[object]] = {
        "value": ["a", "b"],
        "headers": [[("z", "1"), ("a", "2")], None],
    }
    assert [m.headers for _, m in messages_from_columns(tagged, "t")] == [
        (("a", "2"), ("z", "1")),
        (),
    ]
    with pytest.raises(RowError, match="row 0: header 'h'"):
        list(messages_from_columns({"value": ["a"], "headers": [[("h", None)]]}, "t"))
    with pytest.raises(RowError, match="row 12: 'value' is null"):
        list(messages_from_columns({"value": [None]}, "t", first_row=12))
    with pytest.raises(RowError, match="not UTF-8"):
        list(messages_from_columns({"value": [b"\xff"]}, "t"))
    with pytest.raises(RowError, match="no topic"):
        list(messages_from_columns({"value": ["a"], "topic": [None]}, None))


def test_write_schema_checks() -> None:
    check_write_columns(["value"], {"value": "binary"}, "t")
    with pytest.raises(RowError, match="'value' column"):
        check_write_columns(["key"], {"key": "string"}, "t")
    with pytest.raises(RowError, match="topic"):
        check_write_columns(["value"], {"value": "string"}, None)
    with pytest.raises(RowError, match="string or binary"):
        check_write_columns(["value"], {"value": "int"}, "t")
    check_write_columns(["value", "headers"], {"headers": "map<string,string>"}, "t")
    with pytest.raises(RowError, match="map<string,string>"):
        check_write_columns(["value", "headers"], {"headers": "map<string,int>"}, "t")


def test_batches_are_cut_per_topic_deterministically() -> None:
    rows = [
        ("b", NewMessage(value=str(i))) if i % 3 else ("a", NewMessage(value=str(i)))
        for i in range(7)
    ]
    batches = list(cut_batches(rows, 2, 1_000))
    assert batches == list(cut_batches(rows, 2, 1_000))
    assert [(b.topic, [m.value for m in b.messages]) for b in batches] == [
        ("b", ["1", "2"]),
        ("a", ["0", "3"]),
        ("b", ["4", "5"]),
        ("a", ["6"]),
    ]
    by_bytes = list(cut_batches([("a", NewMessage(value="xx"))] * 3, 10, 4))
    assert [len(b.messages) for b in by_bytes] == [2, 1]


def test_producer_ids_are_stable_and_bounded() -> None:
    assert producer_id("job", 3, None) == "spark-job-3"
    assert producer_id("job", 3, "t") == "spark-job-3-t"
    assert len(producer_id("job", 3, "t" * 200)) <= 200


class RememberingPartition:
    """POST /logs like one partition: the last sequence per producer and the offsets of its
    last ``remembered`` batches; a retried remembered batch returns its offsets, an older
    one gets 409 40902. ``handle`` answers as the load balancer does for a topic of this one
    partition, ``store`` as the partition's broker does."""

    def __init__(self, remembered: int = 8, partition_id: int = 0) -> None:
        self.partition_id = partition_id
        self.log: list[str] = []
        self.last: dict[str, int] = {}
        self.batches: dict[tuple[str, int], list[int]] = {}
        self.remembered = remembered

    def handle(self, params: dict[str, object]) -> tuple[int, object]:
        offsets = self._append(params)
        if offsets is None:
            return 409, {"error_code": 40902, "message": "sequence out of order"}
        return 201, {"offsets": [{"partition_id": self.partition_id, "offset": o} for o in offsets]}

    def store(self, body: dict[str, object]) -> tuple[int, dict[str, object]]:
        offsets = self._append(body)
        if offsets is None:
            return 409, {"error_code": 40902, "message": "sequence out of order"}
        ack = {"partition_id": self.partition_id, "durability": "fsync"}
        return 201, {"partition_id": self.partition_id, "offsets": offsets, "ack": ack}

    def _append(self, params: dict[str, object]) -> list[int] | None:
        """The batch's offsets (a remembered batch's, else appended now); None: out of order."""
        producer, sequence, messages = params["producer_id"], params["sequence"], params["messages"]
        assert isinstance(producer, str) and isinstance(sequence, int)
        assert isinstance(messages, list)
        if (producer, sequence) in self.batches:
            return self.batches[(producer, sequence)]
        if sequence <= self.last.get(producer, -1):
            return None
        offsets = list(range(len(self.log), len(self.log) + len(messages)))
        self.log.extend(str(m["message"]) for m in messages)
        self.last[producer] = sequence
        self.batches[(producer, sequence)] = offsets
        self.batches.pop((producer, sequence - self.remembered), None)
        return offsets


def attempt(rows: int, fail_after: int | None) -> Iterator[TopicBatch]:
    """One task attempt's batches; the first attempt dies after ``fail_after`` rows."""
    messages = (("t", NewMessage(value=str(i))) for i in range(rows))
    for count, batch in enumerate(cut_batches(messages, 2, 1_000)):
        if fail_after is not None and count * 2 >= fail_after:
            raise RuntimeError("executor lost")
        yield batch


ONE: dict[str, Any] = {"partition_counts": {"t": 1}}
"""The driver's count for topic "t" (else a task asks the cluster for it)."""


@pytest.mark.parametrize("fail_after", [2, 12, 30])
def test_a_retried_task_writes_nothing_twice(fail_after: int) -> None:
    service, partition = FakeService(), RememberingPartition()
    service.default("POST", "/producers", lambda p: (201, {"producer_id": p["producer_id"]}))
    service.default("POST", "/logs", partition.handle)
    try:
        with pytest.raises(RuntimeError, match="executor lost"):
            write_batches(
                Endpoint(service.url), attempt(31, fail_after), lambda _t: "spark-j-0", FAST, **ONE
            )
        assert len(partition.log) == fail_after
        summary = write_batches(
            Endpoint(service.url), attempt(31, None), lambda _t: "spark-j-0", FAST, **ONE
        )
    finally:
        service.stop()
    assert partition.log == [str(i) for i in range(31)]
    assert summary.rows == 31 and summary.batches_acknowledged + summary.batches_skipped == 16
    assert summary.batches_skipped == max(0, fail_after // 2 - 8)


def _paged(url: str, retries_max: int = 2, fail_on_data_loss: bool = True) -> list[list[int]]:
    """The offsets of each page ``fetch_range`` reads of ``[0, 3)`` from the service at
    ``url``, two messages a page."""
    pages = fetch_range(
        Endpoint(url),
        OffsetRange("t", 0, 0, 3),
        2,
        retries_max=retries_max,
        fail_on_data_loss=fail_on_data_loss,
        sleep=lambda _s: None,
    )
    return [[m.offset for m in page] for page in pages]


def test_fetch_range_pages_retries_short_reads_and_detects_gaps() -> None:
    service = FakeService()
    pages = iter([[0, 1], [], [2]])

    def fetch(params: dict[str, object]) -> tuple[int, object]:
        offsets = next(pages, [])
        return 200, {
            "messages": [
                {
                    "topic": "t",
                    "partition_id": 0,
                    "offset": o,
                    "key": None,
                    "message": str(o),
                    "timestamp_ms": 1,
                }
                for o in offsets
            ]
        }

    service.default("GET", "/logs", fetch)
    try:
        assert _paged(service.url) == [[0, 1], [2]]
        pages = iter([[0, 2]])
        with pytest.raises(DataLossError, match="not contiguous"):
            _paged(service.url)
        pages = iter([])
        with pytest.raises(DataLossError, match="unreadable"):
            _paged(service.url)
        pages = iter([])
        assert _paged(service.url, retries_max=1, fail_on_data_loss=False) == []
    finally:
        service.stop()


def test_end_offsets_prefer_the_leader_else_the_largest_reachable() -> None:
    def replica(broker: int) -> Replica:
        return Replica(broker, f"http://b{broker}", f"r{broker}", False)

    partitions = [PartitionInfo(0, 1, (replica(1), replica(2))), PartitionInfo(1, 2, (replica(2),))]
    answers = {
        "http://b1": [{"topic": "t", "partition_id": 0, "end_offset": 5, "is_leader": True}],
        "http://b2": [
            {"topic": "t", "partition_id": 0, "end_offset": 9, "is_leader": False},
            {"topic": "t", "partition_id": 1, "end_offset": 4, "is_leader": False},
            {"topic": "other", "partition_id": 1, "end_offset": 99, "is_leader": True},
        ],
    }
    assert pick_end_offsets("t", partitions, answers) == {0: 5, 1: 4}
    assert pick_end_offsets(
        "t", partitions[:1], {"http://b1": None, **{"http://b2": answers["http://b2"]}}
    ) == {0: 9}
    with pytest.raises(UnavailableError, match="t/1"):
        pick_end_offsets("t", partitions, {"http://b1": answers["http://b1"], "http://b2": None})


def test_fetch_range_reads_from_the_partition_leaders_broker() -> None:
    service, broker = FakeService(), FakeService()
    leader = {"broker_id": 1, "address": broker.url, "raft_address": "h:1", "is_leader": True}
    service.default(
        "GET",
        "/partitions",
        lambda _p: (200, {"partitions": [{"partition_id": 0, "leader": 1, "replicas": [leader]}]}),
    )

    def page(params: dict[str, object]) -> tuple[int, object]:
        start = int(str(params["offset"]))
        wanted = int(str(params["max_messages"]))
        return 200, {"messages": [record(o) for o in range(start, min(start + wanted, 3))]}

    broker.default("GET", "/logs", page)
    try:
        for direct in (True, False):
            service.default("GET", "/logs", page)
            got = fetch_range(
                Endpoint(service.url), OffsetRange("t", 0, 0, 3), 2, retries_max=0,
                fail_on_data_loss=True,
                direct=direct,
            )  # fmt: skip
            assert [[m.offset for m in p] for p in got] == [[0, 1], [2]]
        assert len(broker.calls("GET", "/logs")) == 2  # the direct read's two pages
        assert len(service.calls("GET", "/logs")) == 2  # the other read's
    finally:
        service.stop()
        broker.stop()


def record(offset: int) -> dict[str, object]:
    return {
        "topic": "t",
        "partition_id": 0,
        "offset": offset,
        "key": None,
        "message": str(offset),
        "timestamp_ms": 1,
    }
