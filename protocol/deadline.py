"""``Deadline``: when the caller of a request stops waiting for its answer.

It travels with the request as a relative budget, ``X-RaftQ-Timeout-Ms`` (milliseconds the
caller still waits, like gRPC's ``grpc-timeout``): hosts share no clock, so each hop turns it
into a point on its own monotonic clock when the request arrives and sends the rest onward.
A hop does not start work its caller has given up on (the load balancer does not forward it,
the manager does not try another broker, a broker does not propose a command still queued),
and it bounds its own waits by it. What was already proposed to Raft may still be applied
after the deadline; the partition recognises such a late copy by its sequence.

A relative budget cannot see time a request spent waiting before its hop read it: a node
stopped (SIGSTOP) with requests in its socket buffer would, on resuming, start each with its
full budget although every caller is long gone. So a hop also sends the deadline as a point
in wall-clock time, ``X-RaftQ-Deadline-Ms`` (epoch milliseconds), and a receiver takes the
earlier of the two, granting the absolute one ``skew_s`` of clock skew: a receiver whose
clock runs ahead by more than that refuses early (nothing done), never works late. A hop sends
onward the absolute deadline it received (less the reply margin), not the one it granted
itself: the allowance is each receiver's, so a request that crossed three hops is not granted
three times the skew.

Pure: every method takes ``now_s`` from the caller's monotonic clock (and ``wall_ms`` from
its wall clock).
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER = "X-RaftQ-Timeout-Ms"
EPOCH_HEADER = "X-RaftQ-Deadline-Ms"


@dataclass(frozen=True, slots=True)
class Deadline:
    at_s: float
    """A point on the monotonic clock of the process that holds it."""
    epoch_ms: int | None = None
    """The absolute deadline as the caller sent it (epoch milliseconds on the caller's
    clock), without the skew allowance this hop granted; ``None`` when none came."""

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

    @classmethod
    def from_headers(
        cls,
        relative: str | None,
        epoch: str | None,
        now_s: float,
        wall_ms: int,
        default_s: float,
        skew_s: float,
    ) -> Deadline:
        """``from_header``, cut to the absolute deadline ``epoch`` (``EPOCH_HEADER``) plus
        ``skew_s`` when one came (older callers send only the relative budget)."""
        deadline = cls.from_header(relative, now_s, default_s)
        if epoch is None or not epoch.isdigit():
            return deadline
        absolute_s = (int(epoch) - wall_ms) / 1000 + skew_s
        return cls(min(deadline.at_s, now_s + max(0.0, absolute_s)), epoch_ms=int(epoch))

    def epoch_header_value(self, now_s: float, wall_ms: int, reply_margin_s: float) -> str:
        """``EPOCH_HEADER``'s value: ``header_value``'s budget as a point in wall time, and
        never later than the absolute deadline received (less the margin too)."""
        margin_ms = int(reply_margin_s * 1000)
        budget_ms = int(max(0.0, self.remaining_s(now_s) - reply_margin_s) * 1000)
        value_ms = wall_ms + budget_ms
        if self.epoch_ms is not None:
            # Never negative: a malformed header is ignored, which would undo the deadline.
            value_ms = min(value_ms, max(0, self.epoch_ms - margin_ms))
        return str(value_ms)

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
