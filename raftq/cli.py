"""The ``raftq`` command: run a local cluster, manage topics, produce and consume.

    raftq cluster up|status|down --dir DIR ...
    raftq topic create NAME [--partitions N] [--replication-factor R]
    raftq topic list
    raftq produce --topic T [--key K] [--partition P] [--no-direct] [MESSAGE ...]
                                                  (else one message per stdin line)
    raftq consume --topic T [--partition P] [--max-messages N] [--consumer-id C] [--follow]
                  [--no-direct]
    raftq key create --role admin|producer|consumer [--topic T ...] [--name N]
    raftq key list
    raftq key revoke KEY_ID

The service URL: ``--url``, else ``--dir``'s cluster.json, else ``$RAFTQ_URL``, else
``.cluster/cluster.json``. The API key: ``--api-key-file``, else ``$RAFTQ_API_KEY``, else the
admin key in that cluster.json (a key is never taken on the command line itself: it would
show in the process list).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Never, TextIO
from urllib.parse import urlsplit

import requests
from tqdm import tqdm

from protocol.node_config import NodeConfigError, NodeFile, check_deployment, parse_node_file
from protocol.types import NewMessage, headers_of
from raftq.admin import Admin
from raftq.client_limits import ClientLimits
from raftq.cluster import ClusterError, ClusterStatus, LocalCluster
from raftq.cluster_layout import CLUSTER_FILE, LayoutError, admin_key_of
from raftq.consumer import Consumer
from raftq.errors import RaftQClientError
from raftq.group import GroupMember
from raftq.node_signing import NodeSigning, manager_leader
from raftq.producer import Producer
from raftq.records import ConsumerLag, GroupInfo, Record

DEFAULT_DIR = ".cluster"
EXIT_FAILURE = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """The command line or the environment does not say enough to act."""


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


def resolve_url(url: str | None, directory: str | None, env_url: str | None) -> str:
    """``--url``, else ``--dir``'s cluster.json, else ``$RAFTQ_URL``, else the default dir."""
    if url:
        return _checked_url(url, "--url")
    if directory is None and env_url:
        return _checked_url(env_url, "RAFTQ_URL")
    found = _cluster_file(directory).get("load_balancer_url")
    if not isinstance(found, str):
        raise UsageError(
            f"{Path(directory or DEFAULT_DIR) / CLUSTER_FILE} has no load_balancer_url"
        )
    return found


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
    """``--tls-ca``, else ``$RAFTQ_TLS_CA``, else the cluster.json's ``tls_ca`` (a cluster
    started with ``--tls``), else ``None``: the system's CAs."""
    if args.tls_ca:
        return str(args.tls_ca)
    if context.env_tls_ca:
        return context.env_tls_ca
    if args.url is None:
        with contextlib.suppress(UsageError):
            found = _cluster_file(args.dir).get("tls_ca")
            return found if isinstance(found, str) else None
    return None


def _checked_url(url: str, where: str) -> str:
    """A URL the client can call, else a usage error now (not eight failed attempts)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{where} must be http(s)://host:port of the load balancer, not {url!r}")
    return url.rstrip("/")


def resolve_api_key(args: argparse.Namespace, context: Context) -> str:
    """``--api-key-file``, else ``$RAFTQ_API_KEY``, else the cluster.json's admin key."""
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
        found = admin_key_of(_cluster_file(args.dir))
        if found is not None:
            return found
    raise UsageError("no API key: give --api-key-file FILE or set RAFTQ_API_KEY")


def _cluster_file(directory: str | None) -> dict[str, object]:
    path = Path(directory or DEFAULT_DIR) / CLUSTER_FILE
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"no {path}: give --url URL, --dir DIR of a cluster, or set RAFTQ_URL"
        ) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    if not isinstance(body, dict):
        raise UsageError(f"{path} is not a JSON object")
    return body


def _print_json_lines(items: Iterable[object], out: TextIO) -> None:
    for item in items:
        out.write(json.dumps(item) + "\n")
    out.flush()


def _stdin_messages(stdin: TextIO) -> Iterator[str]:
    for line in stdin:
        yield line.rstrip("\n")


def cmd_topic(args: argparse.Namespace, context: Context) -> int:
    target = resolve_target(args, context)
    with Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca) as admin:
        if args.topic_command == "create":
            topic = admin.create_topic(
                args.name,
                args.partitions,
                args.replication_factor,
                retention_ms=args.retention_ms,
                retention_bytes=args.retention_bytes,
                min_insync_replicas=args.min_insync_replicas,
            )
            for part in topic.partitions:
                context.stdout.write(
                    f"{topic.name} partition {part.partition_id}: replicas on brokers "
                    f"{list(part.replicas)}, leader {part.leader}\n"
                )
        elif args.topic_command == "describe":
            _describe(admin, args.name, context.stdout, args.output or "table")
        elif args.output == "json":
            _print_json_lines((dataclasses.asdict(t) for t in admin.list_topics()), context.stdout)
        else:
            for summary in admin.list_topics():
                context.stdout.write(f"{summary.name}\t{summary.partition_count} partitions\n")
    return 0


def _describe(admin: Admin, topic: str, out: TextIO, output: str) -> None:
    """Each partition (leader, replicas, log start, end offset), then each consumer's lag."""
    partitions = admin.partitions(topic)
    ends, starts = admin.end_offsets(topic), admin.start_offsets(topic)
    lag = admin.consumer_lag(topic)
    if output == "json":
        body = {
            "topic": topic,
            "partitions": [
                {
                    "partition_id": p.partition_id,
                    "leader": p.leader,
                    "replicas": [r.broker_id for r in p.replicas],
                    "log_start_offset": starts.get(p.partition_id),
                    "end_offset": ends.get(p.partition_id),
                }
                for p in partitions
            ],
            "consumers": [dataclasses.asdict(c) for c in lag.consumers],
        }
        out.write(json.dumps(body) + "\n")
        return
    out.write(f"{'partition':>9} {'leader':>6} {'replicas':<12} {'log start':>10} {'end':>10}\n")
    for p in partitions:
        replicas = ",".join(str(r.broker_id) for r in p.replicas)
        leader = "-" if p.leader is None else str(p.leader)
        out.write(
            f"{p.partition_id:>9} {leader:>6} {replicas:<12} "
            f"{starts.get(p.partition_id, 0):>10} {ends.get(p.partition_id, 0):>10}\n"
        )
    _write_lag_table(lag.consumers, out)


def _write_lag_table(consumers: Iterable[ConsumerLag], out: TextIO) -> None:
    """One row per consumer and partition: ``raftq lag`` and ``raftq topic describe``."""
    out.write(f"{'consumer':<34} {'partition':>9} {'offset':>10} {'end':>10} {'lag':>10} age_s\n")
    for c in consumers:
        out.write(
            f"{c.consumer_id:<34} {c.partition_id:>9} {c.offset:>10} {c.end_offset:>10} "
            f"{c.lag_messages:>10} {c.lag_s:.1f}\n"
        )


def cmd_produce(args: argparse.Namespace, context: Context) -> int:
    target = resolve_target(args, context)
    limits = ClientLimits()
    source = iter(args.messages) if args.messages else _stdin_messages(context.stdin)
    headers = headers_of(dict(args.header))
    with Producer(
        target.url,
        args.topic,
        partition_id=args.partition,
        limits=limits,
        direct=args.direct,
        api_key=target.api_key,
        tls_ca=target.tls_ca,
    ) as producer:
        total = len(args.messages) if args.messages else _lines_left(context.stdin, limits)
        with _progress_bar(args, context, "produced", total) as bar:
            # Bounded chunks: stdin may be endless, and each chunk's offsets print as it lands.
            while chunk := list(islice(source, limits.batch_messages_max)):
                offsets = producer.produce_batch(
                    NewMessage(value=value, key=args.key, headers=headers) for value in chunk
                )
                _print_json_lines(
                    ({"partition_id": o.partition_id, "offset": o.offset} for o in offsets),
                    context.stdout,
                )
                bar.update(len(chunk))
    return 0


def _lines_left(stdin: TextIO, limits: ClientLimits) -> int | None:
    """Lines from stdin's position to its end when it is a regular file (read through the
    descriptor, which leaves stdin's own position alone); None for a pipe or a terminal."""
    try:
        descriptor = stdin.fileno()
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    offset, lines, last = os.lseek(descriptor, 0, os.SEEK_CUR), 0, b"\n"
    while chunk := os.pread(descriptor, limits.line_count_chunk_bytes, offset):
        lines, last, offset = lines + chunk.count(b"\n"), chunk[-1:], offset + len(chunk)
    return lines + (last != b"\n")  # a last line without its newline


