"""Node files: their shape is checked key by key, they become the role's command line, and a
deployment's files are checked against each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.node_config import (
    NodeConfigError,
    NodeFile,
    Peer,
    check_deployment,
    node_file_text,
    parse_node_file,
)

PEERS = (
    Peer(1, "http://10.0.0.1:17111", "10.0.0.1:17121"),
    Peer(2, "http://10.0.0.2:17111", "10.0.0.2:17121"),
    Peer(3, "http://10.0.0.3:17111", "10.0.0.3:17121"),
)


def _manager(i: int, peers: tuple[Peer, ...] = PEERS, **limits: str) -> str:
    body = {"role": "manager", "id": i, "host": f"10.0.0.{i}", "port": 17111}
    body.update(raft_port=17121, data_dir="data", secret_file="/etc/raftq/secret")
    return node_file_text(body, peers, limits)


def _broker(i: int, managers: list[str] | None = None, **limits: str) -> str:
    body = {"role": "broker", "id": i, "host": f"10.0.0.{i}", "port": 17131}
    body.update(raft_port_min=17200, raft_port_max=17299, data_dir="/var/lib/raftq")
    listed = [p.http_url for p in PEERS] if managers is None else managers
    body.update(managers=listed, secret_file="/etc/raftq/secret")
    return node_file_text(body, (), limits)


def _lb(managers: list[str]) -> str:
    return node_file_text(
        {"role": "load_balancer", "host": "10.0.0.1", "port": 17100, "managers": managers}
    )


def test_a_manager_file_becomes_its_command_line_with_paths_made_absolute() -> None:
    node = parse_node_file(_manager(2, flush_period_s="0.5"), "/etc/raftq/manager.toml")
    assert (node.role, node.node_id, node.name) == ("manager", 2, "manager 2")
    assert node.argv == [
        "--id", "2", "--host", "10.0.0.2", "--port", "17111", "--raft-port", "17121",
        "--peers",
        "1=http://10.0.0.1:17111@10.0.0.1:17121,2=http://10.0.0.2:17111@10.0.0.2:17121,"
        "3=http://10.0.0.3:17111@10.0.0.3:17121",
        "--data-dir", "/etc/raftq/data", "--secret-file", "/etc/raftq/secret",
        "--limit", "flush_period_s=0.5",
    ]  # fmt: skip


def test_broker_and_load_balancer_files_and_tls() -> None:
    text = _broker(1) + '\n[tls]\ncert = "node.pem"\nkey = "node-key.pem"\n'
    broker = parse_node_file(text, "/etc/raftq/broker.toml")
    assert "--db-url" not in broker.argv  # optional: the broker's SQLite default
    listed = broker.argv[broker.argv.index("--managers") + 1]
    assert listed == ",".join(p.http_url for p in PEERS)
    assert broker.argv[-4:] == [
        "--tls-cert", "/etc/raftq/node.pem", "--tls-key", "/etc/raftq/node-key.pem",
    ]  # fmt: skip
    lb = parse_node_file(_lb(["http://a:1", "http://b:1/"]), "lb.toml")
    assert lb.node_id is None
    assert lb.argv == [
        "--host",
        "10.0.0.1",
        "--port",
        "17100",
        "--managers",
        "http://a:1,http://b:1/",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("role = 'manger'", "role must be one of manager, broker, load_balancer; got 'manger'"),
        ("role = ", "not valid TOML"),
        (_broker(1) + "colour = 'red'\n", "unknown key 'colour' for a broker"),
        (_broker(1).replace("port = 17131", "port = '17131'"), "port must be a int, got str"),
        (_broker(1).replace("id = 1\n", ""), "missing key 'id'"),
        (_broker(1).replace("id = 1\n", "id = true\n"), "id must be a int, got bool"),
        (
            _broker(1) + "[limits]\nflush_period_s = 'fast'\n",
            "limit flush_period_s must be a number",
        ),
        (_broker(1) + "[tls]\nfile = 'x'\n", "[tls] takes only cert, key, ca"),
        (_manager(1).replace("raft_address", "raft_addr"), "peer 1 must have exactly"),
        (_manager(1, ()), "missing key 'peers'"),
        (_manager(1, ()) + "peers = []\n", "peers must list every manager"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_key(text: str, message: str) -> None:
    with pytest.raises(NodeConfigError) as refused:
        parse_node_file(text, "/etc/raftq/node.toml")
    assert str(refused.value).startswith("/etc/raftq/node.toml: ")
    assert message in str(refused.value)


def _files(*texts: tuple[str, str]) -> list[NodeFile]:
    return [parse_node_file(text, name) for name, text in texts]


def test_a_consistent_deployment_has_no_problems() -> None:
    files = _files(
        *((f"m{i}.toml", _manager(i)) for i in (1, 2, 3)),
        *((f"b{i}.toml", _broker(i, flush_period_s="0.2")) for i in (1, 2, 3)),
        ("lb.toml", _lb([p.http_url for p in PEERS])),
    )
    assert check_deployment(files) == []


def test_inconsistent_files_are_named() -> None:
    other = (*PEERS[:2], Peer(3, "http://10.0.0.9:17111", "10.0.0.9:17121"))
    files = _files(
        ("m1.toml", _manager(1)),
        ("m2.toml", _manager(2)),
        ("m3.toml", _manager(3, other)),
        ("b1.toml", _broker(1)),
        ("b1-again.toml", _broker(1)),
        ("b2.toml", _broker(2, flush_period_s="0.5")),
        ("b3.toml", _broker(3, ["http://10.0.0.1:17100"])),  # the load balancer's URL
        ("lb.toml", _lb([p.http_url for p in PEERS[:2]])),
    )
    problems = check_deployment(files)
    assert "broker id 1 is in both b1.toml and b1-again.toml" in problems
    assert "the peers of m3.toml differ from those of m1.toml" in problems
    assert "broker limits differ: flush_period_s is default in b1.toml, 0.5 in b2.toml" in problems
    assert any(p.startswith("lb.toml lists managers") for p in problems), problems
    assert any("b3.toml lists ['http://10.0.0.1:17100'] among its managers" in p for p in problems)
    assert len(problems) == 5, problems


def test_a_broker_file_of_an_older_version_is_refused_saying_what_to_do() -> None:
    """``managers_url`` (the load balancer) reaches the broker, which refuses it at start
    (``broker.config``); ``raftq node check`` names it too."""
    old = _broker(1, []).replace("managers = []", 'managers_url = "http://10.0.0.1:17100"')
    node = parse_node_file(old, "b1.toml")
    assert node.argv[node.argv.index("--managers-url") + 1] == "http://10.0.0.1:17100"
    (problem,) = check_deployment([node])
    assert "managers_url (the load balancer) is no longer taken" in problem


def test_the_text_written_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(_broker(3, fetch_messages_max="500"))
    node = parse_node_file(path.read_text(), str(path))
    assert node.limits == {"fetch_messages_max": "500"}
    assert node.settings["data_dir"] == "/var/lib/raftq"


def test_a_switch_written_reads_back_as_a_switch() -> None:
    """``mutual_tls = true`` (``raftq cluster up --mutual-tls``): TOML's booleans, not
    Python's ``True``, which no TOML reader takes."""
    written = node_file_text({"role": "broker", "id": 1, "mutual_tls": True})
    assert "mutual_tls = true" in written
    assert "--mutual-tls" in parse_node_file(_broker(1) + "mutual_tls = true\n", "b.toml").argv
