"""What RaftQ relies on in pysyncobj 0.3.17, pinned so that an upgrade fails here, loudly,
rather than in production, silently. Each test names the code that depends on the
behaviour; a failure means: read that code again before taking the new version.

Pinned elsewhere: a late acknowledgement moving a follower's next index back, the journal
cleared after a crash between a dump and its compaction, the members a dump and a restart
take (``test_node.py``, ``test_membership.py``: ``RaftNode``'s fixes fail there if pysyncobj
changes under them), and pysyncobj unpickling anything from anyone without a password
(``unit_tests/cluster/test_access.py``, the evil pickle on a bare node).
"""

from __future__ import annotations

import gc
import os
import re
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pysyncobj.syncobj
import pysyncobj.version
import pytest
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.journal import FileJournal, MetaStorer, ResizableFile
from pysyncobj.serializer import Serializer
from pysyncobj.syncobj import SyncObjException

from protocol.limits import Limits
from runtime.replication.raft.node import raft_conf
from unit_tests.ports import free_port
from unit_tests.runtime.replication.raft import crash_child
from unit_tests.runtime.replication.waits import wait_for

WAIT_S = 10.0
PACKAGE = Path(__file__).parents[4] / "server" / "runtime" / "replication" / "raft"


class Recorded:
    """Records the thread that pickles it."""

    threads: list[str] = []

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        Recorded.threads.append(threading.current_thread().name)
        return (Recorded, ())


class Counter(crash_child.Counter):
    """``add`` appends a value; ``fail`` raises."""

    @replicated  # type: ignore[misc]
    def fail(self) -> None:
        raise RuntimeError("a bug in apply")


@pytest.fixture
def bare() -> Iterator[Callable[..., tuple[SyncObj, Counter]]]:
    """Plain pysyncobj nodes (no ``RaftNode``), each with a ``Counter``."""
    nodes: list[SyncObj] = []

    def start(address: str, partners: list[str], **conf: Any) -> tuple[SyncObj, Counter]:
        counter = Counter()
        conf.setdefault("bindAddress", address)
        nodes.append(SyncObj(address, partners, SyncObjConf(**conf), consumers=[counter]))
        return nodes[-1], counter

    yield start
    for node in nodes:
        node.destroy()


def _leader_alone(start: Callable[..., tuple[SyncObj, Counter]], **conf: Any) -> Any:
    node, counter = start(f"127.0.0.1:{free_port()}", [], **conf)
    wait_for(node._isLeader, "a node alone to elect itself")
    counter.add(0, sync=True, timeout=WAIT_S)
    return node, counter


def test_the_version_these_pins_were_measured_on() -> None:
    """requirements-server.txt pins it exactly. Before taking another: run this module and
    the real-process tests, and read the code each pin names."""
    assert pysyncobj.version.VERSION == "0.3.17"


def test_every_private_name_the_package_uses_exists() -> None:
    """``runtime/replication/raft`` reaches into pysyncobj's private members (its fixes);
    a rename would show there as an AttributeError at some later moment, or a silently
    ignored override. Every mangled name it uses must still be a member."""
    used: set[str] = set()
    for path in PACKAGE.glob("*.py"):
        used |= set(
            re.findall(r"_(?:SyncObj|FileJournal|ResizableFile|Serializer)__\w+", path.read_text())
        )
    address = f"127.0.0.1:{free_port()}"
    node = SyncObj(address, [], SyncObjConf(bindAddress=address, autoTick=False))
    journal_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"pin-{os.getpid()}.journal"
    journal = FileJournal(str(journal_file))
    serializer = Serializer(None, 1024, False, None, None, None)
    try:
        owners = {"SyncObj": node, "FileJournal": journal, "Serializer": serializer}
        owners["ResizableFile"] = journal._FileJournal__journalFile
        missing = [n for n in sorted(used) if not hasattr(owners[n[1:].split("__")[0]], n)]
        assert not missing, f"pysyncobj no longer has {missing}"
    finally:
        journal._destroy()
        node._doDestroy()
        for path in journal_file.parent.glob(journal_file.name + "*"):
            path.unlink()
    assert used, "the scan found the package's private names"


