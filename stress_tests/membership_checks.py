"""What a membership run must show once everything healed, besides the queue checker's
verdict per topic (issue 19). Pure: no I/O, no clock; each rule takes plain records (parsed
``GET /overview`` answers, write probes, the final read, the history) and flags what breaks
it, so each is tested on synthetic states (``unit_tests/stress/test_membership_checks.py``).

Must be 0 (``MEMBERSHIP_MUST_BE_ZERO``):

- unfinished_move: a partition still ``moving``, not active, with a replica on a broker that
  is not registered, not alive or draining, or with fewer or more replicas than its topic's
  replication factor (after healing and a bounded wait: a move that never finishes);
- unwritable: a partition whose probe batch was not acknowledged within the bound;
- replica_mismatch: replicas of a partition whose databases differ over ``[log start,
  end)`` (``GET /checksum`` per replica), whose log starts or ends differ, a range whose
  row count is not its length (a row missing from a database that flushed it), or fewer
  replicas read than the replication factor;
- insync_ack_short: an acknowledgement of a ``min_insync_replicas`` topic whose answer said
  fewer replicas held the batch than that (or said nothing);
- drain_wrongly_refused: 409 CANNOT_MOVE for a broker that held no replication-factor-1
  replica while every broker was alive and for each of its partitions another live,
  not-draining broker without a replica of it could take one;
- drain_wrongly_taken: a drain taken (202) of a broker holding a replication-factor-1
  replica, which can never move.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stress_tests.history import History, Outcome, ReplicaLog

MEMBERSHIP_MUST_BE_ZERO = (
    "unfinished_move",
    "unwritable",
    "replica_mismatch",
    "insync_ack_short",
    "drain_wrongly_refused",
    "drain_wrongly_taken",
)
EXAMPLES_MAX = 5
CANNOT_MOVE = 40906


@dataclass
class MembershipVerdict:
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(MEMBERSHIP_MUST_BE_ZERO, 0)
    )
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.counts[name] == 0 for name in MEMBERSHIP_MUST_BE_ZERO)

    def flag(self, category: str, example: str) -> None:
        self.counts[category] += 1
        shown = self.examples.setdefault(category, [])
        if len(shown) < EXAMPLES_MAX:
            shown.append(example)

    def lines(self) -> list[str]:
        out = [f"  {n:<22} {self.counts[n]:>6}  (must be 0)" for n in MEMBERSHIP_MUST_BE_ZERO]
        for name, shown in sorted(self.examples.items()):
            out += [f"  e.g. {name}: {example}" for example in shown]
        return out


# --- the cluster as GET /overview shows it ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class BrokerState:
    alive: bool
    draining: bool


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition_id: int
    state: str
    replicas: tuple[int, ...]
    """Broker ids; a move in progress lists its new broker already."""
    moving: bool


@dataclass(frozen=True, slots=True)
class ClusterState:
    brokers: Mapping[int, BrokerState]
    partitions: tuple[PartitionState, ...]

    def held_by(self, broker_id: int) -> list[PartitionState]:
        return [p for p in self.partitions if broker_id in p.replicas]


def parse_overview(body: Any) -> ClusterState:
    """``GET /overview``'s answer as a ``ClusterState`` (``ValueError`` when malformed)."""
    if not isinstance(body, dict):
        raise ValueError("GET /overview: not a JSON object")
    brokers = {
        int(b["broker_id"]): BrokerState(b["alive"] is True, b["draining"] is True)
        for b in body["brokers"]
    }
    partitions = tuple(
        PartitionState(
            str(p["topic"]),
            int(p["partition_id"]),
            str(p["state"]),
            tuple(int(r["broker_id"]) for r in p["replicas"]),
            p.get("moving") is not None,
        )
        for p in body["partitions"]
    )
    return ClusterState(brokers, partitions)


def check_moves_finished(
    state: ClusterState, replication_factors: Mapping[str, int], verdict: MembershipVerdict
) -> None:
    """Every partition of the run's topics settled: active, no move, its replication factor
    of replicas, each on a registered, alive, not-draining broker."""
    for part in state.partitions:
        wanted = replication_factors.get(part.topic)
        if wanted is None:
            continue  # a topic of another run
        where = f"{part.topic}/{part.partition_id}"
        if part.moving:
            verdict.flag("unfinished_move", f"{where}: still moving (replicas {part.replicas})")
        if part.state != "active":
            verdict.flag("unfinished_move", f"{where}: {part.state}")
        if len(set(part.replicas)) != wanted:
            verdict.flag("unfinished_move", f"{where}: replicas {part.replicas}, want {wanted}")
        for broker_id in part.replicas:
            broker = state.brokers.get(broker_id)
            if broker is None or not broker.alive or broker.draining:
                shown = "not registered" if broker is None else f"{broker}"
                verdict.flag("unfinished_move", f"{where}: replica on broker {broker_id} ({shown})")


