"""The CLI run in-process by the tests: its exit code (and, for the hostile tests, its output)."""

from __future__ import annotations

import pytest

from kimi_oracle.cli import main


def exit_code_of(*args) -> int:
    """Run `kimi-oracle ARGS` in this process; its exit code."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    return int(exc.value.code)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """Run `kimi-oracle ARGS` in this process; its exit code, stdout and stderr."""
    code = exit_code_of(*args)
    out = capsys.readouterr()
    return code, out.out, out.err
