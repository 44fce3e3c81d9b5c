"""RaftNode: a late acknowledgement never moves a follower's next index back (pysyncobj's
would, and its follower then deletes entries it had acknowledged); a refusal still does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysyncobj import SyncObjConf

from runtime import durable_journal
from runtime.raft_node import RaftNode
from unit_tests.ports import free_port

WAIT_S = 10.0


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[RaftNode]:
    address = f"127.0.0.1:{free_port()}"
    conf = SyncObjConf(
        bindAddress=address,
        journalFile=str(tmp_path / "raft.journal"),
        fullDumpFile=str(tmp_path / "raft.dump"),
        useFork=False,
    )
    durable_journal.install()
    node = RaftNode(address, [], conf, consumers=[])
    deadline = time.monotonic() + WAIT_S
    while not node._isLeader():
        assert time.monotonic() < deadline, "a single node elects itself"
        time.sleep(0.01)
    yield node
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
