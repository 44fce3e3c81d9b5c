"""The durable journal: every Raft log change and every vote is synced before pysyncobj
acts on it, and a restarted node reads back what it wrote."""

from __future__ import annotations

import gzip
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pysyncobj.pickle
import pysyncobj.syncobj
import pytest
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.journal import FIRST_RECORD_OFFSET, LAST_RECORD_OFFSET_OFFSET
from pysyncobj.serializer import Serializer

from runtime.replication.machine import FrozenState
from runtime.replication.raft import journal as durable_journal
from runtime.replication.raft.dump import DumpWriter
from runtime.replication.raft.journal import DurableFileJournal, DurableMetaStorer

WAIT_S = 10.0


def test_every_append_and_truncation_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    monkeypatch.setattr(DurableFileJournal, "flush", lambda self: synced.append("flush"))
    journal = DurableFileJournal(str(tmp_path / "raft.journal"))
    journal.add(b"one", 1, 1)
    journal.add(b"two", 2, 1)
    assert synced == ["flush", "flush"]
    journal.deleteEntriesFrom(1)
    assert len(synced) == 3
    journal._destroy()


def test_entries_and_votes_survive_a_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(descriptor: int) -> None:
        fsyncs.append(descriptor)
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    path = str(tmp_path / "raft.journal")
    journal = DurableFileJournal(path)
    journal.add(b"cmd", 1, 3)
    journal.setCurrentTerm(3, "node-b")
    assert len(fsyncs) >= 2  # the vote's file and its folder
    journal._destroy()
    reopened = DurableFileJournal(path)
    assert reopened[0] == (b"cmd", 1, 3)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (3, "node-b")
    assert isinstance(DurableMetaStorer(path + ".meta").getMeta(), dict)
    reopened._destroy()


def test_nodes_built_within_installed_use_it_and_others_keep_pysyncobjs(tmp_path: Path) -> None:
    original = pysyncobj.syncobj.createJournal
    with durable_journal.installed():
        journal = pysyncobj.syncobj.createJournal(str(tmp_path / "j"))
        assert isinstance(journal, DurableFileJournal)
        assert pysyncobj.syncobj.Serializer is DumpWriter
        assert not isinstance(pysyncobj.syncobj.createJournal(None), DurableFileJournal)
    journal._destroy()
    assert pysyncobj.syncobj.createJournal is original
    plain = pysyncobj.syncobj.createJournal(str(tmp_path / "plain"))
    assert not isinstance(plain, DurableFileJournal)
    plain._destroy()


def test_term_and_vote_are_fsynced_and_a_commit_index_alone_is_not_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    storer = DurableMetaStorer(str(tmp_path / "raft.journal.meta"))
    storer.storeMeta({"currentTerm": 3, "votedForNodeId": "a", "raftCommitIndex": 10})
    assert len(fsyncs) == 2, "the file, then the folder after the rename"
    storer.storeMeta({"currentTerm": 3, "votedForNodeId": "a", "raftCommitIndex": 11})
    assert len(fsyncs) == 2, "a moved commit index alone costs no fsync"
    storer.storeMeta({"currentTerm": 3, "votedForNodeId": "b", "raftCommitIndex": 11})
    assert len(fsyncs) == 4
    reread = DurableMetaStorer(str(tmp_path / "raft.journal.meta")).getMeta()
    assert (reread["currentTerm"], reread["votedForNodeId"]) == (3, "b")


def test_the_adapter_finds_its_journal_and_its_size_in_bytes(tmp_path: Path) -> None:
    path = str(tmp_path / "raft.journal")
    journal = DurableFileJournal(path)
    assert durable_journal.opened(path) is journal
    assert journal.entry_bytes == 0
    journal.add(b"x" * 1000, 1, 1)
    journal.add(b"y" * 500, 2, 1)
    assert 1500 < journal.entry_bytes < 1600, "commands plus a small header each"
    journal.deleteEntriesTo(1)
    assert 500 < journal.entry_bytes < 600
    journal._destroy()


