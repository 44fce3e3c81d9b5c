"""A partition's snapshot (pysyncobj's full dump) is a frozen copy taken cheaply in the tick
thread and written by the dump writer's thread: it restores the replicated state exactly, a
later apply does not leak into it, and the tick thread pickles no message of a backlog."""

from __future__ import annotations

import pickle
import threading
import time
from pathlib import Path

import pytest
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer

from broker.partition.log import PartitionLog
from broker.partition.raft import FrozenPartitionLog
from protocol.limits import PartitionLimits
from protocol.types import ReplicaId
from runtime.replication.raft.dump import DumpWriter
from unit_tests.broker.test_partition_log import LIMITS, _random_commands, new_log

WAIT_S = 30.0


def _write_and_load(tmp_path: Path, frozen: FrozenPartitionLog) -> PartitionLog:
    """Through the dump writer to the file, back through pysyncobj's own reader."""
    path = str(tmp_path / "raft.dump")
    writer = DumpWriter(path, 2**16, False, None, None, None)
    writer.serialize(([{}, {"log": frozen}], (b"b", 2, 1), (b"a", 1, 1), set()), 1)
    _wait_written(writer)
    data = Serializer(path, 2**16, False, None, None, None).deserialize()
    log = data[0][1]["log"]
    assert isinstance(log, PartitionLog)
    return log


def _wait_written(writer: DumpWriter) -> None:
    deadline = time.monotonic() + WAIT_S
    while (state := writer.checkSerializing()[0]) == SERIALIZER_STATE.SERIALIZING:
        assert time.monotonic() < deadline, "the dump writer never finished"
        time.sleep(0.005)
    assert state == SERIALIZER_STATE.SUCCESS


@pytest.mark.parametrize("seed", range(3))
def test_a_snapshot_restores_the_log_exactly(tmp_path: Path, seed: int) -> None:
    log = new_log()
    for name, args in _random_commands(seed, 300):
        getattr(log, name)(*args)
    restored = _write_and_load(tmp_path, FrozenPartitionLog(log, chunk_messages=7))
    assert restored.__dict__ == log.__dict__
    assert list(restored.__dict__) == list(log.__dict__), "attribute order too"
    assert list(restored.messages) == list(log.messages), "messages in offset order"
    assert pickle.dumps(restored) == pickle.dumps(log), "bit for bit"


def test_an_apply_after_the_snapshot_started_is_not_in_it(tmp_path: Path) -> None:
    log = PartitionLog(3, LIMITS)
    log.append([(None, "a"), ("k", "b")], 1, "p1", 1)
    frozen = FrozenPartitionLog(log, chunk_messages=1)
    before = pickle.dumps(log)
    log.append([(None, "c")], 2, "p1", 2)  # the tick thread applies on
    log.consume("c1", 5, "r1")
    log.mark_flushed(ReplicaId(0), 3)
    assert pickle.dumps(_write_and_load(tmp_path, frozen)) == before


def test_the_tick_thread_pickles_no_message_and_the_writer_pickles_bounded_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why a snapshot of a full partition holds the tick thread only briefly (pysyncobj's
    own held it for 6.7 s at 500k messages here), checked by what each thread pickles
    rather than by a clock: the tick thread (here, this one) freezes the log without
    pickling a single message, and the writer's thread pickles the messages in chunks of
    at most ``chunk_messages`` (one GIL hold each). The time itself is the benchmark's."""
    chunk_messages = 1_000
    log = PartitionLog(3, PartitionLimits(50_000, 1 << 30, 49_999, 100, 8, 100))
    for start in range(0, 20_000, 5_000):
        log.append([(None, f"{start + i}-value") for i in range(5_000)], start, "p", start)
    pickled: list[tuple[str, int]] = []
    real_dumps = pickle.dumps

    def recording_dumps(value: object, protocol: int | None = None) -> bytes:
        messages = len(value) if isinstance(value, list) else 0
        if isinstance(value, dict):
            assert value.get("messages") is None, "the tick thread pickled the messages"
        pickled.append((threading.current_thread().name, messages))
        return real_dumps(value, protocol=protocol)

    monkeypatch.setattr("broker.partition.raft.pickle.dumps", recording_dumps)
    tick_thread = threading.current_thread().name
    writer = DumpWriter(str(tmp_path / "raft.dump"), 2**16, False, None, None, None)
    frozen = FrozenPartitionLog(log, chunk_messages)
    writer.serialize(([{}, {"log": frozen}], (b"b", 2, 1), (b"a", 1, 1), set()), 1)
    in_tick_thread = [count for thread, count in pickled if thread == tick_thread]
    assert in_tick_thread == [0], pickled  # the attributes only, without the messages
    _wait_written(writer)
    chunks = [count for thread, count in pickled if thread != tick_thread]
    assert sum(chunks) == 20_000 and max(chunks) == chunk_messages, chunks
