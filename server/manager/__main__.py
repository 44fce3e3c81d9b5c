"""``python -m manager`` (options, or ``--config FILE``): one ``ManagerConfig``, served."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from manager.app import create_app
from manager.config import ManagerConfig, parse_peers
from manager.joining import joining_prelude
from manager.peer_check import check_peers_agree
from runtime.command_line import (
    ServeOptions,
    add_limit_option,
    add_metrics_token_option,
    check_before_start,
    expand_config,
    limits_from,
    read_metrics_token,
    read_secret,
    run_server,
)
from runtime.tls import add_mutual_tls_option, add_tls_options, tls_from


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m manager", description="RaftQ manager")
    parser.add_argument("--id", type=int, required=True, help="this manager's id in --peers")
    parser.add_argument("--host", required=True, help="address to bind (HTTP and Raft)")
    parser.add_argument("--port", type=int, required=True, help="HTTP port")
    parser.add_argument("--raft-port", type=int, required=True)
    parser.add_argument(
        "--peers", required=True, help="every manager: id=http://host:port@host:raft_port,..."
    )
    parser.add_argument("--data-dir", type=Path, required=True, help="Raft journal and dump")
    parser.add_argument("--secret-file", type=Path, required=True, help="the cluster secret")
    add_limit_option(parser)
    add_tls_options(parser)
    add_mutual_tls_option(parser)
    add_metrics_token_option(parser)
    return parser


def config_from_args(argv: list[str]) -> ManagerConfig:
    args = _parser().parse_args(argv)
    return ManagerConfig(
        manager_id=args.id,
        host=args.host,
        port=args.port,
        raft_port=args.raft_port,
        peers=parse_peers(args.peers),
        data_dir=args.data_dir,
        secret=read_secret(args.secret_file),
        limits=limits_from(args.limit),
        tls=tls_from(args),
        metrics_token=read_metrics_token(args.metrics_token_file),
    )


@dataclass(frozen=True, slots=True)
class _Start:
    config: ManagerConfig
    joining: bool
    """No running peer lists this manager yet: it waits to be added (``manager.joining``)."""


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s manager %(levelname)s %(message)s")
    return run_server(
        "manager",
        lambda: _checked(argv),
        lambda start: create_app(start.config),
        _serve_options,
        lambda start: joining_prelude(start.config) if start.joining else None,
    )


def _checked(argv: list[str]) -> _Start:
    """The config, once the peers that answer agree on who the managers are."""
    config = config_from_args(expand_config("manager", argv))
    joining: list[bool] = []
    check_before_start(
        config.limits,
        config.secret,
        config.tls,
        f"manager-{config.manager_id}",
        lambda client: joining.append(check_peers_agree(config, client)),
    )
    return _Start(config, joining == [True])


def _serve_options(start: _Start) -> ServeOptions:
    config = start.config
    return ServeOptions(config.host, config.port, config.limits, config.tls)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
