"""``python -m broker``: parse the command line once, then serve under gunicorn."""

from __future__ import annotations

import sys

from broker.app import create_app
from broker.config import build_config, parse_args
from protocol.limits import LimitsError
from runtime.gunicorn_app import serve


def main(argv: list[str] | None = None) -> int:
    try:
        config = build_config(parse_args(argv))
    except (ValueError, LimitsError) as exc:
        print(f"broker: {exc}", file=sys.stderr)
        return 2
    serve(
        lambda: create_app(config),
        host=config.host,
        port=config.port,
        threads=config.http_threads,
        name=f"raftq-broker-{config.broker_id}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
