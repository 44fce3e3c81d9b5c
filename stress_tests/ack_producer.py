"""``AckRecordingProducer``: a producer worker on raw HTTP that records, with each
acknowledged batch, the ``replicas_synced`` of the answer's acks (``raftq.Producer`` keeps
its acks to itself), so a ``min_insync_replicas`` topic's acks can be checked
(``membership_checks.check_insync_acks``).

The same step machine as ``workload.ProducerWorker``: one batch at a time to one partition,
through the load balancer, resent with its ``(producer_id, sequence)`` until acknowledged or
``give_up_s`` passed. An answer that proves nothing was done (``protocol.errors.
proves_nothing_done``: 503 NOT_ENOUGH_REPLICAS, NO_LEADER, every 4xx) leaves the batch's
outcome as it was; any other failure (503 NOT_ENOUGH_REPLICAS_AFTER_APPEND: stored, not
acknowledged; COMMIT_TIMEOUT; a timeout; a connection reset) makes it unknown. A batch given
up is recorded unknown if any attempt may have taken effect, else failed. A 4xx other than
an expired registration (UNKNOWN_PRODUCER: registered again, same sequence) ends the batch.
Used by one thread at a time.
"""

from __future__ import annotations

import time
from typing import Any

import requests

from protocol.errors import ErrorCode, proves_nothing_done
from stress_tests.credentials import client_session
from stress_tests.history import Outcome, Position, Recorder
from stress_tests.workload import PendingBatch

REQUEST_TIMEOUT_S = 12.0
CONNECT_TIMEOUT_S = 1.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class AckRecordingProducer:
    def __init__(
        self,
        name: str,
        url: str,
        topic: str,
        recorder: Recorder,
        *,
        api_key: str,
        batch_messages: int,
        give_up_s: float,
        partition_id: int = 0,
        session: requests.Session | None = None,
    ) -> None:
        """``session``: how to reach the service (default: one carrying ``api_key``)."""
        self.name = name
        self._url, self._topic, self._recorder = url, topic, recorder
        self._batch_messages, self._give_up_s = batch_messages, give_up_s
        self._partition_id = partition_id
        self._session = session if session is not None else client_session(api_key)
        self._registered = False
        self._pending: PendingBatch | None = None
        self._sequence = 0
        self.acked_messages = 0

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def step(self) -> bool:
        """Send a new batch or resend the pending one; True when one was acknowledged."""
        if not self._registered and not self._register():
            return False
        if self._pending is None:
            self._sequence += 1
            self._pending = PendingBatch.numbered(self.name, self._sequence, self._batch_messages)
        pending = self._pending
        answer = self._post(pending)
        if answer is not None:
            self._acked(pending, answer)
            return True
        if time.monotonic() - pending.first_try_s > self._give_up_s:
            self.give_up()
        return False

    def give_up(self) -> None:
        if self._pending is not None:
            self._record(
                self._pending, Outcome.UNKNOWN if self._pending.unknown else Outcome.FAILED
            )

    def close(self) -> None:
        self._session.close()

    def _register(self) -> bool:
        body = {"topic": self._topic, "producer_id": self.name}
        try:
            with self._session.post(
                self._url + "/producers", json=body, timeout=(CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S)
            ) as response:
                self._registered = response.status_code in (200, 201)
        except requests.RequestException:
            self._registered = False
        return self._registered

    def _post(self, pending: PendingBatch) -> dict[str, Any] | None:
        """The 201 answer's body, or None after noting why not on ``pending``."""
        body = {
            "producer_id": self.name,
            "topic": self._topic,
            "partition_id": self._partition_id,
            "sequence": pending.sequence,
            "messages": [{"message": value} for value in pending.values],
        }
        try:
            with self._session.post(
                self._url + "/logs", json=body, timeout=(CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S)
            ) as response:
                status, answer = response.status_code, _json(response)
        except requests.ConnectTimeout as exc:
            pending.detail = repr(exc)[:300]  # never connected: nothing sent
            return None
        except requests.RequestException as exc:
            pending.detail, pending.unknown = repr(exc)[:300], True
            return None
        if status == 201 and isinstance(answer, dict):
            return answer
        pending.detail = f"{status} {str(answer)[:280]}"
        if not proves_nothing_done(status, answer):
            pending.unknown = True
        if _error_code(answer) == ErrorCode.UNKNOWN_PRODUCER.value:
            self._registered = False
        elif status not in RETRY_STATUSES:
            self._record(pending, Outcome.UNKNOWN if pending.unknown else Outcome.FAILED)
        return None

    def _acked(self, pending: PendingBatch, answer: dict[str, Any]) -> None:
        offsets = answer["offsets"]
        acks = answer["acks"]
        positions = tuple(Position(int(o["partition_id"]), int(o["offset"])) for o in offsets)
        synced = min((int(a["replicas_synced"]) for a in acks), default=None)
        self._record(pending, Outcome.ACKED, positions, synced)

    def _record(
        self,
        pending: PendingBatch,
        outcome: Outcome,
        positions: tuple[Position, ...] = (),
        replicas_synced: int | None = None,
    ) -> None:
        self._recorder.send(pending.as_send(self.name, outcome, positions, replicas_synced))
        if outcome is Outcome.ACKED:
            self.acked_messages += len(pending.values)
        self._pending = None


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _error_code(answer: Any) -> int | None:
    code = answer.get("error_code") if isinstance(answer, dict) else None
    return code if isinstance(code, int) else None
