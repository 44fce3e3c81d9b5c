"""``raftq produce``, ``raftq consume`` and ``raftq receive``: messages in and out."""

from __future__ import annotations

import argparse
import json
import os
import stat
from itertools import islice
from typing import Never, TextIO

from tqdm import tqdm

from protocol.types import NewMessage, headers_of
from raftq.admin import Admin
from raftq.cli.context import (
    Context,
    Target,
    print_json_lines,
    progress_bar,
    resolve_target,
    shows_progress,
    stdin_messages,
)
from raftq.client_limits import ClientLimits
from raftq.consumer import Consumer
from raftq.group import GroupMember
from raftq.producer import Producer
from raftq.records import Record


def cmd_produce(args: argparse.Namespace, context: Context) -> int:
    target = resolve_target(args, context)
    limits = ClientLimits()
    source = iter(args.messages) if args.messages else stdin_messages(context.stdin)
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
        with progress_bar(args, context, "produced", total) as bar:
            # Bounded chunks: stdin may be endless, and each chunk's offsets print as it lands.
            while chunk := list(islice(source, limits.batch_messages_max)):
                offsets = producer.produce_batch(
                    NewMessage(value=value, key=args.key, headers=headers) for value in chunk
                )
                print_json_lines(
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
        total = _lag_total(target, args, consumer) if shows_progress(args, context) else None
        with progress_bar(args, context, "consumed", total) as bar:
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
            print_json_lines((_record_json(r) for r in records), context.stdout)
        bar.update(len(records))
        if not args.follow:
            return 0
        if not records:
            try:
                context.sleep(ClientLimits().follow_idle_poll_s)
            except KeyboardInterrupt:  # Ctrl-C ends a follow, like tail -f
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
