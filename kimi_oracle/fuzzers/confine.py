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

import contextlib
import fcntl
import os
import struct
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

from kimi_oracle.core.specs import absolute_spec  # noqa: F401 - (its one home is core.specs)

OUTPUT_NAME = "output.log"
OUTPUT_CAP = 64 << 10  # bytes of a process's output kept in its log


def confine(directory: str | os.PathLike) -> None:
    """Enter `directory` (the current directory's place on sys.path kept as an absolute path)
    and send fd 1 and 2 to its capped `output.log`."""
    here = os.getcwd()
    directory = os.path.abspath(directory)
    sys.path[:] = [here if p in ("", ".") else p for p in sys.path]
    os.chdir(directory)
    _capture(Path(directory) / OUTPUT_NAME)


_PIPE: dict[str, Any] = {}  # this process' captured output: the pipe's read end, the writer's lock


def settle_output(patience_s: float = 0.5) -> None:
    """Flush what this (confined) process printed and wait until its log holds it: called after
    each call, so that a crash's finding carries the output that came before it."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if not _PIPE:
        return
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        pending = struct.unpack("i", fcntl.ioctl(_PIPE["fd"], termios.FIONREAD, b"\0\0\0\0"))[0]
        if not pending:
            break
        time.sleep(0.002)
    time.sleep(0.002)  # (a chunk the writer has read but not yet taken the lock for)
    with _PIPE["lock"]:  # the chunk being written, written
        pass


def _capture(log_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    lock = threading.Lock()
    _PIPE.update(fd=read_fd, lock=lock)
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
            with lock:
                kept, noted = _keep(log, chunk, kept, noted)

    threading.Thread(target=drain, name="kimi-output", daemon=True).start()


def _keep(log: Any, chunk: bytes, kept: int, noted: bool) -> tuple[int, bool]:
    """Write what of `chunk` fits under OUTPUT_CAP (and once, that the rest is dropped)."""
    room = OUTPUT_CAP - kept
    if room > 0:
        log.write(chunk[:room])
        kept += min(room, len(chunk))
    if len(chunk) > room and not noted:
        noted = True
        log.write(f"\n[output capped at {OUTPUT_CAP} bytes; the rest is dropped]\n".encode())
    return kept, noted


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


__all__ = ["OUTPUT_CAP", "OUTPUT_NAME", "absolute_spec", "confine", "output_tail", "settle_output"]
