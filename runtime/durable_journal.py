"""A pysyncobj journal that is on disk before Raft acts on it.

pysyncobj 0.3.17 writes its journal through ``mmap`` and never syncs it, and writes its
metadata (current term, vote) without ``fsync``: an acknowledged entry, or a vote, survives a
process crash (the kernel keeps the pages) but not a power loss. Raft's safety needs both on
stable storage before a node answers: a follower must have the entries durable before it
acknowledges them (the leader counts that acknowledgement toward the commit that acks a
produce), and a vote must be durable before it is granted.

``install()`` makes every ``SyncObj`` created afterwards in this process use
``DurableFileJournal``: pysyncobj offers no hook for its journal class, so this replaces its
module-level factory. Call it in the Raft adapters, right before creating a ``SyncObj``.
"""

from __future__ import annotations

import os
import shutil
import weakref
from typing import Any

import pysyncobj.journal
import pysyncobj.syncobj
from pysyncobj.journal import FIRST_RECORD_OFFSET, FileJournal, MemoryJournal, MetaStorer
from pysyncobj.pickle import dumps, loads


class DurableMetaStorer(MetaStorer):
    """Writes term and vote to a temporary file, fsyncs it, renames it, fsyncs the folder.

    pysyncobj also stores its commit index here, once a second whenever it moved. That one
    is a hint (a restarted node replays its journal up to it, then learns the real commit
    index from the leader), so a store that changes neither term nor vote is skipped rather
    than paid with two fsyncs a second per replica (measured: the largest single cost of a
    busy broker's Raft thread after the journal sync itself)."""

    _durable: tuple[object, object] | None = None
    """(term, vote) last made durable by this storer."""

    def getMeta(self) -> dict[str, Any]:  # noqa: N802 (pysyncobj's name)
        # pysyncobj's own getMeta leaves the file open.
        try:
            with open(self.getPath(), "rb") as file:
                meta: dict[str, Any] = loads(file.read())
        except (OSError, ValueError, EOFError):
            return {}
        return meta

    def storeMeta(self, meta: dict[str, Any]) -> None:  # noqa: N802 (pysyncobj's name)
        term_and_vote = (meta.get("currentTerm"), meta.get("votedForNodeId"))
        if term_and_vote == self._durable:
            return
        path = self.getPath()
        with open(path + ".tmp", "wb") as file:
            file.write(dumps(meta))
            file.flush()
            os.fsync(file.fileno())
        shutil.move(path + ".tmp", path)
        _fsync_directory(os.path.dirname(path) or ".")
        self._durable = term_and_vote


class DurableFileJournal(FileJournal):
    """``FileJournal`` that syncs its file after every change, before pysyncobj answers."""

    def __init__(self, journal_file: str) -> None:
        install()  # FileJournal.__init__ builds its MetaStorer from the module's global name
        super().__init__(journal_file)
        self._deferring = False
        self._dump_file = dump_file_for(journal_file)
        _opened[os.path.abspath(journal_file)] = self

    @property
    def entry_bytes(self) -> int:
        """Bytes of the entries the journal holds: pysyncobj also keeps every one of them in
        memory until a log compaction drops them."""
        end = int(self._FileJournal__currentOffset)
        return end - int(FIRST_RECORD_OFFSET)

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self._sync()

    def flush(self) -> None:
        """Make every change on disk. Not pysyncobj's ``mmap.flush()``: CPython 3.11 calls
        ``msync`` holding the GIL, so each sync (about 1 ms here under load) froze every
        thread of the process, other partitions' Raft threads and the HTTP threads included
        (py-spy --gil: a busy broker's largest GIL holder). ``fdatasync`` on the mapped file
        writes the same pages (Linux keeps one page cache for a file and its shared
        mappings) and lets the other threads run meanwhile."""
        os.fdatasync(self._FileJournal__journalFile._ResizableFile__f.fileno())

    def clear(self) -> None:
        # Called when a snapshot replaces the log: the snapshot must be on disk first.
        self._sync_dump()
        super().clear()
        self._sync()

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802, N803
        super().deleteEntriesFrom(entryFrom)
        self._sync()

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802, N803
        # Compaction drops entries that the full dump now holds: the dump must be on disk
        # first. It rewrites the kept entries one add() at a time: sync once at the end.
        self._sync_dump()
        self._deferring = True
        try:
            super().deleteEntriesTo(entryTo)
        finally:
            self._deferring = False
        self._sync()

    def _sync(self) -> None:
        if not self._deferring:
            self.flush()

    def _sync_dump(self) -> None:
        if self._deferring or not os.path.exists(self._dump_file):
            return
        descriptor = os.open(self._dump_file, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        _fsync_directory(os.path.dirname(self._dump_file) or ".")


def dump_file_for(journal_file: str) -> str:
    """The full dump that goes with a journal: the adapters name them ``X.journal`` and
    ``X.dump`` side by side."""
    base, _ = os.path.splitext(journal_file)
    return base + ".dump"


_opened: weakref.WeakValueDictionary[str, DurableFileJournal] = weakref.WeakValueDictionary()
"""Journals by absolute path: pysyncobj creates its journal itself, given only the path, so
this is how the adapter that named the path finds it (weak: a destroyed node's goes away)."""


def opened(journal_file: str) -> DurableFileJournal | None:
    """The journal pysyncobj opened at ``journal_file`` in this process, if any."""
    return _opened.get(os.path.abspath(journal_file))


def create_journal(journal_file: str | None = None) -> Any:
    if journal_file is None:
        return MemoryJournal()
    return DurableFileJournal(journal_file)


def install() -> None:
    """Idempotent: later ``SyncObj``s in this process use ``DurableFileJournal`` (and its
    ``DurableMetaStorer``)."""
    pysyncobj.syncobj.createJournal = create_journal
    pysyncobj.journal.MetaStorer = DurableMetaStorer


def _fsync_directory(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
