"""The wire form of every partition command, pinned: a Raft entry holds these tuples, so
they are a protocol (journals written by every earlier version replay them)."""

from __future__ import annotations

from typing import get_args

import pytest

from broker.partition.commands import (
    Append,
    Command,
    Consume,
    DeadLettered,
    MarkFlushed,
    Receive,
    Redrive,
    ResetReplica,
    Settle,
    Truncate,
    from_wire,
    to_wire,
)
from protocol.types import Offset, ReplicaId

WIRE_FORMS: list[tuple[Command, tuple[object, ...]]] = [
    (
        Append(((None, "v"), ("k", "w", (("h", "1"),))), 5, "p", 2),
        ("append", ((None, "v"), ("k", "w", (("h", "1"),))), 5, "p", 2),
    ),
    (Append(((None, "v"),), 5, None, None), ("append", ((None, "v"),), 5, None, None)),
    (Consume("c", 10, "r", 7, 3), ("consume", "c", 10, "r", 7, 3)),
    (Consume("c", 10, None), ("consume", "c", 10, None, None, None)),
    (
        MarkFlushed(ReplicaId(1), Offset(9), Offset(4), "h:1"),
        ("mark_flushed", 1, 9, 4, "h:1"),
    ),
    (MarkFlushed(ReplicaId(1), Offset(9)), ("mark_flushed", 1, 9, None, None)),
    (Truncate(Offset(3)), ("truncate", 3)),
    (ResetReplica(ReplicaId(2), "h:2"), ("reset_replica", 2, "h:2")),
    (ResetReplica(ReplicaId(2)), ("reset_replica", 2, None)),
    (
        Receive("g", 5, 7, "r", 30_000, 3, True, ((0, "k"),)),
        ("receive", "g", 5, 7, "r", 30_000, 3, True, ((0, "k"),)),
    ),
    (
        Receive("g", 5, 7, None, 30_000, 3, False),
        ("receive", "g", 5, 7, None, 30_000, 3, False, ()),
    ),
    (Settle("g", "ack", ((0, 1),), 7, 0), ("settle", "g", "ack", ((0, 1),), 7, 0)),
    (DeadLettered("g", (0, 1)), ("dead_lettered", "g", (0, 1))),
    (Redrive("g", "r", 7, 10, ((0, 4, None),)), ("redrive", "g", "r", 7, 10, ((0, 4, None),))),
    (Redrive("g", None, 7, 10), ("redrive", "g", None, 7, 10, ())),
]


def test_every_command_has_its_wire_form_and_decodes_back() -> None:
    assert {type(c) for c, _ in WIRE_FORMS} == set(get_args(Command))
    for command, wire in WIRE_FORMS:
        assert to_wire(command) == wire
        assert from_wire(wire) == command


@pytest.mark.parametrize(
    "wire",
    [
        ("consume", "c", 10, "r"),  # before pop sequences
        ("consume", "c", 10, "r", 7),
        ("mark_flushed", 1, 9),  # before starts and addresses
        ("mark_flushed", 1, 9, 4),
        ("reset_replica", 1),
        ("receive", "g", 5, 7, None, 30_000, 3, False),  # before keys
    ],
)
def test_the_shorter_forms_of_older_journals_still_decode(wire: tuple[object, ...]) -> None:
    command = from_wire(wire)
    assert command is not None and to_wire(command)[: len(wire)] == wire


@pytest.mark.parametrize(
    "wire",
    [
        None,
        (),
        ("append",),
        ("nope", 1),
        ("append", ((None, "v"),), 5, None),
        ("append", ((None, 5),), 5, None, None),
        ("consume", "c", "ten", None),
        ("consume", "c", 10, None, None, None, None),
        ("mark_flushed", True, 9),
        ("truncate", True),
        ("reset_replica", 1, 7),
        ("receive", "g", 5, 7, None, 30_000, 3, "yes"),
        ("settle", "g", "keep", ((0, 1),), 7, 0),
        ("dead_lettered", "g", (0, "1")),
        ("redrive", "g", None, 7, 10),
    ],
)
def test_a_malformed_wire_tuple_decodes_to_none(wire: object) -> None:
    assert from_wire(wire) is None
