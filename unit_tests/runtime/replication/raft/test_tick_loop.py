"""The tick loop (issue 22): many real pysyncobj nodes of this process ticked by one thread,
proposals answered without waiting for a tick, nodes joining and leaving while others run."""

from __future__ import annotations

import gc
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

import pytest
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection

from protocol.limits import Limits
from protocol.types import RaftRole
from runtime.replication.machine import Entry
from runtime.replication.raft.machine import Environment, RaftConfig, RaftMachine
from runtime.replication.raft.tick_loop import NodePoller, TickLoop
from unit_tests.ports import free_port
from unit_tests.runtime.replication.ledger import LEDGER, Ledger
from unit_tests.runtime.replication.waits import one_leader, wait_for

Machine = RaftMachine[Ledger, int, tuple[object, Entry]]
LIMITS = Limits()
LOOP_NAME = "raft-tick-loop-test"


def _loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == LOOP_NAME]


def _pysyncobj_tick_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "_autoTickThread" in t.name]


class Nodes:
    def __init__(self, directory: Path, loop: TickLoop) -> None:
        self._directory = directory
        self.loop = loop
        self.machines: list[Machine] = []
        self.ports: dict[int, int] = {}

    def start(self, address: str, partners: Sequence[str] = ()) -> Machine:
        directory = self._directory / address.replace(":", "-")
        config = RaftConfig("ledger", address, tuple(partners), str(directory), "s", LIMITS)
        machine: Machine = RaftMachine(LEDGER, config, Environment(loop=self.loop))
        self.machines.append(machine)
        self.ports[id(machine)] = int(address.rsplit(":", 1)[1])
        return machine

    def group(self, size: int) -> list[Machine]:
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(size)]
        return [self.start(a, [p for p in addresses if p != a]) for a in addresses]

    def alone(self) -> Machine:
        machine = self.start(f"127.0.0.1:{free_port()}")
        wait_for(machine.caught_up, "a node alone to elect itself")
        return machine


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    made = Nodes(tmp_path, TickLoop(name=LOOP_NAME))
    yield made
    for machine in made.machines:
        machine.stop(5.0)


def _leader(group: list[Machine]) -> Machine:
    leader = one_leader(group, lambda m: m.status().role is RaftRole.LEADER)
    wait_for(leader.caught_up, "the leader's first entry applied")
    return leader


def _all_hold_one(group: list[Machine]) -> bool:
    return all(m.read(lambda ledger: len(ledger.values)) == 1 for m in group)


def test_many_groups_run_on_one_thread(nodes: Nodes) -> None:
    groups = [nodes.group(3) for _ in range(4)]
    leaders = [_leader(group) for group in groups]
    for number, leader in enumerate(leaders):
        value, entry = leader.propose(number)
        assert value == 1 and entry.replicas_synced >= 2
    for group in groups:
        wait_for(partial(_all_hold_one, group), "every replica applied the entry")
    assert len(_loop_threads()) == 1
    assert not _pysyncobj_tick_threads()


def test_the_thread_count_does_not_grow_with_the_nodes(nodes: Nodes) -> None:
    nodes.alone()
    before = threading.active_count()
    more = [nodes.alone() for _ in range(12)]
    assert threading.active_count() == before
    assert all(m.propose(1)[0] == 1 for m in more)
    assert threading.active_count() == before


def test_a_proposal_wakes_the_loop_at_once(tmp_path: Path) -> None:
    """With a tick every 2 s, a proposal is answered in a small part of it: the request
    thread's wake-up (pysyncobj's pipe) is in the loop's poll, and the answers that commit
    it are events too."""
    slow = Nodes(tmp_path, TickLoop(period_s=2.0, name=LOOP_NAME))
    try:
        leader = _leader(slow.group(3))
        took = []
        for value in range(10):
            start = time.monotonic()
            leader.propose(value)
            took.append(time.monotonic() - start)
        assert statistics.median(took) < 0.25, took
    finally:
        for machine in slow.machines:
            machine.stop(5.0)


def test_a_node_closed_while_others_run(nodes: Nodes) -> None:
    group = nodes.group(3)
    alone = nodes.alone()
    leader = _leader(group)
    alone.stop(5.0)
    with socket.socket() as probe:  # closed on the loop: its port is free again
        probe.bind(("127.0.0.1", nodes.ports[id(alone)]))
    follower = next(m for m in group if m is not leader)
    follower.stop(5.0)
    assert leader.propose(7)[0] == 1  # two of three still commit
    assert nodes.loop.thread is not None and nodes.loop.thread.is_alive()
    assert nodes.loop.node_count() == 2


def test_the_loop_ends_with_its_last_node_and_starts_again(nodes: Nodes) -> None:
    first = nodes.alone()
    thread = nodes.loop.thread
    assert thread is not None
    first.stop(5.0)
    thread.join(5.0)
    assert not thread.is_alive()
    assert nodes.loop.thread is None
    again = nodes.alone()
    assert again.propose(3)[0] == 1
    assert len(_loop_threads()) == 1


