"""The operations commands' options (``raftq cluster|node|broker|manager --help``)."""

from __future__ import annotations

import argparse
import os

from raftq.cli.context import DEFAULT_DIR
from raftq.cli.parser import progress_option
from raftq.cli.plugins import SubParsers


def add_operations_parsers(commands: SubParsers, target: argparse.ArgumentParser) -> None:
    _add_cluster_commands(commands)
    _add_node_commands(commands)
    _add_broker_commands(commands, target)
    _add_manager_commands(commands)


def _limit(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--limit wants name=value, got {text!r}")
    return name.strip(), value.strip()


def _add_broker_commands(
    commands: SubParsers,
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
        parents=[target, progress_option()],
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
        parents=[target, progress_option()],
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


def _add_manager_commands(commands: SubParsers) -> None:
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


def _add_node_commands(commands: SubParsers) -> None:
    node = commands.add_parser("node", help="run one node from its file; check a deployment's")
    actions = node.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run", help="run the manager, broker or load balancer a node file describes"
    )
    run.add_argument("--config", required=True, help="the node file (TOML)")
    check = actions.add_parser("check", help="check a deployment's node files against each other")
    check.add_argument("files", nargs="+", metavar="FILE")


def _add_cluster_commands(commands: SubParsers) -> None:
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
