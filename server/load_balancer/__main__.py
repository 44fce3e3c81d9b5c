"""``python -m load_balancer --host H --port P --managers URL1,URL2,URL3
[--limit name=value ...]`` (or ``--config FILE``): builds the config once and serves."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from load_balancer.app import create_app
from load_balancer.config import LoadBalancerConfig
from runtime.command_line import (
    ServeOptions,
    add_limit_option,
    add_metrics_token_option,
    expand_config,
    limits_from,
    read_metrics_token,
    run_server,
)
from runtime.tls import add_tls_options, tls_from


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
    add_limit_option(parser)
    add_tls_options(parser)
    add_metrics_token_option(parser)
    return parser


def build_config(argv: Sequence[str]) -> LoadBalancerConfig:
    args = build_parser().parse_args(expand_config("load_balancer", argv))
    urls = tuple(u.strip().rstrip("/") for u in args.managers.split(",") if u.strip())
    return LoadBalancerConfig(
        host=args.host,
        port=args.port,
        manager_urls=urls,
        limits=limits_from(args.limit),
        tls=tls_from(args),
        metrics_token=read_metrics_token(args.metrics_token_file),
    ).validate()


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run_server("load_balancer", lambda: build_config(args), create_app, _serve_options)


def _serve_options(config: LoadBalancerConfig) -> ServeOptions:
    return ServeOptions(config.host, config.port, config.limits, config.tls)


if __name__ == "__main__":
    sys.exit(main())
