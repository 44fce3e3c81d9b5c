"""HTTP calls from the manager to brokers (interfaces in ARCHITECTURE.md)."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import quote

from protocol.dead_letters import PendingDeadLetter
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import GroupRedrive, MarkDeadLettered
from protocol.limits import Limits
from protocol.types import ReplicaSpec
from runtime.http_client import HttpAnswer, JsonHttpClient, PeerLink


class BrokerRefusalError(Exception):
    """A broker's error answer that the manager passes back unchanged (status, body and
    Retry-After): 4xx, 429, or a 503 that does not prove the request was not processed."""

    def __init__(self, answer: HttpAnswer) -> None:
        super().__init__(f"broker answered {answer.status}")
        self.answer = answer


class BrokerClient:
    """Thread-safe; one per manager process."""

    def __init__(self, limits: Limits, link: PeerLink) -> None:
        self._http = JsonHttpClient(limits, link)
        # A poll is its own retry (the next one comes within broker_poll_period_s), so one
        # attempt with a short read timeout: a paused broker must not hold up the others.
        self._poll_timeout_s = max(limits.broker_poll_period_s, limits.http_connect_timeout_s)
        self._poll_http = JsonHttpClient(
            replace(limits, http_retries_max=1),
            link,
            timeout_s=self._poll_timeout_s,
        )

    def host_replica(self, address: str, spec: ReplicaSpec) -> None:
        """Idempotent at the broker: 201 created or 200 already hosted."""
        self._http.call_ok("POST", f"{address}/partitions", spec.to_json(), idempotent=True)

    def hosted_partitions(self, address: str) -> list[dict[str, object]]:
        """The broker's ``GET /partitions`` (the heartbeat); raises ``RaftQError``."""
        body = self._poll_http.call_ok("GET", f"{address}/partitions", idempotent=True)
        items = body.get("partitions") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise RaftQError(ErrorCode.UNAVAILABLE, f"{address}/partitions: malformed answer")
        return [item for item in items if isinstance(item, dict)]

    def replace_member(
        self,
        address: str,
        spec: ReplicaSpec,
        moved_replica_id: int,
        removed: str,
        removed_alive: bool,
    ) -> dict[str, object]:
        """Re-replication at one live replica's broker (``POST /partitions/members``): its
        answer says whether that replica leads and, if so, whether the Raft group's members
        now match ``spec``. Raises ``RaftQError``."""
        body = {
            "spec": spec.to_json(),
            "moved_replica_id": moved_replica_id,
            "removed": removed,
            "removed_alive": removed_alive,
        }
        answer = self._http.call_ok("POST", f"{address}/partitions/members", body, idempotent=True)
        return answer if isinstance(answer, dict) else {}

    def drop_replica(self, address: str, topic: str, partition_id: int, raft_address: str) -> bool:
        """``DELETE /partitions`` at the broker: stop hosting a replica its partition no
        longer has. True when one was dropped now. Raises ``RaftQError``."""
        body = {"topic": topic, "partition_id": partition_id, "raft_address": raft_address}
        answer = self._http.call_ok("DELETE", f"{address}/partitions", body, idempotent=True)
        return isinstance(answer, dict) and answer.get("dropped") is True

    def transfer_leadership(
        self, address: str, topic: str, partition_id: int, raft_address: str
    ) -> None:
        """Ask the broker at ``address``, whose replica leads, to hand leadership to the
        replica at ``raft_address``. Raises ``RaftQError``."""
        body = {"topic": topic, "partition_id": partition_id, "raft_address": raft_address}
        self._http.call_ok("POST", f"{address}/leadership", body, idempotent=True)

    def consumer_lag(
        self, address: str, topic: str
    ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """The broker's ``GET /lag``: its consumers' lag on the partitions of ``topic`` it
        leads, and those partitions' own figures. Raises ``RaftQError``."""
        body = self._http.call_ok("GET", f"{address}/lag", params={"topic": topic}, idempotent=True)
        return _lists(body, f"{address}/lag", "consumers", "partitions")

    def produce(
        self, address: str, body: dict[str, object], deadline: Deadline | None = None
    ) -> HttpAnswer:
        return self._http.call("POST", f"{address}/logs", body, deadline=deadline)

    def group_figures(
        self, address: str, topic: str
    ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """``GET {broker}/groups``: each group's figures in the partitions it leads, and
        those partitions' own (a group's that has not received there yet)."""
        body = self._http.call_ok(
            "GET", f"{address}/groups", params={"topic": topic}, idempotent=True
        )
        return _lists(body, f"{address}/groups", "groups", "partitions")

    def receive(
        self, address: str, group: str, params: dict[str, str], deadline: Deadline | None
    ) -> HttpAnswer:
        """A consumer group's receive of one partition: safe to repeat (the partition
        answers a repeat of its request id with the same leases)."""
        return self._http.call(
            "GET",
            f"{address}/groups/{quote(group, safe='')}/messages",
            params=params,
            idempotent=True,
            deadline=deadline,
        )

    def settle(
        self,
        address: str,
        group: str,
        action: str,
        body: dict[str, object],
        deadline: Deadline | None,
    ) -> HttpAnswer:
        """An ack, nack or extend of one partition's receipts: idempotent by receipt."""
        path = f"{address}/groups/{quote(group, safe='')}/{action}"
        return self._http.call("POST", path, body, idempotent=True, deadline=deadline)

    def redrive(self, address: str, request: GroupRedrive, deadline: Deadline | None) -> HttpAnswer:
        """One partition's part of a redrive: a repeat of its request id does nothing."""
        path = f"{address}/groups/{quote(request.group, safe='')}/redrive"
        return self._http.call("POST", path, request.to_json(), idempotent=True, deadline=deadline)

    def dead_letters(self, address: str, most: int) -> list[PendingDeadLetter]:
        """``GET {broker}/dead-letters``: messages past their group's ``max_deliveries`` in
        the partitions it leads; raises ``RaftQError``."""
        body = self._http.call_ok(
            "GET", f"{address}/dead-letters", params={"max_messages": str(most)}, idempotent=True
        )
        items = body.get("dead_letters") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise RaftQError(ErrorCode.INTERNAL, f"{address}/dead-letters: malformed answer")
        return [PendingDeadLetter.from_json(item) for item in items]

    def mark_dead_lettered(self, address: str, request: MarkDeadLettered) -> None:
        """The dead-letter step's last part (idempotent); raises ``RaftQError``."""
        path = f"{address}/groups/{quote(request.group, safe='')}/dead-lettered"
        self._http.call_ok("POST", path, request.to_json(), idempotent=True)

    def read(
        self, address: str, params: dict[str, str], deadline: Deadline | None = None
    ) -> HttpAnswer:
        """A pop (with ``consumer_id`` and ``request_id``) or a fetch: both safe to repeat."""
        return self._http.call(
            "GET", f"{address}/logs", params=params, idempotent=True, deadline=deadline
        )


def _lists(
    body: object, where: str, first: str, second: str
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The two lists of objects a broker's figures answer holds."""
    found = []
    for name in (first, second):
        items = body.get(name) if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise RaftQError(ErrorCode.UNAVAILABLE, f"{where}: malformed answer")
        found.append([item for item in items if isinstance(item, dict)])
    return found[0], found[1]
