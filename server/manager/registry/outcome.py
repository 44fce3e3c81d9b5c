"""What a replicated command returns: apply never raises, it answers one of these."""

from __future__ import annotations

from enum import Enum


class Outcome(Enum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    """The command changed nothing (a repeat): callers treat it as success."""
    EXISTS = "exists"
    TOO_MANY = "too_many"
    UNKNOWN_TOPIC = "unknown_topic"
    UNKNOWN_PARTITION = "unknown_partition"
    UNKNOWN_BROKER = "unknown_broker"
    INVALID = "invalid"
    """The arguments break a rule the proposer should have checked (a bug or a race)."""
    BUSY = "busy"
    """Another multi-step operation on the same topic is not finished."""
    ADDRESS_TAKEN = "address_taken"
    """A Raft address in the placement is already used (two placements raced)."""
    FAILED = "failed"
    """Apply hit an unexpected exception; the adapter logged it and changed nothing."""

    @property
    def ok(self) -> bool:
        return self in (Outcome.CREATED, Outcome.UPDATED, Outcome.UNCHANGED)
