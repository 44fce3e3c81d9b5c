"""``python -m broker``: parse the command line once, then serve."""

from __future__ import annotations

import sys

from broker.app import create_app
from broker.config import BrokerConfig, build_config, parse_args
from runtime.command_line import ServeOptions, run_server


def main(argv: list[str] | None = None) -> int:
    return run_server("broker", lambda: build_config(parse_args(argv)), create_app, _serve_options)


def _serve_options(config: BrokerConfig) -> ServeOptions:
    return ServeOptions(config.host, config.port, config.limits, config.tls)


if __name__ == "__main__":
    sys.exit(main())
