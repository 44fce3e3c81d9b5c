"""``raftq cluster``, ``raftq node``, ``raftq broker`` and ``raftq manager``: running a
cluster, the operations commands. They come with the server's distribution, which names
``COMMAND_GROUP`` to the client's CLI (entry point group ``raftq.commands``)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from ops.cluster import ClusterError, ClusterStatus, LocalCluster
from ops.cluster_layout import CLUSTER_FILE, LayoutError
from ops.parser import add_operations_parsers
from raftq.admin import Admin
from raftq.cli.context import (
    DEFAULT_DIR,
    EXIT_FAILURE,
    CommandError,
    Context,
    UsageError,
    print_json_lines,
    progress_to,
    resolve_target,
    shows_progress,
)
from raftq.cli.plugins import CommandGroup, Handler
from raftq.client_limits import ClientLimits
from runtime.node_config import NodeConfigError, NodeFile, check_deployment, parse_node_file


def cmd_broker(args: argparse.Namespace, context: Context) -> int:
    if args.broker_command == "remove":
        return _remove_broker(args, context)
    if args.broker_command == "wait-replicated":
        return _wait_replicated(args, context)
    if args.broker_command == "add":
        cluster = LocalCluster(args.dir, progress=progress_to(context))
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
        print_json_lines((dataclasses.asdict(b) for b in brokers), context.stdout)
        return 0
    context.stdout.write(f"{'broker':>6} {'state':<6} {'replicas':>8} address\n")
    for b in brokers:
        state = "alive" if b.alive else "DEAD"
        context.stdout.write(f"{b.broker_id:>6} {state:<6} {b.partition_count:>8} {b.address}\n")
    return 0


def cmd_manager(args: argparse.Namespace, context: Context) -> int:
    cluster = LocalCluster(args.dir, progress=progress_to(context))
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
        disable=not shows_progress(args, context),
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
            cluster = LocalCluster(args.dir or DEFAULT_DIR, progress=progress_to(context))
            try:
                cluster.forget_broker(broker_id)
            finally:
                cluster.detach()
        admin.remove_broker(broker_id)
    context.stdout.write(f"broker {broker_id} removed: it holds no replica and its id is retired\n")
    return 0


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
    context.stdout.flush()
    # exec, not a child: a service manager (systemd) then sees and signals the node itself.
    os.execv(sys.executable, [sys.executable, "-m", node.role, "--config", args.config])


def _read_node_file(path: str) -> NodeFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return parse_node_file(text, path)


def cmd_cluster(args: argparse.Namespace, context: Context) -> int:
    progress = progress_to(context)
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
        f"  directory  {cluster.directory} (cluster.json, client.json, secret, <node>/node.log)\n"
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


def _failing_as_commands(handler: Handler) -> Handler:
    """The operations' own errors, as the client's CLI reports a command that failed."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace, context: Context) -> int:
        try:
            return handler(args, context)
        except (ClusterError, LayoutError, NodeConfigError) as exc:
            raise CommandError(str(exc)) from exc

    return run


COMMAND_GROUP = CommandGroup(
    add_parsers=add_operations_parsers,
    handlers={
        "cluster": _failing_as_commands(cmd_cluster),
        "node": _failing_as_commands(cmd_node),
        "broker": _failing_as_commands(cmd_broker),
        "manager": _failing_as_commands(cmd_manager),
    },
)
