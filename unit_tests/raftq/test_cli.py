"""The ``raftq`` command line: parsing, where the URL comes from, and the client commands
against a scripted fake of the load balancer."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from protocol.node_auth import authority, node_key, parse_signature, signature_holds
from raftq.cli import (
    DEFAULT_DIR,
    Context,
    UsageError,
    build_parser,
    main,
    plugins,
    resolve_url,
    run,
)
from raftq.client_limits import ClientLimits
from raftq.profile import PROFILE_FILE, ClientProfile
from unit_tests.raftq.fake_service import FakeService


@pytest.mark.parametrize(
    "argv",
    [
        ["topic", "create"],
        ["topic", "create", "t", "--partitions", "0"],
        ["produce"],
        ["consume", "--topic", "t", "--max-messages", "-1"],
        ["topic", "list", "--url", "u", "--dir", "d"],
        ["nonsense"],
    ],
)
def test_bad_command_lines_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2


def _profile(directory: Path, url: str, api_key: str | None = None) -> None:
    """The client profile ``raftq cluster up`` writes in ``directory``."""
    directory.mkdir(exist_ok=True)
    (directory / PROFILE_FILE).write_text(json.dumps(ClientProfile(url, api_key).to_json()))


def test_url_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path, "http://from-dir")
    assert resolve_url("http://explicit/", str(tmp_path), "http://env") == "http://explicit"
    assert resolve_url(None, str(tmp_path), "http://env") == "http://from-dir"
    assert resolve_url(None, None, "http://env/") == "http://env"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="RAFTQ_URL"):
        resolve_url(None, None, None)
    _profile(tmp_path / DEFAULT_DIR, "http://dflt")
    assert resolve_url(None, None, None) == "http://dflt"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[]", "not a JSON object"),
        ('{"api_key": "k"}', "it has no url"),
        ('{"url": "http://h:1", "api_key": 7}', "api_key and tls_ca must be strings or null"),
        ('{"url": "http://h:1", "node_cert": ["c"]}', "node_cert must be [certificate, key]"),
        ("{", "cannot read"),
    ],
)
def test_a_bad_profile_is_a_usage_error_naming_it(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / PROFILE_FILE).write_text(text)
    code, out, err = _run(["topic", "list", "--dir", str(tmp_path)])
    assert (code, out) == (2, "") and why in err and str(tmp_path / PROFILE_FILE) in err


def test_a_wrong_url_is_a_one_line_usage_error_at_once() -> None:
    for url in ("nonsense", "127.0.0.1:17100", "ftp://host:1", "http://"):
        code, out, err = _run(["topic", "list", "--url", url])
        assert code == 2 and out == "", url
        assert err.startswith("raftq: --url must be http(s)://host:port") and err.count("\n") == 1
    with pytest.raises(UsageError, match="RAFTQ_URL must be"):
        resolve_url(None, None, "localhost")


TEST_KEY = "rq_0123456789ab_" + "k" * 43


def _run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    context = Context(None, TEST_KEY, None, io.StringIO(stdin), out, err)
    code = run(build_parser().parse_args(argv), context)
    return code, out.getvalue(), err.getvalue()


def _offsets(messages: object) -> list[dict[str, int]]:
    """A produce answer: one offset in partition 0 for each message sent."""
    assert isinstance(messages, list)
    return [{"partition_id": 0, "offset": i} for i in range(len(messages))]


def test_produce_from_arguments_and_stdin(service: FakeService) -> None:
    service.default(
        "POST",
        "/logs",
        lambda p: (201, {"offsets": _offsets(p["messages"])}),
    )
    code, out, _ = _run(["produce", "--url", service.url, "--topic", "t", "--key", "k", "a", "b"])
    assert code == 0
    assert out.splitlines() == [
        '{"partition_id": 0, "offset": 0}',
        '{"partition_id": 0, "offset": 1}',
    ]
    assert service.calls("POST", "/logs")[0]["messages"] == [
        {"message": "a", "key": "k"},
        {"message": "b", "key": "k"},
    ]
    code, out, _ = _run(["produce", "--url", service.url, "--topic", "t"], stdin="x\ny\n")
    assert code == 0 and len(out.splitlines()) == 2
    assert service.calls("POST", "/logs")[1]["messages"] == [{"message": "x"}, {"message": "y"}]
    headed = ["produce", "--url", service.url, "--topic", "t", "--header", "a=1=2", "z"]
    assert _run([*headed, "--header", "b="])[0] == 0
    assert service.calls("POST", "/logs")[2]["messages"] == [
        {"message": "z", "headers": {"a": "1=2", "b": ""}}
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["produce", "--topic", "t", "--header", "novalue"])


def test_consume_prints_json_lines(service: FakeService) -> None:
    message = {"topic": "t", "partition_id": 0, "offset": 3, "key": None, "message": "m"}
    message["headers"] = {"trace": "t1"}
    message["timestamp_ms"] = 9
    service.default("GET", "/logs", lambda _p: (200, {"messages": [message]}))
    code, out, err = _run(["consume", "--url", service.url, "--topic", "t", "--partition", "0"])
    assert code == 0 and json.loads(out) == message
    assert "consumer_id c-1" in err
    argv = ["consume", "--url", service.url, "--topic", "t", "--partition", "0"]
    assert _run([*argv, "--output", "table"])[1] == "0\t3\t\tm\n"


def test_consume_follow_keeps_popping_until_interrupted(service: FakeService) -> None:
    """Pops until an empty answer, waits, pops again, ... until Ctrl-C (here raised by the
    second wait): every message printed once, exit 0."""

    def message(offset: int) -> dict[str, object]:
        body = {"topic": "t", "partition_id": 0, "offset": offset, "key": None}
        return {**body, "message": f"m{offset}", "timestamp_ms": 9}

    pages = [[message(o) for o in offsets] for offsets in ([0, 1], [], [2], [])]
    service.default("GET", "/logs", lambda _p: (200, {"messages": pages.pop(0) if pages else []}))
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            raise KeyboardInterrupt

    out, err = io.StringIO(), io.StringIO()
    argv = ["consume", "--url", service.url, "--topic", "t", "--partition", "0", "--follow"]
    context = Context(None, TEST_KEY, None, io.StringIO(), out, err, sleep)
    assert run(build_parser().parse_args(argv), context) == 0
    assert [json.loads(line)["offset"] for line in out.getvalue().splitlines()] == [0, 1, 2]
    assert waits == [ClientLimits().follow_idle_poll_s] * 2


def test_produce_shows_a_progress_bar_with_the_total_of_a_file_on_stdin(
    service: FakeService, tmp_path: Path
) -> None:
    def offsets(params: dict[str, object]) -> tuple[int, dict[str, object]]:
        messages = params["messages"]
        assert isinstance(messages, list)
        return 201, {"offsets": [{"partition_id": 0, "offset": i} for i in range(len(messages))]}

    service.default("POST", "/logs", offsets)
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"m{i}\n" for i in range(2_499)) + "last, no newline")
    argv = ["produce", "--url", service.url, "--topic", "t", "--progress"]
    out, err = io.StringIO(), io.StringIO()
    with lines.open() as stdin:
        assert (
            run(build_parser().parse_args(argv), Context(None, TEST_KEY, None, stdin, out, err))
            == 0
        )
    assert len(out.getvalue().splitlines()) == 2_500
    final = err.getvalue().split("\r")[-1]
    assert "produced" in final and "2500/2500" in final and "msg/s" in final, final
    # Without --progress and not on a terminal: no bar.
    assert _run(["produce", "--url", service.url, "--topic", "t", "a"])[2] == ""


def test_consume_follow_counts_against_the_lag_it_started_with(service: FakeService) -> None:
    page = [
        {"topic": "t", "partition_id": 0, "offset": o, "key": None, "message": "m"}
        for o in range(3)
    ]
    for record in page:
        record["timestamp_ms"] = 9
    pages = [page, []]
    service.default("GET", "/logs", lambda _p: (200, {"messages": pages.pop(0) if pages else []}))
    lag = {"topic": "t", "consumer_id": "c-1", "offset": 0, "end_offset": 4, "lag_s": 1.0}
    other = {**lag, "partition_id": 0, "consumer_id": "someone-else", "lag_messages": 50}
    body = {
        "consumers": [{**lag, "partition_id": 0, "lag_messages": 4}, other],
        "unavailable_partitions": [],
    }
    service.default("GET", "/lag", lambda _p: (200, body))

    def interrupt(_seconds: float) -> None:
        raise KeyboardInterrupt

    out, err = io.StringIO(), io.StringIO()
    argv = ["consume", "--url", service.url, "--topic", "t", "--follow", "--progress"]
    context = Context(None, TEST_KEY, None, io.StringIO(), out, err, interrupt)
    assert run(build_parser().parse_args(argv), context) == 0, err.getvalue()
    final = err.getvalue().split("\r")[-1]
    assert "consumed" in final and "3/4" in final, final


def test_topic_commands_and_errors(service: FakeService) -> None:
    service.default(
        "GET",
        "/topics",
        lambda _p: (200, {"topics": [{"name": "t", "partitions": 2, "active_partitions": 2}]}),
    )
    assert _run(["topic", "list", "--url", service.url])[1] == "t\t2 partitions\n"
    listed = _run(["topic", "list", "--url", service.url, "--output", "json"])[1]
    assert json.loads(listed) == {"name": "t", "partition_count": 2, "active_partition_count": 2}
    service.default("POST", "/topics", lambda _p: (409, {"error_code": 40901, "message": "exists"}))
    code, _, err = _run(["topic", "create", "t", "--url", service.url])
    assert code == 1 and "exists" in err


def test_main_reads_raftq_url(service: FakeService, monkeypatch: pytest.MonkeyPatch) -> None:
    service.default("GET", "/topics", lambda _p: (200, {"topics": []}))
    monkeypatch.setenv("RAFTQ_URL", service.url)
    monkeypatch.setenv("RAFTQ_API_KEY", TEST_KEY)
    assert main(["topic", "list"]) == 0
    assert service.authorizations() == {f"Bearer {TEST_KEY}"}


def test_the_api_key_comes_from_a_file_the_environment_or_the_cluster_file(
    tmp_path: Path, service: FakeService
) -> None:
    service.default("GET", "/topics", lambda _p: (200, {"topics": []}))
    key_file = tmp_path / "key"
    key_file.write_text("rq_fromfile\n")
    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(
        ["topic", "list", "--url", service.url, "--api-key-file", str(key_file)]
    )
    assert run(args, Context(None, TEST_KEY, None, io.StringIO(), out, err)) == 0
    assert (
        run(
            build_parser().parse_args(["topic", "list", "--url", service.url]),
            Context(None, None, None, io.StringIO(), out, err),
        )
        == 2
    )
    assert "RAFTQ_API_KEY" in err.getvalue()
    _profile(tmp_path, service.url, "rq_fromdir")
    args = build_parser().parse_args(["topic", "list", "--dir", str(tmp_path)])
    assert run(args, Context(None, None, None, io.StringIO(), out, err)) == 0
    assert service.authorizations() == {"Bearer rq_fromfile", "Bearer rq_fromdir"}


def test_key_commands(service: FakeService) -> None:
    info: dict[str, object] = {"key_id": "0123456789ab", "role": "producer", "topics": ["t"]}
    info |= {"name": "n", "created_ms": 1}
    service.default("POST", "/keys", lambda p: (201, {"key": "rq_new", **info}))
    service.default("GET", "/keys", lambda _p: (200, {"keys": [info]}))
    service.default("POST", "/keys/revoke", lambda p: (200, {"key_id": p["key_id"]}))
    code, out, err = _run(
        ["key", "create", "--url", service.url, "--role", "producer", "--topic", "t", "--name", "n"]
    )
    assert code == 0 and out == "rq_new\n" and "shown once" in err
    assert service.calls("POST", "/keys") == [{"role": "producer", "topics": ["t"], "name": "n"}]
    assert _run(["key", "list", "--url", service.url])[1] == "0123456789ab\tproducer\tt\tn\n"
    assert _run(["key", "revoke", "0123456789ab", "--url", service.url])[0] == 0
    assert service.calls("POST", "/keys/revoke") == [{"key_id": "0123456789ab"}]


def test_the_first_admin_key_is_asked_for_as_a_node_and_without_a_name(
    service: FakeService, tmp_path: Path
) -> None:
    service.default("POST", "/keys", lambda p: (201, {"key": "rq_first", **_ADMIN_KEY_INFO}))
    service.default("GET", "/raft_status", lambda p: (200, {"is_leader": True}))
    secret = tmp_path / "secret"
    secret.write_text("s" * 64 + "\n")
    argv = ["key", "create", "--role", "admin", "--secret-file", str(secret), "--url", service.url]
    out, err = io.StringIO(), io.StringIO()
    context = Context(None, None, None, io.StringIO(), out, err)  # no API key anywhere
    assert run(build_parser().parse_args(argv), context) == 0, err.getvalue()
    assert out.getvalue() == "rq_first\n"
    assert service.calls("POST", "/keys") == [{"role": "admin", "topics": []}]  # no empty name
    (sent,) = service.signed("POST", "/keys")
    signature = parse_signature(sent.node_signature or "")
    assert signature is not None and signature.node == "tool-cli"
    assert signature.to == authority(service.url)
    key = node_key("s" * 64, "tool-cli")
    assert signature_holds(key, signature, "POST", sent.target, sent.body)
    assert sent.authorization is None  # no API key, and nothing static
    (asked,) = service.signed("GET", "/raft_status")  # who leads: asked with no credential
    assert asked.node_signature is None and asked.authorization is None


_ADMIN_KEY_INFO = {
    "key_id": "0123456789ab",
    "role": "admin",
    "topics": [],
    "name": "",
    "created_ms": 1,
}


def test_the_bash_completion_completes_commands_actions_and_options() -> None:
    code, script, _ = _run(["completion", "bash"])
    assert code == 0
    probe = "\n".join(
        [
            script,
            'for line in "raftq top" "raftq topic d" "raftq consume --fo" "raftq lag --ou"; do',
            "  COMP_WORDS=($line); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _raftq",
            '  echo "${COMPREPLY[*]}"',
            "done",
        ]
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["topic", "describe", "--follow", "--output"]


def test_group_describe_prints_the_figures_per_partition(service: FakeService) -> None:
    figures = {
        "topic": "t",
        "group": "g",
        "offset": 4,
        "end_offset": 9,
        "lag_messages": 5,
        "lag_s": 1.25,
        "in_flight": 2,
        "dead_letters_pending": 1,
        "dead_lettered": 3,
    }
    group = {
        "topic": "t",
        "group": "g",
        "visibility_timeout_ms": 30_000,
        "max_deliveries": 4,
        "dead_letter_topic": "t-dead",
        "ordering": "none",
        "partitions": [{**figures, "partition_id": 0}, {**figures, "partition_id": 1}],
    }
    service.default(
        "GET", "/groups", lambda _p: (200, {"groups": [group], "unavailable_partitions": []})
    )
    code, out, _ = _run(["group", "describe", "g", "--topic", "t", "--url", service.url])
    assert code == 0
    lines = out.splitlines()
    assert "max deliveries 4" in lines[0] and "dead letters t-dead" in lines[0]
    assert lines[1].split("\t")[0] == "partition"
    assert lines[2:] == ["0\t4\t9\t5\t1.2\t2\t1\t3", "1\t4\t9\t5\t1.2\t2\t1\t3"]
    code, _, err = _run(["group", "describe", "other", "--topic", "t", "--url", service.url])
    assert code == 1 and "no consumer group 'other'" in err
    answered_one = {**group, "partitions": [{**figures, "partition_id": 1}]}
    answer = {"groups": [answered_one], "unavailable_partitions": [0]}
    service.default("GET", "/groups", lambda _p: (200, answer))
    code, out, err = _run(["group", "describe", "g", "--topic", "t", "--url", service.url])
    # The partition whose leader did not answer is shown as unknown, not left out.
    assert code == 1 and "partition(s) 0" in err
    assert out.splitlines()[2:] == ["0" + "\t-" * 7, "1\t4\t9\t5\t1.2\t2\t1\t3"]


OPERATIONS = (
    ["cluster", "up", "--dir", "d"],
    ["node", "run", "--config", "f.toml"],
    ["broker", "list"],
    ["manager", "add", "--help"],
)


@pytest.mark.parametrize("argv", OPERATIONS)
def test_without_the_server_an_operations_command_says_how_to_get_it(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    code, out, err = _run(argv)
    assert (code, out) == (2, "")
    assert err == (
        f"raftq: `raftq {argv[0]}` is an operations command: it comes with the server "
        "distribution, raftq-server: from a RaftQ checkout, `pip install ./server` (or run "
        "scripts/cluster.sh for a local cluster)\n"
    )
    assert f"(not installed: {argv[0]} is the server's)" in build_parser().format_help()


class _BrokenEntryPoint:
    value = "ops.cli:COMMAND_GROUP"

    def load(self) -> object:
        raise ImportError("No module named 'pysyncobj'")


def test_a_server_that_fails_to_load_is_named_and_the_client_still_works(
    service: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugins, "entry_points", lambda group: [_BrokenEntryPoint()])
    code, _, err = _run(["cluster", "status"])
    assert code == 2
    assert err.rstrip().endswith(
        "(the server's commands failed to load: ops.cli:COMMAND_GROUP: ImportError: "
        "No module named 'pysyncobj')"
    )
    service.default("GET", "/topics", lambda _p: (200, {"topics": []}))
    assert _run(["topic", "list", "--url", service.url])[0] == 0


def test_the_servers_commands_plug_in_by_entry_point() -> None:
    """This environment has the server installed (scripts/setup.sh): its group is found."""
    groups, problems = plugins.installed_groups()
    assert problems == []
    assert {name for g in groups for name in g.handlers} >= set(plugins.OPERATIONS_COMMANDS)