def _progress_bar(
    args: argparse.Namespace, context: Context, label: str, total: int | None
) -> tqdm[Never]:
    """Counts messages, with their rate and, when the total is known, the time left."""
    shown = _shows_progress(args, context)
    return tqdm(total=total, desc=label, unit="msg", file=context.stderr, disable=not shown)


def _shows_progress(args: argparse.Namespace, context: Context) -> bool:
    """``--progress``: always; ``--no-progress``: never; neither: when stderr is a terminal."""
    return bool(context.stderr.isatty()) if args.progress is None else bool(args.progress)


def cmd_consume(args: argparse.Namespace, context: Context) -> int:
    target = resolve_target(args, context)
    with Consumer(
        target.url,
        args.topic,
        args.partition,
        consumer_id=args.consumer_id,
        direct=args.direct,
        api_key=target.api_key,
        tls_ca=target.tls_ca,
    ) as consumer:
        context.stderr.write(f"consumer_id {consumer.consumer_id}\n")
        total = _lag_total(target, args, consumer) if _shows_progress(args, context) else None
        with _progress_bar(args, context, "consumed", total) as bar:
            return _consume(args, context, consumer, bar)


def _lag_total(target: Target, args: argparse.Namespace, consumer: Consumer) -> int | None:
    """What a follow has to catch up on: the consumer's lag when it starts (None without
    ``--follow``: a single poll has no end to estimate)."""
    if not args.follow:
        return None
    with Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca) as admin:
        lag = admin.consumer_lag(args.topic)
    return sum(
        c.lag_messages
        for c in lag.consumers
        if c.consumer_id == consumer.consumer_id and args.partition in (None, c.partition_id)
    )


def _consume(
    args: argparse.Namespace, context: Context, consumer: Consumer, bar: tqdm[Never]
) -> int:
    while True:
        records = consumer.poll(args.max_messages)
        if args.output == "table":
            for r in records:
                context.stdout.write(f"{r.partition_id}\t{r.offset}\t{r.key or ''}\t{r.value}\n")
            context.stdout.flush()
        else:
            _print_json_lines((_record_json(r) for r in records), context.stdout)
        bar.update(len(records))
        if not args.follow:
            return 0
        if not records:
            try:
                context.sleep(ClientLimits().follow_idle_poll_s)
            except KeyboardInterrupt:  # Ctrl-C ends a follow, like tail -f
                return 0


def cmd_group(args: argparse.Namespace, context: Context) -> int:
    target = resolve_target(args, context)
    with Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca) as admin:
        if args.group_command == "redrive":
            return _redrive(args, admin, context)
        if args.group_command == "create":
            groups = [
                admin.create_group(
                    args.topic,
                    args.name,
                    visibility_timeout_ms=args.visibility_timeout_ms,
                    max_deliveries=args.max_deliveries,
                    dead_letter_topic=args.dead_letter_topic,
                    ordering=args.ordering,
                )
            ]
        else:
            groups = admin.groups(args.topic)
    if args.group_command == "describe":
        return _describe_group(args, groups, context)
    if args.output == "json":
        _print_json_lines((dataclasses.asdict(g) for g in groups), context.stdout)
        return 0
    for g in groups:
        figures = ""
        if g.lag_messages is not None:
            figures = (
                f"\tlag {g.lag_messages} ({g.lag_s or 0:.1f} s)\tin flight {g.in_flight}"
                f"\tdead waiting {g.dead_letters_pending}\tdead-lettered {g.dead_lettered}"
            )
        context.stdout.write(
            f"{g.topic}\t{g.group}\tvisibility {g.visibility_timeout_ms} ms\t"
            f"max deliveries {g.max_deliveries or '-'}\tdead letters {g.dead_letter_topic or '-'}"
            f"\tordering {g.ordering}{figures}\n"
        )
    return 0


