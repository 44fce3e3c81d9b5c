"""``Simulation``: one seeded run of a simulated Raft group, and its trace.

Each step the scheduler (one random stream from the seed) picks at most one action
(propose a command, crash a node, restart one, cut or heal the network, add or remove a
member, force a log compaction), then the virtual clock moves by ``step_s``, the messages
due are delivered, every node that is up ticks once (in a seeded order), and the checks
(``checks.Invariants``) run. After ``steps`` steps the faults stop: the network heals, every
node comes back, and the group settles; then nothing acknowledged may be missing from the
leader. The same seed gives the same trace, step for step.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic

from protocol.errors import RaftQError
from protocol.limits import Limits
from runtime.replication.machine import C, Definition, Entry, R, S
from runtime.replication.raft.sim.checks import InvariantError, Invariants, durable_entries
from runtime.replication.raft.sim.disk import SimDisk, default_root
from runtime.replication.raft.sim.network import NetworkFaults, SimNetwork, seeded_random
from runtime.replication.raft.sim.nodes import SimNode
from runtime.replication.raft.sim.operations import Operations, World
from runtime.replication.raft.sim.world import NodeRandom, VirtualClock, virtual


@dataclass(frozen=True, slots=True)
class Workload(Generic[S, C, R]):
    """What the simulated group replicates, and how to drive and compare it."""

    definition: Definition[S, C, R]
    command: Callable[[random.Random, int], C]
    """A command to propose at a step (its number: a stand-in for the proposer's clock)."""
    entry_of: Callable[[R], Entry]
    """Where an acknowledged command landed."""
    fingerprint: Callable[[S], str]
    """Equal for equal states (``checks.fingerprint``, or the workload's own)."""
    broken_definition: Definition[S, C, R] | None = None
    """The same table applying something else: for ``SimConfig.diverging_node``."""
    see: Callable[[S], None] | None = None
    """Shown the proposing node's state just before ``command`` is called (a proposer that
    reads its own state first, as the managers do); none: commands from the stream alone."""
    describe: Callable[[R], str] | None = None
    """What an acknowledged command's answer says, for the trace (none: nothing)."""
    operations: Callable[[World[S, C, R]], Operations] | None = None
    """The operations run beside the proposals (``operations.py``), made once per run."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    seed: int
    steps: int = 300
    settle_steps: int = 300
    step_s: float = 0.02
    nodes: int = 3
    spares: int = 1
    """Nodes outside the group at the start that a membership change may add (a move adds,
    then removes); more are made as needed, each with an address never used before."""
    min_insync_replicas: int = 2
    faults: NetworkFaults = field(default_factory=NetworkFaults)
    propose_p: float = 0.3
    unsynced_p: float = 0.0
    crash_p: float = 0.01
    restart_p: float = 0.05
    partition_p: float = 0.01
    heal_p: float = 0.04
    member_change_p: float = 0.01
    compact_p: float = 0.01
    operate_p: float = 0.0
    """Chance per step of the workload's ``Operations.act`` (none without operations)."""
    lying_nodes: tuple[int, ...] = ()
    """Broken variant: these nodes' disks acknowledge syncs without keeping anything."""
    diverging_node: int | None = None
    """Broken variant: this node applies with ``Workload.broken_definition``."""
    checks_off: frozenset[str] = frozenset()
    """Checks not made (``checks.CHECKS``), to show that another one catches a fault."""


@dataclass(slots=True)
class SimResult:
    seed: int
    trace: list[str] = field(default_factory=list)
    violation: str | None = None
    steps_run: int = 0
    acknowledged: int = 0
    stats: dict[str, int] = field(default_factory=dict)

    def trace_text(self) -> str:
        return "\n".join(self.trace)


def address_of(number: int) -> str:
    return f"n{number}:{9000 + number}"


class Simulation(Generic[S, C, R]):
    def __init__(
        self, workload: Workload[S, C, R], config: SimConfig, limits: Limits | None = None
    ) -> None:
        self._workload = workload
        self._config = config
        self._limits = limits or Limits()
        self._rng = seeded_random(config.seed, "scheduler")
        self._clock = VirtualClock()
        self._draws = NodeRandom()
        self._network = SimNetwork(config.seed, config.faults)
        self._disk = SimDisk(default_root())
        self._checks = Invariants(config.min_insync_replicas, config.checks_off)
        self._result = SimResult(config.seed)
        self._answers: list[tuple[str, int, R | RaftQError]] = []
        self._proposals = 0
        self._partitioned = False
        self._nodes: dict[str, SimNode[S, C, R]] = {}
        for number in range(1, config.nodes + config.spares + 1):
            self._new_node(number)
        self._group = [address_of(n) for n in range(1, config.nodes + 1)]
        make = workload.operations
        self._operations = None if make is None else make(self)

    def _new_node(self, number: int) -> SimNode[S, C, R]:
        """Node ``number``, not started. An address serves one node's life only: RaftQ never
        gives a replica's Raft address to another (a node with the old one's address and
        none of its votes let a member with old members win a second election in a term:
        membership seed 2127 before addresses were fresh)."""
        address = address_of(number)
        definition = self._workload.definition
        broken = self._workload.broken_definition
        if number == self._config.diverging_node and broken is not None:
            definition = broken
        node = SimNode(
            address,
            self._config.seed,
            definition,
            self._network,
            self._disk,
            self._limits,
            members_min=self._config.nodes - 1,  # a move may remove a dead member first
        )
        self._nodes[address] = node
        if number in self._config.lying_nodes:
            self._disk.lying.add(address)
        return node

    def run(self) -> SimResult:
        """The whole run; a violation ends it (``SimResult.violation``)."""
        try:
            with virtual(self._clock, self._draws, self._disk):
                for address in self._group:
                    others = tuple(a for a in self._group if a != address)
                    self._nodes[address].start(others, self._draws)
            for step in range(self._config.steps):
                self._step(step, self._choose)
            self._settle()
        except InvariantError as exc:
            self._result.violation = str(exc)
            self._note(f"VIOLATION {exc}")
        finally:
            self._stop_all()
        self._result.stats = {
            "sent": self._network.sent,
            "dropped": self._network.dropped,
            "delivered": self._network.delivered,
            "syncs": self._disk.syncs,
            "proposals": self._proposals,
        }
        return self._result

    # --- one step ---------------------------------------------------------------------

    def _step(self, step: int, choose: Callable[[], str]) -> None:
        self._result.steps_run = step + 1
        with virtual(self._clock, self._draws, self._disk):
            action = choose()
            self._clock.advance(self._config.step_s)
            self._network.now_s = self._clock.now_s
            for source, target, message in self._network.due():
                node = self._nodes[target]
                if node.up:
                    self._draws.current = node.draws
                    self._network.deliver(source, target, message)
            order = sorted(a for a, n in self._nodes.items() if n.up)
            self._rng.shuffle(order)
            for address in order:
                self._nodes[address].tick(self._draws)
                self._take_answers()
            if self._operations is not None:
                self._operations.after_tick()
            summary = self._check_all()
            if self._operations is not None:
                self._operations.check()
        self._note(f"{step:04d} {self._clock.now_s:7.2f}s {action:<28} {summary}")

    def _check_all(self) -> str:
        parts = []
        for address, node in sorted(self._nodes.items()):
            if not node.up:
                if node.partners:  # else never started, or retired
                    parts.append(f"{address.split(':')[0]}:down")
                continue
            seen = node.observe()
            if seen.role == "leader":
                self._checks.leader(address, seen.term)
            self._check_committed(node, seen.commit_index)
            if seen.last_applied != node.seen_applied:
                node.seen_applied = seen.last_applied
                machine = node.machine
                assert machine is not None
                digest = machine.read(self._workload.fingerprint)
                self._checks.applied_state(address, seen.last_applied, digest)
            parts.append(
                f"{address.split(':')[0]}:{seen.role[0].upper()}{seen.term}"
                f"/c{seen.commit_index}/a{seen.last_applied}"
            )
        return " ".join(parts)

    def _check_committed(self, node: SimNode[S, C, R], commit_index: int) -> None:
        if commit_index <= node.checked_commit:
            return
        for command, index, term in node.log_entries(node.checked_commit + 1, commit_index):
            self._checks.committed_entry(node.address, index, term, command)
        node.checked_commit = commit_index

    def _take_answers(self) -> None:
        answers, self._answers = self._answers, []
        for proposer, number, answer in answers:
            if isinstance(answer, RaftQError):
                self._note(f"     p{number} at {proposer}: {answer.code.value}")
                continue
            entry = self._workload.entry_of(answer)
            # ``Entry.term`` is the term the proposer applied it in (``applying_entry``),
            # not always the entry's own: a leader re-elected applies its older entries in
            # its new term. The entry's own term is in the proposer's log.
            found = self._nodes[proposer].log_entries(entry.index, entry.index)
            term = found[0][2] if found else entry.term
            holders = self._durable_holders(entry.index, term)
            self._note(
                f"     p{number} at {proposer}: acked index {entry.index} term {term} "
                f"synced {entry.replicas_synced} on disk {len(holders)}"
                + ("" if self._workload.describe is None else f" {self._workload.describe(answer)}")
            )
            self._checks.acknowledgement(
                proposer, entry.index, term, entry.replicas_synced, holders
            )
            self._result.acknowledged += 1

    def _durable_holders(self, index: int, term: int) -> list[str]:
        """Nodes whose files, as a power cut would leave them, hold the entry: in the
        journal, or (an index before the journal's first) in a durable dump."""
        holders = []
        for address, node in sorted(self._nodes.items()):
            files = self._disk.durable_files(node.data_dir)
            entries = durable_entries(files.get("raft.journal", b""))
            in_dump = bool(entries) and min(entries) > index and bool(files.get("raft.dump"))
            if entries.get(index) == term or in_dump:
                holders.append(address)
        return holders

    def _note(self, line: str) -> None:
        self._result.trace.append(line)

    # --- the scheduler's choices --------------------------------------------------------

    def _choose(self) -> str:
        """At most one action this step; its name for the trace."""
        config, rng = self._config, self._rng
        roll = rng.random()
        for probability, action in (
            (config.propose_p, self._propose),
            (config.crash_p, self._crash),
            (config.restart_p, self._restart),
            (config.partition_p, self._partition),
            (config.heal_p, self._heal),
            (config.member_change_p, self._change_member),
            (config.compact_p, self._compact),
            (config.operate_p, self._operate),
        ):
            if roll < probability:
                return action()
            roll -= probability
        return "-"

    # --- the ``World`` that operations see ----------------------------------------------

    def nodes(self) -> Mapping[str, SimNode[S, C, R]]:
        return self._nodes

    def leader(self) -> SimNode[S, C, R] | None:
        return self._leader()

    def fresh_node(self) -> SimNode[S, C, R]:
        fresh = [n for _, n in sorted(self._nodes.items()) if n.incarnation == 0]
        return fresh[0] if fresh else self._new_node(len(self._nodes) + 1)

    def host(self, node: SimNode[S, C, R], partners: tuple[str, ...]) -> None:
        node.start(partners, self._draws)

    def note(self, line: str) -> None:
        self._note(line)

    def _up(self) -> list[SimNode[S, C, R]]:
        return [node for _, node in sorted(self._nodes.items()) if node.up]

    def _leader(self) -> SimNode[S, C, R] | None:
        leaders = [n for n in self._up() if n.observe().role == "leader"]
        return max(leaders, key=lambda n: n.observe().term) if leaders else None

    def _propose(self) -> str:
        up = self._up()
        if not up:
            return "propose: nobody up"
        leader = self._leader()
        node = leader if leader is not None and self._rng.random() < 0.7 else self._rng.choice(up)
        machine = node.machine
        assert machine is not None
        self._proposals += 1
        number = self._proposals
        if self._workload.see is not None:
            machine.read(self._workload.see)
        command = self._workload.command(self._rng, number)
        synced = self._rng.random() >= self._config.unsynced_p

        def answered(answer: R | RaftQError) -> None:
            self._answers.append((node.address, number, answer))

        machine.submit(command, answered, synced=synced)
        return f"propose p{number} at {node.address.split(':')[0]}" + ("" if synced else " u")

    def _crash(self) -> str:
        up = self._up()
        if not up:
            return "crash: nobody up"
        node = self._rng.choice(up)
        node.crash()
        return f"crash {node.address}"

    def _restart(self) -> str:
        down = [n for _, n in sorted(self._nodes.items()) if not n.up and n.partners]
        if not down:
            return "restart: nobody down"
        node = self._rng.choice(down)
        node.start(node.partners, self._draws)
        return f"restart {node.address}"

    def _partition(self) -> str:
        sides = {address: self._rng.randrange(2) for address in sorted(self._nodes)}
        self._network.partition(sides)
        self._partitioned = True
        cut = " ".join(f"{a.split(':')[0]}={s}" for a, s in sorted(sides.items()))
        return f"partition {cut}"

    def _heal(self) -> str:
        if not self._partitioned:
            return "heal: not cut"
        self._network.heal()
        self._partitioned = False
        return "heal"

    def _compact(self) -> str:
        up = self._up()
        if not up:
            return "compact: nobody up"
        node = self._rng.choice(up)
        machine = node.machine
        assert machine is not None
        machine.compact()
        return f"compact {node.address}"

    def _operate(self) -> str:
        if self._operations is None:
            return "-"
        return self._operations.act(self._rng)

    def _change_member(self) -> str:
        leader = self._leader()
        if leader is None:
            return "member change: no leader"
        machine = leader.machine
        assert machine is not None
        members = sorted(leader.members() | {leader.address})
        if len(members) <= self._config.nodes:
            fresh = [n for _, n in sorted(self._nodes.items()) if n.incarnation == 0]
            target = self._rng.choice(fresh) if fresh else self._new_node(len(self._nodes) + 1)
            target.start(tuple(members), self._draws)
            add = True
        else:
            choices = [a for a in members if a != leader.address]
            target = self._nodes[self._rng.choice(choices)]
            add = False
        return self._start_change(leader, target, add)

    def _start_change(self, leader: SimNode[S, C, R], target: SimNode[S, C, R], add: bool) -> str:
        machine = leader.machine
        assert machine is not None
        what = f"{'add' if add else 'remove'} {target.address} at {leader.address}"

        def answered(error: RaftQError | None) -> None:
            self._note(f"     {what}: {'committed' if error is None else error.code.value}")
            if error is None and not add:
                target.wipe()  # its broker discards a removed replica

        try:
            machine.start_member_change(target.address, add, answered)
        except RaftQError as exc:
            if add:
                target.wipe()  # never joined: a spare again
            return f"{what}: refused ({exc.code.value})"
        return what

    # --- the end ------------------------------------------------------------------------

    def _settle(self) -> None:
        """No more faults: heal, bring every node back, let the group settle, then check
        that the leader holds every acknowledged entry."""
        with virtual(self._clock, self._draws, self._disk):
            self._network.heal()
            self._network.quiet()
            for node in self._nodes.values():
                if not node.up and node.partners:
                    node.start(node.partners, self._draws)
        for step in range(self._config.settle_steps):
            self._step(self._config.steps + step, lambda: "settle")
            if self._settled():
                break
        leader = self._leader()
        if leader is None:
            raise InvariantError("no leader after the faults stopped (liveness)")
        unfinished = None if self._operations is None else self._operations.unfinished()
        if unfinished is not None:
            raise InvariantError(f"never finished after the faults stopped: {unfinished}")
        first = leader.observe().first_index
        terms = {i: t for _, i, t in leader.log_entries(first, 1 << 62)}
        self._checks.none_lost(leader.address, terms, first)

    def _settled(self) -> bool:
        """A leader, and every node up has applied all that it committed (its last entry:
        every node has heard of every entry)."""
        leader = self._leader()
        if leader is None:
            return False
        seen = leader.observe()
        last = leader.log_entries(seen.commit_index, 1 << 62)
        if len(last) != 1:
            return False  # entries not committed yet
        if self._operations is not None and self._operations.unfinished() is not None:
            return False
        return all(n.observe().last_applied == seen.commit_index for n in self._up())

    def _stop_all(self) -> None:
        for node in self._nodes.values():
            if node.up:
                with virtual(self._clock, self._draws, self._disk):
                    node.crash()
        shutil.rmtree(self._disk.root, ignore_errors=True)
