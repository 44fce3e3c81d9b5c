"""No database password in an error, a config's repr or a process title (issue 23, hole 5):
the checks in process, and two real broker processes that must refuse to start."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import build_config, parse_args, refuse_password_on_command_line
from broker.persistence.sql_store import DatabaseError, SqlMessageStore, check_database_url
from unit_tests.ports import free_port

PASSWORD = "Sup3rSecretPw"
START_TIMEOUT_S = 60


def _closed_port_url() -> str:
    return f"postgresql://raftq:{PASSWORD}@127.0.0.1:{free_port()}/raftq"


def test_a_password_on_the_command_line_is_refused_naming_what_to_do() -> None:
    for argv in (["--db-url", _closed_port_url()], [f"--db-url={_closed_port_url()}"]):
        with pytest.raises(ValueError, match="process list") as refused:
            refuse_password_on_command_line(argv)
        assert PASSWORD not in str(refused.value) and "node file" in str(refused.value)
    refuse_password_on_command_line(["--db-url", "postgresql://raftq@h/db"])  # ~/.pgpass
    refuse_password_on_command_line(["--config", "node.toml"])


def test_a_url_the_driver_would_misread_is_refused_without_quoting_it() -> None:
    for url in (f"postgresql://raftq:{PASSWORD}@x@h/db", f"nonsense:{PASSWORD}"):
        with pytest.raises(ValueError) as refused:
            check_database_url(url)
        assert PASSWORD not in str(refused.value)
    check_database_url("postgresql://raftq:p%40ss@h/db")


def test_an_unreachable_database_is_reported_without_its_password() -> None:
    with pytest.raises(DatabaseError) as refused:
        SqlMessageStore(_closed_port_url())
    assert PASSWORD not in str(refused.value)
    assert "raftq:***@127.0.0.1" in str(refused.value)


def test_a_configs_repr_holds_neither_the_secret_nor_the_password(tmp_path: Path) -> None:
    secret_file = _secret_file(tmp_path)
    args = parse_args([*_broker_argv(tmp_path, secret_file), "--db-url", _closed_port_url()])
    config = build_config(args)
    assert PASSWORD not in repr(config) and config.secret not in repr(config)


def test_real_brokers_refuse_without_showing_the_password(tmp_path: Path) -> None:
    """A broker given the password on its command line exits 2 before doing anything; one
    given it in its node file starts, fails to reach the database, and says so without
    it. Neither's output holds the password."""
    secret_file = _secret_file(tmp_path)
    argv = _broker_argv(tmp_path, secret_file)
    on_command_line = _run([*argv, "--db-url", _closed_port_url()])
    assert on_command_line.returncode == 2, on_command_line.stderr
    assert "process list" in on_command_line.stderr
    node_file = tmp_path / "node.toml"
    node_file.write_text(_node_file(argv, _closed_port_url()))
    in_node_file = _run(["--config", str(node_file)])
    assert in_node_file.returncode != 0
    assert "cannot open the database postgresql://raftq:***@127.0.0.1" in in_node_file.stderr
    for done in (on_command_line, in_node_file):
        assert PASSWORD not in done.stdout + done.stderr


def _secret_file(directory: Path) -> Path:
    path = directory / "secret"
    path.write_text(secrets.token_hex(32))
    return path


def _broker_argv(directory: Path, secret_file: Path) -> list[str]:
    port = free_port()
    return [
        "--id", "1", "--host", "127.0.0.1", "--port", str(port),
        "--raft-port-min", str(free_port()), "--raft-port-max", "65000",
        "--data-dir", str(directory / "data"), "--managers", f"http://127.0.0.1:{free_port()}",
        "--secret-file", str(secret_file),
    ]  # fmt: skip


def _node_file(argv: list[str], db_url: str) -> str:
    options = dict(zip(argv[::2], argv[1::2], strict=True))
    return "\n".join(
        [
            'role = "broker"',
            f"id = {options['--id']}",
            f'host = "{options["--host"]}"',
            f"port = {options['--port']}",
            f"raft_port_min = {options['--raft-port-min']}",
            f"raft_port_max = {options['--raft-port-max']}",
            f'data_dir = "{options["--data-dir"]}"',
            f'db_url = "{db_url}"',
            f'managers = ["{options["--managers"]}"]',
            f'secret_file = "{options["--secret-file"]}"',
        ]
    )


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *argv],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )
