"""``python -m manager``: parse the command line into one ``ManagerConfig`` and serve it."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from manager.app import create_app
from manager.config import ConfigError, ManagerConfig, parse_peers
from protocol.limits import Limits, LimitsError
from runtime.gunicorn_app import serve


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
    parser.add_argument("--threads", type=int, default=32, help="HTTP threads of the worker")
    parser.add_argument(
        "--limit", action="append", default=[], metavar="NAME=VALUE", help="override a limit"
    )
    return parser


def config_from_args(argv: list[str]) -> ManagerConfig:
    args = _parser().parse_args(argv)
    try:
        secret = args.secret_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the secret file: {exc}") from exc
    overrides = {}
    for item in args.limit:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--limit {item!r}: expected name=value")
        overrides[name.strip()] = value.strip()
    return ManagerConfig(
        manager_id=args.id,
        host=args.host,
        port=args.port,
        raft_port=args.raft_port,
        peers=parse_peers(args.peers),
        data_dir=args.data_dir,
        secret=secret,
        limits=Limits().with_overrides(overrides),
        http_threads=args.threads,
    )


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s manager %(levelname)s %(message)s")
    try:
        config = config_from_args(argv)
    except (ConfigError, LimitsError) as exc:
        print(f"manager: {exc}", file=sys.stderr)
        return 2
    serve(
        lambda: create_app(config),
        host=config.host,
        port=config.port,
        threads=config.http_threads,
        name=f"raftq-manager-{config.manager_id}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
