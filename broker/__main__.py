"""``python -m broker`` (options, or ``--config FILE``): build the config once, then serve."""

from __future__ import annotations

import sys

from broker.app import create_app
from broker.config import BrokerConfig, build_config, parse_args
from runtime.command_line import ServeOptions, expand_config, run_server


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run_server(
        "broker",
        lambda: build_config(parse_args(expand_config("broker", args))),
        create_app,
        _serve_options,
    )


def _serve_options(config: BrokerConfig) -> ServeOptions:
    return ServeOptions(config.host, config.port, config.limits, config.tls)


if __name__ == "__main__":
    sys.exit(main())
