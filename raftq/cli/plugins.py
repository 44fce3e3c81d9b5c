"""Command groups that other distributions add to ``raftq``: the server's operations
commands (``cluster``, ``node``, ``broker``, ``manager``) come with ``raftq-server``, which
names its group under the entry point group ``raftq.commands``. The client imports no server
code: without the server, each of those commands is a stub that says how to get it."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TypeAlias

from raftq.cli.context import EXIT_USAGE, Context

ENTRY_POINT_GROUP = "raftq.commands"

OPERATIONS_COMMANDS = ("cluster", "node", "broker", "manager")
"""The server's commands: a client-only install shows each as a stub."""

SERVER_INSTALL_HINT = (
    "it comes with the server distribution, raftq-server: from a RaftQ checkout, "
    "`pip install ./server` (or run scripts/cluster.sh for a local cluster)"
)

Handler = Callable[[argparse.Namespace, Context], int]
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


@dataclass(frozen=True, slots=True)
class CommandGroup:
    """What a distribution adds: its parsers (given the client's target options: ``--url``,
    ``--dir``, ``--api-key-file``, ``--output``, ``--tls-ca``) and a handler per command."""

    add_parsers: Callable[[SubParsers, argparse.ArgumentParser], None]
    handlers: Mapping[str, Handler]


def installed_groups() -> tuple[list[CommandGroup], list[str]]:
    """The command groups installed, and why any failed to load."""
    groups: list[CommandGroup] = []
    problems: list[str] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            group = point.load()
        except Exception as exc:
            problems.append(f"{point.value}: {type(exc).__name__}: {exc}")
            continue
        if isinstance(group, CommandGroup):
            groups.append(group)
        else:
            problems.append(f"{point.value} is not a raftq.cli.plugins.CommandGroup")
    return groups, problems


def add_plugin_commands(commands: SubParsers, target: argparse.ArgumentParser) -> None:
    """Add the installed groups' commands, and a stub for each operations command that none
    of them has; each parser carries its handler (``args.plugin_handler``)."""
    groups, problems = installed_groups()
    handlers: dict[str, Handler] = {}
    for group in groups:
        group.add_parsers(commands, target)
        handlers.update(group.handlers)
    for name in OPERATIONS_COMMANDS:
        if name not in handlers:
            handlers[name] = _stub(commands, name, problems)
    for name, handler in handlers.items():
        commands.choices[name].set_defaults(plugin_handler=handler)


def _stub(commands: SubParsers, name: str, problems: list[str]) -> Handler:
    stub = commands.add_parser(
        name, add_help=False, help=f"(not installed: {name} is the server's)"
    )
    stub.add_argument("arguments", nargs=argparse.REMAINDER)
    why = f" (the server's commands failed to load: {'; '.join(problems)})" if problems else ""

    def missing(args: argparse.Namespace, context: Context) -> int:
        context.stderr.write(
            f"raftq: `raftq {name}` is an operations command: {SERVER_INSTALL_HINT}{why}\n"
        )
        return EXIT_USAGE

    return missing
