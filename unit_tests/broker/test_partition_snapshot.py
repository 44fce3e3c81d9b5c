"""A partition's snapshot (pysyncobj's full dump) is a frozen copy taken cheaply in the tick
thread and written by the dump writer's thread: it restores the replicated state exactly, a
later apply does not leak into it, and a big backlog blocks the tick thread only briefly."""

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
from protocol.limits import Limits, PartitionLimits
from protocol.types import ReplicaId
from runtime.durable_journal import DumpWriter
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


def test_a_snapshot_of_a_full_partition_blocks_the_tick_thread_briefly(tmp_path: Path) -> None:
    """500k unflushed messages (``partition_unflushed_messages_max``): pysyncobj's own
    snapshot held its tick thread for 6.7 s here; now the tick thread only freezes the log
    (~20 ms) and the writer's thread never holds the GIL for long."""
    limits = Limits()
    messages = limits.partition_unflushed_messages_max
    log = PartitionLog(3, PartitionLimits(messages, 1 << 30, messages - 1, 100, 8, 100))
    batch_size = 10_000
    for start in range(0, messages, batch_size):
        values = [
            (None, f"{start + i}-abcdefghijklmnopqrstuvwxyz-{i * 7919}") for i in range(batch_size)
        ]
        log.append(values, start, f"p{start % 7}", start)
    bound_s = limits.raft_election_timeout_min_s / 4
    gaps_s: list[float] = []
    stop = threading.Event()

    def tick_thread() -> None:  # stands in for pysyncobj's: wakes every millisecond
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps_s.append(now - last)
            last = now

    ticker = threading.Thread(target=tick_thread)
    ticker.start()
    writer = DumpWriter(str(tmp_path / "raft.dump"), 2**16, False, None, None, None)
    started = time.perf_counter()
    frozen = FrozenPartitionLog(log, limits.raft_snapshot_chunk_messages)
    writer.serialize(([{}, {"log": frozen}], (b"b", 2, 1), (b"a", 1, 1), set()), 1)
    in_tick_thread_s = time.perf_counter() - started
    try:
        _wait_written(writer)
    finally:
        stop.set()
        ticker.join()
    assert in_tick_thread_s < bound_s, f"{in_tick_thread_s:.3f} s in the tick thread"
    assert max(gaps_s) < bound_s, f"another thread was held for {max(gaps_s):.3f} s"
