"""The durable state of the power-cut file system: what a disk would still hold after a power
cut. It lives on the real disk under ``<backing>/durable/`` (so it survives kill -9 of the
FUSE process) and is only ever changed by a sync:

- ``objects/<id>.data``: a file's content as of its last fsync (absent: empty);
- ``objects/<id>.dir``: a directory's entries as of its last fsync, JSON
  ``{name: {"id": int, "kind": "file"|"dir", "mode": int}}`` (absent: empty); id 0 is the root;
- ``snapshot.json``: present only between a snapshot and the next mount: the live inode
  number of each object of the snapshot, which the next FUSE process takes over.

Objects have their own ids, not inode numbers: an inode number freed by an unlink comes back
for a new file while the durable entry of the old file may still name it. The FUSE process
gives every file and directory it creates a fresh id (``ObjectIds``).

Every record is written to a temporary file, fsynced, renamed into place, and the folder
fsynced, so a kill -9 of the FUSE process (or a real power loss) leaves the old or the new
record, never a torn one."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from runtime.durable_files import fsync_directory, fsync_file

ROOT_ID = 0
COPY_CHUNK_BYTES = 1024 * 1024
"""Bytes copied per read when a sync copies a written range from the live file."""

Kind = Literal["file", "dir"]


@dataclass(frozen=True)
class Entry:
    """One name in a durable directory record."""

    object_id: int
    kind: Kind
    mode: int


class ObjectIds:
    """Live inode number -> object id, for the inodes the current FUSE process knows.
    Thread-safe (the FUSE threads share it)."""

    def __init__(self, ids_by_inode: dict[int, int], next_id: int) -> None:
        self._lock = threading.Lock()
        self._ids_by_inode = dict(ids_by_inode)
        self._next_id = next_id

    def fresh(self, inode: int) -> int:
        """A new id for a newly created inode (its number may have belonged to a deleted one)."""
        with self._lock:
            object_id = self._next_id
            self._next_id += 1
            self._ids_by_inode[inode] = object_id
            return object_id

    def get(self, inode: int) -> int:
        """The inode's id; a fresh one if this process never saw it (an inode it did not
        create and the snapshot did not hold cannot have durable state yet)."""
        with self._lock:
            known = self._ids_by_inode.get(inode)
        return self.fresh(inode) if known is None else known

    def forget(self, inode: int) -> None:
        with self._lock:
            self._ids_by_inode.pop(inode, None)


class DurableStore:
    """The records under ``durable_dir``. Callers serialise syncs of one object (the FUSE
    operations hold a lock per inode); syncs of different objects may run at once."""

    def __init__(self, durable_dir: Path) -> None:
        self.durable_dir = durable_dir
        self.objects_dir = durable_dir / "objects"
        self.snapshot_file = durable_dir / "snapshot.json"

    # --- syncs (FUSE threads) ---

    def sync_file(self, object_id: int, live_fd: int, dirty: DirtyLike, size_bytes: int) -> None:
        """Makes ``<id>.data`` equal to the live file (see ``dirty.py`` for why this order)."""
        path = self.objects_dir / f"{object_id}.data"
        created = not path.exists()
        out_fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            if dirty.truncated_to is not None:
                os.ftruncate(out_fd, min(dirty.truncated_to, os.fstat(out_fd).st_size))
            for start, end in dirty.merged_ranges():
                _copy_range(live_fd, out_fd, start, min(end, size_bytes))
            os.ftruncate(out_fd, size_bytes)
            os.fsync(out_fd)
        finally:
            os.close(out_fd)
        if created:
            fsync_directory(self.objects_dir)

    def read_dir(self, object_id: int) -> dict[str, Entry]:
        path = self.objects_dir / f"{object_id}.dir"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        return {name: Entry(e["id"], e["kind"], e["mode"]) for name, e in raw.items()}

    def write_dir(self, object_id: int, entries: dict[str, Entry]) -> None:
        raw = {n: {"id": e.object_id, "kind": e.kind, "mode": e.mode} for n, e in entries.items()}
        _write_atomically(self.objects_dir / f"{object_id}.dir", json.dumps(raw).encode())

    # --- snapshot and restore (no FUSE process running on this backing directory) ---

    def snapshot(self, live_dir: Path) -> None:
        """Makes everything now in ``live_dir`` durable: a new store replaces the old one."""
        building = self.durable_dir.with_name(self.durable_dir.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        (building / "objects").mkdir(parents=True)
        ids_by_inode = _copy_tree(live_dir, DurableStore(building))
        _write_atomically(
            building / "snapshot.json",
            json.dumps({"next_id": len(ids_by_inode), "ids_by_inode": ids_by_inode}).encode(),
        )
        _replace_dir(building, self.durable_dir)

    def claim_snapshot(self, live_dir: Path) -> ObjectIds:
        """The object ids of the last snapshot, for a starting FUSE process; takes a snapshot
        first when none is waiting (the previous process was killed without a ``cut()``, or
        this backing directory is new)."""
        if not self.snapshot_file.exists():
            live_dir.mkdir(parents=True, exist_ok=True)
            self.snapshot(live_dir)
        raw = json.loads(self.snapshot_file.read_text())
        self.snapshot_file.unlink()
        fsync_directory(self.durable_dir)
        ids = {int(inode): object_id for inode, object_id in raw["ids_by_inode"].items()}
        return ObjectIds(ids, raw["next_id"])

    def restore(self, live_dir: Path) -> None:
        """Replaces ``live_dir`` with the durable state: what a disk holds after a power cut."""
        building = live_dir.with_name(live_dir.name + ".restoring")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        seen: set[int] = {ROOT_ID}
        pending = [(ROOT_ID, building)]
        while pending:
            dir_id, dir_path = pending.pop()
            for name, entry in self.read_dir(dir_id).items():
                target = dir_path / name
                if entry.kind == "file":
                    self._restore_file(entry.object_id, target)
                elif entry.object_id not in seen:
                    # A directory renamed with only one of its two parents synced is named twice
                    # (or, moved below itself, names an ancestor): it is restored once.
                    seen.add(entry.object_id)
                    target.mkdir()
                    pending.append((entry.object_id, target))
                else:
                    continue
                target.chmod(stat.S_IMODE(entry.mode))
        _replace_dir(building, live_dir)

    def _restore_file(self, object_id: int, target: Path) -> None:
        source = self.objects_dir / f"{object_id}.data"
        if source.exists():
            shutil.copyfile(source, target)
        else:
            target.touch()


class DirtyLike(Protocol):
    """What ``sync_file`` needs of a ``DirtyRegion``: the store does not depend on how the
    file system tracks changes."""

    @property
    def truncated_to(self) -> int | None: ...

    def merged_ranges(self) -> list[tuple[int, int]]: ...


def _copy_tree(live_dir: Path, store: DurableStore) -> dict[int, int]:
    """Copies ``live_dir`` into ``store`` as objects; returns live inode -> object id."""
    ids_by_inode = {live_dir.stat().st_ino: ROOT_ID}
    pending = [(ROOT_ID, live_dir)]
    while pending:
        dir_id, dir_path = pending.pop()
        entries: dict[str, Entry] = {}
        for child in os.scandir(dir_path):
            info = child.stat(follow_symlinks=False)
            object_id = len(ids_by_inode)
            ids_by_inode[info.st_ino] = object_id
            if stat.S_ISDIR(info.st_mode):
                entries[child.name] = Entry(object_id, "dir", info.st_mode)
                pending.append((object_id, Path(child.path)))
            elif stat.S_ISREG(info.st_mode):
                entries[child.name] = Entry(object_id, "file", info.st_mode)
                shutil.copyfile(child.path, store.objects_dir / f"{object_id}.data")
                fsync_file(store.objects_dir / f"{object_id}.data")
            else:
                raise ValueError(f"{child.path}: only files and directories are supported")
        store.write_dir(dir_id, entries)
    return ids_by_inode


def _copy_range(source_fd: int, target_fd: int, start: int, end: int) -> None:
    offset = start
    while offset < end:
        data = os.pread(source_fd, min(COPY_CHUNK_BYTES, end - offset), offset)
        if not data:
            return  # the live file is shorter now; its final length is set after the copy
        os.pwrite(target_fd, data, offset)
        offset += len(data)


def _replace_dir(new: Path, old: Path) -> None:
    """Puts ``new`` in place of ``old`` (two renames; a crash between them leaves ``new`` and
    ``old.discarded``, which the next snapshot or restore rebuilds anyway)."""
    discarded = old.with_name(old.name + ".discarded")
    shutil.rmtree(discarded, ignore_errors=True)
    if old.exists():
        old.rename(discarded)
    new.rename(old)
    fsync_directory(old.parent)
    shutil.rmtree(discarded, ignore_errors=True)


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    temporary.rename(path)
    fsync_directory(path.parent)