def test_a_new_leader_stamps_every_member_answered_just_now(
    bare: Callable[..., tuple[SyncObj, Counter]],
) -> None:
    """So "answered lately" is not "in sync": ``RaftNode.replicas_answering`` also asks for
    a match index moved in the leader's term (min_insync_replicas)."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    dead = addresses[2]  # never started: it cannot have answered anyone
    nodes = [bare(a, [p for p in addresses if p != a])[0] for a in addresses[:2]]
    before = pysyncobj.syncobj.monotonicTime()
    wait_for(lambda: any(n._isLeader() for n in nodes), "a leader of two of three")
    leader = next(n for n in nodes if n._isLeader())
    member = next(n for n in leader._SyncObj__otherNodes if n.address == dead)
    assert leader._SyncObj__lastResponseTime[member] >= before
    assert leader._SyncObj__raftMatchIndex[member] == 0


def test_a_leader_adding_a_member_stamps_it_answered_and_guards_no_second_change(
    bare: Callable[..., tuple[SyncObj, Counter]],
) -> None:
    """The add stamps the new member "answered just now" (``replicas_answering``), and
    pysyncobj's one-change-at-a-time guard never engages (its change index is never set):
    a second change is taken while the first waits for its commit (``RaftNode.
    change_member`` keeps the rule itself)."""
    node, _ = _leader_alone(bare, dynamicMembershipChange=True)
    first, second = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"  # nobody there
    before = pysyncobj.syncobj.monotonicTime()
    node.addNodeToCluster(first)
    wait_for(lambda: len(node._SyncObj__otherNodes) == 1, "the first add appended")
    added = next(iter(node._SyncObj__otherNodes))
    assert node._SyncObj__lastResponseTime[added] >= before
    node.addNodeToCluster(second)  # the first cannot commit: its new member never answers
    wait_for(lambda: len(node._SyncObj__otherNodes) == 2, "the second add appended too")
    assert node._SyncObj__changeClusterIDx is None


def test_with_batched_appends_every_commit_waits_for_the_next_tick(
    bare: Callable[..., tuple[SyncObj, Counter]],
) -> None:
    """pysyncobj's default: each commit waits for the next 100 ms append tick, so
    ``raft_conf`` turns batching off."""
    assert SyncObjConf().appendEntriesUseBatch and SyncObjConf().appendEntriesPeriod == 0.1
    _, counter = _leader_alone(bare)
    waits_s = []
    for value in range(5):
        started = time.monotonic()
        counter.add(value, sync=True, timeout=WAIT_S)
        waits_s.append(time.monotonic() - started)
    assert statistics.median(waits_s) >= 0.09, waits_s  # a bound from below: load only adds
    conf = raft_conf(
        Limits(), secret="s", bind_address="127.0.0.1:1", journal_file="j", dump_file="d"
    )
    assert not conf.appendEntriesUseBatch


def test_a_call_that_timed_out_may_still_be_applied(
    bare: Callable[..., tuple[SyncObj, Counter]],
) -> None:
    """A timeout is no answer: the entry may commit after it (``raft_failure`` maps it to
    COMMIT_TIMEOUT, which does not prove that nothing was done)."""
    _, counter = _leader_alone(bare)
    with pytest.raises(SyncObjException) as timed_out:
        counter.add(1, sync=True, timeout=1e-6)
    assert timed_out.value.errorCode == "Timeout"
    wait_for(lambda: counter.values == [0, 1], "the timed-out call to be applied anyway")


def test_an_exception_in_a_replicated_method_wedges_the_group(
    bare: Callable[..., tuple[SyncObj, Counter]],
) -> None:
    """The tick thread retries the failing entry forever and applies nothing after it, so
    ``StateConsumer.apply`` catches every exception (applied as ``None``)."""
    node, counter = _leader_alone(bare)
    applied = node.raftLastApplied
    counter.fail()
    with pytest.raises(SyncObjException):
        counter.add(2, sync=True, timeout=1.0)
    assert counter.values == [0] and node.raftLastApplied == applied


@pytest.mark.parametrize(("journal", "dump"), [(True, True), (True, False), (False, True)])
@pytest.mark.filterwarnings("ignore::ResourceWarning")  # its meta storer leaves files open
def test_only_the_journal_and_the_full_dump_together_survive_a_restart(
    bare: Callable[..., tuple[SyncObj, Counter]], tmp_path: Path, journal: bool, dump: bool
) -> None:
    """A compaction drops from the journal what the dump holds: without a dump file the
    restarted node lacks the start of its log and never applies anything again, and
    without a journal what came after the dump is lost (``raft_conf`` sets both)."""
    files = {
        "journalFile": str(tmp_path / "j") if journal else None,
        "fullDumpFile": str(tmp_path / "d") if dump else None,
        "useFork": False,
    }
    node, counter = _leader_alone(bare, **files)  # applies 0
    for value in (1, 2):
        counter.add(value, sync=True, timeout=WAIT_S)
    node.forceLogCompaction()
    wait_for(lambda: node._getRaftLogSize() <= 2, "the compaction")
    counter.add(3, sync=True, timeout=WAIT_S)
    node.destroy()
    wait_for(lambda: not node.tick_thread_alive(), "the node to stop")
    node, restarted = bare(f"127.0.0.1:{free_port()}", [], **files)
    wait_for(node._isLeader, "the restarted node to elect itself")
    if journal and not dump:
        with pytest.raises(SyncObjException):
            restarted.add(4, sync=True, timeout=1.0)
        assert restarted.values == []
        return
    restarted.add(4, sync=True, timeout=WAIT_S)
    assert restarted.values == ([0, 1, 2, 3, 4] if journal else [0, 1, 2, 4])


def test_a_syncobj_made_before_a_fork_is_dead_in_the_child(
    bare: Callable[..., tuple[SyncObj, Counter]],
) -> None:
    """Its tick thread does not survive ``fork()``: nodes are built in the serving process."""
    _, counter = _leader_alone(bare)
    child = os.fork()
    if child == 0:  # the child: exit 0 only if the node is dead here
        try:
            counter.add(1, sync=True, timeout=1.0)
        except SyncObjException:
            os._exit(0)
        os._exit(1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_it_binds_every_address_unless_told_which(
    bare: Callable[..., tuple[SyncObj, Counter]],
) -> None:
    """Without ``bindAddress`` a node named 127.0.0.1:P listens on 0.0.0.0:P (here reached
    at 127.0.0.2); ``raft_conf`` always sets it."""
    for bind, reachable in ((None, True), ("given", False)):
        port = free_port()
        address = f"127.0.0.1:{port}"
        node, _ = bare(address, [], bindAddress=address if bind else None)
        wait_for(node.isReady, "the node to bind")
        assert _connects(("127.0.0.2", port)) is reachable, bind


def _connects(where: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(where, timeout=2):
            return True
    except OSError:
        return False


def test_it_never_syncs_its_journal_or_its_term_and_vote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither an append nor a term and vote reach the disk before pysyncobj acts on them:
    ``runtime/replication/raft/journal.py`` replaces both."""
    syncs: list[str] = []
    monkeypatch.setattr(os, "fsync", lambda fd: syncs.append("fsync"))
    monkeypatch.setattr(os, "fdatasync", lambda fd: syncs.append("fdatasync"))
    monkeypatch.setattr(ResizableFile, "flush", lambda self: syncs.append("msync"))
    journal = FileJournal(str(tmp_path / "j"))
    journal.add(b"entry", 1, 1)
    journal.setCurrentTerm(2, "someone")
    MetaStorer(str(tmp_path / "m")).storeMeta({"currentTerm": 2})
    assert syncs == []
    monkeypatch.undo()
    journal._destroy()


