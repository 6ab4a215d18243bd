"""What a candidate's or planner's process keeps of ours: nothing but its own directory and log.

The process that runs user code (a candidate's executor, a planner's check) calls `confine(dir)`
first: its working directory becomes `dir` (a temporary directory its parent made and removes),
so a relative path the code writes never lands among the user's files (the golden directory
being checked, the current directory); a spec naming a file by a relative path is resolved
before (`absolute_spec`). Its stdout and stderr (file descriptors 1 and 2, so that C code and
child processes are caught as well) go to `dir/output.log`, of which the first `OUTPUT_CAP`
bytes are kept and the rest counted: what it prints never reaches our stdout (`--json -` stays
JSON) nor floods our stderr. `output_tail(dir)` reads the end of that log for a finding.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

OUTPUT_NAME = "output.log"
OUTPUT_CAP = 64 << 10  # bytes of a process's output kept in its log


def absolute_spec(spec: str) -> str:
    """`spec` with its file path made absolute (`c/x.py:fn` -> `/cwd/c/x.py:fn`); other specs as
    they are (the same path rule as `oracle.candidates.resolve`)."""
    target, sep, attr = spec.rpartition(":")
    if not sep:
        target, attr = spec, ""
    if not (target.endswith(".py") or "/" in target or "\\" in target):
        return spec
    path = os.path.abspath(target)
    return f"{path}:{attr}" if sep else path


def confine(directory: str | os.PathLike) -> None:
    """Enter `directory` (the current directory's place on sys.path kept as an absolute path)
    and send fd 1 and 2 to its capped `output.log`."""
    here = os.getcwd()
    sys.path[:] = [here if p in ("", ".") else p for p in sys.path]
    os.chdir(directory)
    _capture(Path(directory) / OUTPUT_NAME)


def _capture(log_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    for fd in (1, 2):
        os.dup2(write_fd, fd)
    os.close(write_fd)
    log = open(log_path, "wb", buffering=0)

    def drain() -> None:
        kept, noted = 0, False
        while True:
            try:
                chunk = os.read(read_fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            room = OUTPUT_CAP - kept
            if room > 0:
                log.write(chunk[:room])
                kept += min(room, len(chunk))
            if len(chunk) > room and not noted:
                noted = True
                log.write(f"\n[output capped at {OUTPUT_CAP} bytes; the rest is dropped]\n".encode())

    threading.Thread(target=drain, name="kimi-output", daemon=True).start()


def output_tail(directory: str | os.PathLike | None, limit: int = 4000) -> str:
    """The last `limit` characters of a confined process's output ("" when none)."""
    if directory is None:
        return ""
    try:
        with open(Path(directory) / OUTPUT_NAME, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


__all__ = ["OUTPUT_CAP", "OUTPUT_NAME", "absolute_spec", "confine", "output_tail"]
