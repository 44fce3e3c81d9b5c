"""pysyncobj's Raft files, made durable before Raft acts on them, and its full dump written
off the tick thread.

pysyncobj 0.3.17 writes its journal through ``mmap`` and never syncs it, writes its metadata
(current term, vote) and its full dump (snapshot) without ``fsync``, and rewrites its journal
in place when it compacts it. An acknowledged entry, or a vote, then survives a process crash
but not a power loss, and a crash in the middle of a compaction loses the journal's tail.
Raft's safety needs all of it on stable storage before a node answers: a follower must have the
entries durable before it acknowledges them (the leader counts that acknowledgement toward the
commit that acks a produce), and a vote must be durable before it is granted.

The rule every file here follows: a write is durable once its file is fsynced; a create or a
rename once its directory is fsynced too; a file that replaces another is complete and synced
before the rename; and nothing is dropped from the journal before the full dump that holds it
is durable under its final name.

While ``installed()`` lasts, a ``SyncObj`` built in its thread uses ``DurableFileJournal``
(with ``DurableMetaStorer``) and ``DumpWriter`` (``dump.py``): pysyncobj offers no hook for
these classes and looks them up by their module-level names when it builds a node, so they
are swapped in for the construction only (``RaftNode``), and any other ``SyncObj`` of the
process keeps pysyncobj's own.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pysyncobj.journal
import pysyncobj.syncobj
from pysyncobj.journal import (
    FIRST_RECORD_OFFSET,
    LAST_RECORD_OFFSET_OFFSET,
    FileJournal,
    MemoryJournal,
    MetaStorer,
    ResizableFile,
)
from pysyncobj.pickle import dumps, loads, to_bytes

from runtime.durable_files import fsync_directory, fsync_file, write_all
from runtime.replication.raft.dump import DumpWriter

_log = logging.getLogger(__name__)


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
        _write_file(path + ".tmp", [dumps(meta)])
        os.replace(path + ".tmp", path)
        fsync_directory(_directory_of(path))
        self._durable = term_and_vote


class DurableFileJournal(FileJournal):
    """``FileJournal`` that syncs its file after every change, before pysyncobj answers, and
    compacts by writing a new file and renaming it over the old one."""

    # FileJournal's private attributes, which this class reads and replaces.
    _FileJournal__journal: list[tuple[bytes, int, int]]
    _FileJournal__journalFile: Any
    _FileJournal__currentOffset: int

    def __init__(self, journal_file: str) -> None:
        _drop_torn_tail(journal_file)
        with installed():  # FileJournal.__init__ builds its MetaStorer by its global name
            super().__init__(journal_file)
        self._path = journal_file
        self._dump_file = dump_file_for(journal_file)
        # pysyncobj may have just created the file: its name must survive a power cut too.
        fsync_file(journal_file)
        fsync_directory(_directory_of(journal_file))
        _opened[os.path.abspath(journal_file)] = self

    @property
    def entry_bytes(self) -> int:
        """Bytes of the entries the journal holds: pysyncobj also keeps every one of them in
        memory until a log compaction drops them."""
        end = int(self._FileJournal__currentOffset)
        return end - int(FIRST_RECORD_OFFSET)

    skip_sync: Callable[[bytes], bool] | None = None
    """Set by ``RaftNode.leave_unsynced``: True for an entry that may stay unsynced (a group
    proposed with ``replicated`` durability). The next synced entry, or any sync, covers it."""

    defer_syncs = False
    """Set by ``RaftNode`` while its leader appends entries it sends before syncing them:
    their sync is left to ``sync_deferred``, which it calls before it can count itself
    toward their commit."""
    _sync_owed = False

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        if self.skip_sync is None or not self.skip_sync(command):
            if self.defer_syncs:
                self._sync_owed = True
            else:
                self.flush()

    def sync_deferred(self) -> None:
        if self._sync_owed:
            self._sync_owed = False
            self.flush()

    def flush(self) -> None:
        """Make every change on disk. Not pysyncobj's ``mmap.flush()``: CPython 3.11 calls
        ``msync`` holding the GIL, so each sync (about 1 ms here under load) froze every
        thread of the process, other partitions' Raft threads and the HTTP threads included
        (py-spy --gil: a busy broker's largest GIL holder). ``fdatasync`` on the mapped file
        writes the same pages (Linux keeps one page cache for a file and its shared
        mappings) and lets the other threads run meanwhile."""
        os.fdatasync(self._FileJournal__journalFile._ResizableFile__f.fileno())

    def clear(self) -> None:
        # Called when a full dump replaces the log: the dump must be on disk first.
        self._sync_dump()
        super().clear()
        self.flush()

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802, N803
        super().deleteEntriesFrom(entryFrom)
        self.flush()

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802, N803
        """Compaction drops entries that the full dump now holds: the dump must be on disk
        first. pysyncobj rewrites the kept entries in place (header first, then one entry
        at a time), so a crash in the middle lost the rest of them, acknowledged or not;
        this writes them to a new file, syncs it and renames it over the journal."""
        self._sync_dump()
        self._rewrite(self._FileJournal__journal[entryTo:])

    def keep_from(self, first: tuple[bytes, int, int], second: tuple[bytes, int, int]) -> bool:
        """Drop the entries before ``first`` when the journal holds ``first, second`` in a
        row (a full dump's last two entries), keeping every entry after them; False (nothing
        changed) when it does not. Raft's rule for a snapshot that ends inside the log: the
        entries that follow it stay."""
        entries = self._FileJournal__journal
        if not entries:
            return False
        position = first[1] - entries[0][1]
        if not 0 <= position < len(entries) - 1:
            return False
        if (entries[position], entries[position + 1]) != (first, second):
            return False
        if position > 0:
            self._rewrite(entries[position:])
        return True

    def _rewrite(self, entries: list[tuple[bytes, int, int]]) -> None:
        records = [_record(command, idx, term) for command, idx, term in entries]
        end = FIRST_RECORD_OFFSET + sum(len(r) for r in records)
        header = self._FileJournal__getDefaultHeader()[:LAST_RECORD_OFFSET_OFFSET]
        temporary = self._path + ".rewrite"
        _write_file(temporary, [header, struct.pack("<I", end), *records])
        os.replace(temporary, self._path)
        fsync_directory(_directory_of(self._path))
        old = self._FileJournal__journalFile
        self._FileJournal__journalFile = ResizableFile(self._path)
        self._FileJournal__journal = list(entries)
        self._FileJournal__currentOffset = end
        old._ResizableFile__mm.close()
        old._ResizableFile__f.close()

    def _sync_dump(self) -> None:
        if not os.path.exists(self._dump_file):
            return
        fsync_file(self._dump_file)
        fsync_directory(_directory_of(self._dump_file))


def dump_file_for(journal_file: str) -> str:
    """The full dump that goes with a journal: ``RaftConfig`` names them ``X.journal`` and
    ``X.dump`` side by side."""
    base, _ = os.path.splitext(journal_file)
    return base + ".dump"


_opened: weakref.WeakValueDictionary[str, DurableFileJournal] = weakref.WeakValueDictionary()
"""Journals by absolute path: pysyncobj creates its journal itself, given only the path, so
this is how the node that named the path finds it (weak: a destroyed node's goes away)."""


def opened(journal_file: str) -> DurableFileJournal | None:
    """The journal pysyncobj opened at ``journal_file`` in this process, if any."""
    return _opened.get(os.path.abspath(journal_file))


def create_journal(journal_file: str | None = None) -> Any:
    if journal_file is None:
        return MemoryJournal()
    return DurableFileJournal(journal_file)


_installing = threading.RLock()
"""Held while pysyncobj's names are swapped: no other thread builds a node meanwhile."""


@contextmanager
def installed() -> Iterator[None]:
    """Within it, in this thread, pysyncobj builds ``DurableFileJournal`` (and its
    ``DurableMetaStorer``) and ``DumpWriter``; its own classes are back afterwards."""
    with _installing:
        names = (
            (pysyncobj.syncobj, "createJournal"),
            (pysyncobj.syncobj, "Serializer"),
            (pysyncobj.journal, "MetaStorer"),
        )
        saved = [getattr(module, name) for module, name in names]
        ours = (create_journal, DumpWriter, DurableMetaStorer)
        for (module, name), value in zip(names, ours, strict=True):
            setattr(module, name, value)
        try:
            yield
        finally:
            for (module, name), value in zip(names, saved, strict=True):
                setattr(module, name, value)


def _drop_torn_tail(path: str) -> None:
    """Cut the journal after its last whole record. A power cut while an append was being
    synced can leave the header's end offset on disk without the record it covers (zeros,
    or older bytes); pysyncobj would fail to start on it, or read a wrong entry. Only an
    append whose sync never finished can be torn, and nobody was told about it."""
    if not os.path.exists(path):
        return
    with open(path, "r+b") as file:
        data = file.read()
        if len(data) < FIRST_RECORD_OFFSET:
            return
        (end,) = struct.unpack_from("<I", data, LAST_RECORD_OFFSET_OFFSET)
        whole = _whole_records_end(data, min(end, len(data)))
        if whole == end:
            return
        _log.warning("journal %s: dropping a torn tail, bytes %d to %d", path, whole, end)
        file.seek(LAST_RECORD_OFFSET_OFFSET)
        file.write(struct.pack("<I", whole))
        file.flush()
        os.fsync(file.fileno())


def _whole_records_end(data: bytes, end: int) -> int:
    """Offset after the last record that is whole (its two sizes agree, it holds an index
    and a term) and whose index follows the previous one."""
    offset: int = FIRST_RECORD_OFFSET
    previous: int | None = None
    while offset + 4 <= end:
        size: int = struct.unpack_from("<I", data, offset)[0]
        record_end = offset + 8 + size
        if size < 16 or record_end > end:
            break
        (trailing,) = struct.unpack_from("<I", data, record_end - 4)
        (index,) = struct.unpack_from("<Q", data, offset + 4)
        if trailing != size or (previous is not None and index != previous + 1):
            break
        previous, offset = index, record_end
    return offset


def _record(command: bytes, idx: int, term: int) -> bytes:
    """One journal record in pysyncobj's format: size, (index, term, command), size."""
    data: bytes = struct.pack("<QQ", idx, term) + to_bytes(command)
    size = struct.pack("<I", len(data))
    return size + data + size


def _write_file(path: str, parts: list[bytes]) -> None:
    """Create or truncate ``path``, write ``parts`` and fsync it (its name is not synced)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for part in parts:
            write_all(descriptor, part)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _directory_of(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))
