"""``python -m broker`` (options, or ``--config FILE``): build the config once, then serve."""

from __future__ import annotations

import sys
from dataclasses import replace

from broker.app import create_app
from broker.config import BrokerConfig, build_config, parse_args
from broker.limits_check import check_limits_agree
from runtime.command_line import ServeOptions, expand_config, run_server
from runtime.http_client import JsonHttpClient, PeerLink


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run_server("broker", lambda: _checked_config(args), create_app, _serve_options)


def _checked_config(args: list[str]) -> BrokerConfig:
    config = build_config(parse_args(expand_config("broker", args)))
    # One attempt per call: a broker that is not listening yet is skipped at once.
    once = replace(config.limits, http_retries_max=1)
    client = JsonHttpClient(once, PeerLink.of(config.secret, config.tls))
    try:
        check_limits_agree(config, client)
    finally:
        client.close()
    return config


def _serve_options(config: BrokerConfig) -> ServeOptions:
    return ServeOptions(config.host, config.port, config.limits, config.tls)


if __name__ == "__main__":
    sys.exit(main())
