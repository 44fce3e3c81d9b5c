"""The few RaftQ HTTP calls the benchmark makes, each with a timeout and a status check.

The benchmark talks plain HTTP (not the ``raftq`` client) so that a row measures exactly one
request per step: the client's batching, buffering and retries would blur that. The measured
requests go through ``LightClient`` (urllib3 + orjson, as RaftQ's own hops): ``requests``
costs ~0.3 ms of CPU per call, on the same two cores as the servers it measures. Setup calls
(topics, leaders, offsets) use ``requests`` (``credentials.client_session``).

Every call carries an API key (``Authorization: Bearer``), as a client's does: the measured
rows include the cost of checking it (never the node token, which skips the key check).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import orjson
import requests
import urllib3

from stress_tests.polling import poll_until

REQUEST_TIMEOUT_S = 30.0
"""Per request; above the servers' own 10 s component timeout so their errors reach us."""
ADMIN_TIMEOUT_S = 30.0
LEADERS_WAIT_S = 60.0
UNAVAILABLE_CODE = 50304
"""``protocol.errors.ErrorCode.UNAVAILABLE``, as a client sees it on the wire."""
VALUE = "x" * 100
"""Every produced message: 100 bytes (plus a short key where the scenario routes by key)."""


class RequestFailedError(RuntimeError):
    """An answer other than the one expected (the row counts it as an error)."""


def expect(response: requests.Response, status: int) -> Any:
    """The JSON body when the status is the expected one; ``RequestFailedError`` otherwise."""
    if response.status_code != status:
        raise RequestFailedError(f"{response.status_code}: {response.text[:120]}")
    return response.json()


def post(session: requests.Session, url: str, body: dict[str, Any], status: int = 201) -> Any:
    with session.post(url, json=body, timeout=REQUEST_TIMEOUT_S) as response:
        return expect(response, status)


def get(session: requests.Session, url: str, params: dict[str, str | int]) -> Any:
    with session.get(url, params=params, timeout=REQUEST_TIMEOUT_S) as response:
        return expect(response, 200)


class LightClient:
    """One thread's client for measured requests: one kept-alive connection per host, the
    ``credentials`` (headers: ``credentials.bearer`` of an API key, or a node's) on every
    request, built once, not per request."""

    def __init__(self, credentials: Mapping[str, str]) -> None:
        timeout = urllib3.Timeout(total=REQUEST_TIMEOUT_S)
        self._pool = urllib3.PoolManager(num_pools=8, maxsize=1, retries=False, timeout=timeout)
        self._headers = dict(credentials)
        self._json_headers = {**self._headers, "Content-Type": "application/json"}

    def post(self, url: str, body: dict[str, Any], status: int = 201) -> Any:
        answer = self._pool.request(
            "POST", url, body=orjson.dumps(body), headers=self._json_headers
        )
        return _expect_light(answer, status)

    def get(self, url: str, params: dict[str, str | int]) -> Any:
        answer = self._pool.request("GET", f"{url}?{urlencode(params)}", headers=self._headers)
        return _expect_light(answer, 200)

    def close(self) -> None:
        self._pool.clear()


def _expect_light(answer: urllib3.BaseHTTPResponse, status: int) -> Any:
    if answer.status != status:
        raise RequestFailedError(f"{answer.status}: {answer.data[:120]!r}")
    return orjson.loads(answer.data)


def new_id() -> str:
    return uuid.uuid4().hex


def partitions(session: requests.Session, lb: str, topic: str) -> list[dict[str, Any]]:
    """The manager's view of a topic's partitions: replicas with ``address`` and
    ``is_leader``."""
    with session.get(f"{lb}/partitions", params={"topic": topic}, timeout=ADMIN_TIMEOUT_S) as r:
        body = expect(r, 200)
    found = body.get("partitions") if isinstance(body, dict) else None
    return [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []


def leader_address(session: requests.Session, lb: str, topic: str, partition_id: int) -> str | None:
    """HTTP address of the broker the managers see leading the partition, if any."""
    for part in partitions(session, lb, topic):
        if part.get("partition_id") == partition_id:
            for replica in part.get("replicas", []):
                if replica.get("is_leader") is True and isinstance(replica.get("address"), str):
                    return str(replica["address"])
    return None


def create_topic(session: requests.Session, lb: str, name: str, partition_count: int) -> None:
    """Create the topic, then wait until the managers see a leader for every partition, so
    no scenario measures an election. Right after a broker restart the managers may answer
    503 (no leader yet, or "recorded but not yet hosted": creation then resumes in the
    background), so both steps retry until ``LEADERS_WAIT_S``."""
    body = {"name": name, "partitions": partition_count}

    def recorded() -> bool:
        try:
            with session.post(f"{lb}/topics", json=body, timeout=ADMIN_TIMEOUT_S) as response:
                # 409: an earlier attempt recorded it; 503 50304: recorded, still being placed.
                if response.status_code in (201, 409):
                    return True
                return bool(response.json().get("error_code") == UNAVAILABLE_CODE)
        except (requests.RequestException, ValueError):
            return False

    def led() -> bool:
        try:
            return all(leader_address(session, lb, name, p) for p in range(partition_count))
        except (requests.RequestException, ValueError, RequestFailedError):
            return False

    deadline_s = time.monotonic() + LEADERS_WAIT_S
    poll_until(recorded, LEADERS_WAIT_S, f"topic {name} recorded", period_s=0.5)
    wait_s = max(1.0, deadline_s - time.monotonic())
    poll_until(led, wait_s, f"a leader for every partition of {name}", period_s=0.2)


def end_offset(session: requests.Session, lb: str, topic: str, partition_id: int) -> int:
    """The partition's end offset, asked of its leader broker."""
    address = leader_address(session, lb, topic, partition_id)
    if address is None:
        raise RequestFailedError(f"no leader for {topic}/{partition_id}")
    with session.get(f"{address}/partitions", timeout=ADMIN_TIMEOUT_S) as response:
        body = expect(response, 200)
    for part in body.get("partitions", []):
        if (part.get("topic"), part.get("partition_id")) == (topic, partition_id):
            return int(part["end_offset"])
    raise RequestFailedError(f"{address} does not host {topic}/{partition_id}")
