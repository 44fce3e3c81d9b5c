"""Pickling a slots dataclass of the replicated state so that a field added later does not
break snapshots written before it: the state is the list of field values in order, and a
state that is shorter (written before trailing fields existed) gives them their defaults.

Python's own dataclass pickling zips fields with values and leaves a missing one unset (an
``AttributeError`` much later, on a replica restored from an old snapshot). Only trailing
fields with defaults may be added; reordering or removing fields is still a format change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, fields
from typing import Any


def state_of(record: Any) -> list[object]:
    return [getattr(record, spec.name) for spec in fields(record)]


def restore(record: Any, state: Sequence[object]) -> None:
    specs = fields(record)
    if len(state) > len(specs):
        raise ValueError(f"{type(record).__name__}: {len(state)} values for {len(specs)} fields")
    for index, spec in enumerate(specs):
        if index < len(state):
            value = state[index]
        elif spec.default is not MISSING:
            value = spec.default
        elif spec.default_factory is not MISSING:
            value = spec.default_factory()
        else:
            raise ValueError(f"{type(record).__name__}: no value for {spec.name}")
        object.__setattr__(record, spec.name, value)  # frozen records too


class ByFieldOrder:
    """Base of a (not frozen) slots dataclass of replicated state: pickled as its field
    values in order, with ``state_of`` and ``restore`` above. A frozen dataclass must
    define both methods in its own body: ``dataclass`` puts its own on a frozen class."""

    __slots__ = ()

    def __getstate__(self) -> list[object]:
        return state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        restore(self, state)
