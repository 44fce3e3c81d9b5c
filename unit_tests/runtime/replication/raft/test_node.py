"""RaftNode: a late acknowledgement never moves a follower's next index back (pysyncobj's
would, and its follower then deletes entries it had acknowledged); a refusal still does. A
node killed right after a snapshot keeps the journal's entries past the snapshot. A deposed
leader with a diverged tail catches up at once (simulator finding 8)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle
import pytest
from pysyncobj import FAIL_REASON, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.monotonic import monotonic as raft_clock

from protocol.errors import ErrorCode
from protocol.limits import Limits
from runtime.replication.raft import journal as durable_journal
from runtime.replication.raft.node import RaftNode, raft_failure
from unit_tests.ports import free_port
from unit_tests.runtime.replication.raft import crash_child
from unit_tests.runtime.replication.waits import one_leader, wait_for

WAIT_S = 10.0


def start_node(
    directory: Path,
    partners: list[str],
    consumers: list[SyncObjConsumer] | None = None,
    address: str | None = None,
) -> RaftNode:
    address = address or f"127.0.0.1:{free_port()}"
    conf = SyncObjConf(
        bindAddress=address,
        journalFile=str(directory / "raft.journal"),
        fullDumpFile=str(directory / "raft.dump"),
        useFork=False,
    )
    notice_s = Limits().raft_commit_notice_delay_s
    return RaftNode(
        address, partners, conf, consumers=consumers or [], commit_notice_delay_s=notice_s
    )


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[RaftNode]:
    node = start_node(tmp_path, [])
    deadline = time.monotonic() + WAIT_S
    while not node._isLeader():
        assert time.monotonic() < deadline, "a single node elects itself"
        time.sleep(0.01)
    yield node
    node.destroy()


def test_a_node_built_on_a_thread_that_ends_keeps_running(tmp_path: Path) -> None:
    """pysyncobj stops a node's tick thread once the thread that built it has ended; a
    broker builds replicas on the thread of a ``POST /partitions`` connection, which ends
    with the connection (found by the fast tier: every new topic's replicas stopped)."""
    built: list[RaftNode] = []
    builder = threading.Thread(target=lambda: built.append(start_node(tmp_path, [])))
    builder.start()
    builder.join(WAIT_S)
    assert not builder.is_alive() and built
    node = built[0]
    try:
        deadline = time.monotonic() + WAIT_S
        while not node._isLeader():  # electing itself takes ticks after the builder ended
            assert time.monotonic() < deadline, "the node stopped ticking with its builder"
            time.sleep(0.01)
    finally:
        node.destroy()


class SyncedAtApply(SyncObjConsumer):  # type: ignore[misc]
    """Records, for every applied entry, whether its journal had synced it by then."""

    def __init__(self) -> None:
        super().__init__()
        self.synced_index = 0
        self.checks: list[tuple[int, int]] = []

    @replicated  # type: ignore[misc]
    def bump(self) -> None:
        node = self._syncObj
        assert isinstance(node, RaftNode)
        self.checks.append((node.applying_entry()[0], self.synced_index))


def test_a_leader_counts_itself_toward_a_commit_only_once_it_synced_the_entry(
    tmp_path: Path,
) -> None:
    """The leader sends new entries before syncing them (RaftNode._checkCommandsToApply);
    it must still have synced each one before it commits and applies it."""
    consumer = SyncedAtApply()
    node = start_node(tmp_path, [], [consumer])
    try:
        journal = node.journal
        assert journal is not None
        real_flush = journal.flush

        def flush() -> None:
            last = len(journal) and journal[len(journal) - 1][1]
            real_flush()
            consumer.synced_index = max(consumer.synced_index, last)

        journal.flush = flush  # type: ignore[method-assign]
        deadline = time.monotonic() + WAIT_S
        while not node._isLeader():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for _ in range(50):
            consumer.bump(sync=True, timeout=WAIT_S)
        assert len(consumer.checks) == 50
        assert all(index <= synced for index, synced in consumer.checks), consumer.checks
    finally:
        node.destroy()


def test_its_journal_is_the_durable_one(leader: RaftNode) -> None:
    assert isinstance(leader.journal, durable_journal.DurableFileJournal)


def test_a_late_success_keeps_next_index_and_a_refusal_moves_it(leader: RaftNode) -> None:
    follower = "follower"  # a stand-in key: the handler only indexes its tables with it
    next_index = leader._SyncObj__raftNextIndex
    match_index = leader._SyncObj__raftMatchIndex
    leader._SyncObj__lastResponseTime[follower] = 0.0
    next_index[follower], match_index[follower] = 10, 4  # entries up to 9 sent, 4 acked

    def answer(next_node_idx: int, *, success: bool, reset: bool) -> None:
        message = {"type": "next_node_idx", "next_node_idx": next_node_idx}
        leader._SyncObj__onMessageReceived(
            follower, {**message, "success": success, "reset": reset}
        )

    answer(6, success=True, reset=False)  # acknowledges 5 while 6..9 are in flight
    assert (match_index[follower], next_index[follower]) == (5, 10)
    answer(3, success=False, reset=True)  # the follower lacks entries: go back
    assert next_index[follower] == 3
    answer(8, success=True, reset=False)
    assert (match_index[follower], next_index[follower]) == (7, 8)


def test_a_restart_right_after_a_snapshot_keeps_the_entries_after_it(tmp_path: Path) -> None:
    """pysyncobj cleared the journal when it did not *start* with the dump's last entries,
    which it does only once the compaction after a dump is done: a node killed in between
    came back without the entries it had applied (and acknowledged) after the dump."""
    child = subprocess.run(
        [sys.executable, "-m", crash_child.__name__, str(tmp_path), "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert (tmp_path / "raft.dump").exists()
    assert not list(tmp_path.glob("*.writing.*")), "the dump was renamed into place"
    node, counter = crash_child.start_node(str(tmp_path), free_port())
    try:
        expected = list(range(crash_child.BEFORE_SNAPSHOT)) + list(
            range(100, 100 + crash_child.AFTER_SNAPSHOT)
        )
        deadline = time.monotonic() + WAIT_S
        while counter.values != expected and time.monotonic() < deadline:
            time.sleep(0.01)
        assert counter.values == expected
        journal = node.journal
        assert journal is not None and journal[0][1] > 1, "compacted up to the dump"
    finally:
        node.destroy()


def test_loading_a_dump_restarts_the_election_timeout(leader: RaftNode) -> None:
    """A big dump holds the tick thread while it loads: a follower must not then stand for
    election as if it had not heard from the leader meanwhile."""
    leader.forceLogCompaction()
    dump = leader._SyncObj__conf.fullDumpFile
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(dump):
        assert time.monotonic() < deadline, "no dump written"
        time.sleep(0.01)
    leader._SyncObj__raftElectionDeadline = 0.0  # as if the load had taken very long
    # On pysyncobj's clock (CLOCK_MONOTONIC_RAW, which drifts from time.monotonic), and
    # before the load, so a stall between the load and the check (CI, on a loaded machine)
    # cannot make a correct deadline look too early.
    loaded_after_s = raft_clock()
    leader._SyncObj__loadDumpFile(False)  # a leader's tick never reads the deadline
    timeout_min_s = leader._SyncObj__conf.raftMinTimeout
    assert leader._SyncObj__raftElectionDeadline >= loaded_after_s + timeout_min_s


def test_one_mapping_of_raft_failures_says_what_proves_nothing_was_done() -> None:
    refused = (
        FAIL_REASON.QUEUE_FULL,
        FAIL_REASON.MISSING_LEADER,
        FAIL_REASON.NOT_LEADER,
        FAIL_REASON.DISCARDED,
        FAIL_REASON.REQUEST_DENIED,
    )
    for reason in refused:
        assert raft_failure(reason, "t/0", 5.0).code.proves_nothing_done, reason
    for reason in (FAIL_REASON.LEADER_CHANGED, FAIL_REASON.UNKNOWN_OUTCOME, "Timeout"):
        error = raft_failure(reason, "t/0", 5.0)
        assert error.code is ErrorCode.COMMIT_TIMEOUT and not error.code.proves_nothing_done


def test_a_leader_is_caught_up_once_it_applied_an_entry_of_its_term(leader: RaftNode) -> None:
    deadline = time.monotonic() + WAIT_S
    while not leader.caught_up():  # its no-op, committed at once in a group of one
        assert time.monotonic() < deadline, "the leader's no-op is applied"
        time.sleep(0.01)


def test_a_node_that_never_heard_of_a_leader_is_not_caught_up(tmp_path: Path) -> None:
    """Its partners are unreachable, so it never learns a term nor applies an entry of one;
    a group elsewhere may have committed what it lacks: it must not serve reads."""
    partners = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]  # nobody there
    node = start_node(tmp_path, partners)
    try:
        assert node.node_status().term == 0
        assert not node.caught_up()
    finally:
        node.close(WAIT_S)


class Blobs(SyncObjConsumer):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    @replicated  # type: ignore[misc]
    def put(self, blob: bytes) -> None:
        self.sizes.append(len(blob))


def blob_for_entry_of(entry_bytes: int) -> bytes:
    """A blob whose ``put`` entry's command is exactly ``entry_bytes`` long (pysyncobj: a
    type byte, then the pickled ``(method id, (blob,))``)."""
    for size in range(entry_bytes - 100, entry_bytes):
        if 1 + len(pysyncobj_pickle.dumps((0, (b"x" * size,)))) == entry_bytes:
            return b"x" * size
    raise AssertionError(f"no blob makes an entry of {entry_bytes} bytes")


@pytest.mark.parametrize("entry_bytes", [2 * 65536, 2 * 65536 - 10, 3 * 65536, 70_000])
def test_an_entry_sent_in_parts_arrives_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, entry_bytes: int
) -> None:
    """pysyncobj marks the part before the last finished for a command just below a multiple
    of 64 KiB (``EntryParts``): without the fix each follower logs "failed _onTick" for an
    unpickling error and takes the entry only at the leader's next part."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    blobs = [Blobs() for _ in addresses]
    nodes: list[RaftNode] = []
    try:
        for number, (address, consumer) in enumerate(zip(addresses, blobs, strict=True)):
            directory = tmp_path / str(number)
            directory.mkdir()
            others = [a for a in addresses if a != address]
            nodes.append(start_node(directory, others, [consumer], address))
        leader = one_leader(nodes, lambda node: bool(node._isLeader()))
        blob = blob_for_entry_of(entry_bytes)
        blobs[nodes.index(leader)].put(blob, sync=True, timeout=WAIT_S)
        wait_for(lambda: all(b.sizes == [len(blob)] for b in blobs), "every node applies it")
    finally:
        for node in nodes:
            node.destroy()
    failures = [r for r in caplog.records if r.name.startswith("pysyncobj")]
    assert not failures, [r.getMessage() for r in failures]


DIVERGED = 300
"""Entries a leader cut off from its followers appends and the group never takes. Backed up
over one per heartbeat (pysyncobj's refusal, 0.1 s), they took the old leader 30 s to get
past once back; a refusal naming the entry after its commit index takes one round trip."""
CATCH_UP_S = 10.0


def _group_member(directory: Path, address: str, addresses: list[str]) -> tuple[RaftNode, Any]:
    """A member of a group of ``addresses`` on ``directory``'s files (new or left by a stop),
    each commit sent at once (RaftQ's ``appendEntriesUseBatch=False``), never compacted."""
    directory.mkdir(exist_ok=True)
    conf = SyncObjConf(
        bindAddress=address,
        journalFile=str(directory / "raft.journal"),
        fullDumpFile=str(directory / "raft.dump"),
        useFork=False,
        appendEntriesUseBatch=False,
        logCompactionMinEntries=10**9,
        logCompactionMinTime=10**9,
    )
    counter = crash_child.Counter()
    notice_s = Limits().raft_commit_notice_delay_s
    others = [a for a in addresses if a != address]
    node = RaftNode(address, others, conf, consumers=[counter], commit_notice_delay_s=notice_s)
    return node, counter


class _Group:
    """Three real members on local ports, each started and stopped by its number."""

    def __init__(self, tmp_path: Path) -> None:
        self.addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        self.directories = [tmp_path / str(number) for number in range(3)]
        self.running: dict[int, tuple[RaftNode, Any]] = {}

    def start(self, number: int) -> tuple[RaftNode, Any]:
        member = _group_member(self.directories[number], self.addresses[number], self.addresses)
        self.running[number] = member
        return member

    def stop(self, number: int) -> None:
        node, _ = self.running.pop(number)
        node.close(WAIT_S)

    def stop_all(self) -> None:
        for number in list(self.running):
            self.stop(number)


def _leader_appends_alone(group: _Group) -> int:
    """Start the group, commit one entry, stop the followers, and have the leader append
    ``DIVERGED`` entries alone (never committed); stop it too. Its number."""
    for number in range(3):
        group.start(number)
    nodes = [group.running[number][0] for number in range(3)]
    old = nodes.index(one_leader(nodes, lambda node: bool(node._isLeader())))
    group.running[old][1].add(0, sync=True, timeout=WAIT_S)
    wait_for(
        lambda: all(counter.values == [0] for _, counter in group.running.values()),
        "every member applies the first entry",
    )
    for number in range(3):
        if number != old:
            group.stop(number)
    old_node, old_counter = group.running[old]
    first_diverged = old_node._SyncObj__getCurrentLogIndex() + 1
    for value in range(DIVERGED):
        old_counter.add(-1 - value, callback=lambda _result, _error: None)
    wait_for(
        lambda: old_node._SyncObj__getCurrentLogIndex() >= first_diverged + DIVERGED - 1,
        "the cut-off leader appends every entry",
    )
    assert old_node._isLeader() and old_counter.values == [0], "none of them committed"
    group.stop(old)
    return old


def test_a_deposed_leader_with_a_diverged_tail_catches_up_at_once(tmp_path: Path) -> None:
    """Simulator finding 8 (seed 5079) on real nodes: a leader whose followers stopped goes
    on appending alone (``DIVERGED`` entries, never committed), stops; the others come back,
    elect one of them and commit as many entries of a later term; the old leader comes back
    with its log diverged after the first entry, to a leader elected after those entries.
    pysyncobj's follower answered each refused append with the refused index, so the
    leader backed up one entry per heartbeat (``DIVERGED`` heartbeats; longer under
    proposals, which undo it); with ``RaftNode``'s answer (the entry after its commit
    index) it holds the group's entries within ``CATCH_UP_S``.
    """
    group = _Group(tmp_path)
    try:
        old = _leader_appends_alone(group)
        followers = [number for number in range(3) if number != old]
        for number in followers:
            group.start(number)
        new_nodes = [group.running[number][0] for number in followers]
        first = one_leader(new_nodes, lambda node: bool(node._isLeader()))
        heir = next(node for node in new_nodes if node is not first)
        new_counter = group.running[followers[new_nodes.index(first)]][1]
        for value in range(1, DIVERGED + 1):
            new_counter.add(value, callback=lambda _result, _error: None)
        expected = list(range(DIVERGED + 1))
        wait_for(
            lambda: all(group.running[n][1].values == expected for n in followers),
            "the new group commits and applies its entries",
        )
        # A leader elected now starts the old leader's next index at its log's end, where
        # the backing up is long (the first new leader started it before its own entries,
        # where the old leader's log still matched).
        first.transfer_leadership(heir.selfNode.id)
        wait_for(lambda: heir._isLeader() and heir.caught_up(), "the other member leads")
        _, back = group.start(old)
        wait_for(
            lambda: back.values == expected,
            "the old leader drops its own entries and applies the group's",
            CATCH_UP_S,
        )
    finally:
        group.stop_all()