def test_a_node_built_on_a_thread_that_ends_keeps_running(nodes: Nodes) -> None:
    """A broker builds replicas on the HTTP thread of ``POST /partitions``."""
    built: list[Machine] = []
    maker = threading.Thread(target=lambda: built.append(nodes.alone()))
    maker.start()
    maker.join()
    _rounds_pass(nodes.loop, 3)  # time for the loop to stop, were it tied to that thread
    assert built[0].propose(5)[0] == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_taken_port_is_retried_on_the_loop(nodes: Nodes) -> None:
    """With autoTick off pysyncobj binds in its constructor; on the loop one try there and
    then the ticks retry (pysyncobj's own tick thread did so), the constructor never spins.
    (pysyncobj's ``TcpServer.bind`` leaves a failed socket to the garbage collector.)"""
    port = free_port()
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", port))
    blocker.listen()
    try:
        started = time.monotonic()
        machine = nodes.start(f"127.0.0.1:{port}")
        assert time.monotonic() - started < 1.0
        _rounds_pass(nodes.loop, 3)  # ticks retried the bind, and failed
        assert not machine.caught_up()
    finally:
        blocker.close()
    wait_for(machine.caught_up, "the node bound once the port was free")
    assert machine.propose(9)[0] == 1
    gc.collect()  # the failed sockets' warnings here, not in a later test


def test_the_shared_loop_environment_uses_the_process_loop(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = RaftConfig("ledger", address, (), str(tmp_path / "n"), "s", LIMITS)
    machine: Machine = RaftMachine(LEDGER, config, Environment(shared_loop=True))
    try:
        wait_for(machine.caught_up, "a node alone to elect itself")
        assert machine.propose(1)[0] == 1
        loop = TickLoop.shared()
        assert loop.thread is not None and loop.thread.is_alive()
        assert not _pysyncobj_tick_threads()
    finally:
        machine.stop(5.0)


def test_the_default_environment_ticks_on_a_thread_of_its_own(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = RaftConfig("ledger", address, (), str(tmp_path / "n"), "s", LIMITS)
    machine: Machine = RaftMachine(LEDGER, config)
    try:
        wait_for(machine.caught_up, "a node alone to elect itself")
        assert machine.propose(1)[0] == 1
        assert _pysyncobj_tick_threads()  # the shared loop is not on by default
    finally:
        machine.stop(5.0)


class _NumberTakenOnClose(socket.socket):
    """A socket whose number a regular file takes the moment it closes, as another thread's
    ``open`` (a journal, a log) may between pysyncobj's close and its unsubscribe."""

    path = ""
    taken = -1

    def close(self) -> None:
        number = self.fileno()
        super().close()
        if number < 0 or self.taken >= 0:
            return
        opened = os.open(self.path, os.O_RDONLY | os.O_CREAT)
        if opened != number:
            os.dup2(opened, number)
            os.close(opened)
        self.taken = number


def test_a_connection_closed_before_it_unsubscribes_ends_whatever_took_its_number(
    tmp_path: Path,
) -> None:
    """pysyncobj's ``disconnect`` closes the socket, then unsubscribes it. A file that took
    the number in between made ``epoll_ctl(DEL)`` fail (EPERM); the error ended the
    disconnect half done, and the connection never reconnected (a manager whose peer
    was killed stayed cut off from another one: no new leader)."""
    loop = TickLoop(name=LOOP_NAME)  # its thread never starts: this test polls nothing
    poller = NodePoller(loop)
    poller.attach()
    ours, theirs = socket.socketpair()
    watched = _NumberTakenOnClose(fileno=ours.detach())
    watched.path = str(tmp_path / "file")
    disconnected: list[bool] = []
    connection = TcpConnection(
        poller, onDisconnected=lambda: disconnected.append(True), socket=watched
    )
    try:
        connection.disconnect()
        assert watched.taken >= 0
        assert disconnected == [True]
        assert connection.state == CONNECTION_STATE.DISCONNECTED
        assert connection.fileno() is None
        assert poller.descriptors() == []
    finally:
        theirs.close()
        if watched.taken >= 0:
            os.close(watched.taken)


_MAIN_ENDS = """
import sys
from protocol.limits import Limits
from runtime.replication.raft.machine import RaftConfig, RaftMachine
from unit_tests.runtime.replication.ledger import LEDGER
from unit_tests.runtime.replication.waits import wait_for

config = RaftConfig("ledger", sys.argv[1], (), sys.argv[2], "s", Limits())
machine = RaftMachine(LEDGER, config)
wait_for(machine.caught_up, "a node alone to elect itself")
print(machine.propose(1)[0], flush=True)
"""


def test_the_loop_ends_with_the_main_thread(tmp_path: Path) -> None:
    """pysyncobj's tick thread stops once the main thread has ended (``RaftNode`` ties it
    there); so does the loop: a process whose main thread returns without closing its
    nodes still exits."""
    address = f"127.0.0.1:{free_port()}"
    root = Path(__file__).parents[4]
    done = subprocess.run(
        [sys.executable, "-c", _MAIN_ENDS, address, str(tmp_path / "n")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'server'}"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def _rounds_pass(loop: TickLoop, rounds: int) -> None:
    """Wait (bounded) until the loop has ticked every node ``rounds`` more times."""
    until = loop.rounds + rounds
    wait_for(lambda: loop.rounds >= until, f"{rounds} rounds of the tick loop")
