"""``Registration``: announces this broker to the managers, at start and periodically.

Thread: one daemon thread. ``POST /brokers`` is idempotent, so repeating it is harmless; it
also re-registers the broker after the managers' registry was lost or rebuilt. A refusal
that repeating cannot cure (another live broker has this id) ends the announcements and is
handed to ``on_refused``, which stops the broker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from broker.managers import Managers
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import RegisterBroker

_log = logging.getLogger(__name__)


class Registration:
    def __init__(
        self,
        managers: Managers,
        announcement: RegisterBroker,
        limits: Limits,
        on_refused: Callable[[str], None],
    ) -> None:
        self._managers = managers
        self._on_refused = on_refused
        self._announcement = announcement
        self._limits = limits
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registration", daemon=True)
        self.registered = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        retry_s = self._limits.http_retry_backoff_s_max
        while not self._stop.is_set():
            try:
                self._managers.call_ok("POST", "/brokers", self._announcement.to_json())
                self.registered.set()
                wait_s = self._limits.broker_register_period_s
            except RaftQError as exc:
                if exc.code is ErrorCode.ID_TAKEN:
                    _log.critical("the managers refuse this broker: %s", exc.message)
                    self._on_refused(exc.message)
                    return
                _log.info("registration with the managers failed: %s", exc.message)
                wait_s = retry_s
            self._stop.wait(wait_s)