def _redrive(args: argparse.Namespace, admin: Admin, context: Context) -> int:
    """Redrive until nothing is left or ``--max-messages`` are redriven."""
    left: int | None = args.max_messages
    redriven = gone = 0
    while left is None or left > 0:
        done = admin.redrive(args.topic, args.name, left)
        redriven, gone = redriven + done.redriven, gone + done.gone
        left = None if left is None else left - done.redriven - done.gone
        if not done.more:
            break
    if args.output == "json":
        _print_json_lines([{"redriven": redriven, "gone": gone}], context.stdout)
    else:
        context.stdout.write(f"redriven {redriven}\tgone (removed by retention) {gone}\n")
    return 0


def _describe_group(args: argparse.Namespace, groups: list[GroupInfo], context: Context) -> int:
    found = [g for g in groups if g.group == args.name]
    if not found:
        context.stderr.write(f"topic {args.topic!r} has no consumer group {args.name!r}\n")
        return 1
    (group,) = found
    if args.output == "json":
        _print_json_lines([dataclasses.asdict(group)], context.stdout)
        return 0
    out = context.stdout
    out.write(
        f"{group.topic}\t{group.group}\tvisibility {group.visibility_timeout_ms} ms\t"
        f"max deliveries {group.max_deliveries or '-'}\t"
        f"dead letters {group.dead_letter_topic or '-'}\tordering {group.ordering}\n"
    )
    out.write("partition\tfloor\tend\tlag\tlag_s\tin_flight\tdead_waiting\tdead_lettered\n")
    rows = {
        p.partition_id: (
            f"{p.partition_id}\t{p.offset}\t{p.end_offset}\t{p.lag_messages}\t{p.lag_s:.1f}\t"
            f"{p.in_flight}\t{p.dead_letters_pending}\t{p.dead_lettered}\n"
        )
        for p in group.partitions
    }
    # A partition whose leader did not answer is shown, not left out (kafka-consumer-groups
    # prints "-" for what it does not know): a missing row would read as "no such partition".
    rows.update((pid, f"{pid}" + "\t-" * 7 + "\n") for pid in group.unavailable_partitions)
    out.writelines(rows[pid] for pid in sorted(rows))
    if group.unavailable_partitions:
        listed = ", ".join(map(str, group.unavailable_partitions))
        context.stderr.write(f"no answer from the leader of partition(s) {listed}: try again\n")
        return 1
    return 0


def cmd_receive(args: argparse.Namespace, context: Context) -> int:
    target = resolve_target(args, context)
    with GroupMember(
        target.url, args.topic, args.group, api_key=target.api_key, tls_ca=target.tls_ca
    ) as member:
        deliveries = member.receive(args.max_messages)
        for d in deliveries:
            if args.output == "json":
                body = {
                    **_record_json(d.record),
                    "delivery_count": d.delivery_count,
                    "receipt": d.receipt,
                }
                context.stdout.write(json.dumps(body) + "\n")
            else:
                r = d.record
                context.stdout.write(
                    f"{r.partition_id}\t{r.offset}\t{d.delivery_count}\t{r.key or ''}\t{r.value}\n"
                )
        context.stdout.flush()
        if args.ack and deliveries:
            member.ack(deliveries)
    return 0


def _record_json(record: Record) -> dict[str, object]:
    return {
        "topic": record.topic,
        "partition_id": record.partition_id,
        "offset": record.offset,
        "key": record.key,
        "message": record.value,
        "headers": dict(record.headers),
        "timestamp_ms": record.timestamp_ms,
    }


def cmd_lag(args: argparse.Namespace, context: Context) -> int:
    target = resolve_target(args, context)
    with Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca) as admin:
        lag = admin.consumer_lag(args.topic)
    out = context.stdout
    if args.output == "json":
        _print_json_lines((dataclasses.asdict(c) for c in lag.consumers), out)
    else:
        _write_lag_table(lag.consumers, out)
    if lag.unavailable_partitions:
        context.stderr.write(
            f"raftq: no answer for partitions {lag.unavailable_partitions}: their consumers "
            "are missing\n"
        )
        return EXIT_FAILURE
    return 0


