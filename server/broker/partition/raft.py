"""A partition as a replicated state machine: what it hands the replication layer.

- Its state: a ``PartitionLog`` (pure), stored in snapshots under ``log``.
- How a command travels: a group of commands (``broker.partition.commands``, in their wire
  form) is one entry, one call of ``run_group`` (``run_group_unsynced`` for ``replicated``
  durability); applying it gives one ``Result`` per command (``apply_group``).
- The frozen table of its ``@replicated`` methods (``PARTITION_METHODS``): a wire protocol.
- Its snapshot form (``FrozenPartitionLog``): cheap to take on the tick thread, pickled
  later (``thaw_partition_log``, by this module's path, is part of the dump format).
- ``partition_raft`` (the real group, pysyncobj) and ``partition_twin`` (its in-memory twin).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from itertools import islice

from broker.partition.commands import Command, KeyValue, from_wire, to_wire
from broker.partition.log import MessageTuple, PartitionLog, Rejected, Result
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits, PartitionLimits
from protocol.types import ReplicaSpec
from runtime.replication.machine import (
    Definition,
    Entry,
    FrozenState,
    ReplicatedMachine,
    ReplicatedMethod,
)
from runtime.replication.memory import MemoryMachine
from runtime.replication.raft.machine import RaftConfig, RaftMachine

_log = logging.getLogger(__name__)

GroupApplied = tuple[list[Result], Entry]
"""A group's results, one per command, and the entry that carried it."""
PartitionMachine = ReplicatedMachine[PartitionLog, Sequence[Command], GroupApplied]
"""A partition's replicated log: a group of commands in, one result per command out."""
PartitionTwin = MemoryMachine[PartitionLog, Sequence[Command], GroupApplied]


def apply_group(log: PartitionLog, wire_commands: object, synced: bool = True) -> list[Result]:
    """Apply a committed group, command by command. Total: a malformed command becomes its
    own ``Rejected`` result, and the other commands of the group still apply. ``synced``:
    the entry was synced on a majority (so is everything before it)."""
    if not isinstance(wire_commands, list | tuple):
        return []
    results = [_total(log, wire) for wire in wire_commands]
    if synced:
        log.mark_durable()
    return results


def _total(log: PartitionLog, wire: object) -> Result:
    # An exception inside a pysyncobj apply wedges the group for good: a bug becomes a result.
    try:
        return log.apply(from_wire(wire))
    except Exception as exc:
        _log.exception("apply failed")
        return Rejected(ErrorCode.INTERNAL, f"apply failed: {exc}")


def _legacy_append(
    log: PartitionLog,
    messages: list[KeyValue],
    timestamp_ms: int,
    producer_id: str | None,
    sequence: int | None,
) -> object:
    return apply_group(log, [("append", messages, timestamp_ms, producer_id, sequence)])


def _legacy_consume(
    log: PartitionLog, consumer_id: str, max_messages: int, request_id: str | None
) -> object:
    return apply_group(log, [("consume", consumer_id, max_messages, request_id)])


def _legacy_mark_flushed(log: PartitionLog, replica_id: int, flushed_offset: int) -> object:
    return apply_group(log, [("mark_flushed", replica_id, flushed_offset)])


PARTITION_METHODS = (
    ReplicatedMethod("run_group", lambda log, wires: apply_group(log, wires, synced=True)),
    ReplicatedMethod(
        "run_group_unsynced", lambda log, wires: apply_group(log, wires, False), synced=False
    ),
    ReplicatedMethod("append", _legacy_append),
    ReplicatedMethod("consume", _legacy_consume),
    ReplicatedMethod("mark_flushed", _legacy_mark_flushed),
)
"""The partition's replicated methods: a wire protocol, frozen (see ``ReplicatedMethod``).

``run_group`` (one entry holding a group of commands) and ``run_group_unsynced`` (the same,
for appends with ``replicated`` durability: its entries are not synced when a journal takes
them) are the methods proposed today. ``append``, ``consume`` and ``mark_flushed`` are the
single commands proposed before group commit: never proposed, kept unchanged so journals
written then still replay. pysyncobj numbers them by sorted ``name_v0``: ``append`` 0,
``consume`` 1, ``mark_flushed`` 2, ``run_group_unsynced`` 3, ``run_group`` 4 (pinned by
``unit_tests/broker/test_partition_raft.py``)."""


