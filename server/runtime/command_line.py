"""What the three servers' ``__main__`` share: a node file (``--config FILE``), ``--limit``
options, the cluster secret, and serving a config-built ``App`` with one clear error (exit 2)
for bad settings."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from protocol.limits import Limits, LimitsError
from runtime.http_api import App, server_limits
from runtime.http_client import JsonHttpClient, PeerLink
from runtime.http_server import HttpRequest, HttpResponse, HttpServer
from runtime.node_config import NodeConfigError, parse_node_file
from runtime.tls import TlsFiles, server_context

SECRET_CHARS_MIN = 16
_log = logging.getLogger(__name__)
_Config = TypeVar("_Config")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    host: str
    port: int
    limits: Limits
    tls: TlsFiles


def expand_config(role: str, argv: Sequence[str]) -> list[str]:
    """``--config FILE [OPTION...]``: the node file's options, then the rest (a later
    ``--limit`` adds to the file's); any other command line is returned as it is. Raises
    ``NodeConfigError`` (a ``ValueError``) for a file no ``role`` may start from."""
    if not argv or argv[0] != "--config":
        return list(argv)
    if len(argv) < 2:
        raise NodeConfigError("--config needs a file")
    path = argv[1]
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise NodeConfigError(f"cannot read {path}: {exc.strerror}") from None
    node = parse_node_file(text, path)
    if node.role != role:
        raise NodeConfigError(f"{path} configures a {node.role}, not a {role}")
    return [*node.argv, *argv[2:]]


def add_limit_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a limit of protocol/limits.py (repeatable)",
    )


def limits_from(items: list[str]) -> Limits:
    """``Limits`` with ``NAME=VALUE`` overrides, validated; raises ``LimitsError``."""
    overrides = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise LimitsError(f"--limit takes NAME=VALUE, got {item!r}")
        overrides[name.strip()] = value.strip()
    return Limits().with_overrides(overrides)


def read_secret(path: str | Path) -> str:
    """The cluster secret (the password of every Raft group); refuse a missing or short one:
    without it pysyncobj would unpickle whatever anyone sends to a Raft port."""
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"cannot read the cluster secret from {path}: {exc}") from exc
    if len(secret) < SECRET_CHARS_MIN:
        raise ValueError(
            f"the cluster secret in {path} is missing or shorter than {SECRET_CHARS_MIN} characters"
        )
    return secret


def add_metrics_token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-token-file",
        type=Path,
        help="file holding a token that may read this node's /metrics (Authorization: Bearer)",
    )


def read_metrics_token(path: Path | None) -> str | None:
    """The node's opt-in scrape token (None without the option); refuse a short one: it is
    a bearer credential like an API key."""
    if path is None:
        return None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"cannot read the scrape token from {path}: {exc.strerror}") from None
    if len(token) < SECRET_CHARS_MIN or any(c.isspace() for c in token):
        raise ValueError(
            f"the scrape token in {path} must be at least {SECRET_CHARS_MIN} characters "
            "without spaces"
        )
    return token


@dataclass(frozen=True, slots=True)
class Prelude:
    """What a node serves before its app is built, and what it waits for first (a manager
    being added answers its address check and waits until the managers list it)."""

    app: App
    ready: Callable[[threading.Event], bool]
    """Blocks until the node may build its app (True), or until the event is set (the node
    stops: False). Runs on the "start" thread."""


def run_server(
    role: str,
    build: Callable[[], _Config],
    create_app: Callable[[_Config], App],
    options: Callable[[_Config], ServeOptions],
    prelude: Callable[[_Config], Prelude | None] = lambda _config: None,
) -> int:
    """Build the config once (exit 2 with the reason if it is invalid), bind the port (exit 2
    if it is taken: before any Raft node starts), build the app, then serve until SIGTERM or
    SIGINT; requests in progress then finish (bounded) and the app is closed. With a
    ``prelude``, its app serves while a thread waits for it to be ready, then builds the
    node's app, which serves from then on."""
    try:
        config = build()
        first = prelude(config)
    except ValueError as exc:  # ConfigError and LimitsError are ValueErrors
        print(f"{role}: {exc}", file=sys.stderr)
        return 2
    chosen = options(config)
    built: list[App] = []

    def handle(request: HttpRequest) -> HttpResponse:
        return built[-1].handle(request)

    try:
        tls = server_context(chosen.tls) if chosen.tls.serves_tls else None
        server = HttpServer(chosen.host, chosen.port, handle, server_limits(chosen.limits), tls)
    except OSError as exc:
        print(f"{role}: cannot listen on {chosen.host}:{chosen.port}: {exc}", file=sys.stderr)
        return 2
    stopping = threading.Event()
    failed: list[BaseException] = []
    starter: threading.Thread | None = None
    if first is None:
        built.append(create_app(config))
    else:
        built.append(first.app)
        starter = threading.Thread(
            target=_start_after,
            args=(first, stopping, lambda: built.append(create_app(config)), server, failed),
            name="start",
            daemon=True,
        )
        starter.start()

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()
        server.shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    finally:
        stopping.set()
        if starter is not None:
            starter.join()  # an app being built is closed below, not left running
        for app in reversed(built):
            app.close()
    return 1 if failed else 0


def _start_after(
    first: Prelude,
    stopping: threading.Event,
    start: Callable[[], None],
    server: HttpServer,
    failed: list[BaseException],
) -> None:
    """The "start" thread: wait for the prelude, then build the node's app; a failure
    stops the server (the process then exits 1, its log saying why)."""
    try:
        if first.ready(stopping) and not stopping.is_set():
            start()
    except Exception as exc:
        _log.exception("could not start")
        failed.append(exc)
        server.shutdown()


def check_before_start(
    limits: Limits,
    secret: str,
    tls: TlsFiles,
    node: str,
    check: Callable[[JsonHttpClient], None],
) -> None:
    """Run a start-up check against the running nodes (``check`` raises ``ValueError`` to
    refuse the start) with a client that makes one attempt per call, signed as ``node``: a
    node that is not listening yet is skipped at once, before this one binds its port or
    starts Raft."""
    link = PeerLink.of(secret, tls, node)
    client = JsonHttpClient(replace(limits, http_retries_max=1), link)
    try:
        check(client)
    finally:
        client.close()
