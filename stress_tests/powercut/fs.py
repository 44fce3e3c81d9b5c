"""The FUSE operations of the power-cut file system: a passthrough to ``<backing>/live`` that
records what each sync makes durable in a ``DurableStore``.

Every operation acts on the live tree at once, so processes on the mount see a normal file
system. A file's data becomes durable only at an fsync/fdatasync of that file (the written
ranges and truncates since its last sync are copied into its durable object); names become
durable only at an fsync of their directory (its current listing replaces its durable record).
With ``strict_directories=False`` a file's fsync also makes its name, and its ancestors'
names, durable (roughly ext4 with ``data=ordered``, which commits the name with the file).

Threads: libfuse calls these methods from its worker threads. ``_lock`` guards the
per-inode maps; a per-inode sync lock keeps two syncs of one file or directory from
interleaving their copies (the later one must win). ``_namespace`` makes each change of a
name and the bookkeeping of its inode one step: the kernel serialises the operations of one
directory only, and the backing file system reuses a freed inode number at once. Without it,
a file created in one directory could take the inode number an unlink or a rename-over in
another had just freed, before that operation forgot the old inode: the new file lost its
object id, so a later directory sync named it with a fresh id that no sync had written (an
empty file after a cut: the 0-byte ``raft.dump`` of the power-loss run of 2026-11-24)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stress_tests.powercut.dirty import DirtyRegion
from stress_tests.powercut.durable_store import DurableStore, Entry, Kind, ObjectIds

STAT_FIELDS = (
    "st_mode",
    "st_ino",
    "st_dev",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_size",
    "st_blocks",
    "st_blksize",
)


class PowerCutOperations:
    """fusepy's operations object (fusepy dispatches through ``__call__`` by method name; it
    needs no base class). Paths are absolute within the mount, e.g. ``/data/x.db``."""

    use_ns = True  # fusepy: times in nanoseconds (its float seconds are deprecated)

    def __init__(
        self, live_dir: Path, store: DurableStore, ids: ObjectIds, strict_directories: bool
    ) -> None:
        self._live_dir = live_dir
        self._store = store
        self._ids = ids
        self._strict_directories = strict_directories
        self._lock = threading.Lock()
        self._namespace = threading.Lock()
        self._dirty: dict[int, DirtyRegion] = {}
        self._sync_locks: dict[int, threading.Lock] = {}
        self._inode_by_fd: dict[int, int] = {}

    def __call__(self, op: str, *args: Any) -> Any:
        method = getattr(self, op, None)
        if method is None:
            raise OSError(errno.ENOSYS, op)
        return method(*args)

    # --- namespace ---

    def getattr(self, path: str | None, fh: object = None) -> dict[str, int]:
        info = os.fstat(fh) if isinstance(fh, int) else os.lstat(self._live(path))
        attrs = {name: getattr(info, name) for name in STAT_FIELDS}
        attrs.update(st_atime=info.st_atime_ns, st_mtime=info.st_mtime_ns)
        attrs["st_ctime"] = info.st_ctime_ns
        return attrs

    def access(self, path: str, amode: int) -> None:
        if not os.access(self._live(path), amode):
            raise OSError(errno.EACCES, path)

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._live(path))]

    def mkdir(self, path: str, mode: int) -> None:
        with self._namespace:
            os.mkdir(self._live(path), mode)
            self._created(os.lstat(self._live(path)).st_ino)

    def rmdir(self, path: str) -> None:
        with self._namespace:
            inode = os.lstat(self._live(path)).st_ino
            os.rmdir(self._live(path))
            self._forget(inode)

    def unlink(self, path: str) -> None:
        with self._namespace:
            inode = os.lstat(self._live(path)).st_ino
            os.unlink(self._live(path))
            self._forget(inode)

    def rename(self, old: str, new: str) -> None:
        with self._namespace:
            try:
                replaced: int | None = os.lstat(self._live(new)).st_ino
            except FileNotFoundError:
                replaced = None
            os.rename(self._live(old), self._live(new))
            if replaced is not None and replaced != os.lstat(self._live(new)).st_ino:
                self._forget(replaced)

    def link(self, target: str, source: str) -> None:
        raise OSError(errno.EPERM, "hard links are not supported")

    def symlink(self, target: str, source: str) -> None:
        raise OSError(errno.EPERM, "symbolic links are not supported")

    def mknod(self, path: str, mode: int, dev: int) -> None:
        raise OSError(errno.EPERM, "only files and directories are supported")

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._live(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._live(path), uid, gid)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        if times is None:
            os.utime(self._live(path))
        else:
            os.utime(self._live(path), ns=times)

    def statfs(self, path: str) -> dict[str, int]:
        info = os.statvfs(self._live(path))
        names = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
        return {name: getattr(info, name) for name in (*names, "f_files", "f_frsize", "f_namemax")}

    # --- file data ---

    def create(self, path: str, mode: int) -> int:
        flags = _live_flags(os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with self._namespace:
            fd = os.open(self._live(path), flags, mode)
            inode = os.fstat(fd).st_ino
            self._created(inode)
        with self._lock:
            self._inode_by_fd[fd] = inode
        return fd

    def open(self, path: str, flags: int) -> int:
        fd = os.open(self._live(path), _live_flags(flags))
        inode = os.fstat(fd).st_ino
        with self._lock:
            self._inode_by_fd[fd] = inode
            if flags & os.O_TRUNC:
                self._dirty_region(inode).add_truncate(0)
        return fd

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        written = os.pwrite(fh, data, offset)
        with self._lock:
            self._dirty_region(self._inode_by_fd[fh]).add_write(offset, written)
        return written

    def truncate(self, path: str | None, length: int, fh: object = None) -> None:
        if isinstance(fh, int):
            os.ftruncate(fh, length)
            inode = os.fstat(fh).st_ino
        else:
            os.truncate(self._live(path), length)
            inode = os.lstat(self._live(path)).st_ino
        with self._lock:
            self._dirty_region(inode).add_truncate(length)

    def flush(self, path: str | None, fh: int) -> None:
        return None  # nothing buffered here; closing is not syncing

    def release(self, path: str | None, fh: int) -> None:
        with self._lock:
            self._inode_by_fd.pop(fh, None)
        os.close(fh)

    # --- syncs ---

    def fsync(self, path: str | None, datasync: int, fh: int) -> None:
        inode = os.fstat(fh).st_ino
        with self._sync_lock(inode):
            with self._lock:
                dirty = self._dirty.pop(inode, DirtyRegion())
            try:
                if not dirty.is_clean():
                    size_bytes = os.fstat(fh).st_size
                    self._store.sync_file(self._ids.get(inode), fh, dirty, size_bytes)
            except BaseException:
                with self._lock:
                    self._dirty_region(inode).add(dirty)
                raise
        if not self._strict_directories and path is not None:
            self._make_names_durable(path)

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        directory = self._live(path)
        inode = os.lstat(directory).st_ino
        with self._sync_lock(inode):
            with self._namespace:  # the listing and its ids as of one moment
                entries = self._live_entries(directory)
            self._store.write_dir(self._ids.get(inode), entries)

    def _make_names_durable(self, path: str) -> None:
        """ext4-like mode: each name on the path, from the file up to the root, is put into
        its directory's durable record (the rest of each record stays as it was)."""
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts), 0, -1):
            parent = self._live("/" + "/".join(parts[: depth - 1]))
            name = parts[depth - 1]
            with self._namespace:
                entry = self._entry(os.lstat(parent / name))
            parent_inode = os.lstat(parent).st_ino
            parent_id = self._ids.get(parent_inode)
            with self._sync_lock(parent_inode):
                entries = self._store.read_dir(parent_id)
                if entries.get(name) != entry:
                    self._store.write_dir(parent_id, {**entries, name: entry})

    def _live_entries(self, directory: Path) -> dict[str, Entry]:
        children = os.scandir(directory)
        return {child.name: self._entry(child.stat(follow_symlinks=False)) for child in children}

    def _entry(self, info: os.stat_result) -> Entry:
        return Entry(self._ids.get(info.st_ino), _kind(info.st_mode), info.st_mode)

    # --- bookkeeping ---

    def _live(self, path: str | None) -> Path:
        if path is None:
            raise OSError(errno.ENOENT, "no path (unlinked)")
        return self._live_dir / path.lstrip("/")

    def _created(self, inode: int) -> None:
        """A new inode: fresh id and no history (its number may have been a deleted one's)."""
        self._ids.fresh(inode)
        with self._lock:
            self._dirty.pop(inode, None)

    def _forget(self, inode: int) -> None:
        self._ids.forget(inode)
        with self._lock:
            self._dirty.pop(inode, None)
            self._sync_locks.pop(inode, None)

    def _dirty_region(self, inode: int) -> DirtyRegion:
        """Caller holds ``_lock``."""
        return self._dirty.setdefault(inode, DirtyRegion())

    @contextmanager
    def _sync_lock(self, inode: int) -> Iterator[None]:
        with self._lock:
            lock = self._sync_locks.setdefault(inode, threading.Lock())
        with lock:
            yield


def _live_flags(flags: int) -> int:
    """The flags for the live file: read-write (a sync reads the written ranges back through
    the same descriptor) and without O_APPEND (the kernel already turned appends into writes
    at the end; pwrite on an O_APPEND descriptor would ignore their offsets)."""
    return (flags & ~(os.O_APPEND | os.O_ACCMODE)) | os.O_RDWR


def _kind(mode: int) -> Kind:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    raise OSError(errno.EPERM, "only files and directories are supported")
