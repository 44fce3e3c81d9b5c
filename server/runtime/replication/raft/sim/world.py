"""The virtual world a simulated group runs in: pysyncobj's clock and random numbers, and
the syncs the simulated disk records, replaced while the simulation steps.

pysyncobj 0.3.17 reads its clock through the module-level name ``monotonicTime`` of
``pysyncobj.syncobj`` and draws election timeouts from that module's ``random``; RaftQ's
``RaftNode`` reads ``monotonic_time`` of its own module. ``virtual()`` swaps these names (and
``os.fsync``/``os.fdatasync``, so ``SimDisk`` sees every sync, and pysyncobj's
``getEncryptor``, memoized) for the duration of one
simulation step, under a process-wide lock, and puts the originals back: the same choice as
``journal.installed()`` (ARCHITECTURE.md, "Deterministic simulation", says why not a vendored
fork). A real node of the same process that ticks meanwhile would read the virtual clock:
the simulator runs alone (its tests and its command line build no other node).
"""

from __future__ import annotations

import functools
import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pysyncobj.syncobj

from runtime.replication.raft import node as raft_node
from runtime.replication.raft.sim.disk import SimDisk

_stepping = threading.Lock()
_encryptor = functools.lru_cache(maxsize=4)(pysyncobj.syncobj.getEncryptor)
"""Held while pysyncobj's names are virtual: one simulation steps at a time."""


class VirtualClock:
    """Seconds since the run started; only the scheduler moves it."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"time runs forward only, not by {seconds}")
        self.now_s += seconds


class NodeRandom:
    """What pysyncobj calls ``random``: draws from the stream of the node being run
    (``current``), so each node's election timeouts come from its own seeded stream."""

    def __init__(self) -> None:
        self.current = random.Random(0)

    def random(self) -> float:
        return self.current.random()


@contextmanager
def virtual(clock: VirtualClock, draws: NodeRandom, disk: SimDisk) -> Iterator[None]:
    """Within it pysyncobj and ``RaftNode`` read ``clock``, draw from ``draws``, and every
    ``fsync``/``fdatasync`` of the process is also recorded by ``disk``."""
    with _stepping:
        names: list[tuple[object, str, object]] = [
            (pysyncobj.syncobj, "monotonicTime", clock),
            (pysyncobj.syncobj, "random", draws),
            (raft_node, "monotonic_time", clock),
            (os, "fsync", disk.wrap(os.fsync)),
            (os, "fdatasync", disk.wrap(os.fdatasync)),
            # Only pysyncobj's TCP transport encrypts; deriving the key (PBKDF2) took a
            # fifth of a run's time. Derived once per secret instead.
            (pysyncobj.syncobj, "getEncryptor", _encryptor),
        ]
        saved = [(module, name, getattr(module, name)) for module, name, _ in names]
        for module, name, value in names:
            setattr(module, name, value)
        try:
            yield
        finally:
            for module, name, value in saved:
                setattr(module, name, value)
