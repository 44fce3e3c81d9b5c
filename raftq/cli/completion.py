"""``raftq completion bash``: tab completion from the parser itself."""

from __future__ import annotations

import argparse

from raftq.cli.context import Context
from raftq.cli.parser import build_parser


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
