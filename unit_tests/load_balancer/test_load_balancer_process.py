"""The load balancer as a real process (``python -m load_balancer``) in front of fake managers
served from threads of this test process."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from unit_tests.load_balancer.fake_manager import FakeManager
from unit_tests.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 10.0


@dataclass
class Setup:
    url: str
    managers: list[FakeManager]
    session: requests.Session

    def get(self, path: str, **kwargs: object) -> requests.Response:
        return self.session.get(self.url + path, timeout=REQUEST_TIMEOUT_S, **kwargs)  # type: ignore[arg-type]

    def wait_for_leader(self, manager: FakeManager, timeout_s: float = 5.0) -> float:
        """Seconds until the load balancer names ``manager`` as leader."""
        started_s = time.monotonic()
        while time.monotonic() - started_s < timeout_s:
            if self.get("/").json()["leader_address"] == manager.url:
                return time.monotonic() - started_s
            time.sleep(0.02)
        raise AssertionError(f"the load balancer never chose {manager.url}")


def start_load_balancer(
    tmp_path: Path, managers: list[FakeManager], limits: list[str]
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "load_balancer", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--managers", ",".join(m.url for m in managers)]
    for limit in limits:
        argv += ["--limit", limit]
    with open(tmp_path / f"lb-{port}.log", "ab") as log:
        process = subprocess.Popen(
            argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    deadline_s = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline_s:
        if process.poll() is not None:
            raise AssertionError((tmp_path / f"lb-{port}.log").read_text())
        try:
            requests.get(url + "/", timeout=1.0).close()
            return process, url
        except requests.ConnectionError:
            time.sleep(0.1)
    process.kill()
    process.wait()
    raise AssertionError("the load balancer did not start")


@pytest.fixture
def make_setup(tmp_path: Path) -> Iterator[Callable[..., Setup]]:
    cleanups: list[Callable[[], None]] = []

    def make(*limits: str) -> Setup:
        managers = [FakeManager(i) for i in (1, 2, 3)]
        cleanups.extend(m.stop for m in managers)
        managers[0].lead(term=1)
        for follower in managers[1:]:
            follower.follow(managers[0], term=1)
        process, url = start_load_balancer(tmp_path, managers, list(limits))
        cleanups.append(lambda: _stop(process))
        session = requests.Session()
        cleanups.append(session.close)
        setup = Setup(url, managers, session)
        setup.wait_for_leader(managers[0])
        return setup

    yield make
    for cleanup in reversed(cleanups):
        cleanup()


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_forwards_method_path_query_body_status_and_headers(
    make_setup: Callable[..., Setup],
) -> None:
    setup = make_setup()
    leader = setup.managers[0]
    response = setup.session.post(
        setup.url + "/topics/a%20b?x=1&y=a%2Fb",
        data=b'{"name": "t"}',
        headers={"Content-Type": "application/json", "X-Custom": "42", "X-Reply-Status": "409"},
        timeout=REQUEST_TIMEOUT_S,
    )
    assert response.status_code == 409
    assert response.headers["X-Echo"] == "yes"
    assert response.headers["Retry-After"] == "7"
    echo = response.json()
    assert echo["manager"] == leader.url
    assert echo["method"] == "POST"
    assert echo["path"] == "/topics/a b"
    assert echo["query"] == "x=1&y=a%2Fb"
    assert echo["body"] == '{"name": "t"}'
    assert echo["headers"]["x-custom"] == "42"
    assert echo["headers"]["content-type"] == "application/json"
    assert echo["headers"]["content-length"] == str(len('{"name": "t"}'))
    assert echo["headers"]["host"] == leader.url.removeprefix("http://")
    for method in ("PUT", "DELETE", "PATCH"):
        answer = setup.session.request(method, setup.url + "/x", timeout=REQUEST_TIMEOUT_S)
        assert answer.json()["method"] == method
    assert setup.session.post(setup.url + "/", timeout=REQUEST_TIMEOUT_S).json()["path"] == "/"


def test_own_endpoints(make_setup: Callable[..., Setup]) -> None:
    setup = make_setup()
    health = setup.get("/").json()
    assert health == {
        "status": "ok",
        "role": "load_balancer",
        "leader_address": setup.managers[0].url,
    }
    status = setup.get("/raft_status").json()
    assert status["leader_address"] == setup.managers[0].url
    assert [m["address"] for m in status["managers"]] == [m.url for m in setup.managers]
    assert [m["is_leader"] for m in status["managers"]] == [True, False, False]
    assert all(m["reachable"] and m["term"] == 1 for m in status["managers"])
    assert "raftq_lb_forwarded_total" not in setup.get("/metrics").text
    setup.get("/topics")
    assert 'raftq_lb_forwarded_total{status="200"} 1' in setup.get("/metrics").text


def test_no_leader_answers_503_with_reason_and_retry_after(
    make_setup: Callable[..., Setup],
) -> None:
    setup = make_setup()
    first, second, third = setup.managers
    first.follow(None, term=2)
    second.follow(None, term=2)
    third.stop()
    deadline_s = time.monotonic() + 5.0
    while setup.get("/").json()["leader_address"] is not None and time.monotonic() < deadline_s:
        time.sleep(0.02)
    response = setup.get("/topics")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    body = response.json()
    assert body["error_code"] == 50301
    assert body["message"].startswith("no manager leader: ")
    assert f"{third.url} unreachable (" in body["message"]
    assert f"{first.url} is not the leader (term 2" in body["message"]


def test_retries_once_on_the_new_leader_after_not_leader(make_setup: Callable[..., Setup]) -> None:
    setup = make_setup()
    old, new, _ = setup.managers
    old.hand_over_to = new
    response = setup.get("/logs?consumer_id=c1&max_messages=2")
    assert response.status_code == 200
    assert response.json()["manager"] == new.url
    assert old.seen == [("GET", "/logs?consumer_id=c1&max_messages=2")]
    assert new.seen == [("GET", "/logs?consumer_id=c1&max_messages=2")]
    assert 'raftq_lb_retries_total{reason="not_leader"} 1' in setup.get("/metrics").text


def test_retries_on_the_new_leader_when_the_old_one_refuses(
    make_setup: Callable[..., Setup],
) -> None:
    # A poll period far longer than the test: only the refused connection makes it look again.
    setup = make_setup("manager_poll_period_s=600")
    old, new, third = setup.managers
    old.stop()
    new.lead(term=2)
    third.follow(new, term=2)
    response = setup.session.post(setup.url + "/producers", json={"topic": "t"}, timeout=10)
    assert response.status_code == 200
    assert response.json()["manager"] == new.url
    assert 'raftq_lb_retries_total{reason="connect_failed"} 1' in setup.get("/metrics").text


def test_a_timeout_after_sending_is_503_unavailable_and_not_retried(
    make_setup: Callable[..., Setup],
) -> None:
    setup = make_setup(
        "http_timeout_s=0.8",
        "raft_commit_timeout_s=0.3",
        "raft_leader_wait_s_max=0.3",
        "group_commit_queue_wait_s_max=0.1",
        "http_connect_timeout_s=0.2",
    )
    leader = setup.managers[0]
    response = setup.session.post(setup.url + "/slow?sleep_s=2", json={}, timeout=10)
    assert response.status_code == 503
    body = response.json()
    assert body["error_code"] == 50304
    assert "may or may not have taken effect" in body["message"]
    assert leader.seen == [("POST", "/slow?sleep_s=2")]
    assert all(not m.seen for m in setup.managers[1:])


def test_routes_to_the_new_leader_within_a_second_of_the_election(
    make_setup: Callable[..., Setup],
) -> None:
    setup = make_setup()
    old, new, third = setup.managers
    old.stop()
    new.lead(term=2)
    third.follow(new, term=2)
    assert setup.wait_for_leader(new) < 1.0
    assert setup.get("/topics").json()["manager"] == new.url


def test_the_clients_deadline_is_forwarded_less_what_was_used(
    make_setup: Callable[..., Setup],
) -> None:
    setup = make_setup()
    given = setup.session.post(
        setup.url + "/x", headers={"X-RaftQ-Timeout-Ms": "5000"}, timeout=REQUEST_TIMEOUT_S
    ).json()
    assert 0 < int(given["headers"]["x-raftq-timeout-ms"]) <= 5000 - 200
    absent = setup.session.post(setup.url + "/x", timeout=REQUEST_TIMEOUT_S).json()
    assert 0 < int(absent["headers"]["x-raftq-timeout-ms"]) <= (10.0 + 1.0 - 0.2) * 1000
    gone = setup.session.post(
        setup.url + "/x", headers={"X-RaftQ-Timeout-Ms": "0"}, timeout=REQUEST_TIMEOUT_S
    )
    assert gone.status_code == 503 and gone.json()["error_code"] == 50307


def test_the_absolute_deadline_is_read_and_sent_as_this_hop_computed_it(
    make_setup: Callable[..., Setup],
) -> None:
    """The earlier of the two headers holds; what goes on is this hop's deadline in both
    forms (the client's copies are dropped), never the skew allowance it granted itself."""
    setup = make_setup()
    leader = setup.managers[0]
    sent_ms = int(time.time() * 1000)
    absolute = {"X-RaftQ-Timeout-Ms": "60000", "X-RaftQ-Deadline-Ms": str(sent_ms + 3_000)}
    given = setup.session.post(setup.url + "/x", headers=absolute, timeout=REQUEST_TIMEOUT_S)
    headers = given.json()["headers"]
    assert int(headers["x-raftq-deadline-ms"]) == sent_ms + 3_000 - 200
    assert 0 < int(headers["x-raftq-timeout-ms"]) <= 3_000 + 1_000 - 200
    relative = {"X-RaftQ-Timeout-Ms": "2000", "X-RaftQ-Deadline-Ms": str(sent_ms + 60_000)}
    given = setup.session.post(setup.url + "/x", headers=relative, timeout=REQUEST_TIMEOUT_S)
    epoch_ms = int(given.json()["headers"]["x-raftq-deadline-ms"])
    assert sent_ms < epoch_ms <= int(time.time() * 1000) + 2_000 - 200
    passed = {"X-RaftQ-Timeout-Ms": "60000", "X-RaftQ-Deadline-Ms": str(sent_ms - 5_000)}
    gone = setup.session.post(setup.url + "/gone", headers=passed, timeout=REQUEST_TIMEOUT_S)
    assert gone.status_code == 503 and gone.json()["error_code"] == 50307
    assert ("POST", "/gone") not in leader.seen  # not forwarded
