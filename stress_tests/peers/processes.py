"""``PeerProcess``: one server of a peer cluster, started in its own session (so it is a
process group: a wrapper script and the server it runs) and stopped by signalling only that
group. Used from the main thread only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from stress_tests.polling import WaitTimeoutError, poll_until

STOP_WAIT_S = 20.0
PORT_PROBE_TIMEOUT_S = 0.5
LOG_TAIL_CHARS = 600


def find_binary(name: str, preferred_dirs: Sequence[str] = ()) -> str | None:
    """The program's path: in ``preferred_dirs`` first, then ``PATH``, then ``/usr/sbin``
    (where Debian puts servers, often not on a user's ``PATH``); None when absent."""
    for directory in (*preferred_dirs, None, "/usr/sbin"):
        if directory is None:
            found = shutil.which(name)
            if found is not None:
                return found
            continue
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), PORT_PROBE_TIMEOUT_S):
        return True
    return False


class PeerProcess:
    """One server; ``pgid`` is None unless it runs, so a sampler never reads a reused pid."""

    def __init__(
        self, name: str, argv: Sequence[str], log_file: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name, self.argv, self.log_file = name, list(argv), log_file
        self._env = None if env is None else dict(env)
        self._child: subprocess.Popen[bytes] | None = None

    @property
    def pgid(self) -> int | None:
        """The process group to sample and signal, while the server runs."""
        return self._child.pid if self.running() and self._child is not None else None

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self._child = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
                close_fds=True,
            )

    def running(self) -> bool:
        return self._child is not None and self._child.poll() is None

    def stop(self) -> None:
        """SIGTERM the group, SIGKILL it if still there after ``STOP_WAIT_S``; then reap."""
        child = self._child
        if child is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, sig)
            try:
                poll_until(lambda: child.poll() is not None, STOP_WAIT_S, f"{self.name} to stop")
                break
            except WaitTimeoutError:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # anything of the group left behind
        self._child = None

    def log_tail(self) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-LOG_TAIL_CHARS:].strip()
