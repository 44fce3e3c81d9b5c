"""Error codes of the HTTP API: ``{"error_code": <status*100+n>, "message": ...}``, and the
one rule on which of them prove that nothing was done (``proves_nothing_done``): the load
balancer, the manager's router, the client library and both Raft adapters decide with it
whether repeating a request elsewhere is safe."""

from __future__ import annotations

from enum import Enum


class ErrorCode(Enum):
    """Each code's value is ``status * 100 + n``; its status is the HTTP status."""

    MALFORMED_REQUEST = 40001
    INVALID_FIELD = 40002
    UNAUTHENTICATED = 40101
    """No credentials, or ones nobody issued (or since revoked)."""
    FORBIDDEN = 40301
    """Valid credentials without the right to this."""
    UNKNOWN_TOPIC = 40401
    UNKNOWN_PARTITION = 40402
    UNKNOWN_CONSUMER = 40403
    UNKNOWN_PRODUCER = 40404
    NOT_FOUND = 40405
    METHOD_NOT_ALLOWED = 40501
    REQUEST_TIMEOUT = 40801
    """The request's bytes did not all arrive within the server's bound."""
    TOPIC_EXISTS = 40901
    SEQUENCE_OUT_OF_ORDER = 40902
    TOO_MANY = 40903
    ID_TAKEN = 40904
    """A producer or consumer id is registered for another topic (or partition); a broker
    id is registered and alive at another address, or was removed."""
    BROKER_NOT_EMPTY = 40905
    """A broker to remove still holds replicas, or was not drained first."""
    CANNOT_MOVE = 40906
    """A drain that could not finish: a replica it would move is its partition's only one,
    no broker could take it, or another replica of its partition is down."""
    TOO_LARGE = 41301
    OFFSET_OUT_OF_RANGE = 41601
    """A fetch beyond the partition's end offset (the message names the valid range)."""
    BACKPRESSURE = 42901
    HEADERS_TOO_LARGE = 43101
    INTERNAL = 50001
    NO_LEADER = 50301
    NOT_LEADER = 50302
    COMMIT_TIMEOUT = 50303
    """The command may or may not have been applied: retry with the same sequence or
    request id, which is safe."""
    UNAVAILABLE = 50304
    """No answer came, or none that says what happened: the outcome is unknown (retry with
    the same sequence or request id)."""
    NOT_ENOUGH_BROKERS = 50305
    PARTIALLY_WRITTEN = 50306
    """Some partitions of a batch stored their part, others failed: retry with the same
    sequence (the stored parts are recognised as duplicates)."""
    REFUSED = 50307
    """Refused before doing anything: busy, not ready yet (a topic still being created, a
    replica that cannot serve the range yet, a Raft queue that is full), or the connection
    was never made. Repeating it, here later or elsewhere, is safe."""
    NOT_ENOUGH_REPLICAS = 50308
    """The partition has fewer replicas in sync than its topic's ``min_insync_replicas``:
    the produce was refused before anything was stored (Kafka's NOT_ENOUGH_REPLICAS)."""
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 50309
    """The batch is committed, but fewer replicas than the topic's ``min_insync_replicas``
    acknowledged holding it within the bound (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND):
    not acknowledged; retry with the same sequence (it is recognised as a duplicate)."""

    @property
    def status(self) -> int:
        return self.value // 100

    @property
    def proves_nothing_done(self) -> bool:
        """True when an answer with this code proves the request changed nothing: every 4xx
        (rejected before acting) and the 503s of a refusal before proposing."""
        return self.status < 500 or self in _NOTHING_DONE_5XX


_NOTHING_DONE_5XX = frozenset(
    {
        ErrorCode.NO_LEADER,
        ErrorCode.NOT_LEADER,
        ErrorCode.NOT_ENOUGH_BROKERS,
        ErrorCode.REFUSED,
        ErrorCode.NOT_ENOUGH_REPLICAS,
    }
)


def proves_nothing_done(status: int, body: object) -> bool:
    """The rule for an HTTP answer: its ``error_code`` decides; without a known code a 4xx
    proves nothing was done and a 5xx leaves the outcome unknown."""
    raw = body.get("error_code") if isinstance(body, dict) else None
    try:
        code = ErrorCode(raw) if isinstance(raw, int) else None
    except ValueError:
        code = None
    if code is None or code.status != status:
        return status < 500
    return code.proves_nothing_done


class RaftQError(Exception):
    """An error that maps to one HTTP answer. Raised by services, mapped by the HTTP layer."""

    def __init__(self, code: ErrorCode, message: str, leader_hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.leader_hint = leader_hint

    @property
    def status(self) -> int:
        return self.code.status

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"error_code": self.code.value, "message": self.message}
        if self.leader_hint is not None:
            body["leader_hint"] = self.leader_hint
        return body

    @classmethod
    def from_json(cls, status: int, body: object) -> RaftQError:
        """Rebuild an error another component answered with (for passing it through)."""
        if isinstance(body, dict) and isinstance(body.get("error_code"), int):
            try:
                code = ErrorCode(body["error_code"])
            except ValueError:
                code = _code_for_status(status)
            hint = body.get("leader_hint")
            return cls(code, str(body.get("message", "")), hint if isinstance(hint, str) else None)
        return cls(_code_for_status(status), f"unexpected answer with status {status}")


def _code_for_status(status: int) -> ErrorCode:
    for code in ErrorCode:
        if code.status == status:
            return code
    return ErrorCode.INTERNAL if status >= 500 else ErrorCode.MALFORMED_REQUEST
