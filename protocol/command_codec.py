"""``CommandCodec``: replicated commands as plain tagged tuples, one style for every state.

A command is a frozen dataclass; in a Raft entry it travels as ``(tag, field, field, ...)``
in the order of its fields, never as a pickled class, so renaming or moving a class can
never break a journal on disk. The tags, the field order and the values' plain forms are a
wire protocol: a command changes only by a new tag, or by a trailing field with a default,
which the decoder fills in when an older entry lacks it.

``from_wire`` is total: anything malformed (an unknown tag, too few or too many fields, or
values its kind's ``check`` refuses) decodes to ``None``, never an exception, because apply
must not raise. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import Any, Generic, TypeVar

C = TypeVar("C")

Check = Callable[[tuple[object, ...]], tuple[object, ...] | None]
"""A kind's check of a wire tuple's values (the tag left out): the values to build the
command from (converted where their plain form differs), or ``None`` to refuse them."""


class CommandCodec(Generic[C]):
    def __init__(
        self,
        tags: Mapping[str, type[C]],
        checks: Mapping[type[C], Check] | None = None,
        *,
        plain: Callable[[object], object] = lambda value: value,
        drop_trailing_defaults: bool = False,
    ) -> None:
        """``tags``: every kind by its wire tag (never renamed). ``checks``: a kind's own
        check of its values (none: the arity alone). ``plain``: a field value as plain
        data. ``drop_trailing_defaults``: trailing fields at their defaults are left out
        (the decoder gives them back, and a node of an older version, which knows fewer
        fields, still applies a command that uses none of the newer ones)."""
        self._kinds = dict(tags)
        self._tags = {kind: tag for tag, kind in tags.items()}
        self._checks = dict(checks or {})
        self._plain = plain
        self._drop_trailing_defaults = drop_trailing_defaults

    def name(self, command: C) -> str:
        return self._tags[type(command)]

    def to_wire(self, command: C) -> tuple[object, ...]:
        specs = fields(command)  # type: ignore[arg-type]
        values = [getattr(command, spec.name) for spec in specs]
        while self._drop_trailing_defaults and values:
            default = specs[len(values) - 1].default
            if default is MISSING or values[-1] != default:
                break
            values.pop()
        return (self._tags[type(command)], *(self._plain(value) for value in values))

    def from_wire(self, wire: object) -> C | None:
        """The command a wire tuple holds, or ``None`` when it is not one."""
        if not isinstance(wire, tuple) or not wire or not isinstance(wire[0], str):
            return None
        kind = self._kinds.get(wire[0])
        if kind is None or not _arity_ok(kind, len(wire) - 1):
            return None
        check = self._checks.get(kind)
        values = wire[1:] if check is None else check(wire[1:])
        return None if values is None else kind(*values)


def _arity_ok(kind: type[Any], count: int) -> bool:
    """All fields, or (an entry journaled before trailing fields with defaults were added)
    at least every field without a default; the missing ones take their defaults."""
    specs = fields(kind)
    required = sum(1 for s in specs if s.default is MISSING and s.default_factory is MISSING)
    return required <= count <= len(specs)
