"""``PowerCutFS``: starts, cuts and stops the power-cut file system of one backing directory.

Layout of ``backing_dir``: ``mnt/`` (the mount point), ``live/`` (what processes see through
the mount), ``durable/`` (what survives a cut, see ``durable_store.py``) and ``fuse.log`` (the
FUSE process's stderr). Used from one thread (a test's); the FUSE process is a child process.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO

from stress_tests.polling import poll_until
from stress_tests.powercut.durable_store import DurableStore

REPO_DIR = Path(__file__).resolve().parents[2]
MOUNT_TIMEOUT_S = 10.0
"""From starting the FUSE process until the mount is up (it snapshots the backing first)."""
STOP_TIMEOUT_S = 10.0
"""From SIGTERM (or SIGKILL) until the FUSE process has exited."""
UNMOUNT_TIMEOUT_S = 10.0
"""From the lazy unmount until the mount point is no longer a mount."""


def fuse_unavailable_reason() -> str | None:
    """Why FUSE cannot run here, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the kernel's FUSE module is not loaded or not visible)"
    if ctypes.util.find_library("fuse") is None:
        return "no libfuse 2 (Debian: apt-get install libfuse2)"
    try:
        import fuse  # noqa: F401, PLC0415 (fusepy loads libfuse when imported)
    except (ImportError, OSError) as exc:
        return f"fusepy cannot load: {exc}"
    return None


def is_mounted(path: Path) -> bool:
    """Whether something is mounted at ``path``, from the kernel's mount table:
    ``os.path.ismount`` answers False for a FUSE mount whose process died (stat fails)."""
    escaped = str(path).replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011")
    with open("/proc/self/mounts") as mounts:
        return any(line.split(" ")[1] == escaped for line in mounts)


class PowerCutFS:
    """A file system that loses at a ``cut()`` everything not made durable by a sync."""

    def __init__(
        self,
        backing_dir: Path,
        strict_directories: bool = True,
        mount_timeout_s: float = MOUNT_TIMEOUT_S,
    ) -> None:
        self.backing_dir = backing_dir.resolve()
        self.mount_point = self.backing_dir / "mnt"
        self.live_dir = self.backing_dir / "live"
        self.strict_directories = strict_directories
        self.mount_timeout_s = mount_timeout_s
        self._store = DurableStore(self.backing_dir / "durable")
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> PowerCutFS:
        self.mount()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.unmount()

    @property
    def mounted(self) -> bool:
        return self._process is not None

    def mount(self) -> Path:
        """Starts the FUSE process and returns the mount point once it is mounted."""
        if self._process is not None:
            raise RuntimeError(f"{self.mount_point} is already mounted")
        self._lazy_unmount()  # a mount left by a FUSE process that died with its test run
        self.mount_point.mkdir(parents=True, exist_ok=True)
        self._log = (self.backing_dir / "fuse.log").open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "stress_tests.powercut", str(self.mount_point)]
            + [str(self.backing_dir)]
            + ([] if self.strict_directories else ["--no-strict-directories"]),
            cwd=REPO_DIR,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        try:
            poll_until(self._mount_is_up, self.mount_timeout_s, f"mount of {self.mount_point}")
        except BaseException:
            self._kill()
            raise
        return self.mount_point

    def cut(self) -> None:
        """A power cut: kill -9 the FUSE process, detach the mount, rebuild ``live/`` from the
        durable state only, then declare everything in it durable. Kill the processes that use
        the mount first. Unmounted afterwards: ``mount()`` again to go on."""
        if self._process is None:
            raise RuntimeError(f"{self.mount_point} is not mounted")
        self._kill()
        self._store.restore(self.live_dir)
        self._store.snapshot(self.live_dir)

    def unmount(self) -> None:
        """A clean stop (everything becomes durable, as a real unmount syncs). Idempotent; a
        FUSE process that does not stop within its bound is killed, and the error raised."""
        if self._process is None:
            return
        process = self._process
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._kill()
            raise
        self._finish()
        if process.returncode != 0:
            log = self.backing_dir / "fuse.log"
            raise RuntimeError(f"the FUSE process exited with {process.returncode}: see {log}")

    def _mount_is_up(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            log = (self.backing_dir / "fuse.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the FUSE process exited with {self._process.returncode}: {log}")
        return is_mounted(self.mount_point)

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=STOP_TIMEOUT_S)
        self._finish()

    def _finish(self) -> None:
        """After the FUSE process exited: no mount left behind, log closed."""
        self._lazy_unmount()
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _lazy_unmount(self) -> None:
        if not is_mounted(self.mount_point):
            return
        # Lazy: processes that still hold files on the mount get errors instead of blocking
        # the unmount (a dead FUSE process aborted the connection already).
        fusermount = shutil.which("fusermount") or shutil.which("fusermount3")
        command = [fusermount, "-uz"] if fusermount else ["umount", "-l"]
        subprocess.run([*command, str(self.mount_point)], check=True, timeout=STOP_TIMEOUT_S)
        poll_until(
            lambda: not is_mounted(self.mount_point),
            UNMOUNT_TIMEOUT_S,
            f"unmount of {self.mount_point}",
        )
