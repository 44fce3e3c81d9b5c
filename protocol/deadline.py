"""``Deadline``: when the caller of a request stops waiting for its answer.

It travels with the request as a relative budget, ``X-RaftQ-Timeout-Ms`` (milliseconds the
caller still waits, like gRPC's ``grpc-timeout``): hosts share no clock, so each hop turns it
into a point on its own monotonic clock when the request arrives and sends the rest onward.
A hop does not start work its caller has given up on (the load balancer does not forward it,
the manager does not try another broker, a broker does not propose a command still queued),
and it bounds its own waits by it. What was already proposed to Raft may still be applied
after the deadline; the partition recognises such a late copy by its sequence.

Pure: every method takes ``now_s`` from the caller's monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER = "X-RaftQ-Timeout-Ms"


@dataclass(frozen=True, slots=True)
class Deadline:
    at_s: float
    """A point on the monotonic clock of the process that holds it."""

    @classmethod
    def after(cls, budget_s: float, now_s: float) -> Deadline:
        return cls(now_s + max(0.0, budget_s))

    @classmethod
    def from_header(cls, value: str | None, now_s: float, default_s: float) -> Deadline:
        """The caller's deadline; ``default_s`` (this hop's own bound) when the header is
        missing or malformed, and never later than that bound."""
        budget_s = default_s
        # A malformed header is not worth refusing the request for: this hop's bound holds.
        if value is not None and value.isdigit():
            budget_s = min(default_s, int(value) / 1000)
        return cls.after(budget_s, now_s)

    def remaining_s(self, now_s: float) -> float:
        return max(0.0, self.at_s - now_s)

    def expired(self, now_s: float) -> bool:
        return now_s >= self.at_s

    def header_value(self, now_s: float, reply_margin_s: float) -> str:
        """The budget to send onward, in whole milliseconds: what is left now, less a margin
        for the answer to travel back (so the callee's own answer, even an error, arrives
        before this hop stops waiting for it)."""
        return str(int(max(0.0, self.remaining_s(now_s) - reply_margin_s) * 1000))

    def bound(self, timeout_s: float, now_s: float) -> float:
        """``timeout_s`` cut to what is left of the deadline."""
        return min(timeout_s, self.remaining_s(now_s))