def test_without_fork_a_snapshot_is_taken_inside_the_calling_thread(tmp_path: Path) -> None:
    """With ``useFork=False`` the whole state is pickled and written by the tick thread
    (seconds for a big partition), so ``DumpWriter`` replaces the serializer."""
    Recorded.threads.clear()
    serializer = Serializer(str(tmp_path / "dump"), 1024, False, None, None, None)
    serializer.serialize(([{}, {"state": Recorded()}], (b"b", 2, 1), (b"a", 1, 1), set()), 1)
    assert Recorded.threads == [threading.current_thread().name]
    assert (tmp_path / "dump").is_file(), "written before serialize returned"


class _Recording:
    """A pysyncobj ``Poller`` that records what subscribes through it (``NodePoller``'s
    place)."""

    def __init__(self) -> None:
        self.subscribed: dict[int, Any] = {}
        self.polled: list[float] = []

    def subscribe(self, descr: int, callback: Any, eventMask: int) -> None:  # noqa: N803
        self.subscribed[descr] = callback

    def unsubscribe(self, descr: int) -> None:
        self.subscribed.pop(descr, None)

    def poll(self, timeout: float) -> None:
        self.polled.append(timeout)


class _OnRecording(SyncObj):  # type: ignore[misc]
    """``RaftNode``'s way onto a tick loop: ``_poller`` a property whose setter ignores the
    poller pysyncobj makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.recording = _Recording()
        super().__init__(*args, **kwargs)

    @property
    def _poller(self) -> _Recording:
        return self.recording

    @_poller.setter
    def _poller(self, _made: Any) -> None:
        pass


def test_every_descriptor_of_a_node_subscribes_through_its_poller_attribute() -> None:
    """``tick_loop``: pysyncobj reaches the node's poller only as ``SyncObj._poller`` (set
    once in ``__init__``, before its transport and ``PipeNotifier``), for its server, its
    connections and its wake-up pipe; ``_onTick(t)`` ends with ``_poller.poll(t)``; a
    queued command writes to the pipe at once (without batching) and its callback drains
    it; with autoTick off the constructor binds and ``destroy`` destroys on the caller's
    thread (``RaftNode.destroy`` hands it to the loop instead)."""
    assert pysyncobj.syncobj.PIPE_NOTIFIER_ENABLED
    address = f"127.0.0.1:{free_port()}"
    partner = "127.0.0.1:1"  # nobody there; a lower address: the node connects out to it
    conf = SyncObjConf(bindAddress=address, autoTick=False, appendEntriesUseBatch=False)
    node = _OnRecording(address, [partner], conf, consumers=[Counter()])
    try:
        recording = node.recording
        server = node._SyncObj__transport._server
        pipe = node._SyncObj__pipeNotifier
        server_fd = server._TcpServer__fileno
        assert server_fd in recording.subscribed  # bound in the constructor
        read_end = pipe._PipeNotifier__pipeR
        assert read_end in recording.subscribed
        node._onTick(0.25)
        assert recording.polled == [0.25]
        connection = node._SyncObj__transport._connections
        assert any(c.fileno() in recording.subscribed for c in connection.values())
        node._applyCommand(b"x", None)
        assert os.read(read_end, 16) == b"o"  # written at once, for the loop's poll
        os.write(pipe._PipeNotifier__pipeW, b"o")
        recording.subscribed[read_end](read_end, 1)  # the callback drains it
        with pytest.raises(BlockingIOError):
            os.read(read_end, 16)
    finally:
        node.destroy()  # autoTick off: at once, on this thread
    assert not node.recording.subscribed.keys() - {read_end}  # it never closes its pipe


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_with_autotick_off_a_taken_port_fails_the_constructor_after_its_retries() -> None:
    """``RaftNode`` on a loop sets ``maxBindRetries`` 1: pysyncobj's constructor then raises
    ``BindError`` as its last step (with the default 0 it would retry in a busy loop until
    bound), and its transport's tick binds later. (``TcpServer.bind`` leaves the failed
    socket to the garbage collector.)"""
    assert SyncObjConf().maxBindRetries == 0
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        address = f"127.0.0.1:{port}"
        conf = SyncObjConf(bindAddress=address, autoTick=False, maxBindRetries=1)
        with pytest.raises(SyncObjException) as failed:
            SyncObj(address, [], conf)
        assert failed.value.errorCode == "BindError"
    # The half-made node lives on in the traceback and the captured log: close the socket
    # its failed bind left, or the warning comes in whichever test collects it.
    trace = failed.value.__traceback__
    while trace is not None:
        made = trace.tb_frame.f_locals.get("self")
        if isinstance(made, SyncObj):
            made._SyncObj__transport._server._TcpServer__socket.close()
        trace = trace.tb_next
    del failed, trace
    gc.collect()
