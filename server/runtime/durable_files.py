"""How RaftQ puts a file or a directory on disk so that it survives a power cut.

A write is durable once the file is fsynced; a name (create, rename) once its directory is
fsynced as well. Everything an acknowledgement, a flush mark or a restart depends on goes
through these functions or syncs the same way (the Raft journal, SQLite with
``synchronous=FULL``). Standard library only: the launcher in ``raftq`` and every node use it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Make the entries of directory ``path`` (creates, renames, removals) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Make what was written to ``path`` durable (not its name: see ``fsync_directory``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directories(path: str | os.PathLike[str]) -> None:
    """``mkdir -p`` whose every created level is durable: each new directory is synced into
    its parent, so a restart after a power cut finds the whole path."""
    target = Path(path).absolute()
    missing: list[Path] = []
    while not target.exists():
        missing.append(target)
        target = target.parent
    for directory in reversed(missing):
        # Made by another process meanwhile: syncing its parent again is harmless.
        with contextlib.suppress(FileExistsError):
            directory.mkdir()
        fsync_directory(directory.parent)


def write_atomically(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: after a power cut it holds either the old or the new
    content, never a mix or nothing (write a temporary, fsync it, rename, fsync the dir)."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # a temporary left by a crash keeps its old mode otherwise
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, target)
    fsync_directory(target.parent)


def create_if_missing(path: str | os.PathLike[str], data: bytes, mode: int) -> bool:
    """Create ``path`` holding ``data`` unless it exists (False then); durable when True. A
    crash before the rename leaves only a temporary, so a half-written file never exists.
    One creator at a time is assumed (the launcher of a cluster directory)."""
    if Path(path).exists():
        return False
    write_atomically(path, data, mode)
    return True


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (it may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
