"""A one-node Raft group that a test kills with SIGKILL right after a snapshot: the full dump
is renamed into place, the journal is not yet compacted, and entries were appended after the
dump's last index meanwhile (as they are while the dump writer's thread runs).

``python -m unit_tests.runtime.replication.raft.crash_child DIR PORT`` never returns: it
kills itself.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from pysyncobj import SyncObjConf, SyncObjConsumer, replicated

from protocol.limits import Limits
from runtime.replication.raft import dump
from runtime.replication.raft.journal import DurableFileJournal
from runtime.replication.raft.node import RaftNode

BEFORE_SNAPSHOT = 30
"""Commands applied before the snapshot starts: the dump holds them."""
AFTER_SNAPSHOT = 20
"""Commands applied while the dump is being written: only the journal holds them."""
WAIT_S = 10.0


class Counter(SyncObjConsumer):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.values: list[int] = []

    @replicated  # type: ignore[misc]
    def add(self, value: int) -> int:
        self.values.append(value)
        return len(self.values)


def start_node(directory: str, port: int) -> tuple[RaftNode, Counter]:
    """A one-node group whose log is compacted only when forced."""
    address = f"127.0.0.1:{port}"
    conf = SyncObjConf(
        bindAddress=address,
        journalFile=os.path.join(directory, "raft.journal"),
        fullDumpFile=os.path.join(directory, "raft.dump"),
        useFork=False,
        logCompactionMinEntries=10**9,
        logCompactionMinTime=10**9,
    )
    counter = Counter()
    notice_s = Limits().raft_commit_notice_delay_s
    node = RaftNode(address, [], conf, consumers=[counter], commit_notice_delay_s=notice_s)
    wait(node._isLeader, "a one-node group elects itself")
    return node, counter


def wait(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


def crash_right_after_a_snapshot(directory: str, port: int) -> None:
    node, counter = start_node(directory, port)
    for value in range(BEFORE_SNAPSHOT):
        counter.add(value, sync=True)
    # Hold the dump "being written" while more commands are applied.
    release = threading.Event()
    write_done = dump._DumpWrite.done
    dump._DumpWrite.done = lambda self: release.is_set() and write_done(self)  # type: ignore[method-assign]
    node.forceLogCompaction()
    wait(lambda: node._SyncObj__serializer._writing is not None, "the snapshot to start")
    for value in range(100, 100 + AFTER_SNAPSHOT):
        counter.add(value, sync=True)

    def crash(self: DurableFileJournal, entryTo: int) -> None:  # noqa: N803
        os.kill(os.getpid(), signal.SIGKILL)  # the dump is in place; the journal untouched

    DurableFileJournal.deleteEntriesTo = crash  # type: ignore[method-assign]
    release.set()
    time.sleep(WAIT_S)
    raise SystemExit("not killed")


if __name__ == "__main__":
    crash_right_after_a_snapshot(sys.argv[1], int(sys.argv[2]))
