"""The command line: every command, its options and their checks (``raftq --help``)."""

from __future__ import annotations

import argparse
import os

from raftq.cli.context import DEFAULT_DIR


def _limit(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--limit wants name=value, got {text!r}")
    return name.strip(), value.strip()


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
    _add_cluster_commands(commands)
    _add_node_commands(commands)
    target = _target_options()
    data = _data_options()
    _add_topic_commands(commands, target)
    _add_data_commands(commands, target, data)
    _add_group_commands(commands, target)
    _add_key_commands(commands, target)
    _add_broker_commands(commands, target)
    _add_manager_commands(commands)
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
    data = argparse.ArgumentParser(add_help=False, parents=[_progress_option()])
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


def _progress_option() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr with rate and ETA (default: when stderr is a terminal)",
    )
    return options


def _add_broker_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    target: argparse.ArgumentParser,
) -> None:
    broker = commands.add_parser("broker", help="list brokers; add one to a local cluster")
    broker_commands = broker.add_subparsers(dest="broker_command", required=True, metavar="ACTION")
    broker_commands.add_parser("list", parents=[target], help="brokers, liveness and replicas")
    grow = broker_commands.add_parser(
        "add", help="start one more broker in a local cluster (new partitions go to it first)"
    )
    grow.add_argument(
        "--dir", default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})"
    )
    grow.add_argument("--timeout-s", type=float, default=90.0, help="readiness wait (default 90)")
    shrink = broker_commands.add_parser(
        "remove",
        parents=[target, _progress_option()],
        help="move a broker's replicas to the others, then remove it (and, in a local "
        "cluster, stop it)",
    )
    shrink.add_argument("broker_id", type=int, help="the broker to remove")
    shrink.add_argument(
        "--cancel",
        action="store_true",
        help="stop removing it instead: it takes replicas again (a move under way finishes)",
    )
    heal = broker_commands.add_parser(
        "wait-replicated",
        parents=[target, _progress_option()],
        help="wait until every partition has all its replicas on live brokers (a dead "
        "broker's replicas move after broker_replace_after_s)",
    )
    heal.add_argument("--timeout-s", type=float, default=600.0, help="longest wait (default 600)")
    shrink.add_argument(
        "--timeout-s",
        type=float,
        default=600.0,
        help="longest wait for its replicas to move (default 600)",
    )


def _add_manager_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    manager = commands.add_parser("manager", help="add or remove a manager of a local cluster")
    actions = manager.add_subparsers(dest="manager_command", required=True, metavar="ACTION")
    grow = actions.add_parser("add", help="one more manager (the next id) joins the group")
    shrink = actions.add_parser("remove", help="a manager leaves the group and stops")
    shrink.add_argument("manager_id", type=int, help="the manager to remove")
    for action in (grow, shrink):
        action.add_argument(
            "--dir", default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})"
        )
        action.add_argument("--timeout-s", type=float, default=90.0, help="wait (default 90)")


def _add_node_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    node = commands.add_parser("node", help="run one node from its file; check a deployment's")
    actions = node.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run", help="run the manager, broker or load balancer a node file describes"
    )
    run.add_argument("--config", required=True, help="the node file (TOML)")
    check = actions.add_parser("check", help="check a deployment's node files against each other")
    check.add_argument("files", nargs="+", metavar="FILE")


def _add_cluster_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = commands.add_parser("cluster", help="run a local cluster of processes")
    actions = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start (or restart) every node that is not running")
    up.add_argument("--dir", default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
    up.add_argument("--base-port", type=int, help="first port (default 17100)")
    up.add_argument("--host", help="address every node binds (default 127.0.0.1)")
    up.add_argument("--brokers", type=int, help="number of brokers, at least 3 (default 3)")
    up.add_argument(
        "--hosts",
        type=lambda text: [h.strip() for h in text.split(",")],
        help="one address per node, as on separate hosts: load balancer, managers, brokers "
        "(e.g. 127.0.0.2,...,127.0.0.8); default: every node on --host",
    )
    up.add_argument(
        "--dead-broker-timeout-s",
        type=float,
        help="silence after which the managers hold a broker dead (the limit "
        "broker_dead_after_s, default 3)",
    )
    up.add_argument(
        "--replace-dead-broker-after-s",
        type=float,
        help="silence after which a dead broker's replicas move to live brokers (the limit "
        "broker_replace_after_s, default 60)",
    )
    up.add_argument(
        "--db-url",
        default=os.environ.get("RAFTQ_DB_URL"),
        help="PostgreSQL URL; broker i uses database <name>_broker_i (default: $RAFTQ_DB_URL, "
        "which keeps a password off the process list)",
    )
    up.add_argument("--limit", action="append", type=_limit, metavar="NAME=VALUE", default=None)
    up.add_argument("--timeout-s", type=float, default=90.0, help="readiness wait (default 90)")
    up.add_argument(
        "--tls",
        action="store_true",
        default=None,
        help="HTTPS on every node, with certificates of a CA made for this cluster",
    )
    up.add_argument(
        "--mutual-tls",
        action="store_true",
        default=None,
        help="with --tls: managers and brokers take node requests only from callers that "
        "show a certificate of the cluster's CA",
    )
    status = actions.add_parser("status", help="liveness of every node and the manager leader")
    status.add_argument("--dir", default=DEFAULT_DIR)
    status.add_argument("--json", action="store_true", help="print JSON")
    down = actions.add_parser("down", help="stop every node (data is kept)")
    down.add_argument("--dir", default=DEFAULT_DIR)
    down.add_argument("--timeout-s", type=float, default=10.0, help="SIGTERM grace per node")
