"""The broker's store on real SQLite and PostgreSQL, and its in-memory twin: idempotent
multi-row flush, range reads, checksums and the HostedReplicaRow table."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from broker.persistence.sql_store import SqlMessageStore
from broker.persistence.store import FlushBatch, MemoryMessageStore, MessageStore
from protocol.limits import Limits
from protocol.types import BrokerId, Headers, PartitionId, ReplicaAddress, ReplicaId, ReplicaSpec

SPEC = ReplicaSpec(
    topic="orders",
    partition_id=PartitionId(2),
    replica_id=ReplicaId(1),
    replicas=tuple(
        ReplicaAddress(ReplicaId(i), BrokerId(i + 1), f"http://b{i}", f"127.0.0.1:{9000 + i}")
        for i in range(3)
    ),
    limits=Limits(partition_consumers_max=7).partition_limits(),
)


def _drop_postgres_database(url: str) -> None:
    parsed = make_url(url)
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(
    request: pytest.FixtureRequest, tmp_path: object, postgres_url: str
) -> Iterator[MessageStore]:
    if request.param == "memory":
        yield MemoryMessageStore()
        return
    if request.param == "sqlite":
        sql = SqlMessageStore(f"sqlite:///{tmp_path}/broker.sqlite3")
        yield sql
        sql.close()
        return
    # A fresh database per test, created by the store itself as a broker does at start.
    url = (
        make_url(postgres_url)
        .set(database=f"raftq_test_{uuid.uuid4().hex[:12]}")
        .render_as_string(hide_password=False)
    )
    sql = SqlMessageStore(url)
    yield sql
    sql.close()
    _drop_postgres_database(url)


def _headers(offset: int) -> Headers:
    """Every third message has headers, with characters JSON and COPY both escape."""
    return (("a\tb", "x\ny"), ("trace", f"t{offset}")) if offset % 3 == 0 else ()


def rows(start: int, end: int, *, headers: bool = True) -> FlushBatch:
    return FlushBatch(
        messages=[
            (o, (None if o % 2 else f"k{o}", f"v{o}", 1000 + o, _headers(o) if headers else ()))
            for o in range(start, end)
        ],
        bitmasks=[0b100] * (end - start),
    )


def test_flush_is_idempotent_and_reads_ranges_in_order(store: MessageStore) -> None:
    store.save_replica(SPEC)
    store.insert_messages("orders", 2, rows(0, 5), 5)
    store.insert_messages("orders", 2, rows(3, 8), 8)  # overlaps: a repeated flush
    got = store.read_messages("orders", 2, 2, 6)
    assert [(m.offset, m.key, m.value, m.timestamp_ms, m.headers) for m in got] == [
        (2, "k2", "v2", 1002, ()),
        (3, None, "v3", 1003, _headers(3)),
        (4, "k4", "v4", 1004, ()),
        (5, None, "v5", 1005, ()),
    ]
    assert store.read_messages("orders", 1, 0, 10) == []
    assert len(store.read_messages("orders", 2, 0, 100)) == 8


def test_checksum_is_equal_for_equal_content_and_differs_otherwise(
    store: MessageStore,
) -> None:
    twin = MemoryMessageStore()
    for target in (store, twin):
        target.insert_messages("orders", 2, rows(0, 10), 10)
    assert store.checksum("orders", 2, 0, 10) == twin.checksum("orders", 2, 0, 10)
    assert store.checksum("orders", 2, 0, 10).count == 10
    assert store.checksum("orders", 2, 0, 9) != twin.checksum("orders", 2, 0, 10)


def test_a_header_counts_in_the_checksum(store: MessageStore) -> None:
    """A replica whose database lost or changed a header must not compare equal."""
    plain = FlushBatch(messages=[(0, ("k", "v", 5, ()))], bitmasks=[0])
    tagged = FlushBatch(messages=[(0, ("k", "v", 5, (("h", "1"),)))], bitmasks=[0])
    twin = MemoryMessageStore()
    store.insert_messages("orders", 2, plain, 1)
    twin.insert_messages("orders", 2, tagged, 1)
    assert store.checksum("orders", 2, 0, 1) != twin.checksum("orders", 2, 0, 1)


def test_a_database_from_before_headers_gets_the_column(tmp_path: Path) -> None:
    """An upgrade: the ``log`` table of an older broker has no ``msg_headers``; opening it
    adds the column, keeps the rows (no headers), and new rows keep theirs."""
    url = f"sqlite:///{tmp_path}/old.sqlite3"
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "CREATE TABLE log (topic_name VARCHAR(200), partition_id INTEGER, "
                "msg_offset BIGINT, msg TEXT, msg_key TEXT, timestamp_ms BIGINT, "
                "msg_replicated_bitmask INTEGER, "
                "PRIMARY KEY (topic_name, partition_id, msg_offset))"
            )
        )
        connection.execute(text("INSERT INTO log VALUES ('orders', 2, 0, 'old', NULL, 9, 0)"))
    engine.dispose()
    store = SqlMessageStore(url)
    store.insert_messages("orders", 2, rows(3, 4), 4)
    got = store.read_messages("orders", 2, 0, 10)
    store.close()
    assert [(m.offset, m.value, m.headers) for m in got] == [(0, "old", ()), (3, "v3", _headers(3))]


def test_replicas_are_recorded_once_and_rebuilt(store: MessageStore) -> None:
    store.save_replica(SPEC)
    store.save_replica(SPEC)
    assert store.load_replicas() == [SPEC]
    assert SPEC.partners == ("127.0.0.1:9000", "127.0.0.1:9002")


def test_a_large_flush_is_one_call(store: MessageStore) -> None:
    store.insert_messages("orders", 2, rows(0, 5000), 5000)
    assert store.checksum("orders", 2, 0, 5000).count == 5000


def test_any_text_round_trips_unchanged(store: MessageStore) -> None:
    """PostgreSQL flushes through COPY's text format: its escapes must not leak."""
    odd = ["tab\there", "new\nline", "back\\slash", "\\N", "cr\rlf\r\n", "ünï €", "", " "]
    batch = FlushBatch(
        messages=[
            (i, (text if i % 2 else None, text, 7, (("h", text),) if text else ()))
            for i, text in enumerate(odd)
        ],
        bitmasks=[0] * len(odd),
    )
    store.insert_messages("or\tders\\", 2, batch, len(odd))
    got = store.read_messages("or\tders\\", 2, 0, len(odd))
    expected = [
        (i, text if i % 2 else None, text, (("h", text),) if text else ())
        for i, text in enumerate(odd)
    ]
    assert [(m.offset, m.key, m.value, m.headers) for m in got] == expected