# --- drains ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DrainAttempt:
    """One ``POST /brokers/drain`` and the cluster as the nemesis saw it just before."""

    broker_id: int
    status: int
    error_code: int | None
    holds_lone_replica: bool
    """It held a replication-factor-1 replica (its partition's only one)."""
    all_alive: bool
    every_replica_has_a_spare: bool
    """For each partition it held, a live, not-draining broker without a replica of it."""

    def describe(self) -> str:
        return (
            f"broker {self.broker_id}: {self.status} {self.error_code} (lone replica "
            f"{self.holds_lone_replica}, all alive {self.all_alive}, spare "
            f"{self.every_replica_has_a_spare})"
        )


def drain_attempt(
    state: ClusterState, broker_id: int, status: int, code: int | None
) -> DrainAttempt:
    """The attempt with what ``state`` (the overview just before it) says of the broker."""
    held = state.held_by(broker_id)
    takers = {b for b, s in state.brokers.items() if s.alive and not s.draining and b != broker_id}
    return DrainAttempt(
        broker_id,
        status,
        code,
        holds_lone_replica=any(len(p.replicas) == 1 for p in held),
        all_alive=all(s.alive for s in state.brokers.values()),
        every_replica_has_a_spare=all(takers - set(p.replicas) for p in held),
    )


def drainable(state: ClusterState, broker_id: int) -> bool:
    """The rule the nemesis draws its drain targets by (and holds a refusal against)."""
    attempt = drain_attempt(state, broker_id, 0, None)
    return must_be_taken(attempt)


def must_be_taken(attempt: DrainAttempt) -> bool:
    return (
        not attempt.holds_lone_replica and attempt.all_alive and attempt.every_replica_has_a_spare
    )


def check_drains(attempts: Iterable[DrainAttempt], verdict: MembershipVerdict) -> None:
    for attempt in attempts:
        refused = attempt.status == 409 and attempt.error_code == CANNOT_MOVE
        if refused and must_be_taken(attempt):
            verdict.flag("drain_wrongly_refused", attempt.describe())
        if attempt.status == 202 and attempt.holds_lone_replica:
            verdict.flag("drain_wrongly_taken", attempt.describe())


# --- writes after healing --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WriteProbe:
    """One batch produced to one partition after healing."""

    topic: str
    partition_id: int
    acked: bool
    seconds: float
    detail: str = ""


def check_writable(
    probes: Iterable[WriteProbe], bound_s: float, verdict: MembershipVerdict
) -> None:
    for probe in probes:
        if not probe.acked or probe.seconds > bound_s:
            verdict.flag(
                "unwritable",
                f"{probe.topic}/{probe.partition_id}: acked {probe.acked} after "
                f"{probe.seconds:.1f} s (bound {bound_s:g} s) {probe.detail}",
            )


# --- replicas' databases ---------------------------------------------------------------------
def check_replica_databases(
    topic: str,
    replicas: Iterable[ReplicaLog],
    replication_factor: int,
    verdict: MembershipVerdict,
) -> None:
    """Per partition: as many replicas as the replication factor, the same log start and
    end, and the same database rows over ``[log start, end)``, every row there present."""
    by_partition: dict[int, list[ReplicaLog]] = defaultdict(list)
    for replica in replicas:
        by_partition[replica.partition_id].append(replica)
    for partition_id, group in sorted(by_partition.items()):
        where = f"{topic}/{partition_id}"
        if len(group) != replication_factor:
            verdict.flag("replica_mismatch", f"{where}: {len(group)} replicas read")
        shapes = {(r.log_start, r.log_start + len(r.entries), r.db_sums) for r in group}
        if len(shapes) > 1:
            ranges = sorted((r.broker_id, r.log_start, r.log_start + len(r.entries)) for r in group)
            verdict.flag(
                "replica_mismatch", f"{where}: databases differ (broker, start, end) {ranges}"
            )
        for replica in group:
            for part in replica.db_sums:
                if part.count != part.end - part.start:
                    verdict.flag(
                        "replica_mismatch",
                        f"{where} broker {replica.broker_id}: {part.count} rows in "
                        f"[{part.start}, {part.end})",
                    )


# --- min_insync_replicas ---------------------------------------------------------------------
def check_insync_acks(
    topic: str, history: History, min_insync_replicas: int, verdict: MembershipVerdict
) -> None:
    for send in history.sends:
        if send.outcome is not Outcome.ACKED:
            continue
        synced = send.replicas_synced
        if synced is None or synced < min_insync_replicas:
            verdict.flag(
                "insync_ack_short",
                f"{topic}: {send.producer} seq {send.sequence} acked with replicas_synced "
                f"{synced} < min_insync_replicas {min_insync_replicas}",
            )