def cmd_key(args: argparse.Namespace, context: Context) -> int:
    secret_file = getattr(args, "secret_file", None)
    if secret_file is not None:  # the first admin key of a deployment: asked as a node
        url = resolve_url(args.url, args.dir, context.env_url)
        signing = NodeSigning.of(_read_secret(secret_file))
        tls_ca = resolve_tls_ca(args, context)
        cert = _node_cert(args)
        admin = Admin(_leader_of(url, tls_ca), node=signing, tls_ca=tls_ca, node_cert=cert)
    else:
        target = resolve_target(args, context)
        admin = Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca)
    with admin:
        if args.key_command == "create":
            made = admin.create_key(args.role, args.topics, args.name)
            context.stderr.write(
                f"key {made.info.key_id} ({made.info.role}); shown once, keep it secret:\n"
            )
            context.stdout.write(made.key + "\n")
        elif args.key_command == "list" and args.output == "json":
            _print_json_lines((dataclasses.asdict(k) for k in admin.list_keys()), context.stdout)
        elif args.key_command == "list":
            for info in admin.list_keys():
                topics = ",".join(info.topics) or "-"
                context.stdout.write(f"{info.key_id}\t{info.role}\t{topics}\t{info.name}\n")
        else:
            admin.revoke_key(args.key_id)
            context.stdout.write(f"key {args.key_id} revoked\n")
    return 0


def cmd_broker(args: argparse.Namespace, context: Context) -> int:
    if args.broker_command == "remove":
        return _remove_broker(args, context)
    if args.broker_command == "wait-replicated":
        return _wait_replicated(args, context)
    if args.broker_command == "add":
        cluster = LocalCluster(args.dir, progress=_progress_to(context))
        try:
            node = cluster.add_broker(timeout_s=args.timeout_s)
        finally:
            cluster.detach()
        context.stdout.write(f"{node.name} is up: {node.http_address}\n")
        return 0
    target = resolve_target(args, context)
    with Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca) as admin:
        brokers = admin.brokers()
    if args.output == "json":
        _print_json_lines((dataclasses.asdict(b) for b in brokers), context.stdout)
        return 0
    context.stdout.write(f"{'broker':>6} {'state':<6} {'replicas':>8} address\n")
    for b in brokers:
        state = "alive" if b.alive else "DEAD"
        context.stdout.write(f"{b.broker_id:>6} {state:<6} {b.partition_count:>8} {b.address}\n")
    return 0


def cmd_manager(args: argparse.Namespace, context: Context) -> int:
    cluster = LocalCluster(args.dir, progress=_progress_to(context))
    try:
        if args.manager_command == "add":
            node = cluster.add_manager(timeout_s=args.timeout_s)
            context.stdout.write(f"{node.name} joined the managers: {node.http_address}\n")
        else:
            cluster.remove_manager(args.manager_id, timeout_s=args.timeout_s)
            context.stdout.write(f"manager-{args.manager_id} left the managers and stopped\n")
    finally:
        cluster.detach()
    return 0


def _wait_replicated(args: argparse.Namespace, context: Context) -> int:
    """A progress bar over the partitions still under-replicated, until none is."""
    target = resolve_target(args, context)
    with Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca) as admin:
        remaining = admin.under_replicated()
        _wait_down_to_zero(
            args,
            context,
            remaining,
            admin.under_replicated,
            "partitions re-replicated",
            "partition",
        )
    context.stdout.write("every partition has all its replicas on live brokers\n")
    return 0


def _wait_down_to_zero(
    args: argparse.Namespace,
    context: Context,
    remaining: int,
    count: Callable[[], int],
    label: str,
    unit: str,
) -> None:
    """Poll ``count`` until it is 0 (bounded by ``--timeout-s``), with a progress bar."""
    deadline_s = time.monotonic() + args.timeout_s
    with tqdm(
        total=remaining,
        desc=label,
        unit=unit,
        file=context.stderr,
        disable=not _shows_progress(args, context),
    ) as bar:
        while remaining > 0:
            if time.monotonic() >= deadline_s:
                raise UsageError(f"{remaining} {unit}(s) left after {args.timeout_s:g} s")
            context.sleep(ClientLimits().broker_remove_poll_s)
            now = count()
            bar.update(max(remaining - now, 0))
            remaining = now


