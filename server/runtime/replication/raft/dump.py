"""pysyncobj's full dump (snapshot), written off the tick thread and made durable.

pysyncobj 0.3.17 (``useFork=False``) pickles and gzips the whole state inside its tick
thread and writes the file without ``fsync``. ``DumpWriter`` replaces its ``Serializer``
(``journal.installed``): the tick thread only freezes the state, a thread of its own writes
and fsyncs it, and a later tick renames it into place and fsyncs the folder. The file
format is pysyncobj's (gzip of a pickle), so dumps written before still load.
"""

from __future__ import annotations

import glob
import gzip
import itertools
import logging
import os
import pickle
import threading
import zlib
from collections.abc import Callable
from typing import Any

import pysyncobj.pickle
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer

from runtime.durable_files import fsync_directory, write_all
from runtime.durable_journal import thaw_pickled
from runtime.replication.machine import FrozenState

_log = logging.getLogger(__name__)

DUMP_COMPRESSION_LEVEL = 1
"""zlib level of the full dump (pysyncobj uses 9). Measured on 500k messages of ~80 random
characters: level 9 took 3.2 s for 27.6 MB, level 1 0.56 s for 28.2 MB."""
_COMPRESS_CHUNK_BYTES = 1024 * 1024
"""Bytes zlib compresses per call; it releases the GIL during each call."""
WRITING_SUFFIX = ".writing."
"""A dump being written is ``X.dump.writing.N``."""
_write_numbers = itertools.count()


class _Pickled(FrozenState):
    """Any other snapshot value, pickled in the tick thread (so later applies cannot change
    it); unpickles into the value itself."""

    def __init__(self, value: object) -> None:
        self._blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def __reduce__(self) -> tuple[object, tuple[bytes]]:
        return (thaw_pickled, (self._blob,))


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

    _Serializer__incomingTransmissionFile: Any  # pysyncobj's: a snapshot being received

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

    def wait_written(self) -> None:
        """Until the dump being written, if any, is written (not yet renamed: a tick does
        that). For the simulator, which must not depend on a thread's speed."""
        if self._writing is not None:
            self._writing.wait()

    def close_transmissions(self) -> None:
        """Tick thread: forget every send of the dump to a follower in progress, closing
        its file (pysyncobj drops its sends without closing their files: when one ends,
        is cut short by a new dump or a lost leadership, or the node ends)."""
        sends = self._sends()
        for send_id in list(sends):
            _close_send(sends.pop(send_id))

    def close_incoming(self) -> None:
        """Tick thread, as the node ends: close a snapshot being received (pysyncobj leaves
        its file open; the simulator's crashes showed it)."""
        incoming: Any = self._Serializer__incomingTransmissionFile
        if incoming is not None and not isinstance(incoming, bytes):  # bytes: in memory
            incoming.close()
            self._Serializer__incomingTransmissionFile = None

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

    applied_index: Callable[[], int] | None = None
    """Set by ``RaftNode``: the last index its state applied (``_refuse_older``)."""

    def setTransmissionData(self, data: Any) -> bool:  # noqa: N802
        incoming = self._Serializer__incomingTransmissionFile
        if self._path is not None and data is not None and data[2] and incoming is not None:
            # The last part (always empty): pysyncobj closes and renames the file next.
            incoming.flush()
            os.fsync(incoming.fileno())
            if self._refuse_older(incoming):
                return False
        done: bool = super().setTransmissionData(data)
        if done and self._writing is not None:
            # The leader's dump is newer than the one being written: never rename an older
            # dump over it (on a restart the journal, cleared for the leader's, would no
            # longer match it).
            self._writing.superseded = True
        return done

    def _refuse_older(self, incoming: Any) -> bool:
        """Drop a snapshot from the leader that ends at or before the last entry this node
        applied (a late copy: its state, dump and log hold all of it and more). Raft
        ignores such a snapshot; pysyncobj renamed it over the newer dump and cleared the
        log, entries acknowledged since included (simulator, manager workload, membership
        seed 71: a member back from 78 to 12). The leader moved its next index past the
        snapshot when it sent the last part: its appends go on from there."""
        if self.applied_index is None:
            return False
        try:
            with open(incoming.name, "rb") as file, gzip.GzipFile(fileobj=file) as unzipped:
                data = pysyncobj.pickle.load(unzipped)
            last_index = int(data[1][1])
        except Exception:
            return False  # pysyncobj loads it and reports what is wrong
        if last_index > self.applied_index():
            return False
        incoming.close()
        os.remove(incoming.name)
        self._Serializer__incomingTransmissionFile = None
        _log.warning("a late snapshot to %d ignored (applied up to here already)", last_index)
        return True

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

    def wait(self) -> None:
        """Until the write has ended (the simulator: a dump's end must not depend on how
        fast a thread ran)."""
        self._thread.join()

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


def _directory_of(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))
