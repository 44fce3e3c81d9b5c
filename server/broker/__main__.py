"""``python -m broker`` (options, or ``--config FILE``): build the config once, then serve."""

from __future__ import annotations

import sys

from broker.app import create_app
from broker.config import (
    BrokerConfig,
    build_config,
    parse_args,
    refuse_password_on_command_line,
)
from broker.limits_check import check_limits_agree
from runtime.command_line import ServeOptions, check_before_start, expand_config, run_server


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run_server("broker", lambda: _checked_config(args), create_app, _serve_options)


def _checked_config(args: list[str]) -> BrokerConfig:
    refuse_password_on_command_line(args)
    config = build_config(parse_args(expand_config("broker", args)))
    check_before_start(
        config.limits,
        config.secret,
        config.tls,
        f"broker-{config.broker_id}",
        lambda client: check_limits_agree(config, client),
    )
    return config


def _serve_options(config: BrokerConfig) -> ServeOptions:
    return ServeOptions(config.host, config.port, config.limits, config.tls)


if __name__ == "__main__":
    sys.exit(main())
