"""Worker processes of a campaign: capped logs, the pumps that fill them, process-group signalling
and reaping."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable




class CappedLog:
    """A log file that never grows past `limit` bytes: when it would, the older part is dropped
    (a marker line says how much) and the newest `limit / 2` bytes are kept. `on_line` (if
    given) sees every complete line, dropped ones included (libFuzzer statistics)."""

    def __init__(self, path: Path, limit: int, on_line: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.limit = max(int(limit), 4096)
        self.on_line = on_line
        self.dropped = 0
        self.size = 0
        self._marker = 0  # bytes of the marker line at the file's start
        self._partial = b""
        self._fh = open(self.path, "w+b")

    def write(self, data: bytes) -> None:
        """Append `data`; keep the tail when the file would pass the limit."""
        if not data:
            return
        if self.on_line is not None:
            self._lines(data)
        self._fh.write(data)
        self.size += len(data)
        if self.size > self.limit:
            self._truncate()

    def _lines(self, data: bytes) -> None:
        buf = self._partial + data
        *lines, self._partial = buf.split(b"\n")
        if len(self._partial) > 1 << 16:  # a "line" without end: judged in pieces
            lines.append(self._partial)
            self._partial = b""
        for line in lines:
            self.on_line(line.decode("utf-8", "replace"))

    def _truncate(self) -> None:
        keep = self.limit // 2
        self._fh.flush()
        self._fh.seek(self.size - keep)
        tail = self._fh.read(keep)
        cut = tail.find(b"\n")
        if 0 <= cut < 4096:
            tail = tail[cut + 1 :]  # start at a line
        self.dropped += self.size - self._marker - len(tail)  # the log's own bytes, not its marker's
        marker = (f"[kimi-oracle: {self.dropped} earlier bytes of this log were dropped; it keeps the newest "
                  f"{self.limit / 2**20:g} MiB at most]\n").encode()
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(marker + tail)
        self._fh.flush()
        self.size = len(marker) + len(tail)
        self._marker = len(marker)

    def close(self) -> None:
        """Flush, hand the last partial line to `on_line`, and close."""
        if self.on_line is not None and self._partial:
            self.on_line(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        try:
            self._fh.close()
        except OSError:
            pass


def pump(stream: Any, log: CappedLog) -> threading.Thread:
    """A thread copying `stream` (a pipe) into `log` until the pipe closes, then closing both."""
    def run() -> None:
        # SIGINT/SIGTERM go to the main thread only (it may hold them back while it writes a report).
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
            pass
        try:
            while True:
                chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
                if not chunk:
                    break
                try:
                    log.write(chunk)
                except OSError:
                    pass  # a full disk: keep draining, so that the writer never blocks
        except (OSError, ValueError):
            pass
        finally:
            log.close()
            try:
                stream.close()
            except OSError:
                pass

    thread = threading.Thread(target=run, name=f"log:{log.path.name}", daemon=True)
    thread.start()
    return thread


def last_line(path: Path, limit: int = 4096) -> str:
    """The last non-empty line of a (log) file, at most `limit` bytes read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


@dataclass
class _Worker:
    index: int
    engine: str
    budget_s: float
    spec_path: Path
    status_path: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    deadline: float = 0.0
    killed: bool = False
    returncode: int | None = None
    log: CappedLog | None = None
    pump: threading.Thread | None = None


def _close_log(w: _Worker) -> None:
    # The pipe closes once every process of the worker's session is gone (_reap_group).
    if w.pump is not None:
        w.pump.join(10.0)


def _signal_group(w: _Worker, sig: int) -> None:
    if w.proc is None:
        return
    try:
        os.killpg(w.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_group(w: _Worker) -> None:
    # Leftovers of a finished worker (an executor spinning in a hung candidate, the fork
    # server) live in its session: end them.
    if w.proc is None:
        return
    if w.proc.poll() is None:
        return
    if w.returncode is None:
        w.returncode = w.proc.returncode
    _signal_group(w, signal.SIGKILL)