def _remove_broker(args: argparse.Namespace, context: Context) -> int:
    """Drain the broker (its replicas move to the others, one partition at a time, with a
    progress bar), then, in a local cluster, stop it and record it removed, and remove it
    from the managers' registry (a broker still running elsewhere then stops itself: its
    id is refused)."""
    target = resolve_target(args, context)
    broker_id = args.broker_id
    with Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca) as admin:
        if args.cancel:
            kept = admin.cancel_drain(broker_id)
            context.stdout.write(f"broker {broker_id} stays: it holds {kept} replica(s)\n")
            return 0
        remaining = admin.drain_broker(broker_id)

        def held() -> int:
            return next(b.partition_count for b in admin.brokers() if b.broker_id == broker_id)

        try:
            _wait_down_to_zero(
                args, context, remaining, held, f"moving broker {broker_id}'s replicas", "replica"
            )
        except UsageError as exc:
            raise UsageError(
                f"broker {broker_id}: {exc} (it stays draining; run this again)"
            ) from None
        if args.url is None and (Path(args.dir or DEFAULT_DIR) / CLUSTER_FILE).exists():
            cluster = LocalCluster(args.dir or DEFAULT_DIR, progress=_progress_to(context))
            try:
                cluster.forget_broker(broker_id)
            finally:
                cluster.detach()
        admin.remove_broker(broker_id)
    context.stdout.write(f"broker {broker_id} removed: it holds no replica and its id is retired\n")
    return 0


def _progress_to(context: Context) -> Callable[[str], None]:
    """Progress lines of a cluster operation, on stderr as they come."""

    def progress(line: str) -> None:
        context.stderr.write(line + "\n")
        context.stderr.flush()

    return progress


def cmd_node(args: argparse.Namespace, context: Context) -> int:
    if args.node_command == "check":
        files = [_read_node_file(path) for path in args.files]
        problems = check_deployment(files)
        for problem in problems:
            context.stderr.write(f"raftq: {problem}\n")
        if not problems:
            names = ", ".join(f.name for f in files)
            context.stdout.write(f"{len(files)} node files agree: {names}\n")
        return EXIT_FAILURE if problems else 0
    node = _read_node_file(args.config)
    if importlib.util.find_spec("pysyncobj") is None:
        raise UsageError("this Python lacks the server's packages: pip install 'raftq[server]'")
    context.stdout.flush()
    # exec, not a child: a service manager (systemd) then sees and signals the node itself.
    os.execv(sys.executable, [sys.executable, "-m", node.role, "--config", args.config])


def _node_cert(args: argparse.Namespace) -> tuple[str, str] | None:
    """``--node-cert CERT KEY``, else a ``--dir`` cluster's own with ``--mutual-tls``."""
    if args.node_cert:
        return str(args.node_cert[0]), str(args.node_cert[1])
    if args.url is not None:
        return None
    with contextlib.suppress(UsageError):
        body = _cluster_file(args.dir)
        if body.get("mutual_tls") is True:
            tls = Path(args.dir or DEFAULT_DIR) / "tls"
            return str(tls / "node.pem"), str(tls / "node-key.pem")
    return None


def _leader_of(url: str, tls_ca: str | None) -> str:
    """The manager leader's own URL, asked of ``url`` (the load balancer or a manager):
    a node's request goes straight to it, never through the load balancer."""
    with requests.Session() as session:
        session.trust_env = False  # no proxy between this host's nodes; our CA, not the env's
        session.verify = tls_ca or True
        leader = manager_leader(session, url, ClientLimits().request_timeout_s)
    if leader is None:
        raise UsageError(f"{url}/raft_status names no manager leader: is the cluster up?")
    return leader


def _read_secret(path: str) -> str:
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    if not secret:
        raise UsageError(f"{path} is empty")
    return secret


def _read_node_file(path: str) -> NodeFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return parse_node_file(text, path)


def cmd_cluster(args: argparse.Namespace, context: Context) -> int:
    progress = _progress_to(context)
    if args.cluster_command == "up":
        limits = None if args.limit is None else dict(args.limit)
        if args.dead_broker_timeout_s is not None:
            limits = {**(limits or {}), "broker_dead_after_s": str(args.dead_broker_timeout_s)}
        if args.replace_dead_broker_after_s is not None:
            replace_s = str(args.replace_dead_broker_after_s)
            limits = {**(limits or {}), "broker_replace_after_s": replace_s}
        cluster = LocalCluster(
            args.dir,
            host=args.host,
            base_port=args.base_port,
            db_url=args.db_url,
            limits=limits,
            tls=args.tls,
            mutual_tls=args.mutual_tls,
            brokers=args.brokers,
            hosts=args.hosts,
            progress=progress,
        )
        try:
            cluster.up(timeout_s=args.timeout_s)
        finally:
            cluster.detach()
        _print_summary(cluster, context.stdout)
        return 0
    cluster = LocalCluster(args.dir, progress=progress)
    if args.cluster_command == "status":
        status = cluster.status()
        if args.json:
            context.stdout.write(json.dumps(status.to_json(), indent=2) + "\n")
        else:
            context.stdout.write(format_status(status))
        return 0 if all(n.process_alive and n.http_ok for n in status.nodes) else EXIT_FAILURE
    cluster.down(timeout_s=args.timeout_s)
    context.stdout.write(f"cluster in {cluster.directory} stopped (data kept)\n")
    return 0


