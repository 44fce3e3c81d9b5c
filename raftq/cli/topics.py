"""``raftq topic``, ``raftq lag`` and ``raftq key``: topics, consumer lag and API keys."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterable
from typing import TextIO

from raftq.admin import Admin
from raftq.cli.as_node import leader_of, node_cert, read_secret
from raftq.cli.context import (
    EXIT_FAILURE,
    Context,
    print_json_lines,
    resolve_target,
    resolve_tls_ca,
    resolve_url,
)
from raftq.node_signing import NodeSigning
from raftq.records import ConsumerLag


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
            print_json_lines((dataclasses.asdict(t) for t in admin.list_topics()), context.stdout)
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


def cmd_lag(args: argparse.Namespace, context: Context) -> int:
    target = resolve_target(args, context)
    with Admin(target.url, api_key=target.api_key, tls_ca=target.tls_ca) as admin:
        lag = admin.consumer_lag(args.topic)
    out = context.stdout
    if args.output == "json":
        print_json_lines((dataclasses.asdict(c) for c in lag.consumers), out)
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
        signing = NodeSigning.of(read_secret(secret_file))
        tls_ca = resolve_tls_ca(args, context)
        cert = node_cert(args)
        admin = Admin(leader_of(url, tls_ca), node=signing, tls_ca=tls_ca, node_cert=cert)
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
            print_json_lines((dataclasses.asdict(k) for k in admin.list_keys()), context.stdout)
        elif args.key_command == "list":
            for info in admin.list_keys():
                topics = ",".join(info.topics) or "-"
                context.stdout.write(f"{info.key_id}\t{info.role}\t{topics}\t{info.name}\n")
        else:
            admin.revoke_key(args.key_id)
            context.stdout.write(f"key {args.key_id} revoked\n")
    return 0
