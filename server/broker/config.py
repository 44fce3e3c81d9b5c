"""``BrokerConfig``: every setting of a broker process, built once in ``__main__``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.persistence.sql_store import check_database_url
from protocol.limits import Limits
from protocol.redaction import url_password
from runtime.command_line import (
    add_limit_option,
    add_metrics_token_option,
    limits_from,
    read_metrics_token,
    read_secret,
)
from runtime.tls import NO_TLS, TlsFiles, add_mutual_tls_option, add_tls_options, tls_from


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    host: str
    port: int
    raft_port_min: int
    raft_port_max: int
    data_dir: str
    db_url: str = field(repr=False)
    """May hold the database's password: never shown (``protocol.redaction``)."""
    managers: tuple[str, ...]
    """The managers' own HTTP URLs: where the broker registers and asks about keys and
    ids, as a node, straight (never through the load balancer: ``broker.managers``)."""
    secret: str = field(repr=False)
    """The cluster secret: the password of every Raft group."""
    limits: Limits
    tls: TlsFiles = NO_TLS
    limits_may_differ: bool = False
    """Start even when a running broker has other limits (a rolling change of limits);
    otherwise such a start is refused (``broker/limits_check.py``)."""
    metrics_token: str | None = field(default=None, repr=False)
    """Opt-in bearer for ``/metrics`` only (``--metrics-token-file``)."""

    @property
    def address(self) -> str:
        return f"{self.tls.scheme}://{self.host}:{self.port}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m broker", description="Run a RaftQ broker.")
    parser.add_argument("--id", type=int, required=True, dest="broker_id")
    parser.add_argument("--host", required=True, help="address to bind HTTP and Raft to")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--raft-port-min", type=int, required=True)
    parser.add_argument("--raft-port-max", type=int, required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--db-url", help="default: sqlite:///DATA_DIR/broker.sqlite3")
    parser.add_argument(
        "--managers", help="the managers' own HTTP URLs, comma-separated (not the load balancer)"
    )
    parser.add_argument("--managers-url", help=argparse.SUPPRESS)  # before signed node requests
    parser.add_argument("--secret-file", required=True)
    add_limit_option(parser)
    parser.add_argument(
        "--limits-may-differ",
        action="store_true",
        help="start even when a running broker has other limits (a rolling change)",
    )
    add_tls_options(parser)
    add_mutual_tls_option(parser)
    add_metrics_token_option(parser)
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace) -> BrokerConfig:
    """Validate the arguments into a config; raise ``ValueError`` with a clear message."""
    secret = read_secret(args.secret_file)
    limits = limits_from(args.limit)
    if not 0 < args.raft_port_min <= args.raft_port_max <= 65535:
        raise ValueError("need 0 < --raft-port-min <= --raft-port-max <= 65535")
    data_dir = os.path.abspath(args.data_dir)
    db_url = args.db_url or f"sqlite:///{os.path.join(data_dir, 'broker.sqlite3')}"
    check_database_url(db_url)
    managers = _managers(args.managers, args.managers_url)
    return BrokerConfig(
        broker_id=args.broker_id,
        host=args.host,
        port=args.port,
        raft_port_min=args.raft_port_min,
        raft_port_max=args.raft_port_max,
        data_dir=data_dir,
        db_url=db_url,
        managers=managers,
        secret=secret,
        limits=limits,
        tls=tls_from(args),
        limits_may_differ=args.limits_may_differ,
        metrics_token=read_metrics_token(args.metrics_token_file),
    )


def _managers(given: str | None, old_option: str | None) -> tuple[str, ...]:
    """The ``--managers`` URLs; a clear refusal of the load balancer's URL that older
    versions took (``--managers-url``, ``managers_url`` in a node file)."""
    if old_option is not None:
        raise ValueError(
            f"--managers-url (managers_url = {old_option!r} in a node file) is no longer "
            "taken: a broker calls the managers straight, signed, never through the load "
            "balancer. Give the managers' own HTTP URLs instead: --managers "
            "http://m1:P1,http://m2:P2,http://m3:P3 (managers = [...] in a node file)"
        )
    urls = tuple(url.strip().rstrip("/") for url in (given or "").split(",") if url.strip())
    if not urls:
        raise ValueError("--managers is required: the managers' own HTTP URLs, comma-separated")
    wrong = [url for url in urls if not url.startswith(("http://", "https://"))]
    if wrong:
        raise ValueError(f"--managers takes http(s):// URLs, not {', '.join(wrong)}")
    return urls


def refuse_password_on_command_line(argv: Sequence[str]) -> None:
    """``ValueError`` when the process's own command line (not a node file's settings, which
    never reach it) holds a ``--db-url`` with a password: every user of the host reads a
    command line in the process list (``ps``, ``/proc/PID/cmdline``)."""
    for index, arg in enumerate(argv):
        if arg == "--db-url" and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith("--db-url="):
            value = arg.partition("=")[2]
        else:
            continue
        if url_password(value) is not None:
            raise ValueError(
                "--db-url holds a password, which every user of this host can read in the "
                "process list: give the URL in the node file instead (db_url = ..., file mode "
                "0600; python -m broker --config FILE or raftq node run --config FILE), or "
                "leave the password out of the URL and put it in ~/.pgpass (or PGPASSFILE)"
            )
