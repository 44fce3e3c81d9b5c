"""JsonHttpClient: an answer broken off mid-way is "no answer, outcome unknown", never an
internal error (found by the stress checker: a broker killed while answering a produce)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from protocol.deadline import Deadline
from protocol.limits import Limits
from protocol.node_auth import NodeCredential
from runtime.http_client import JsonHttpClient, NoAnswerError, PeerLink


@pytest.fixture
def truncating_server() -> Iterator[str]:
    """Answers every request with headers promising 74 body bytes, sends 0, and closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                connection.sendall(
                    b"HTTP/1.1 201 CREATED\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 74\r\n\r\n"
                )

    thread = threading.Thread(target=serve)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    listener.close()


def test_a_broken_off_answer_is_an_unknown_outcome(truncating_server: str) -> None:
    client = JsonHttpClient(
        Limits(http_retries_max=2), PeerLink(NodeCredential.of("s" * 16, "manager-1"), None)
    )
    with pytest.raises(NoAnswerError) as caught:
        client.call("POST", f"{truncating_server}/logs", {"x": 1}, idempotent=True)
    assert caught.value.refused is False
    assert caught.value.status == 503


def test_nothing_is_sent_once_the_callers_deadline_has_passed(truncating_server: str) -> None:
    client = JsonHttpClient(Limits(), PeerLink(None, None))
    with pytest.raises(NoAnswerError) as gone:
        client.call("POST", truncating_server, {"a": 1}, deadline=Deadline(at_s=0.0))
    assert gone.value.refused and gone.value.code.proves_nothing_done
    client.close()