def test_a_sync_is_an_fdatasync_of_the_journal_file_which_releases_the_gil(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "raft.journal"
    journal = DurableFileJournal(str(path))
    synced: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    journal.add(b"entry", 1, 1)
    assert synced == [path.stat().st_ino], "one fdatasync, of the journal file itself"
    assert b"entry" in path.read_bytes(), "the mapped write is in the file"
    journal._destroy()


# --- creates, renames and their order (a recorder of the real calls) ---------------------


class DiskCalls:
    """Records fsync, fdatasync and rename calls (then makes them) as (call, file name)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, str]] = []
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._sync(name, getattr(os, name)))
        real_replace = os.replace

        def replace(source: str, target: str) -> None:
            self.calls.append(("rename", f"{Path(source).name}->{Path(target).name}"))
            real_replace(source, target)

        monkeypatch.setattr(os, "replace", replace)

    def _sync(self, name: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(descriptor: int) -> None:
            self.calls.append((name, Path(os.readlink(f"/proc/self/fd/{descriptor}")).name))
            real(descriptor)

        return sync


def test_a_new_journal_and_its_folder_are_synced_when_it_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskCalls(monkeypatch)
    journal = DurableFileJournal(str(tmp_path / "raft.journal"))
    assert disk.calls == [("fsync", "raft.journal"), ("fsync", tmp_path.name)]
    journal._destroy()


def test_compaction_syncs_the_dump_then_renames_a_synced_new_journal_over_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pysyncobj rewrote the kept entries in place: a crash in the middle lost the rest."""
    path = str(tmp_path / "raft.journal")
    journal = DurableFileJournal(path)
    (tmp_path / "raft.dump").write_bytes(b"snapshot")
    for index in range(1, 10):
        journal.add(f"entry {index}".encode(), index, 1)
    disk = DiskCalls(monkeypatch)
    journal.deleteEntriesTo(5)
    folder = tmp_path.name
    assert disk.calls == [
        ("fsync", "raft.dump"),
        ("fsync", folder),
        ("fsync", "raft.journal.rewrite"),
        ("rename", "raft.journal.rewrite->raft.journal"),
        ("fsync", folder),
    ]
    journal.add(b"entry 10", 10, 2)  # still appends to the new file
    assert [entry[1] for entry in journal] == [6, 7, 8, 9, 10]
    journal._destroy()
    reopened = DurableFileJournal(path)
    assert list(reopened) == [(f"entry {i}".encode(), i, 1) for i in range(6, 10)] + [
        (b"entry 10", 10, 2)
    ]
    reopened._destroy()


def test_keep_from_drops_only_what_precedes_a_dumps_last_entries(tmp_path: Path) -> None:
    journal = DurableFileJournal(str(tmp_path / "raft.journal"))
    for index in range(1, 10):
        journal.add(b"x", index, 1)
    assert not journal.keep_from((b"x", 4, 2), (b"x", 5, 2)), "another term: not the same"
    assert not journal.keep_from((b"x", 9, 1), (b"x", 10, 1)), "past the journal's end"
    assert len(journal) == 9
    assert journal.keep_from((b"x", 4, 1), (b"x", 5, 1))
    assert [entry[1] for entry in journal] == [4, 5, 6, 7, 8, 9]
    assert journal.keep_from((b"x", 4, 1), (b"x", 5, 1)), "already starts there"
    journal._destroy()


def _dump_writer(path: Path) -> DumpWriter:
    return DumpWriter(str(path), 2**16, False, None, None, None)


def _wait_written(writer: DumpWriter) -> object:
    deadline = time.monotonic() + WAIT_S
    while True:
        state, _ = writer.checkSerializing()
        if state != SERIALIZER_STATE.SERIALIZING:
            return state
        assert time.monotonic() < deadline, "the dump writer never finished"
        time.sleep(0.005)


def test_the_dump_is_written_synced_and_renamed_before_compaction_may_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "raft.dump"
    writer = _dump_writer(dump)
    state = [{"_x": 1}, {"counter": 7, "items": list(range(1000))}]
    disk = DiskCalls(monkeypatch)
    writer.serialize((state, (b"b", 5, 1), (b"a", 4, 1), {"n1"}), 4)
    assert _wait_written(writer) == SERIALIZER_STATE.SUCCESS
    temporary = disk.calls[0][1]
    assert temporary.startswith("raft.dump.writing.")
    assert disk.calls == [
        ("fsync", temporary),
        ("rename", f"{temporary}->raft.dump"),
        ("fsync", tmp_path.name),
    ]
    assert writer.checkSerializing() == (SERIALIZER_STATE.NOT_SERIALIZING, None)
    # pysyncobj's own reader loads it: gzip of a pickle, the same tuple, values thawed.
    loaded = Serializer(str(dump), 2**16, False, None, None, None).deserialize()
    assert loaded == (state, (b"b", 5, 1), (b"a", 4, 1), {"n1"})


def test_the_state_is_frozen_when_the_dump_starts_not_when_it_is_written(
    tmp_path: Path,
) -> None:
    writer = _dump_writer(tmp_path / "raft.dump")
    live = {"items": [1, 2, 3]}
    writer.serialize(([{}, live], (b"b", 5, 1), (b"a", 4, 1), set()), 4)
    live["items"].append(4)  # an apply right after, in the tick thread
    assert _wait_written(writer) == SERIALIZER_STATE.SUCCESS
    assert writer.deserialize()[0] == [{}, {"items": [1, 2, 3]}]


def test_a_failed_write_leaves_the_old_dump(tmp_path: Path) -> None:
    dump = tmp_path / "raft.dump"
    writer = _dump_writer(dump)
    writer.serialize(([{}, {"v": 1}], (b"b", 5, 1), (b"a", 4, 1), set()), 4)
    assert _wait_written(writer) == SERIALIZER_STATE.SUCCESS
    writer.serialize(([{}, {"v": Unpicklable()}], (b"d", 7, 1), (b"c", 6, 1), set()), 6)
    assert _wait_written(writer) == SERIALIZER_STATE.FAILED
    assert writer.deserialize()[0] == [{}, {"v": 1}]


class Unpicklable(FrozenState):
    def __reduce__(self) -> str:
        raise TypeError("cannot pickle this")


def test_a_snapshot_received_from_the_leader_is_fsynced_before_it_is_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = _dump_writer(tmp_path / "raft.dump")
    disk = DiskCalls(monkeypatch)
    assert not writer.setTransmissionData((b"part one", True, False))
    assert not writer.setTransmissionData((b"part two", False, False))
    assert writer.setTransmissionData((b"", False, True))
    assert disk.calls[0] == ("fsync", "raft.dump.1.tmp")
    assert (tmp_path / "raft.dump").read_bytes() == b"part onepart two"


def test_a_dump_being_written_never_replaces_one_received_from_the_leader(
    tmp_path: Path,
) -> None:
    writer = _dump_writer(tmp_path / "raft.dump")
    writer.serialize(([{}, {"v": "own"}], (b"b", 5, 1), (b"a", 4, 1), set()), 4)
    assert writer.setTransmissionData((b"the leader's", True, False)) is False
    assert writer.setTransmissionData((b"", False, True)) is True
    assert _wait_written(writer) == SERIALIZER_STATE.FAILED
    assert (tmp_path / "raft.dump").read_bytes() == b"the leader's"
    assert not list(tmp_path.glob("raft.dump.writing.*"))


@pytest.mark.parametrize(
    "tear",
    [
        pytest.param(lambda data, end: data[:end] + bytes(60), id="zeros after the header's end"),
        pytest.param(lambda data, end: data[: end - 3] + b"\xff\xff\xff", id="trailing size"),
        pytest.param(lambda data, end: data[:end] + data[40:end], id="an index out of order"),
    ],
)
def test_a_torn_last_record_is_dropped_when_the_journal_is_opened(
    tmp_path: Path, tear: Callable[[bytes, int], bytes]
) -> None:
    """A power cut during an append's sync: the header's end offset reached the disk and
    the record it covers did not (wholly)."""
    path = tmp_path / "raft.journal"
    journal = DurableFileJournal(str(path))
    for index in range(1, 4):
        journal.add(f"entry {index}".encode(), index, 1)
    end = FIRST_RECORD_OFFSET + journal.entry_bytes
    journal._destroy()
    data = path.read_bytes()
    torn = tear(data, end)
    claimed = max(len(torn), end)  # the header claims any extra bytes are a record
    header = torn[:LAST_RECORD_OFFSET_OFFSET] + struct.pack("<I", claimed)
    path.write_bytes(header + torn[len(header) :])
    reopened = DurableFileJournal(str(path))
    kept = list(reopened)
    assert kept == [(f"entry {i}".encode(), i, 1) for i in range(1, len(kept) + 1)]
    assert len(kept) >= 2, "only the torn record goes"
    reopened.add(b"next", len(kept) + 1, 2)
    reopened._destroy()
    again = DurableFileJournal(str(path))
    assert again[-1] == (b"next", len(kept) + 1, 2)
    again._destroy()


def test_a_dump_write_cut_short_is_removed_when_the_next_node_starts(tmp_path: Path) -> None:
    (tmp_path / "raft.dump.writing.7").write_bytes(b"half a dump")
    (tmp_path / "raft.dump").write_bytes(b"the dump")
    _dump_writer(tmp_path / "raft.dump")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raft.dump"]


def _snapshot_bytes(last_index: int) -> bytes:
    """A leader's dump as pysyncobj sends it: gzip of its pickle of (state, last entry,
    the one before, members)."""
    members: list[str] = []
    payload = ({"state": last_index}, (b"", last_index, 1), (b"", last_index - 1, 1), members)
    return gzip.compress(pysyncobj.pickle.dumps(payload))


@pytest.mark.parametrize(("applied", "installed"), [(20, False), (12, False), (11, True)])
def test_a_snapshot_older_than_the_applied_state_is_refused(
    tmp_path: Path, applied: int, installed: bool
) -> None:
    """A late snapshot ending at or before the entry the node applied is dropped: the
    node's newer dump stays (simulator, manager workload, membership seed 71)."""
    path = tmp_path / "raft.dump"
    path.write_bytes(b"the node's newer dump")
    writer = _dump_writer(path)
    writer.applied_index = lambda: applied
    assert not writer.setTransmissionData((_snapshot_bytes(12), True, False))
    assert writer.setTransmissionData((b"", False, True)) is installed
    assert (path.read_bytes() == _snapshot_bytes(12)) is installed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raft.dump"]
