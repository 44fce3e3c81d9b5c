"""Where new partitions' replicas go. Pure: the caller passes the registry's current view.

Each partition goes on ``replication_factor`` distinct alive brokers (not draining: being
removed), least loaded first (load =
replicas hosted, counting the ones placed earlier in the same call, ties by broker id), so the
partitions of one topic spread. The chosen brokers are rotated by partition id so that replica 0
is not always on the same broker. Each replica gets the lowest port of its broker's range that
no replica uses on that host (brokers sharing a host may have overlapping ranges, and an address
must never be used twice).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from manager.registry.brokers import BrokerRecord
from manager.registry.topics import Assignment, TopicRecord
from protocol.errors import ErrorCode, RaftQError
from protocol.types import BrokerId


def place_partitions(
    partition_ids: Iterable[int],
    replication_factor: int,
    brokers: Iterable[BrokerRecord],
    replica_counts: Mapping[BrokerId, int],
    used_ports: Mapping[str, set[int]],
) -> tuple[Assignment, ...]:
    """One assignment per partition id; raises ``RaftQError(NOT_ENOUGH_BROKERS)``."""
    alive = [b for b in brokers if b.alive and not b.draining]
    if len(alive) < replication_factor:
        raise RaftQError(
            ErrorCode.NOT_ENOUGH_BROKERS,
            f"need {replication_factor} alive brokers, have {len(alive)}",
        )
    load = {b.broker_id: replica_counts.get(b.broker_id, 0) for b in alive}
    ports = {host: set(taken) for host, taken in used_ports.items()}
    assignments = []
    for partition_id in partition_ids:
        chosen = sorted(alive, key=lambda b: (load[b.broker_id], b.broker_id))
        chosen = chosen[:replication_factor]
        shift = partition_id % replication_factor
        chosen = chosen[shift:] + chosen[:shift]
        assignment = []
        for broker in chosen:
            taken = ports.setdefault(broker.raft_host, set())
            port = _lowest_free_port(broker, taken)
            taken.add(port)
            load[broker.broker_id] += 1
            assignment.append((broker.broker_id, f"{broker.raft_host}:{port}"))
        assignments.append(tuple(assignment))
    return tuple(assignments)


def place_replacement(
    holders: Iterable[BrokerId],
    brokers: Iterable[BrokerRecord],
    replica_counts: Mapping[BrokerId, int],
    used_ports: Mapping[str, set[int]],
) -> tuple[BrokerId, str]:
    """Where a replica that leaves a dead broker goes: the least loaded alive broker that
    holds no replica of the partition (``holders``), at its lowest free Raft port. Raises
    ``RaftQError(NOT_ENOUGH_BROKERS)``."""
    held = set(holders)
    candidates = [b for b in brokers if b.broker_id not in held]
    ((broker_id, address),) = place_partitions([0], 1, candidates, replica_counts, used_ports)[0]
    return BrokerId(broker_id), address


def _lowest_free_port(broker: BrokerRecord, used: set[int]) -> int:
    for port in range(broker.raft_port_min, broker.raft_port_max + 1):
        if port not in used:
            return port
    raise RaftQError(
        ErrorCode.NOT_ENOUGH_BROKERS,
        f"broker {broker.broker_id} has no free Raft port in "
        f"[{broker.raft_port_min}, {broker.raft_port_max}]",
    )


def drain_refusal(
    broker_id: BrokerId, topics: Iterable[TopicRecord], brokers: Iterable[BrokerRecord]
) -> str | None:
    """Why draining ``broker_id`` could not finish, or ``None``: a replica it holds is its
    partition's only one (it cannot hand over: the topic has replication factor 1), no
    other live broker that is not draining could take it, or another replica of the
    partition is down (the mover waits for it: a drain moves a replica only while every
    other replica is alive)."""
    known = {b.broker_id: b for b in brokers}
    held = [
        (f"{t.name}/{p.partition_id}", [r.broker_id for r in p.replicas])
        for t in topics
        for p in t.partitions
        if any(r.broker_id == broker_id for r in p.replicas)
    ]
    for name, holders in held:  # the reason no wait can cure comes first
        if len(holders) == 1:
            return f"{name} has its only replica on broker {broker_id} (replication factor 1)"
    for name, holders in held:
        takers = [
            b for b in known.values() if b.alive and not b.draining and b.broker_id not in holders
        ]
        if not takers:
            return f"no other live broker can take broker {broker_id}'s replica of {name}"
        down = [h for h in holders if h != broker_id and not known[h].alive]
        if down:
            # The leaving replica leaves last, so the group keeps its live members; with
            # one down it would be a failure from a standstill meanwhile.
            return (
                f"{name} has a replica on broker {down[0]}, which is down: bring it back, "
                "or let it be replaced, first"
            )
    return None
