"""``AppliedSignal``: wakes a replica's long polls and streams when a command it proposed
has been applied (an append, a pop, a nack), so a waiting reader sees a new message within
the wake-up of a thread rather than a polling period.

Only commands proposed through this replica bump it: those of its clients while it leads,
which is where pops, receives and streams are served. Entries a follower applies (another
replica proposed them) do not, so every waiter also wakes after a bounded slice and looks
again (``Limits.stream_poll_s``). Threads: any; the condition is never held while the
replica's state is read.
"""

from __future__ import annotations

import threading


class AppliedSignal:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0

    def count(self) -> int:
        """How many applied commands have been signalled so far."""
        with self._changed:
            return self._count

    def bump(self) -> None:
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def wait_past(self, seen: int, timeout_s: float) -> int:
        """Until the count is other than ``seen``, at most ``timeout_s``; the count then."""
        with self._changed:
            self._changed.wait_for(lambda: self._count != seen, max(0.0, timeout_s))
            return self._count