def test_a_database_from_before_partition_limits_gets_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    old = create_engine(f"sqlite:///{path}")
    with old.begin() as connection:
        connection.execute(
            text(
                "CREATE TABLE partition_raft (topic_name VARCHAR(200), partition_id INTEGER, "
                "msg_count BIGINT, replica_id INTEGER, raft_host VARCHAR(300), "
                "raft_partners TEXT, replicas TEXT, PRIMARY KEY (topic_name, partition_id))"
            )
        )
        connection.execute(
            text("INSERT INTO partition_raft VALUES ('old', 0, 0, 1, :host, '[]', :replicas)"),
            {
                "host": SPEC.raft_address,
                "replicas": json.dumps([r.to_json() for r in SPEC.replicas]),
            },
        )
    old.dispose()
    store = SqlMessageStore(f"sqlite:///{path}")
    try:
        (loaded,) = store.load_replicas()
        assert loaded.topic == "old" and loaded.limits is None
        store.save_replica(SPEC)
        assert SPEC in store.load_replicas()
    finally:
        store.close()


def test_retention_start_by_age_and_size_and_delete_below(store: MessageStore) -> None:
    store.save_replica(SPEC)
    store.insert_messages("orders", 2, rows(0, 10, headers=False), 10)  # timestamp 1000 + o
    assert store.retention_start("orders", 2, 10, None, None) == 0
    assert store.retention_start("orders", 2, 10, 1004, None) == 4  # the first one as young
    assert store.retention_start("orders", 2, 10, 2000, None) == 10  # all older: all leave
    assert store.retention_start("orders", 2, 6, 2000, None) == 6  # only rows below the end
    # Sizes: "v0".."v9" are 2 characters, keys "k<even>" 2 more: 4 + 2 + 4 + 2 ... from 0.
    assert store.retention_start("orders", 2, 10, None, 6) == 8  # keeps v8+k8 (4), v9 (2)
    assert store.retention_start("orders", 2, 10, None, 5) == 9
    assert store.retention_start("orders", 2, 10, 1003, 12) == 6  # the later of the two
    assert store.delete_below("orders", 2, 6) == 6
    assert store.delete_below("orders", 2, 6) == 0  # idempotent
    assert [m.offset for m in store.read_messages("orders", 2, 0, 10)] == [6, 7, 8, 9]
    assert store.retention_start("orders", 2, 10, None, None) == 6
    # Headers count as their stored JSON: '{"h": "1"}' is 10 characters, "v" 1 more.
    tagged = FlushBatch(messages=[(10, (None, "v", 1010, (("h", "1"),)))], bitmasks=[0])
    store.insert_messages("orders", 2, tagged, 11)
    assert store.retention_start("orders", 2, 11, None, 11) == 10
    assert store.retention_start("orders", 2, 11, None, 10) == 11