def _encode(commands: Sequence[Command], synced: bool) -> tuple[str, tuple[object, ...]]:
    method = "run_group" if synced else "run_group_unsynced"
    return method, ([to_wire(command) for command in commands],)


def _results(value: object, entry: Entry) -> GroupApplied:
    if not isinstance(value, list):
        raise RaftQError(ErrorCode.INTERNAL, f"a group applied as {value!r}")
    return value, entry


def partition_definition(
    replica_count: int, limits: PartitionLimits, snapshot_chunk_messages: int
) -> Definition[PartitionLog, Sequence[Command], GroupApplied]:
    return Definition(
        new_state=lambda: PartitionLog(replica_count, limits),
        state_attribute="log",
        methods=PARTITION_METHODS,
        encode=_encode,
        result=_results,
        freeze=lambda log: FrozenPartitionLog(log, snapshot_chunk_messages),
    )


def partition_raft(
    spec: ReplicaSpec, data_dir: str, secret: str, limits: Limits
) -> RaftMachine[PartitionLog, Sequence[Command], GroupApplied]:
    """One replica's Raft node (one TCP port). Built in the serving process, never before
    a fork."""
    definition = partition_definition(
        len(spec.replicas),
        # The manager's, recorded with the topic; a replica created before the manager sent
        # them keeps its broker's own (as it always did).
        spec.limits or limits.partition_limits(),
        limits.raft_snapshot_chunk_messages,
    )
    config = RaftConfig(
        name=replica_name(spec),
        address=spec.raft_address,
        partners=spec.raft_partners,
        data_dir=data_dir,
        secret=secret,
        limits=limits,
        leader_wait_s=limits.raft_leader_wait_s_max,  # ride out an election in progress
        members_min=max(len(spec.replicas) - 1, 1),  # ``PartitionReplica.replace_member``
        compaction_bytes_min=limits.raft_log_compaction_bytes_min,
    )
    return RaftMachine(definition, config)


def partition_twin(
    name: str, replica_count: int, limits: PartitionLimits, partners: Sequence[str] = ()
) -> PartitionTwin:
    """The in-memory twin of a partition of ``replica_count`` replicas (``partners``: the
    others' Raft addresses; made up when not given)."""
    others = tuple(partners) or tuple(f"{name} replica {i}" for i in range(1, replica_count))
    definition = partition_definition(replica_count, limits, snapshot_chunk_messages=1)
    return MemoryMachine(definition, name, address=name, partners=others)


def replica_name(spec: ReplicaSpec) -> str:
    return f"{spec.topic}/{spec.partition_id} replica {spec.replica_id}"


class FrozenPartitionLog(FrozenState):
    """A ``PartitionLog`` as it was at a log compaction, for the full dump.

    Taken in the tick thread, so it must be cheap whatever the backlog: the message dict is
    copied (its values are immutable tuples: ~17 ms at 500k messages) and the other
    attributes (bounded: offsets, producers, consumers) are pickled. The dump writer's
    thread then pickles the messages ``chunk_messages`` at a time (one GIL hold each; one
    pickle call over all of them held it for ~0.4 s at 500k). Unpickles into a
    ``PartitionLog`` equal to the original, attribute order included.
    """

    def __init__(self, log: PartitionLog, chunk_messages: int) -> None:
        attributes = dict(vars(log))
        self._messages = dict(attributes["messages"])
        attributes["messages"] = None  # keeps its place in the attribute order
        self._attributes = pickle.dumps(attributes, protocol=pickle.HIGHEST_PROTOCOL)
        self._chunk_messages = chunk_messages

    def __reduce__(self) -> tuple[object, tuple[bytes, list[bytes]]]:
        items = iter(self._messages.items())
        chunks: list[bytes] = []
        while chunk := list(islice(items, self._chunk_messages)):
            chunks.append(pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL))
        return (thaw_partition_log, (self._attributes, chunks))


def thaw_partition_log(attributes: bytes, chunks: list[bytes]) -> PartitionLog:
    """Loads a ``FrozenPartitionLog`` from a full dump (its name is part of the dump
    format); goes through ``PartitionLog.__setstate__`` as unpickling a log does."""
    state: dict[str, object] = pickle.loads(attributes)
    messages: dict[int, MessageTuple] = {}
    for chunk in chunks:
        messages.update(pickle.loads(chunk))
    state["messages"] = messages
    log = PartitionLog.__new__(PartitionLog)
    log.__setstate__(state)
    return log
