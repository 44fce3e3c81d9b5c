"""A ``Definition``'s state as pysyncobj replicates it: a ``SyncObjConsumer`` whose
``@replicated`` methods are the definition's table.

The class is made from the table (``consumer_type``), one per table: pysyncobj finds a
consumer's replicated methods by name, numbers them by sorted ``(ver, name_vN)`` and journals
the number with the plain arguments, exactly as for methods written out in a class body, so
journals written by the hand-written adapters replay unchanged (pinned by the tests).

pysyncobj takes every attribute set after ``SyncObjConsumer.__init__`` to be replicated state
and pickles it into snapshots: the lock and the definition are set before it, the state after
it, under the definition's ``state_attribute`` (part of the dump format).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Generic

from pysyncobj import SyncObjConsumer, replicated

from runtime.replication.machine import C, Definition, R, ReplicatedMethod, S

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying an entry returns to its proposer (on this node only: never stored)."""

    value: object
    index: int
    term: int


class StateConsumer(SyncObjConsumer, Generic[S, C, R]):
    """Holds a definition's state. Threads: pysyncobj's tick thread applies (and freezes
    the state for a snapshot); any thread reads, under ``lock``."""

    def __init__(self, definition: Definition[S, C, R]) -> None:
        if hasattr(self, definition.state_attribute):
            raise ValueError(f"state attribute {definition.state_attribute!r} is taken")
        self.lock = threading.Lock()
        self.definition = definition
        super().__init__()
        self.__dict__[definition.state_attribute] = definition.new_state()

    def held_state(self) -> S:
        """Under ``lock`` only."""
        state: S = self.__dict__[self.definition.state_attribute]
        return state

    def apply(self, method: ReplicatedMethod, args: tuple[object, ...], kwargs: Any) -> Applied:
        """Tick thread: one committed entry, with where it landed (read while it is applied)."""
        index, term = self._syncObj.applying_entry()
        with self.lock:
            try:
                value = method.apply(self.held_state(), *args, **kwargs)
            except Exception:  # escaping a pysyncobj apply, it would wedge the group for good
                _log.exception("replicated method %s failed; applied as None", method.name)
                value = None
        return Applied(value, index, term)

    def _serialize(self) -> dict[str, object]:
        # Tick thread, at a log compaction: no thread may see the state half frozen.
        with self.lock:
            data: dict[str, object] = super()._serialize()
            name = self.definition.state_attribute
            data[name] = self.definition.freeze(self.held_state())
        return data


_types: dict[tuple[ReplicatedMethod, ...], type[StateConsumer[Any, Any, Any]]] = {}


def consumer_type(methods: tuple[ReplicatedMethod, ...]) -> type[StateConsumer[Any, Any, Any]]:
    """The consumer class whose replicated methods are ``methods`` (made once per table)."""
    made = _types.get(methods)
    if made is None:
        taken = [m.name for m in methods if hasattr(StateConsumer, m.name)]
        if taken or len({m.name for m in methods}) != len(methods):
            raise ValueError(f"replicated method names taken or repeated: {taken or methods}")
        namespace: dict[str, object] = {}
        for method in methods:
            function = _replicated(method)
            namespace[method.name] = function  # what a proposer calls
            namespace[f"{method.name}_v{method.version}"] = function  # what pysyncobj numbers
        made = type("ReplicatedState", (StateConsumer,), namespace)
        _types[methods] = made
    return made


def _replicated(method: ReplicatedMethod) -> Any:
    def apply(self: StateConsumer[Any, Any, Any], *args: object, **kwargs: object) -> Applied:
        return self.apply(method, args, kwargs)

    apply.__name__ = apply.__qualname__ = method.name  # pysyncobj looks methods up by it
    # The decorator also stores a copy under ``name_vN`` in its caller's frame (a class body);
    # here that frame is this function's, and ``consumer_type`` names the copy itself.
    return replicated(ver=method.version)(apply)
