"""Consumer groups with leased delivery (issue 20): each topic's groups and their settings.
Pure.

The managers hold a group's settings, and every receive carries them to the partitions
(``broker.partition.commands.Receive``), so each partition applies what this registry says.
A group is named within its topic and defined once: defining it again with the same
settings changes nothing (a retried command, or a client that declares its group at every
start), with other settings is refused. Whether its topic and dead-letter topic exist is
``ManagerState``'s to check (it holds the topics); every bound is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from manager.registry.outcome import Outcome
from protocol import snapshot_fields
from protocol.group_requests import Ordering

_ORDERINGS = frozenset(o.value for o in Ordering)


@dataclass(frozen=True, slots=True)
class GroupEntry:
    topic: str
    group: str
    """Unique within its topic; the rule of topic names (``protocol.requests.topic_name``)."""
    visibility_timeout_ms: int
    """How long a lease lasts unless extended (partition time)."""
    max_deliveries: int
    """Deliveries after which a message whose lease ends goes to the dead-letter topic
    instead of being delivered again; 0: no limit. At least 1 with a dead-letter topic."""
    dead_letter_topic: str | None
    """Another topic; written with the cluster's rights (so only admins define groups)."""
    ordering: str
    """An ``Ordering`` value. Plain text, not the enum: a snapshot that pickled the enum
    would not load once its class moved."""
    version: int
    """The registry revision that defined it."""

    # Pickled by field order: a field added later (last, with a default) keeps snapshots
    # written before it readable.
    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)

    @property
    def ordered_by_key(self) -> bool:
        return self.ordering == Ordering.KEY.value

    def same_settings(self, other: GroupEntry) -> bool:
        """Everything but the version: a definition that changes nothing."""
        return _settings(self) == _settings(other)

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "group": self.group,
            "visibility_timeout_ms": self.visibility_timeout_ms,
            "max_deliveries": self.max_deliveries,
            "dead_letter_topic": self.dead_letter_topic,
            "ordering": self.ordering,
        }


@dataclass(frozen=True, slots=True)
class RedriveProgress:
    """A group's redrives in one partition of its dead-letter topic: its letters below
    ``done_to`` are redriven, and ``planned``, when set, is the range being redriven (a
    redrive that failed part way repeats exactly that range, so each origin partition
    recognises its part by request id)."""

    done_to: int = 0
    planned: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class GroupBounds:
    """The bounds a definition is applied with (the proposer's, carried in the command)."""

    visibility_timeout_ms_min: int
    visibility_timeout_ms_max: int
    max_deliveries_max: int
    groups_max: int
    """Groups in one topic: every group lives in every partition of its topic, where
    ``partition_groups_max`` bounds them."""


