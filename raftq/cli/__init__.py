"""The ``raftq`` command: manage topics, produce and consume; with the server installed
(``raftq-server``), also run a local cluster and operate one (``raftq.cli.plugins``).

    raftq cluster up|status|down --dir DIR ...          (the server's)
    raftq topic create NAME [--partitions N] [--replication-factor R]
    raftq topic list
    raftq produce --topic T [--key K] [--partition P] [--no-direct] [MESSAGE ...]
                                                  (else one message per stdin line)
    raftq consume --topic T [--partition P] [--max-messages N] [--consumer-id C] [--follow]
                  [--no-direct]
    raftq key create --role admin|producer|consumer [--topic T ...] [--name N]
    raftq key list
    raftq key revoke KEY_ID

The service URL: ``--url``, else ``--dir``'s client profile (``client.json``, written by
``raftq cluster up``), else ``$RAFTQ_URL``, else ``.cluster/client.json``. The API key:
``--api-key-file``, else ``$RAFTQ_API_KEY``, else the admin key in that profile (a key is
never taken on the command line itself: it would show in the process list).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from raftq.cli.completion import cmd_completion
from raftq.cli.context import (
    DEFAULT_DIR,
    EXIT_FAILURE,
    EXIT_USAGE,
    CommandError,
    Context,
    UsageError,
    resolve_url,
)
from raftq.cli.data import cmd_consume, cmd_produce, cmd_receive
from raftq.cli.groups import cmd_group
from raftq.cli.parser import build_parser
from raftq.cli.topics import cmd_key, cmd_lag, cmd_topic
from raftq.errors import RaftQClientError

COMMANDS: dict[str, Callable[[argparse.Namespace, Context], int]] = {
    "topic": cmd_topic,
    "produce": cmd_produce,
    "consume": cmd_consume,
    "key": cmd_key,
    "lag": cmd_lag,
    "group": cmd_group,
    "receive": cmd_receive,
    "completion": cmd_completion,
}
"""The client's own commands; the others' parsers carry their handler (``plugin_handler``)."""


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    context = Context(
        os.environ.get("RAFTQ_URL"),
        os.environ.get("RAFTQ_API_KEY"),
        os.environ.get("RAFTQ_TLS_CA"),
        sys.stdin,
        sys.stdout,
        sys.stderr,
    )
    return run(args, context)


def run(args: argparse.Namespace, context: Context) -> int:
    handler = COMMANDS.get(args.command) or args.plugin_handler
    try:
        return int(handler(args, context))
    except UsageError as exc:
        context.stderr.write(f"raftq: {exc}\n")
        return EXIT_USAGE
    except (RaftQClientError, CommandError) as exc:
        context.stderr.write(f"raftq: {exc}\n")
        return EXIT_FAILURE
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error of ours.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        return 0


__all__ = [
    "COMMANDS",
    "DEFAULT_DIR",
    "Context",
    "UsageError",
    "build_parser",
    "main",
    "resolve_url",
    "run",
]
