"""Invariant checks that survive ``python -O`` (unlike ``assert``)."""

from __future__ import annotations


class InvariantError(RuntimeError):
    """A condition the code relies on does not hold: a bug, never bad input."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantError(message)
