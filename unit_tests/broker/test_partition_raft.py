"""A partition on a real (single-node) pysyncobj group (``partition_raft``): a group of
commands is one entry with one result per command, the log is compacted by bytes, not only
by count or time, the partition's replicated methods keep their numbers, and the Raft files
written before the replication layer replay to the same state."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.partition.commands import Append, Command, Consume, MarkFlushed
from broker.partition.log import Appended, Consumed, Flushed, Rejected
from broker.partition.raft import PARTITION_METHODS, PartitionMachine, partition_raft
from protocol.limits import Limits
from protocol.types import BrokerId, Offset, PartitionId, ReplicaAddress, ReplicaId, ReplicaSpec
from runtime.replication.machine import method_numbers
from unit_tests.ports import free_port, port_block

WAIT_S = 15.0


@pytest.fixture
def make_raft(tmp_path: Path) -> Iterator[Callable[[Limits], PartitionMachine]]:
    nodes: list[PartitionMachine] = []

    def make(limits: Limits) -> PartitionMachine:
        address = ReplicaAddress(ReplicaId(0), BrokerId(1), "http://b1", f"127.0.0.1:{free_port()}")
        spec = ReplicaSpec("t", PartitionId(0), ReplicaId(0), (address,))
        node = partition_raft(spec, str(tmp_path / "replica"), "secret", limits)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.close()


def test_a_group_is_one_entry_with_a_result_per_command(
    make_raft: Callable[[Limits], PartitionMachine],
) -> None:
    raft = make_raft(Limits())
    raft.propose([Consume("warm-up", 1, None)])  # past the new leader's own first entry
    commands: list[Command] = [
        Append(((None, "a"), ("k", "b")), 1, "p", 1),
        Append(((None, "c"),), 1, "p", 1),  # the same sequence again: a duplicate
        Consume("c", 10, "r"),
        MarkFlushed(ReplicaId(0), Offset(2)),
        MarkFlushed(ReplicaId(5), Offset(2)),  # no such replica: rejected, others unaffected
    ]
    before = raft.status().commit_index
    results, entry = raft.propose(commands)
    assert results[:4] == [
        Appended(Offset(0), Offset(2), duplicate=False),
        Appended(Offset(0), Offset(2), duplicate=True),
        Consumed(Offset(0), Offset(2)),
        Flushed(Offset(2), Offset(2)),
    ]
    assert isinstance(results[4], Rejected)
    assert raft.status().commit_index == before + 1
    assert entry.index == before + 1 and entry.term == raft.status().term
    assert entry.replicas_synced == 1, "the only replica has it on disk"
    assert raft.read(lambda log: (log.end_offset, log.evicted_offset)) == (2, 2)


def test_the_log_is_compacted_once_its_entries_pass_the_byte_bound(
    make_raft: Callable[[Limits], PartitionMachine],
) -> None:
    raft = make_raft(Limits(raft_log_compaction_bytes_min=200_000))
    for sequence in range(40):  # ~40 KB per entry, ~1.6 MB in all (distinct values: pickle
        # stores a repeated string once)
        batch = tuple((None, f"{sequence}-{i}".ljust(1000, "x")) for i in range(40))
        raft.propose([Append(batch, 1, "p", sequence)])
    deadline = time.monotonic() + WAIT_S
    while raft.status().log_entries > 10:
        assert time.monotonic() < deadline, f"never compacted: {raft.status()}"
        time.sleep(0.02)
    assert raft.read(lambda log: log.end_offset) == 1600


def test_an_unsynced_group_is_not_synced_when_journaled(
    make_raft: Callable[[Limits], PartitionMachine], monkeypatch: pytest.MonkeyPatch
) -> None:
    raft = make_raft(Limits())
    raft.propose([Consume("warm-up", 1, None)])
    syncs: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    _, unsynced = raft.propose([Append(((None, "a"),), 1, None, None)], synced=False)
    assert syncs == [] and unsynced.replicas_synced == 0
    _, synced = raft.propose([Append(((None, "b"),), 1, None, None)])
    assert len(syncs) == 1 and synced.index == unsynced.index + 1
    assert raft.read(lambda log: log.end_offset) == 2


def test_the_partitions_replicated_methods_keep_their_numbers() -> None:
    """A journal entry names its method by number: these are the numbers of every journal
    written so far (``run_group_unsynced_v0`` sorts before ``run_group_v0``)."""
    assert method_numbers(PARTITION_METHODS) == {
        "append": 0,
        "consume": 1,
        "mark_flushed": 2,
        "run_group_unsynced": 3,
        "run_group": 4,
    }


LEGACY_FILES = Path(__file__).parent.parent / "legacy_raft_files"


@pytest.mark.parametrize("kind", ["journal", "dump"])
def test_raft_files_written_before_the_replication_layer_replay_to_the_same_state(
    tmp_path: Path, kind: str
) -> None:
    """Every kind of entry those journals hold (the legacy single commands, synced and
    unsynced groups) and a full dump with entries after it (``legacy_raft_files``). The
    entry after the dump shows only once a leader committed it: a restarted node that read
    its term from disk took the dump's last entry, of that term, for "caught up"."""
    directory = tmp_path / "replica"
    shutil.copytree(LEGACY_FILES / f"partition-{kind}", directory)
    port = port_block("legacy_raft_files")[0]  # the dump records the node's address
    address = ReplicaAddress(ReplicaId(0), BrokerId(1), "http://b1", f"127.0.0.1:{port}")
    spec = ReplicaSpec("t", PartitionId(0), ReplicaId(0), (address,))
    raft = partition_raft(spec, str(directory), "secret", Limits())
    try:
        deadline = time.monotonic() + WAIT_S
        while not raft.caught_up():
            assert time.monotonic() < deadline, "the restarted node elects itself"
            time.sleep(0.02)
        state = raft.read(
            lambda log: (
                log.end_offset,
                list(log.flushed_offsets),
                {offset: message[1] for offset, message in log.messages.items()},
                log.consumers["c"].offset,
                log.producers["p"].last_sequence,
            )
        )
        assert state == (5, [2], {2: "g-2", 3: "u-1", 4: "after-1"}, 3, 3)
        (appended,), _ = raft.propose([Append(((None, "new"),), 5000, "p", 4)])
        assert appended == Appended(Offset(5), Offset(6), duplicate=False)
    finally:
        raft.stop(WAIT_S)
