"""``PeerCopy``: reads a range of a partition from a peer replica's broker.

A replica that fell more than ``partition_replica_lag_messages_max`` behind finds the
messages it missed gone from memory (the Storm blob-store idea: a node whose sequence is
behind syncs from one that is not). Its flusher copies them from a peer that has them in its
database, through the peer's stateless fetch, then flushes them as usual.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.types import Offset, ReplicaSpec, StoredMessage, headers_of
from runtime.http_client import JsonHttpClient, PeerLink


class PeerCopy:
    def __init__(self, limits: Limits, link: PeerLink) -> None:
        self._client = JsonHttpClient(limits, link)
        self._fetch_messages_max = limits.fetch_messages_max

    def read(self, spec: ReplicaSpec, start: int, end: int) -> list[StoredMessage]:
        """Messages ``[start, end)`` (at most ``fetch_messages_max``) from the first peer that
        has all of them."""
        end = min(end, start + self._fetch_messages_max)
        reasons = []
        for peer in spec.peers:
            try:
                messages = self._fetch(peer.address, spec, start, end)
            except RaftQError as exc:
                reasons.append(f"{peer.address}: {exc.message}")
                continue
            if [m.offset for m in messages] == list(range(start, end)):
                return messages
            reasons.append(f"{peer.address}: has only {len(messages)} of them")
        raise RaftQError(
            ErrorCode.UNAVAILABLE,
            f"no peer of {spec.topic}/{spec.partition_id} could give [{start}, {end}): "
            + "; ".join(reasons),
        )

    def _fetch(self, address: str, spec: ReplicaSpec, start: int, end: int) -> list[StoredMessage]:
        params = {
            "topic": spec.topic,
            "partition_id": str(spec.partition_id),
            "offset": str(start),
            "max_messages": str(end - start),
        }
        body = self._client.call_ok("GET", f"{address}/logs", params=params, idempotent=True)
        items = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise RaftQError(ErrorCode.INTERNAL, "a peer answered a fetch without messages")
        return [
            StoredMessage(
                offset=Offset(int(item["offset"])),
                value=str(item["message"]),
                key=None if item.get("key") is None else str(item["key"]),
                timestamp_ms=int(item["timestamp_ms"]),
                headers=headers_of({str(k): str(v) for k, v in item.get("headers", {}).items()}),
            )
            for item in items
        ]
