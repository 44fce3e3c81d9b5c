"""``raftq group``: consumer groups with leased delivery (create, list, describe, redrive)."""

from __future__ import annotations

import argparse
import dataclasses

from raftq.admin import Admin
from raftq.cli.context import Context, print_json_lines, resolve_target
from raftq.records import GroupInfo


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
        print_json_lines((dataclasses.asdict(g) for g in groups), context.stdout)
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
        print_json_lines([{"redriven": redriven, "gone": gone}], context.stdout)
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
        print_json_lines([dataclasses.asdict(group)], context.stdout)
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
