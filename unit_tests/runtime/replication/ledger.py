"""A small replicated state for the layer's own tests: a ledger of numbers.

A command is a number: ``add`` (or ``add_unsynced``) appends it and applies as the count;
a negative number calls ``fail``, whose apply raises (a bug in a component's apply)."""

from __future__ import annotations

from runtime.replication.machine import Definition, Entry, ReplicatedMethod


class Ledger:
    def __init__(self) -> None:
        self.values: list[int] = []

    def add(self, value: int) -> int:
        self.values.append(value)
        return len(self.values)


def _fail(_ledger: Ledger) -> object:
    raise RuntimeError("a bug in apply")


LEDGER_METHODS = (
    ReplicatedMethod("add", Ledger.add),
    ReplicatedMethod("add_unsynced", Ledger.add, synced=False),
    ReplicatedMethod("fail", _fail),
)


def _encode(value: int, synced: bool) -> tuple[str, tuple[object, ...]]:
    if value < 0:
        return "fail", ()
    return ("add" if synced else "add_unsynced"), (value,)


def _result(value: object, entry: Entry) -> tuple[object, Entry]:
    return value, entry


LEDGER: Definition[Ledger, int, tuple[object, Entry]] = Definition(
    new_state=Ledger,
    state_attribute="ledger",
    methods=LEDGER_METHODS,
    encode=_encode,
    result=_result,
)
