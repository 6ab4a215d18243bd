"""`python -m kimi_oracle.cli.parse_check`: which of the command lines on stdin (a JSON list of
argument lists) the CLI would refuse, by click's own parse (nothing runs); one JSON list of
errors on stdout. The device check's dry run asks it (`workflows.device_workflows.parse_errors`,
in a process of its own: the workflows layer imports nothing of the CLI)."""

from __future__ import annotations

import json
import sys

import click

from kimi_oracle.cli import cli


def errors(commands: list[list[str]]) -> list[str]:
    """`ARGS: message` for each command line click refuses."""
    found = []
    for args in commands:
        command = cli.get_command(click.Context(cli), args[0]) if args else None
        if command is None:
            found.append(f"{' '.join(args)}: no such command")
            continue
        try:
            command.make_context(args[0], list(args[1:])).close()
        except click.ClickException as exc:
            found.append(f"{' '.join(args)}: {exc.format_message()}")
    return found


if __name__ == "__main__":
    print(json.dumps(errors(json.load(sys.stdin))))
