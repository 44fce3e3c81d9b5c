"""The simulated nodes of one group: each a real ``RaftMachine`` (pysyncobj and RaftQ's
``RaftNode``, journal and dump code), ticked by hand, talking through the ``SimNetwork``,
its files in the ``SimDisk``.

A crash stops the node without anything a clean stop would do for it (the tick that would
close its journal never runs; its files are put back as a power cut leaves them). A restart
builds a new ``RaftMachine`` on those files, as a restarted broker does.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from typing import Any, Generic

from protocol.limits import Limits
from runtime.replication.machine import C, Definition, R, S
from runtime.replication.raft.dump import DumpWriter
from runtime.replication.raft.machine import Environment, RaftConfig, RaftMachine
from runtime.replication.raft.sim.disk import SimDisk
from runtime.replication.raft.sim.network import SimNetwork, seeded_random, transport_class
from runtime.replication.raft.sim.world import NodeRandom


@dataclass(frozen=True, slots=True)
class Observed:
    """One node's Raft state as the checks read it after a tick."""

    role: str
    term: int
    commit_index: int
    last_applied: int
    first_index: int
    """The first index its in-memory log holds (earlier ones are in its dump)."""


class SimNode(Generic[S, C, R]):
    def __init__(
        self,
        address: str,
        seed: int,
        definition: Definition[S, C, R],
        network: SimNetwork,
        disk: SimDisk,
        limits: Limits,
        members_min: int = 1,
    ) -> None:
        self.address = address
        self._members_min = members_min
        self._seed = seed
        self._definition = definition
        self._network = network
        self._disk = disk
        self._limits = limits
        self.machine: RaftMachine[S, C, R] | None = None
        self.incarnation = 0
        self.partners: tuple[str, ...] = ()
        self.draws = random.Random(0)
        self.checked_commit = 0
        """Committed entries up to here were compared with the group's (``Invariants``)."""
        self.seen_applied = -1

    @property
    def up(self) -> bool:
        return self.machine is not None

    @property
    def data_dir(self) -> str:
        return self._disk.node_dir(self.address)

    def start(self, partners: tuple[str, ...], draws: NodeRandom) -> None:
        """Build the node on its files (new, or left by a crash); within ``virtual()``."""
        self.incarnation += 1
        self.partners = partners
        self.draws = seeded_random(self._seed, "node", self.address, self.incarnation)
        draws.current = self.draws
        config = RaftConfig(
            name=self.address,
            address=self.address,
            partners=partners,
            data_dir=self.data_dir,
            secret="simulated",
            limits=self._limits,
            members_min=self._members_min,
        )
        environment = Environment(transport=transport_class(self._network), auto_tick=False)
        self.machine = RaftMachine(self._definition, config, environment)
        self.checked_commit = 0
        self.seen_applied = -1

    def tick(self, draws: NodeRandom) -> None:
        machine = self.machine
        if machine is None:
            return
        draws.current = self.draws
        machine.tick()
        dump = _node_private(machine, "_SyncObj__serializer")
        if isinstance(dump, DumpWriter):
            dump.wait_written()  # a dump's end must not depend on a thread's speed

    def crash(self) -> None:
        """Stop at once and lose what was not synced."""
        machine, self.machine = self.machine, None
        if machine is None:
            return
        machine.stop(0.0)  # closes its files (no tick thread: at once)
        self._network.detach(self.address)
        self._disk.crash(self.data_dir)

    def wipe(self) -> None:
        """Stopped and its files gone: a member removed, whose broker discards it."""
        self.crash()
        self.partners = ()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self._disk.crash(self.data_dir)  # forget what it had synced
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def observe(self) -> Observed:
        machine = self.machine
        if machine is None:
            raise RuntimeError(f"{self.address} is down")
        status = machine.status()
        log = _node_private(machine, "_SyncObj__raftLog")
        return Observed(
            role=status.role.value,
            term=status.term,
            commit_index=status.commit_index,
            last_applied=status.last_applied,
            first_index=int(log[0][1]) if len(log) else 0,
        )

    def log_entries(self, first: int, last: int) -> list[tuple[bytes, int, int]]:
        """Its in-memory log's entries with indexes in ``[first, last]``."""
        machine = self.machine
        if machine is None:
            return []
        log = _node_private(machine, "_SyncObj__raftLog")
        if not len(log):
            return []
        start = int(log[0][1])
        begin, end = max(first - start, 0), max(last - start + 1, 0)
        return [(bytes(c), int(i), int(t)) for c, i, t in log[begin:end]]

    def members(self) -> frozenset[str]:
        return frozenset() if self.machine is None else self.machine.members()


def _node_private(machine: RaftMachine[Any, Any, Any], name: str) -> Any:
    """One of pysyncobj's private attributes of ``machine``'s node (this package may)."""
    return getattr(machine.node, name)
