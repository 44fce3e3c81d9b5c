"""The command line: every command, its options and their checks (``raftq --help``)."""

from __future__ import annotations

import argparse

from raftq.cli.context import DEFAULT_DIR
from raftq.cli.plugins import add_plugin_commands


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _header(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"a header is NAME=VALUE, got {text!r}")
    return name, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftq", description="RaftQ command line.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    target = _target_options()
    data = _data_options()
    _add_topic_commands(commands, target)
    _add_data_commands(commands, target, data)
    _add_group_commands(commands, target)
    _add_key_commands(commands, target)
    add_plugin_commands(commands, target)
    completion = commands.add_parser(
        "completion", help='print a shell completion script: eval "$(raftq completion bash)"'
    )
    completion.add_argument("shell", choices=["bash"])
    return parser


def _target_options() -> argparse.ArgumentParser:
    """Which cluster, with which key, and how to print: every client command's options."""
    target = argparse.ArgumentParser(add_help=False)
    where = target.add_mutually_exclusive_group()
    where.add_argument("--url", help="load balancer URL, e.g. http://127.0.0.1:17100")
    where.add_argument("--dir", help=f"local cluster directory (default {DEFAULT_DIR})")
    target.add_argument("--api-key-file", help="file holding the API key to use")
    target.add_argument(
        "--output",
        choices=["table", "json"],
        help="table (for people; the default but for consume) or json (one object per line)",
    )
    target.add_argument(
        "--tls-ca", help="CA bundle (PEM) to check an https:// cluster's certificate against"
    )
    return target


def _data_options() -> argparse.ArgumentParser:
    """The options of commands that move messages: progress and the direct path."""
    data = argparse.ArgumentParser(add_help=False, parents=[progress_option()])
    data.add_argument(
        "--direct",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="go straight to the partition leaders' brokers, falling back to the load "
        "balancer (default); --no-direct: everything through the load balancer",
    )
    return data


def _add_topic_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    target: argparse.ArgumentParser,
) -> None:
    topic = commands.add_parser("topic", help="create and list topics")
    topic_commands = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    create = topic_commands.add_parser("create", parents=[target], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=_positive, default=1)
    create.add_argument("--replication-factor", type=_positive, default=3)
    create.add_argument(
        "--retention-ms", type=int, default=0, help="older messages leave (default 0: none)"
    )
    create.add_argument(
        "--retention-bytes",
        type=int,
        default=0,
        help="per partition, the oldest messages leave while it holds more (default 0: none)",
    )
    create.add_argument(
        "--min-insync-replicas",
        type=_positive,
        default=None,
        help="replicas that must be in sync for a produce to be taken (default: a majority "
        "of the replication factor; the replication factor: refuse writes while any "
        "replica is away)",
    )
    topic_commands.add_parser("list", parents=[target], help="list topics")
    describe = topic_commands.add_parser(
        "describe", parents=[target], help="partitions, leaders, offsets and consumer lag"
    )
    describe.add_argument("name")


def _add_data_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    target: argparse.ArgumentParser,
    data: argparse.ArgumentParser,
) -> None:
    produce = commands.add_parser("produce", parents=[target, data], help="send messages")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--key", help="key of every message (routes them to one partition)")
    produce.add_argument("--partition", type=int, help="send to this partition")
    produce.add_argument(
        "--header",
        type=_header,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header on every message (repeat for more)",
    )
    produce.add_argument("messages", nargs="*", metavar="MESSAGE", help="else stdin lines")

    consume = commands.add_parser("consume", parents=[target, data], help="pop messages")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int)
    consume.add_argument("--max-messages", type=_positive, default=100)
    consume.add_argument("--consumer-id", help="resume this consumer instead of registering one")
    consume.add_argument(
        "--follow", action="store_true", help="keep popping as messages arrive (Ctrl-C ends)"
    )

    lag = commands.add_parser("lag", parents=[target], help="how far consumers are behind")
    lag.add_argument("--topic", required=True)


def _add_key_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    target: argparse.ArgumentParser,
) -> None:
    key = commands.add_parser("key", help="create, list and revoke API keys (admin)")
    key_commands = key.add_subparsers(dest="key_command", required=True, metavar="ACTION")
    make = key_commands.add_parser("create", parents=[target], help="create an API key")
    make.add_argument("--role", required=True, choices=["admin", "producer", "consumer", "metrics"])
    make.add_argument(
        "--topic",
        action="append",
        default=[],
        dest="topics",
        help="a topic, 'prefix*' or '*' the key may use (repeatable; not for admin)",
    )
    make.add_argument("--name", default="", help="a label shown by 'key list'")
    make.add_argument(
        "--secret-file",
        help="ask as a node, with the cluster secret instead of an API key (the first admin "
        "key of a deployment)",
    )
    make.add_argument(
        "--node-cert",
        nargs=2,
        metavar=("CERT", "KEY"),
        help="with --secret-file, for nodes with --mutual-tls: a certificate of the cluster's "
        "CA and its key, shown with the request (default: a --dir cluster's own)",
    )
    key_commands.add_parser("list", parents=[target], help="list API keys (never the keys)")
    revoke = key_commands.add_parser("revoke", parents=[target], help="revoke an API key")
    revoke.add_argument("key_id")


def _add_group_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    target: argparse.ArgumentParser,
) -> None:
    group = commands.add_parser(
        "group", help="create, list, describe and redrive consumer groups (leased delivery)"
    )
    actions = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[target], help="create a consumer group")
    create.add_argument("name")
    create.add_argument("--topic", required=True)
    create.add_argument(
        "--visibility-timeout-ms",
        type=_positive,
        default=None,
        help="how long a lease lasts unless extended (default: the managers', 30 s)",
    )
    create.add_argument(
        "--max-deliveries",
        type=int,
        default=0,
        help="deliveries after which a message goes to the dead-letter topic (0: no limit)",
    )
    create.add_argument("--dead-letter-topic", default=None)
    create.add_argument(
        "--ordering",
        choices=["none", "key"],
        default="none",
        help="key: a key's next message waits while an earlier one is leased",
    )
    listing = actions.add_parser("list", parents=[target], help="a topic's consumer groups")
    listing.add_argument("--topic", default=None, help="default: every topic's")
    describe = actions.add_parser(
        "describe", parents=[target], help="one group's settings and figures per partition"
    )
    describe.add_argument("name")
    describe.add_argument("--topic", required=True)
    redrive = actions.add_parser(
        "redrive",
        parents=[target],
        help="make a group's dead messages deliverable to it again (its dead-letter topic's, "
        "or those parked)",
    )
    redrive.add_argument("name")
    redrive.add_argument("--topic", required=True)
    redrive.add_argument(
        "--max-messages", type=_positive, default=None, help="default: all (in rounds)"
    )

    receive = commands.add_parser(
        "receive", parents=[target], help="lease messages of a consumer group, print, then ack"
    )
    receive.add_argument("--topic", required=True)
    receive.add_argument("--group", required=True)
    receive.add_argument("--max-messages", type=_positive, default=10)
    receive.add_argument(
        "--ack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ack what was printed (default); --no-ack leaves the leases to end, and the "
        "messages are delivered again",
    )


def progress_option() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr with rate and ETA (default: when stderr is a terminal)",
    )
    return options
