"""What every command shares: the streams and environment it runs with, where the service
is and which key to use (``--url``, ``--dir``, ``$RAFTQ_URL``, the client profile that
``raftq cluster up`` writes), and small output helpers."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Never, TextIO
from urllib.parse import urlsplit

from tqdm import tqdm

from raftq.profile import ClientProfile, ProfileError, read_profile

DEFAULT_DIR = ".cluster"


EXIT_FAILURE = 1


EXIT_USAGE = 2


class UsageError(Exception):
    """The command line or the environment does not say enough to act (exit 2)."""


class CommandError(Exception):
    """The command was understood and could not be done (exit 1): what a command group of
    the server's (``ops``) raises for its own errors."""


@dataclass(frozen=True, slots=True)
class Context:
    """What ``main`` read once from the environment."""

    env_url: str | None
    env_api_key: str | None
    env_tls_ca: str | None
    stdin: TextIO
    stdout: TextIO
    stderr: TextIO
    sleep: Callable[[float], None] = time.sleep


def resolve_url(url: str | None, directory: str | None, env_url: str | None) -> str:
    """``--url``, else ``--dir``'s client profile, else ``$RAFTQ_URL``, else the default
    dir's."""
    if url:
        return _checked_url(url, "--url")
    if directory is None and env_url:
        return _checked_url(env_url, "RAFTQ_URL")
    return _checked_url(local_profile(directory).url, f"{directory or DEFAULT_DIR}'s profile")


@dataclass(frozen=True, slots=True)
class Target:
    """The cluster a command talks to, and how."""

    url: str
    api_key: str
    tls_ca: str | None


def resolve_target(args: argparse.Namespace, context: Context) -> Target:
    return Target(
        resolve_url(args.url, args.dir, context.env_url),
        resolve_api_key(args, context),
        resolve_tls_ca(args, context),
    )


def resolve_tls_ca(args: argparse.Namespace, context: Context) -> str | None:
    """``--tls-ca``, else ``$RAFTQ_TLS_CA``, else the profile's ``tls_ca`` (a cluster
    started with ``--tls``), else ``None``: the system's CAs."""
    if args.tls_ca:
        return str(args.tls_ca)
    if context.env_tls_ca:
        return context.env_tls_ca
    if args.url is None:
        with contextlib.suppress(UsageError):
            return local_profile(args.dir).tls_ca
    return None


def _checked_url(url: str, where: str) -> str:
    """A URL the client can call, else a usage error now (not eight failed attempts)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{where} must be http(s)://host:port of the load balancer, not {url!r}")
    return url.rstrip("/")


def resolve_api_key(args: argparse.Namespace, context: Context) -> str:
    """``--api-key-file``, else ``$RAFTQ_API_KEY``, else the profile's admin key."""
    if args.api_key_file:
        try:
            key = Path(args.api_key_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"cannot read --api-key-file: {exc}") from exc
        if not key:
            raise UsageError(f"{args.api_key_file} is empty")
        return key
    if context.env_api_key:
        return context.env_api_key
    if args.url is None:
        found = local_profile(args.dir).api_key
        if found is not None:
            return found
    raise UsageError("no API key: give --api-key-file FILE or set RAFTQ_API_KEY")


def local_profile(directory: str | None) -> ClientProfile:
    """The client profile of the cluster in ``directory`` (default ``.cluster``)."""
    try:
        return read_profile(Path(directory or DEFAULT_DIR))
    except ProfileError as exc:
        raise UsageError(
            f"{exc}: give --url URL, --dir DIR of a cluster that `raftq cluster up` started, "
            "or set RAFTQ_URL"
        ) from None


def print_json_lines(items: Iterable[object], out: TextIO) -> None:
    for item in items:
        out.write(json.dumps(item) + "\n")
    out.flush()


def stdin_messages(stdin: TextIO) -> Iterator[str]:
    for line in stdin:
        yield line.rstrip("\n")


def progress_bar(
    args: argparse.Namespace, context: Context, label: str, total: int | None
) -> tqdm[Never]:
    """Counts messages, with their rate and, when the total is known, the time left."""
    shown = shows_progress(args, context)
    return tqdm(total=total, desc=label, unit="msg", file=context.stderr, disable=not shown)


def shows_progress(args: argparse.Namespace, context: Context) -> bool:
    """``--progress``: always; ``--no-progress``: never; neither: when stderr is a terminal."""
    return bool(context.stderr.isatty()) if args.progress is None else bool(args.progress)


def progress_to(context: Context) -> Callable[[str], None]:
    """Progress lines of a cluster operation, on stderr as they come."""

    def progress(line: str) -> None:
        context.stderr.write(line + "\n")
        context.stderr.flush()

    return progress
