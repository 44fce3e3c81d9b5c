"""``Lease``: when a producer or consumer renews its registration with the managers.

The managers forget a registration not renewed within ``idle_expiry_s`` (their registration
answer says how long; ``client_idle_expiry_s`` in ``protocol/limits.py``). A client renews it,
by registering again under its own id, once a third of that has passed since the last
renewal, before its next produce or pop: an active client never loses it, an idle one does
(and so do the partitions' records of it, by the same expiry). A failed renewal never fails
the produce or pop (the direct path does not need the managers); it is tried again after a
sixth of the expiry, well before the lease runs out. The managers may still forget it
sooner (renewals they never saw, their leader's clock ahead of ours): on 404
``UNKNOWN_PRODUCER``/``UNKNOWN_CONSUMER`` the producer or consumer registers again at once,
under the same id, and repeats the same batch or poll (``repeat_if_forgotten``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from protocol.errors import ErrorCode
from raftq.errors import ApiError, UnavailableError

_RENEW_FRACTION = 1 / 3
_RETRY_FRACTION = 1 / 6

T = TypeVar("T")


class Lease:
    def __init__(self, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._clock_s = clock_s
        self._expiry_s: float | None = None
        """``None`` until a registration answer states it (older servers do not)."""
        self._renew_at_s = 0.0

    def renewed(self, answer: object) -> None:
        """A registration answered ``answer`` just now."""
        expiry_s = answer.get("idle_expiry_s") if isinstance(answer, dict) else None
        if isinstance(expiry_s, int | float) and not isinstance(expiry_s, bool) and expiry_s > 0:
            self._expiry_s = float(expiry_s)
        if self._expiry_s is not None:
            self._renew_at_s = self._clock_s() + self._expiry_s * _RENEW_FRACTION

    def failed(self) -> None:
        """A renewal failed: try again later, not at every call."""
        if self._expiry_s is not None:
            self._renew_at_s = self._clock_s() + self._expiry_s * _RETRY_FRACTION

    def due(self) -> bool:
        return self._expiry_s is not None and self._clock_s() >= self._renew_at_s


def repeat_if_forgotten(
    attempt: Callable[[], T],
    forgotten: ErrorCode,
    register: Callable[[], object],
    *,
    unavailable_note: str | None = None,
) -> T:
    """``attempt()``; on 404 ``forgotten`` (``UNKNOWN_PRODUCER``/``UNKNOWN_CONSUMER``: the
    managers forgot this client), ``register()`` again under the same id and ``attempt()``
    once more. The partitions still know the client, so what an earlier attempt did is
    recognised, not done again. An ``ApiError`` of the repeat says so when the first attempt's
    outcome was unknown (``after_unknown_outcome``); given ``unavailable_note``, so does an
    ``UnavailableError`` of the repeat (made ``outcome_unknown``, with the note)."""
    try:
        return attempt()
    except ApiError as exc:
        if exc.code is not forgotten:
            raise
        first = exc
    try:
        register()
        return attempt()
    except ApiError as exc:
        exc.after_unknown_outcome = exc.after_unknown_outcome or first.after_unknown_outcome
        raise
    except UnavailableError as exc:
        if unavailable_note is None or exc.outcome_unknown or not first.after_unknown_outcome:
            raise
        raise UnavailableError(
            f"{exc}; {unavailable_note}", outcome_unknown=True, attempts=exc.attempts + 1
        ) from exc
