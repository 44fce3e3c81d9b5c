"""The command line becomes one validated ``ManagerConfig``."""

from __future__ import annotations

from pathlib import Path

import pytest

from manager.__main__ import config_from_args
from manager.config import ConfigError, parse_peers
from protocol.limits import LimitsError

PEERS = "1=http://127.0.0.1:7001@127.0.0.1:7101,2=http://127.0.0.1:7002/@127.0.0.1:7102"


def _args(tmp_path: Path, *extra: str, manager_id: str = "1", raft_port: str = "7101") -> list[str]:
    secret = tmp_path / "secret"
    if not secret.exists():
        secret.write_text("s3cret-of-the-cluster\n")
    return [
        "--id", manager_id, "--host", "127.0.0.1", "--port", "7001", "--raft-port", raft_port,
        "--peers", PEERS, "--data-dir", str(tmp_path / "d"), "--secret-file", str(secret),
        *extra,
    ]  # fmt: skip


def test_parse_peers() -> None:
    peers = parse_peers(PEERS)
    assert [(p.manager_id, p.http_url, p.raft_address) for p in peers] == [
        (1, "http://127.0.0.1:7001", "127.0.0.1:7101"),
        (2, "http://127.0.0.1:7002", "127.0.0.1:7102"),
    ]
    for bad in ("1=127.0.0.1:7001@h:1", "1=http://h:1@h:2,1=http://h:3@h:4", "x"):
        with pytest.raises(ConfigError):
            parse_peers(bad)


def test_config_from_args(tmp_path: Path) -> None:
    config = config_from_args(_args(tmp_path, "--limit", "broker_dead_after_s=5"))
    assert config.secret == "s3cret-of-the-cluster" and "s3cret" not in repr(config)
    assert config.partner_raft_addresses == ["127.0.0.1:7102"]
    assert config.limits.broker_dead_after_s == 5.0
    assert config.journal_path == tmp_path / "d" / "manager.journal"
    peer = config.peer_by_raft_address("127.0.0.1:7102")
    assert peer is not None and peer.http_url == "http://127.0.0.1:7002"


def test_inconsistent_command_lines_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        config_from_args(_args(tmp_path, manager_id="3"))
    with pytest.raises(ConfigError):
        config_from_args(_args(tmp_path, raft_port="7999"))
    with pytest.raises(LimitsError):
        config_from_args(_args(tmp_path, "--limit", "no_such_limit=1"))
    (tmp_path / "secret").write_text("  \n")
    with pytest.raises(ValueError, match="missing or shorter"):
        config_from_args(_args(tmp_path))
