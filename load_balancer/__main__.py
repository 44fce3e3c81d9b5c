"""``python -m load_balancer --host H --port P --managers URL1,URL2,URL3 [--workers N]
[--threads N] [--limit name=value ...]``: builds the config once and serves under gunicorn."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from load_balancer.app import create_app
from load_balancer.config import ConfigError, LoadBalancerConfig
from protocol.limits import Limits, LimitsError
from runtime.gunicorn_app import serve


def parse_limit(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--limit wants name=value, got {text!r}")
    return name.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m load_balancer",
        description="RaftQ load balancer: forwards every request to the manager leader.",
    )
    parser.add_argument("--host", required=True, help="address to bind, e.g. 127.0.0.1")
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument(
        "--managers", required=True, help="comma-separated manager base URLs (http://host:port)"
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument("--threads", type=int, default=16, help="threads per worker (default 16)")
    parser.add_argument(
        "--limit",
        action="append",
        default=[],
        type=parse_limit,
        metavar="NAME=VALUE",
        help="override a limit of protocol/limits.py (repeatable)",
    )
    return parser


def build_config(argv: Sequence[str]) -> LoadBalancerConfig:
    args = build_parser().parse_args(argv)
    urls = tuple(u.strip().rstrip("/") for u in args.managers.split(",") if u.strip())
    return LoadBalancerConfig(
        host=args.host,
        port=args.port,
        manager_urls=urls,
        limits=Limits().with_overrides(dict(args.limit)),
        workers=args.workers,
        threads=args.threads,
    ).validate()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = build_config(sys.argv[1:] if argv is None else argv)
    except (ConfigError, LimitsError) as exc:
        print(f"load_balancer: {exc}", file=sys.stderr)
        return 2
    serve(
        lambda: create_app(config),
        host=config.host,
        port=config.port,
        threads=config.threads,
        workers=config.workers,
        name="raftq-load-balancer",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
