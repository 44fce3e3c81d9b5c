"""The simulated disk: the nodes' files live in a real directory (pysyncobj's journal is an
``mmap``), and ``SimDisk`` records what each sync made durable, so that a crash can put
back exactly that and lose the rest.

The model is the power-cut file system's (``stress_tests/powercut``), strict directories:
a file's bytes are durable as of its last ``fsync``/``fdatasync``; a name (create, rename,
removal) once its directory is fsynced. A crash rewrites the node's directory as its last
synced listing names it, each file with the bytes of its last sync (empty when it never
was). Syncs are seen by replacing ``os.fsync`` and ``os.fdatasync`` while the simulation
steps (``Simulation``'s context, under its lock), so the journal, meta storer and dump code
run unchanged. Files are keyed by inode: the directory should be on tmpfs, whose inode
numbers are not reused soon (``default_root``).

``lying``: addresses of nodes whose syncs are not recorded (a disk that acknowledges
without syncing): a deliberately broken variant that the checks must reject.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable

SyncCall = Callable[[int], None]


def default_root() -> str:
    """A fresh directory for a run's files, on tmpfs when the machine has one."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="raftq-sim-", dir=base)


class SimDisk:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self._data: dict[int, bytes] = {}
        """Inode -> its bytes as of its last sync."""
        self._names: dict[str, dict[str, int]] = {}
        """Directory -> its regular files' names and inodes as of its last sync."""
        self.lying: set[str] = set()
        """Node directories whose syncs are ignored (the broken variant)."""
        self.syncs = 0

    def node_dir(self, address: str) -> str:
        return os.path.join(self.root, address.replace(":", "_"))

    def record(self, fd: int) -> None:
        """What ``fsync(fd)`` makes durable, when ``fd`` is one of the simulation's files."""
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return
        if not path.startswith(self.root + os.sep) or path.endswith(" (deleted)"):
            return
        if any(path.startswith(self.node_dir(a) + os.sep) for a in self.lying):
            return
        if os.path.realpath(path) in {self.node_dir(a) for a in self.lying}:
            return
        self.syncs += 1
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            self._names[path] = _listing(path)
        elif stat.S_ISREG(info.st_mode):
            with open(path, "rb") as file:
                self._data[info.st_ino] = file.read()

    def durable_files(self, directory: str) -> dict[str, bytes]:
        """What a crash would leave in ``directory``: name -> bytes."""
        names = self._names.get(os.path.abspath(directory), {})
        return {name: self._data.get(inode, b"") for name, inode in names.items()}

    def crash(self, directory: str) -> dict[str, bytes]:
        """Rewrite ``directory`` as a power cut leaves it (the node must be stopped, its
        files closed); returns what is left."""
        directory = os.path.abspath(directory)
        left = self.durable_files(directory)
        if os.path.isdir(directory):
            shutil.rmtree(directory)
        os.makedirs(directory)
        listing: dict[str, int] = {}
        for name, data in sorted(left.items()):
            path = os.path.join(directory, name)
            with open(path, "wb") as file:
                file.write(data)
            inode = os.stat(path).st_ino
            listing[name] = inode
            self._data[inode] = data
        self._names[directory] = listing
        return left

    def wrap(self, real: SyncCall) -> SyncCall:
        """``os.fsync`` or ``os.fdatasync`` that also records what it made durable."""

        def sync(fd: int) -> None:
            real(fd)
            self.record(fd)

        return sync


def _listing(directory: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False):
            found[entry.name] = entry.inode()
    return found