def _print_summary(cluster: LocalCluster, out: TextIO) -> None:
    out.write(
        f"RaftQ cluster is up: load balancer {cluster.lb_url}\n"
        f"  directory  {cluster.directory} (cluster.json, secret, logs in <node>/node.log)\n"
        f"  status     raftq cluster status --dir {cluster.directory}\n"
        f"  stop       raftq cluster down --dir {cluster.directory}\n"
    )


def format_status(status: ClusterStatus) -> str:
    lines = [
        f"load balancer {status.load_balancer_url}; manager leader: "
        f"{status.manager_leader or 'none'}",
        f"{'node':<10} {'role':<14} {'pid':>8}  {'process':<8} {'http':<5} address",
    ]
    for node in status.nodes:
        lines.append(
            f"{node.name:<10} {node.role:<14} {node.pid or '-':>8}  "
            f"{'alive' if node.process_alive else 'DOWN':<8} "
            f"{'ok' if node.http_ok else 'NO':<5} {node.http_address}"
        )
    return "\n".join(lines) + "\n"


def cmd_completion(args: argparse.Namespace, context: Context) -> int:
    context.stdout.write(bash_completion(build_parser()))
    return 0


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """A bash completion function for every command, action and option of ``parser``
    (written out from the parser itself, so it never lags behind it)."""
    cases = []
    for name, command in _subcommands(parser).items():
        actions = _subcommands(command)
        if actions:
            inner = [
                f"                {action}) opts={_quoted(_options(sub))} ;;"
                for action, sub in actions.items()
            ]
            body = (
                f'        if [ "$COMP_CWORD" -eq 2 ]; then opts={_quoted(list(actions))}\n'
                '        else case "${COMP_WORDS[2]}" in\n'
                + "\n".join(inner)
                + "\n            esac\n        fi"
            )
        else:
            body = f"        opts={_quoted(_options(command))}"
        cases.append(f"    {name})\n{body}\n        ;;")
    return (
        "_raftq() {\n"
        '    local cur="${COMP_WORDS[COMP_CWORD]}" opts=""\n'
        f'    if [ "$COMP_CWORD" -eq 1 ]; then opts={_quoted(list(_subcommands(parser)))}\n'
        '    else case "${COMP_WORDS[1]}" in\n' + "\n".join(cases) + "\n    esac\n    fi\n"
        '    COMPREPLY=($(compgen -W "$opts" -- "$cur"))\n'
        "}\n"
        "complete -F _raftq raftq\n"
    )


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public way to list them
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]


def _quoted(words: list[str]) -> str:
    return '"' + " ".join(words) + '"'


COMMANDS: dict[str, Callable[[argparse.Namespace, Context], int]] = {
    "cluster": cmd_cluster,
    "topic": cmd_topic,
    "produce": cmd_produce,
    "consume": cmd_consume,
    "key": cmd_key,
    "lag": cmd_lag,
    "group": cmd_group,
    "receive": cmd_receive,
    "broker": cmd_broker,
    "manager": cmd_manager,
    "node": cmd_node,
    "completion": cmd_completion,
}


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
    try:
        return COMMANDS[args.command](args, context)
    except UsageError as exc:
        context.stderr.write(f"raftq: {exc}\n")
        return EXIT_USAGE
    except (RaftQClientError, ClusterError, LayoutError, NodeConfigError) as exc:
        context.stderr.write(f"raftq: {exc}\n")
        return EXIT_FAILURE
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error of ours.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        return 0


if __name__ == "__main__":
    sys.exit(main())
