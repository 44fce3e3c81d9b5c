"""The durable journal: every Raft log change and every vote is synced before pysyncobj
acts on it, and a restarted node reads back what it wrote."""

from __future__ import annotations

import os
from pathlib import Path

import pysyncobj.syncobj
import pytest

from runtime import durable_journal
from runtime.durable_journal import DurableFileJournal, DurableMetaStorer


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
    synced.clear()
    for index in range(2, 50):
        journal.add(b"x", index, 1)
    synced.clear()
    journal.deleteEntriesTo(40)  # compaction rewrites entries: one sync, not one per entry
    assert synced == ["flush"]
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


def test_install_makes_new_syncobjs_use_it(tmp_path: Path) -> None:
    durable_journal.install()
    journal = pysyncobj.syncobj.createJournal(str(tmp_path / "j"))
    assert isinstance(journal, DurableFileJournal)
    journal._destroy()
    assert not isinstance(pysyncobj.syncobj.createJournal(None), DurableFileJournal)


def test_the_full_dump_is_synced_before_the_log_drops_what_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = DurableFileJournal(str(tmp_path / "raft.journal"))
    (tmp_path / "raft.dump").write_bytes(b"snapshot")
    order: list[str] = []
    monkeypatch.setattr(DurableFileJournal, "flush", lambda self: order.append("journal"))
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        order.append("dump-or-folder")
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    for index in range(1, 10):
        journal.add(b"x", index, 1)
    order.clear()
    journal.deleteEntriesTo(5)
    assert order == ["dump-or-folder", "dump-or-folder", "journal"]
    journal._destroy()


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
