"""Exceptions of the client library. All derive from ``RaftQClientError``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, proves_nothing_done

if TYPE_CHECKING:
    from raftq.records import PartitionOffset


class RaftQClientError(Exception):
    """Something the caller asked for did not happen (or may not have)."""


class ApiError(RaftQClientError):
    """The service answered with an error it means (4xx, or a 5xx not worth retrying)."""

    def __init__(
        self,
        status: int,
        error_code: int | None,
        message: str,
        leader_hint: str | None = None,
        *,
        after_unknown_outcome: bool = False,
    ) -> None:
        super().__init__(f"{status} ({error_code}): {message}")
        self.status = status
        self.error_code = error_code
        self.message = message
        self.leader_hint = leader_hint
        self.after_unknown_outcome = after_unknown_outcome
        """An earlier attempt of the same call may have taken effect (e.g. a 409 "topic
        exists" that the earlier, timed-out attempt caused)."""

    @property
    def proves_nothing_done(self) -> bool:
        """This answer proves the call changed nothing (``protocol.errors``' one rule), and no
        earlier attempt of it may have."""
        body = {"error_code": self.error_code}
        return not self.after_unknown_outcome and proves_nothing_done(self.status, body)

    @property
    def code(self) -> ErrorCode | None:
        try:
            return None if self.error_code is None else ErrorCode(self.error_code)
        except ValueError:
            return None


class UnavailableError(RaftQClientError):
    """No usable answer after the bounded retries (or a failure that is unsafe to retry)."""

    def __init__(self, message: str, *, outcome_unknown: bool, attempts: int) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown
        """True when some attempt may have taken effect on the server."""
        self.attempts = attempts


class ProtocolError(RaftQClientError):
    """The service answered something this client does not understand."""


class BufferFullError(RaftQClientError):
    """``Producer.send`` was called with ``buffer_messages_max`` messages unsent, or
    ``AsyncProducer.send`` found its buffer full for ``max_block_ms``."""


class ProduceError(RaftQClientError):
    """``Producer.flush`` failed part way.

    ``completed`` holds the offsets of the messages sent before the failure (in send order).
    ``acked_in_batch`` holds, for the failed batch itself, each message's offset where its
    partition acknowledged it, else ``None`` (the direct path sends a batch's partition groups
    separately, so some may be stored when another fails); it is empty when no message of the
    batch was acknowledged. When ``retained`` is true the failed batch stays queued with its
    sequence, so the next ``flush`` resends it and the service drops it if the first try was
    in fact applied (a stored group comes back with the offsets it was acknowledged with).
    """

    def __init__(
        self,
        message: str,
        *,
        completed: tuple[PartitionOffset, ...],
        retained: bool,
        outcome_unknown: bool,
        acked_in_batch: tuple[PartitionOffset | None, ...] = (),
    ) -> None:
        super().__init__(message)
        self.completed = completed
        self.retained = retained
        self.outcome_unknown = outcome_unknown
        self.acked_in_batch = acked_in_batch