class GroupRegistry:
    def __init__(self) -> None:
        self._groups: dict[str, dict[str, GroupEntry]] = {}
        """Topic name → group name → entry."""
        self._redrives: dict[tuple[str, str], dict[int, RedriveProgress]] = {}
        """(topic, group) → dead-letter partition → how far its redrives went."""

    def __setstate__(self, state: dict[str, object]) -> None:
        """A dump from before redrives has no redrive progress."""
        self.__dict__.update(state)
        if "_redrives" not in state:
            self._redrives = {}

    def __len__(self) -> int:
        return sum(len(groups) for groups in self._groups.values())

    def get(self, topic: str, group: str) -> GroupEntry | None:
        return self._groups.get(topic, {}).get(group)

    def of_topic(self, topic: str) -> list[GroupEntry]:
        """The topic's groups, by name."""
        groups = self._groups.get(topic, {})
        return [groups[name] for name in sorted(groups)]

    def all(self) -> list[GroupEntry]:
        """Every group, by topic and name."""
        return [entry for topic in sorted(self._groups) for entry in self.of_topic(topic)]

    def redrive_progress(self, topic: str, group: str, partition_id: int) -> RedriveProgress:
        """How far the group's redrives went in dead-letter partition ``partition_id``."""
        return self._redrives.get((topic, group), {}).get(partition_id, RedriveProgress())

    def plan_redrive(
        self, topic: str, group: str, partition_id: int, start: int, end: int
    ) -> Outcome:
        """The group's letters in ``[start, end)`` of dead-letter partition ``partition_id``
        are being redriven (the first part of the step: a repeat redrives exactly this
        range again). UNCHANGED for the same plan again; BUSY when another range is
        planned, or ``start`` is not where the last range ended (a stale proposer);
        UNKNOWN_TOPIC for a group that does not exist; INVALID for a bad range."""
        if not _names(topic, group) or self.get(topic, group) is None:
            return Outcome.UNKNOWN_TOPIC
        if not all(_int(v) and v >= 0 for v in (partition_id, start, end)) or end <= start:
            return Outcome.INVALID
        progress = self.redrive_progress(topic, group, partition_id)
        if progress.planned == (start, end):
            return Outcome.UNCHANGED
        if progress.planned is not None or progress.done_to > start:
            return Outcome.BUSY
        self._set(topic, group, partition_id, RedriveProgress(progress.done_to, (start, end)))
        return Outcome.UPDATED

    def finish_redrive(self, topic: str, group: str, partition_id: int, end: int) -> Outcome:
        """The planned range up to ``end`` is redriven: the next starts there. A repeat (or
        a late copy) is UNCHANGED; INVALID when no range ends there."""
        if not _names(topic, group) or self.get(topic, group) is None:
            return Outcome.UNKNOWN_TOPIC
        if not (_int(partition_id) and _int(end)):
            return Outcome.INVALID
        progress = self.redrive_progress(topic, group, partition_id)
        if progress.planned is None or progress.planned[1] != end:
            return Outcome.UNCHANGED if progress.done_to >= end else Outcome.INVALID
        self._set(topic, group, partition_id, RedriveProgress(end))
        return Outcome.UPDATED

    def _set(self, topic: str, group: str, partition_id: int, progress: RedriveProgress) -> None:
        self._redrives.setdefault((topic, group), {})[partition_id] = progress

    def define(self, entry: GroupEntry, bounds: GroupBounds) -> Outcome:
        """CREATED; UNCHANGED when the group exists with the same settings; EXISTS when it
        exists with others; TOO_MANY when its topic has ``groups_max`` groups; INVALID for
        fields or bounds that break a rule. Total: never raises."""
        if not _valid_bounds(bounds) or not _valid(entry, bounds):
            return Outcome.INVALID
        groups = self._groups.get(entry.topic, {})
        known = groups.get(entry.group)
        if known is not None:
            return Outcome.UNCHANGED if known.same_settings(entry) else Outcome.EXISTS
        if len(groups) >= bounds.groups_max:
            return Outcome.TOO_MANY
        self._groups[entry.topic] = {**groups, entry.group: entry}
        return Outcome.CREATED


def _settings(entry: GroupEntry) -> tuple[object, ...]:
    return (
        entry.topic,
        entry.group,
        entry.visibility_timeout_ms,
        entry.max_deliveries,
        entry.dead_letter_topic,
        entry.ordering,
    )


def _names(topic: object, group: object) -> bool:
    return isinstance(topic, str) and isinstance(group, str)


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _valid_bounds(bounds: GroupBounds) -> bool:
    values = (
        bounds.visibility_timeout_ms_min,
        bounds.visibility_timeout_ms_max,
        bounds.max_deliveries_max,
        bounds.groups_max,
    )
    return all(_int(v) and v > 0 for v in values)


def _valid(entry: GroupEntry, bounds: GroupBounds) -> bool:
    """The rules ``protocol.requests.CreateGroup`` checks, again: apply sees only plain
    data from the log."""
    timeout, deliveries, dead = (
        entry.visibility_timeout_ms,
        entry.max_deliveries,
        entry.dead_letter_topic,
    )
    if not all(isinstance(name, str) and name != "" for name in (entry.topic, entry.group)):
        return False
    if not (_int(timeout) and _int(deliveries) and _ordering(entry.ordering)):
        return False
    if not bounds.visibility_timeout_ms_min <= timeout <= bounds.visibility_timeout_ms_max:
        return False
    if not 0 <= deliveries <= bounds.max_deliveries_max:
        return False
    # A dead-letter topic is another topic, and a message reaches it only past a limit.
    return dead is None or (
        isinstance(dead, str) and dead not in ("", entry.topic) and deliveries >= 1
    )


def _ordering(value: object) -> bool:
    return isinstance(value, str) and value in _ORDERINGS
