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

``install()`` makes every ``SyncObj`` created afterwards in this process use
``DurableFileJournal`` (with ``DurableMetaStorer``) and ``DumpWriter``: pysyncobj offers no
hook for these classes, so this replaces its module-level names. Call it in the Raft adapters,
right before creating a ``SyncObj``.
"""

from __future__ import annotations

import glob
import itertools
import logging
import os
import pickle
import struct
import threading
import weakref
import zlib
from collections.abc import Callable
from typing import Any

import pysyncobj.journal
import pysyncobj.syncobj
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.journal import (
    FIRST_RECORD_OFFSET,
    LAST_RECORD_OFFSET_OFFSET,
    FileJournal,
    MemoryJournal,
    MetaStorer,
    ResizableFile,
)
from pysyncobj.pickle import dumps, loads, to_bytes
from pysyncobj.serializer import Serializer

from protocol.durable_files import fsync_directory, fsync_file, write_all

_log = logging.getLogger(__name__)

DUMP_COMPRESSION_LEVEL = 1
"""zlib level of the full dump (pysyncobj uses 9). Measured on 500k messages of ~80 random
characters: level 9 took 3.2 s for 27.6 MB, level 1 0.56 s for 28.2 MB."""
_COMPRESS_CHUNK_BYTES = 1024 * 1024
"""Bytes zlib compresses per call; it releases the GIL during each call."""
WRITING_SUFFIX = ".writing."
"""A dump being written is ``X.dump.writing.N``."""
_write_numbers = itertools.count()


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
        install()  # FileJournal.__init__ builds its MetaStorer from the module's global name
        _drop_torn_tail(journal_file)
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
    """Set by an adapter: True for an entry that may stay unsynced (a group proposed with
    ``replicated`` durability). The next synced entry, or any other sync, covers it."""

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


class FrozenState:
    """A snapshot value that is already an immutable copy of the state it stands for:
    ``DumpWriter`` pickles it in its own thread as it is. A consumer's ``_serialize()``
    returns one for state too big to pickle inside the tick thread."""


class _Pickled(FrozenState):
    """Any other snapshot value, pickled in the tick thread (so later applies cannot change
    it); unpickles into the value itself."""

    def __init__(self, value: object) -> None:
        self._blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def __reduce__(self) -> tuple[object, tuple[bytes]]:
        return (thaw_pickled, (self._blob,))


def thaw_pickled(blob: bytes) -> object:
    """Loads a ``_Pickled`` value from a full dump (its name is part of the dump format)."""
    return pickle.loads(blob)


def freeze(state: object) -> object:
    """pysyncobj's snapshot data (a dict of attributes, or a list of them: the ``SyncObj``'s
    and each consumer's) with every value frozen: ``FrozenState`` values as they are, the
    others pickled now."""
    if isinstance(state, dict):
        return {k: v if isinstance(v, FrozenState) else _Pickled(v) for k, v in state.items()}
    if isinstance(state, list):
        return [freeze(part) for part in state]
    return state


class DumpWriter(Serializer):
    """pysyncobj's ``Serializer`` with the full dump written by a thread of its own.

    pysyncobj (``useFork=False``) pickled and gzipped (level 9) the whole state inside the
    tick thread: 0.7 s at 100k unflushed messages and 3.5 s at 500k measured here (py-spy:
    92% zlib, 8% pickle), beyond the election timeout. Here the tick thread only freezes the
    state (``freeze``; a ``PartitionLog`` copies its message dict: 5 ms at 100k, 17 ms at
    500k) and starts the thread, which pickles, compresses (level ``DUMP_COMPRESSION_LEVEL``)
    and writes to ``X.dump.writing.N``, then fsyncs it. A later tick sees it done
    (``checkSerializing``), renames it over the dump and fsyncs the folder; only then
    pysyncobj drops the entries the dump holds. The file format is pysyncobj's (gzip of a
    pickle), so pysyncobj loads it and sends it to lagging followers unchanged. A snapshot
    received from the leader is fsynced before pysyncobj renames it into place (the journal
    then syncs the folder before it clears), and a dump still being written then is
    dropped, not renamed over it.
    """

    def __init__(
        self,
        fileName: str | None,  # noqa: N803 (pysyncobj's names)
        transmissionBatchSize: int,  # noqa: N803
        tryUseFork: bool,  # noqa: N803
        serializer: Any,
        deserializer: Any,
        serializeChecker: Any,  # noqa: N803
    ) -> None:
        super().__init__(
            fileName, transmissionBatchSize, False, serializer, deserializer, serializeChecker
        )
        self._path = fileName if serializer is None and deserializer is None else None
        self._writing: _DumpWrite | None = None
        self._loaded: list[Any] = []
        if self._path is not None:
            for leftover in glob.glob(glob.escape(self._path + WRITING_SUFFIX) + "*"):
                os.remove(leftover)  # a write a crash or a destroy cut short

    def serialize(self, data: Any, id: int) -> None:
        if self._path is None:
            super().serialize(data, id)
            return
        if self._writing is not None:
            return
        state, last_entry, previous_entry, cluster = data
        payload = (freeze(state), last_entry, previous_entry, cluster)
        self._writing = _DumpWrite(self._path, payload, id)

    def checkSerializing(self) -> tuple[Any, int | None]:  # noqa: N802
        if self._path is None:
            result: tuple[Any, int | None] = super().checkSerializing()
            return result
        writing = self._writing
        if writing is None:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        if not writing.done():
            return SERIALIZER_STATE.SERIALIZING, writing.index
        self._writing = None
        try:
            if writing.superseded:
                os.remove(writing.temporary)
                raise RuntimeError("a snapshot from the leader replaced the state meanwhile")
            if writing.error is not None:
                raise writing.error
            os.replace(writing.temporary, self._path)
            fsync_directory(_directory_of(self._path))
        except Exception:
            _log.exception("the full dump %s could not be written", self._path)
            return SERIALIZER_STATE.FAILED, writing.index
        # Sends to followers in progress restart from the new file (as pysyncobj does).
        self.close_transmissions()
        return SERIALIZER_STATE.SUCCESS, writing.index

    def close_transmissions(self) -> None:
        """Tick thread: forget every send of the dump to a follower in progress, closing
        its file (pysyncobj drops its sends without closing their files: when one ends,
        is cut short by a new dump or a lost leadership, or the node ends)."""
        sends = self._sends()
        for send_id in list(sends):
            _close_send(sends.pop(send_id))

    def getTransmissionData(self, transmissionID: Any) -> Any:  # noqa: N802, N803
        send = self._sends().get(transmissionID)
        data = super().getTransmissionData(transmissionID)
        if send is not None and transmissionID not in self._sends():
            _close_send(send)  # the last part was read (or the read failed)
        return data

    def cancelTransmisstion(self, id: Any) -> None:  # noqa: N802 (pysyncobj's name)
        _close_send(self._sends().pop(id, None))

    def _sends(self) -> dict[Any, Any]:
        sends: dict[Any, Any] = self._Serializer__transmissions
        return sends

    def setTransmissionData(self, data: Any) -> bool:  # noqa: N802
        incoming = self._Serializer__incomingTransmissionFile
        if self._path is not None and data is not None and data[2] and incoming is not None:
            # The last part (always empty): pysyncobj closes and renames the file next.
            incoming.flush()
            os.fsync(incoming.fileno())
        done: bool = super().setTransmissionData(data)
        if done and self._writing is not None:
            # The leader's dump is newer than the one being written: never rename an older
            # dump over it (on a restart the journal, cleared for the leader's, would no
            # longer match it).
            self._writing.superseded = True
        return done

    def deserialize(self) -> Any:
        if self._loaded:
            return self._loaded.pop()
        return super().deserialize()

    def peek(self) -> Any:
        """Load the dump; the next ``deserialize()`` returns the same data without reading
        the file again."""
        data = super().deserialize()
        self._loaded = [data]
        return data


def _close_send(send: object) -> None:
    if isinstance(send, dict) and "file" in send:
        send["file"].close()


class _DumpWrite:
    """One full dump being written to ``X.dump.writing.N`` by a thread of its own. N is new
    for every write in the process: a destroyed node's writer may still run while a new
    node on the same files starts its own."""

    def __init__(self, path: str, payload: tuple[Any, ...], index: int) -> None:
        self.temporary = f"{path}{WRITING_SUFFIX}{next(_write_numbers)}"
        self.index = index
        self.error: BaseException | None = None
        self.superseded = False
        """Set by the tick thread when a snapshot from the leader replaced the state."""
        self._thread = threading.Thread(
            target=self._write, args=(payload,), name="raft-dump-writer", daemon=True
        )
        self._thread.start()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def _write(self, payload: tuple[Any, ...]) -> None:
        try:
            descriptor = os.open(self.temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                sink = _GzipSink(descriptor)
                pickle.Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL).dump(payload)
                sink.finish()
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        except BaseException as exc:  # reported to the tick thread by checkSerializing
            self.error = exc


class _GzipSink:
    """A file-like ``write`` that gzips into a descriptor, one bounded zlib call at a time
    (each releases the GIL), so the pickler streams instead of building one big blob."""

    def __init__(self, descriptor: int) -> None:
        self._descriptor = descriptor
        self._compressor = zlib.compressobj(DUMP_COMPRESSION_LEVEL, zlib.DEFLATED, 31)

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        for start in range(0, len(view), _COMPRESS_CHUNK_BYTES):
            chunk = view[start : start + _COMPRESS_CHUNK_BYTES]
            write_all(self._descriptor, self._compressor.compress(chunk))
        return len(view)

    def finish(self) -> None:
        write_all(self._descriptor, self._compressor.flush())


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
    ``DurableMetaStorer``) and ``DumpWriter``."""
    pysyncobj.syncobj.createJournal = create_journal
    pysyncobj.syncobj.Serializer = DumpWriter
    pysyncobj.journal.MetaStorer = DurableMetaStorer


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
