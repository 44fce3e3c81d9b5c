"""A test's own HTTP listener that records every request it gets (an attacker's server):
what a cluster sends to an address someone else chose. Threads: one serving thread, and a
thread per connection (``ThreadingHTTPServer``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

Answer = Callable[["Received"], tuple[int, bytes]]
"""What the listener answers to a request: (status, JSON body)."""


@dataclass(frozen=True, slots=True)
class Received:
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header_names(self) -> set[str]:
        return {name.lower() for name, _ in self.headers}


def _empty_object(_request: Received) -> tuple[int, bytes]:
    return 200, b"{}"


class RecordingListener:
    """Listens on 127.0.0.1 (a free port), records each request and answers with
    ``answer``. Use as a context manager."""

    def __init__(self, answer: Answer = _empty_object) -> None:
        self.received: list[Received] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Received(
                    self.command,
                    self.path,
                    tuple(self.headers.items()),
                    self.rfile.read(length) if length else b"",
                )
                with lock:
                    received.append(request)
                status, body = answer(request)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._any()

            def do_POST(self) -> None:
                self._any()

            def do_PUT(self) -> None:
                self._any()

            def do_DELETE(self) -> None:
                self._any()

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the test reads ``received``

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="recording-listener", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> RecordingListener:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10.0)
