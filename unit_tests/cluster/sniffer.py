"""Reads HTTP requests off the loopback interface, as someone on the network would: every TCP
segment to or from a range of ports (a test cluster's), captured with a raw packet socket
(``AF_PACKET``: needs ``CAP_NET_RAW``), each connection's client-to-server bytes put back in
order and cut into requests. Nothing here talks to the cluster.

Threads: one capturing thread between ``__enter__`` and ``__exit__``.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

_ETH_P_ALL = 0x0003
_ETH_P_IP = b"\x08\x00"
_PACKET_HOST = 0
"""Loopback shows every packet twice (sent, then received): the received copy is kept."""
_RECEIVE_BUFFER_BYTES = 16 * 1024 * 1024
_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class Captured:
    """One HTTP request read off the wire."""

    client_port: int
    server_port: int
    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)


def can_capture() -> bool:
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(_ETH_P_ALL)).close()
    except (PermissionError, AttributeError, OSError):
        return False
    return True


class LoopbackSniffer:
    def __init__(self, ports: range) -> None:
        self._ports = ports
        self._segments: dict[tuple[int, int], dict[int, bytes]] = {}
        """(client port, server port) -> sequence number -> payload."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._socket = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(_ETH_P_ALL))
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER_BYTES)
        self._socket.bind(("lo", 0))
        self._socket.settimeout(_POLL_S)
        self._thread = threading.Thread(target=self._run, name="sniffer", daemon=True)

    def __enter__(self) -> LoopbackSniffer:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(10.0)
        self._socket.close()

    def requests(self) -> list[Captured]:
        """Every whole request captured so far, connection by connection, in order."""
        with self._lock:
            streams = {key: dict(parts) for key, parts in self._segments.items()}
        found: list[Captured] = []
        for (client, server), parts in streams.items():
            found += _requests(client, server, _in_order(parts))
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                frame, address = self._socket.recvfrom(65_535)
            except TimeoutError:
                continue
            except OSError:
                return
            if address[2] == _PACKET_HOST:
                self._take(frame)

    def _take(self, frame: bytes) -> None:
        if frame[12:14] != _ETH_P_IP:
            return
        ip = frame[14:]
        if len(ip) < 20 or ip[9] != socket.IPPROTO_TCP:
            return
        header_bytes = (ip[0] & 0x0F) * 4
        tcp = ip[header_bytes : int.from_bytes(ip[2:4], "big")]
        source, destination = int.from_bytes(tcp[0:2], "big"), int.from_bytes(tcp[2:4], "big")
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if not payload or destination not in self._ports:
            return  # only what clients send to the cluster's servers
        sequence = int.from_bytes(tcp[4:8], "big")
        with self._lock:
            self._segments.setdefault((source, destination), {})[sequence] = payload


def _in_order(parts: dict[int, bytes]) -> bytes:
    """The stream from its segments (a retransmitted one counted once)."""
    data = bytearray()
    end: int | None = None
    for sequence in sorted(parts):
        payload = parts[sequence]
        if end is not None and sequence < end:
            payload = payload[end - sequence :]  # overlaps what is there
        data += payload
        end = max(end or 0, sequence + len(parts[sequence]))
    return bytes(data)


def _requests(client: int, server: int, data: bytes) -> Iterator[Captured]:
    while data:
        head_end = data.find(b"\r\n\r\n")
        if head_end < 0:
            return
        lines = data[:head_end].decode("latin-1").split("\r\n")
        first = lines[0].split(" ")
        if len(first) != 3 or not first[0].isalpha() or not first[2].startswith("HTTP/"):
            data = data[head_end + 4 :]  # the capture began inside a request: skip it
            continue
        method, target, _version = first
        headers = tuple(
            (name.strip(), value.strip())
            for name, _, value in (line.partition(":") for line in lines[1:])
        )
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        body = data[head_end + 4 : head_end + 4 + length]
        if len(body) < length:
            return  # cut off by the end of the capture
        yield Captured(client, server, method, target, headers, body)
        data = data[head_end + 4 + length :]
