"""The CLI run in-process for the hostile tests: (exit code, stdout, stderr)."""

from __future__ import annotations

from cli_run import exit_code_of


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = exit_code_of(*args)
    out = capsys.readouterr()
    return code, out.out, out.err
