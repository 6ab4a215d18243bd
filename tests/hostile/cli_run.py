"""The CLI run in-process for the hostile tests: (exit code, stdout, stderr)."""

from __future__ import annotations

import pytest

from kimi_oracle.cli import main


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return int(exc.value.code), out.out, out.err
