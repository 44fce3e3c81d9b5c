"""Brokers: registration, the drain and removal of one (``raftq broker remove``), and the
overview of every partition's replicas for the dashboard."""

from __future__ import annotations

from manager.placement import drain_refusal
from manager.registry import commands
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.services.context import ServiceContext, check_outcome
from manager.views import broker_summary, partition_overview
from protocol.errors import ErrorCode, RaftQError
from protocol.requests import RegisterBroker
from protocol.types import BrokerId


class BrokerOperations:
    """Register, drain and remove brokers; describe them."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._limits = context.limits
        self._raft = context.raft
        self._monitor = context.monitor

    def register_broker(self, request: RegisterBroker) -> tuple[dict[str, object], bool]:
        """True when registered or updated, False when it was already registered as is (and
        then nothing is proposed: brokers re-register every broker_register_period_s)."""
        if self._raft.read(lambda s: s.brokers.is_removed(request.broker_id)):
            raise RaftQError(
                ErrorCode.ID_TAKEN,
                f"broker id {request.broker_id} was removed from the cluster (raftq broker "
                "remove) and is never taken again: give this broker a new id",
            )
        known = self._raft.read(lambda s: s.brokers.get(request.broker_id))
        same = known is not None and known.same_registration(
            request.address, request.raft_host, request.raft_port_min, request.raft_port_max
        )
        if known is not None and known.alive and known.address != request.address:
            # Two processes with one id would share its replicas: the newcomer is refused
            # (its broker stops), as Kafka refuses a broker id that is registered and live.
            # A broker that moved host is accepted once its old address is held dead.
            raise RaftQError(
                ErrorCode.ID_TAKEN,
                f"broker id {request.broker_id} is registered at {known.address} and alive; "
                f"a second broker with this id (at {request.address}) is refused: give each "
                "broker its own id (raftq node check), or stop the other one",
            )
        if not same:
            outcome = self._raft.propose(
                commands.RegisterBroker(
                    request.broker_id,
                    request.address,
                    request.raft_host,
                    request.raft_port_min,
                    request.raft_port_max,
                    self._limits.registry_brokers_max,
                )
            )
            same = check_outcome(outcome, f"broker {request.broker_id}") is Outcome.UNCHANGED
        return {"broker_id": request.broker_id}, not same

    def brokers(self) -> dict[str, object]:
        return {"brokers": self._raft.read(_broker_summaries)}

    def drain_broker(self, broker_id: BrokerId) -> dict[str, object]:
        """``raftq broker remove`` step 1: the broker takes no new replica and the manager
        leader moves its replicas away (``ReplicaMover``), one partition at a time. The
        answer is the broker's summary: ``partitions`` counts the replicas still to move.
        409 CANNOT_MOVE, nothing changed, for a drain that could not finish
        (``drain_refusal``)."""
        # A repeat of a drain under way is not refused: it changes nothing.
        refusal = self._raft.read(
            lambda s: None
            if any(b.broker_id == broker_id and b.draining for b in s.brokers.all())
            else drain_refusal(broker_id, s.topics.all(), s.brokers.all())
        )
        if refusal is not None:
            raise RaftQError(
                ErrorCode.CANNOT_MOVE, f"broker {broker_id} cannot be drained: {refusal}"
            )
        outcome = self._raft.propose(commands.DrainBroker(broker_id))
        if outcome is Outcome.UNKNOWN_BROKER:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no broker {broker_id} is registered")
        check_outcome(outcome, f"broker {broker_id}")
        return self._broker_summary(broker_id)

    def cancel_drain(self, broker_id: BrokerId) -> dict[str, object]:
        """Undo ``drain_broker``: the broker takes replicas again and none of its replicas
        starts moving; a move under way finishes. Idempotent; the broker's summary."""
        outcome = self._raft.propose(commands.CancelDrain(broker_id))
        if outcome is Outcome.UNKNOWN_BROKER:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no broker {broker_id} is registered")
        check_outcome(outcome, f"broker {broker_id}")
        return self._broker_summary(broker_id)

    def remove_broker(self, broker_id: BrokerId) -> dict[str, object]:
        """Step 2: forget a drained broker and refuse its id from then on; 409 while a
        replica is still placed on it or moving away from it (drain it first)."""
        outcome = self._raft.propose(commands.RemoveBroker(broker_id))
        if outcome is Outcome.UNKNOWN_BROKER:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no broker {broker_id} is registered")
        if outcome is Outcome.BUSY:
            raise RaftQError(
                ErrorCode.BROKER_NOT_EMPTY,
                f"broker {broker_id} still holds replicas: drain it first (POST "
                "/brokers/drain), then remove it once it holds none",
            )
        if outcome is Outcome.INVALID:
            raise RaftQError(
                ErrorCode.BROKER_NOT_EMPTY,
                f"broker {broker_id} is not draining: drain it first (POST /brokers/drain)",
            )
        check_outcome(outcome, f"broker {broker_id}")
        return {"broker_id": broker_id, "removed": True}

    def _broker_summary(self, broker_id: BrokerId) -> dict[str, object]:
        summaries = self._raft.read(_broker_summaries)
        return next(s for s in summaries if s["broker_id"] == broker_id)

    def partition_overview(self) -> list[dict[str, object]]:
        """Every partition of every topic with its replicas' last reported figures (the
        dashboard's table; soft state from the broker polls, at most a poll period old)."""
        topics, brokers = self._raft.read(
            lambda s: (s.topics.all(), {b.broker_id: b for b in s.brokers.all()})
        )
        monitor = self._monitor
        return [
            partition_overview(
                topic.name,
                partition,
                brokers,
                monitor.leader_of(topic.name, partition.partition_id),
                monitor.replica_reports(topic.name, partition.partition_id),
            )
            for topic in topics
            for partition in topic.partitions
        ]


def _broker_summaries(state: ManagerState) -> list[dict[str, object]]:
    counts = state.topics.held_count_by_broker()
    return [broker_summary(b, counts.get(b.broker_id, 0)) for b in state.brokers.all()]
