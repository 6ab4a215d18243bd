"""Run a candidate in a worker subprocess, so that its segfault, abort, OOM or hang is a finding (parent side).

The executor's side (serve, answer, time, limit memory) is `fuzzers.executor`, the failures are
`fuzzers.crashes`; their names stay importable from here.

`IsolatedCandidate(spec)` behaves like `candidates.Candidate` (it is one), but every call is
sent to a long-lived executor process. When the executor dies (a signal, `os.abort()`,
`sys.exit`, the kernel's OOM killer) the call raises `CandidateDied`; when it does not answer
within `timeout_s` it is killed and the call raises `CandidateTimeout`. Both are
`CandidateCrash`es, so the oracle and the fuzzers turn them into findings with the input that
caused them, and the next call starts a fresh executor.

Executors are forked from a multiprocessing fork server that has already imported torch,
NumPy, Pillow and the reference, so a restart after a crash costs milliseconds, not an import.
The executor's Python stack at the moment of death (faulthandler) is kept as the traceback.

A death is told apart by how it happened: its exception type is `ProcessDied[SIGSEGV]`,
`ProcessDied[exit status 1]`, ... (so `grouping.finding_key` keeps an `exit 0` and an
`exit status 1` death apart). The executor dies with its parent (PR_SET_PDEATHSIG on Linux),
and an interrupt (Ctrl-C, SIGTERM) that reaches the parent during a call ends the executor.

`IsolatedCandidate.time_call` times one call *inside* the executor (the candidate's own time,
without the transfer of images and results), for the gate's A/B timing.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any, Sequence

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S, START_TIMEOUT_S
from kimi_oracle.core.errors import BackendError, CandidateError
from kimi_oracle.core.activity import Activity
from kimi_oracle.core.images import alpha_class, pack_raw, resize_class
from kimi_oracle.core.lifecycle import Started
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.fuzzers.confine import output_tail
# The executor side and the failures live in their own modules; their names stay importable here.
from kimi_oracle.fuzzers.crashes import (CallTimedOut, CandidateDied, CandidateRaised,  # noqa: F401
                                         CandidateTimeout, ProcessDied, signal_name)
from kimi_oracle.fuzzers.executor import (_answer, _serve, _unpack_tensor,  # noqa: F401
                                          candidate_threads, die_with_parent, kill_group)
from kimi_oracle.oracle.candidates import Candidate, CandidateCrash
from kimi_oracle.oracle.checks import CRASH

# Modules the fork server imports once, so that forked executors start warm.
PRELOAD = ["numpy", "PIL.Image", "torch", "kimi_oracle.pipelines.reference", "kimi_oracle.oracle.candidates", "kimi_oracle.fuzzers.sandbox"]

_CONTEXT_LOCK = threading.Lock()
_CONTEXT: Any = None


# The end of a candidate's output (fuzzers.confine's log) kept with a crash or a timeout.
OUTPUT_KEPT = 2000

@contextlib.contextmanager
def _hidden_main() -> Any:
    # multiprocessing re-imports the parent's __main__ in the fork server and its children; the
    # parent may be an atheris script, pytest or stdin. Executors need nothing from it.
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _context() -> Any:
    global _CONTEXT
    with _CONTEXT_LOCK:
        if _CONTEXT is None:
            if "forkserver" in multiprocessing.get_all_start_methods():
                ctx = multiprocessing.get_context("forkserver")
                ctx.set_forkserver_preload(PRELOAD)
            else:  # pragma: no cover - non-Linux
                ctx = multiprocessing.get_context("spawn")
            _CONTEXT = ctx
        return _CONTEXT


# ---------------------------------------------------------------------------------------------
# the parent side


class IsolatedCandidate(Started, Candidate):
    """A candidate whose every call runs in an executor subprocess (restarted after a crash)."""

    def __init__(self, spec: str, *, timeout_s: float = DEFAULT_CASE_TIMEOUT_S, memory_limit_mb: int | None = None,
                 start_timeout_s: float = START_TIMEOUT_S):
        super().__init__(spec, self._unused, "")
        self.timeout_s = float(timeout_s)
        self.memory_limit_mb = memory_limit_mb
        self.start_timeout_s = float(start_timeout_s)
        self._proc: Any = None
        self._conn: Any = None
        self._fault_path: str | None = None
        self._workdir: str | None = None  # the executor's working directory (fuzzers.confine)
        self.calls = 0
        self.restarts = 0
        self.crashes = 0
        self.timeouts = 0
        # Spans in which the executor worked on a request or this process waited for it.
        self.activity = Activity()
        self._in_flight: Call | None = None
        self._timing_key: Any = None
        self._timing_images: list[Image.Image] = []
        self._started = False
        self._accepts: tuple[str, ...] | None = None
        # (mode, alpha class, resample kind, fill stage, background) seen: a behaviour coverage.
        self.behaviours: set[tuple[str, ...]] = set()
        self._cpu: dict[int, float] = {}  # executor pid -> CPU seconds it reported last

    @property
    def cpu_s(self) -> float:
        """CPU seconds the candidate's executors reported, all of them together (a call that
        killed its executor is not counted)."""
        return sum(self._cpu.values())

    @property
    def accepts(self) -> tuple[str, ...]:
        """The input forms the candidate declares (reported by its executor; starts it)."""
        if self._accepts is None:
            self.start()
        return self._accepts or ("pil",)

    @staticmethod
    def _unused(images: Any, config: Any) -> Any:  # pragma: no cover - never called
        raise RuntimeError("IsolatedCandidate runs its function in an executor")

    # -- lifecycle

    def start(self) -> None:
        """Start the executor (loads the candidate); CandidateError when it cannot be loaded."""
        if self._proc is not None and self._proc.is_alive():
            return
        self._cleanup()
        self._timing_key = None
        if self._started:
            self.restarts += 1
        self._started = True
        ctx = _context()
        fd, fault_path = tempfile.mkstemp(prefix="kimi-executor-", suffix=".fault")
        os.close(fd)
        # (absolute: the executor changes its working directory, and the temporary directory may
        # be given relative, as nightly's workers give it)
        self._fault_path = os.path.abspath(fault_path)
        self._workdir = os.path.abspath(tempfile.mkdtemp(prefix="kimi-candidate-"))
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_serve, args=(child, self.spec, self._fault_path, self.memory_limit_mb, self._workdir),
                           name=f"kimi-executor[{self.spec}]", daemon=True)
        with _hidden_main():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        # (a start that fails leaves nothing behind: its directory and fault file go with it)
        if not parent.poll(self.start_timeout_s):
            self.close()
            raise CandidateError(f"candidate {self.spec!r}: the executor did not start within "
                                 f"{self.start_timeout_s:.0f} s")
        try:
            msg = parent.recv()
        except (EOFError, OSError):
            code = self._reap()
            text = (f"candidate {self.spec!r}: the executor died while loading it "
                    f"({signal_name(code)}){self._fault_excerpt()}")
            self.close()
            raise CandidateError(text) from None
        if msg[0] == "error":
            self.close()
            raise CandidateError(msg[2])
        self.description = msg[1] or ""
        self._accepts = tuple(msg[2]) if len(msg) > 2 else ("pil",)

    def close(self) -> None:
        """Stop the executor."""
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self._proc.join(1.0)
        self._kill()
        self._cleanup()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def _kill(self) -> None:
        call, self._in_flight = getattr(self, "_in_flight", None), None
        if call is not None:  # stopped before it answered: that call has no result
            call._settle(error=CandidateError(f"candidate {self.spec!r}: its process was stopped before it answered"))
        proc = self._proc
        if proc is not None:
            kill_group(proc.pid)  # (whatever the candidate forked goes with it)
            if proc.is_alive():
                proc.kill()
            proc.join(5.0)
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
        self._proc = None
        self._conn = None

    def output(self) -> str:
        """The end of what the candidate's process printed (its capped log; "" when none)."""
        return output_tail(self._workdir)

    def _cleanup(self) -> None:
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        if self._fault_path:
            try:
                os.unlink(self._fault_path)
            except OSError:
                pass
            self._fault_path = None

    def _reap(self) -> int | None:
        proc = self._proc
        code = None
        if proc is not None:
            proc.join(5.0)
            code = proc.exitcode
        return code

    def _fault_text(self) -> str:
        if not self._fault_path:
            return ""
        try:
            return Path(self._fault_path).read_text(errors="replace").strip()
        except OSError:
            return ""

    def _fault_excerpt(self) -> str:
        text = self._fault_text()
        output = self.output()[-OUTPUT_KEPT:].strip()  # (what it printed: an import error's traceback)
        return (f"\n{text[-3000:]}" if text else "") + (f"\n{output}" if output else "")

    # -- calls

    def _note(self, images: Sequence[Image.Image], config: PreprocessConfig) -> None:
        bg = config.transparent_bg_config
        for img in images:
            self.behaviours.add((img.mode, alpha_class(img), resize_class(img, config),
                                 config.fill_stage if bg else "none",
                                 bg.pattern if bg else "none"))

    def __call__(self, images: Sequence[Image.Image], config: PreprocessConfig) -> PreprocessResult:
        """Run the candidate on `images` in the executor; CandidateCrash subclasses on failure."""
        return self.start_call(images, config).result()

    def start_call(self, images: Sequence[Image.Image], config: PreprocessConfig) -> "Call":
        """Send `images` to the executor and return at once: the executor works on them while
        this process goes on; `.result()` waits for the answer (the call's timeout counts from
        the sending). One call is in flight at a time: starting another (or any request) first
        receives the answer of the one in flight, which its own `.result()` then returns."""
        self._note(images, config)
        call = Call(self)
        self._send(("call", [pack_raw(img) for img in images], config, self.input_form), call)
        return call

    def time_call(self, images: Sequence[Image.Image], config: PreprocessConfig) -> float:
        """Seconds one call of the candidate's function on `images` takes, measured inside the
        executor (images sent once and kept there while the same list is timed again; CUDA work
        waited for). A crash, death or hang raises like `__call__`."""
        key = tuple(id(img) for img in images)
        send = None
        self._drain()
        if self._timing_key != key or self._proc is None or not self._proc.is_alive():
            send = [pack_raw(img) for img in images]
        msg = self._request(("time", key, send, config))
        # Kept alive so that their ids name these images while the executor holds them.
        self._timing_key, self._timing_images = key, list(images)
        if msg[0] == "timed":
            return float(msg[1])
        return self._failed(msg)

    def _failed(self, msg: tuple) -> Any:
        if msg[0] == "raised":
            err = CandidateRaised(self.spec, msg[1], msg[2], msg[3], output=self.output()[-OUTPUT_KEPT:])
            if len(msg) > 5:
                err.check, err.stats = msg[4], msg[5]
            raise err
        raise CandidateError(msg[2]) if msg[1] != "BackendError" else BackendError(msg[2])

    def _request(self, msg: tuple) -> tuple:
        """Send one request and wait for its answer (at most timeout_s): the answer, or raise."""
        call = Call(self)
        self._send(msg, call)
        return call.answer()

    def _send(self, msg: tuple, call: "Call") -> None:
        """Send a request for `call` (the one in flight is received first). A pipe that breaks
        on sending is the executor's death, raised by `call.answer()`."""
        self._drain()
        if self._proc is None or not self._proc.is_alive():
            self.start()
        self.calls += 1
        call.sent = time.monotonic()
        try:
            self._conn.send(msg)
        except (BrokenPipeError, OSError):
            call._settle(error=self._capture(self._died))
            return
        except KeyboardInterrupt:
            self._abandon()
            raise
        finally:
            self._waited(call.sent)
        self._in_flight = call

    def _drain(self) -> None:
        """Receive the answer of the call in flight, if any (kept in its Call)."""
        call = self._in_flight
        if call is not None:
            self._receive(call)

    def _receive(self, call: "Call") -> None:
        """Wait for `call`'s answer (what is left of its timeout since it was sent)."""
        if call is not self._in_flight:  # abandoned (an interrupt) or its process stopped
            call._settle(error=CandidateError(f"candidate {self.spec!r}: the call was abandoned before it answered"))
            return
        self._in_flight = None
        conn = self._conn
        began = time.monotonic()
        try:
            try:
                ready = conn.poll(max(0.0, call.sent + self.timeout_s - began))
            except (EOFError, OSError):
                ready = True
            if not ready:
                call._settle(error=self._capture(self._timed_out, time.monotonic() - call.sent))
                return
            try:
                answer, span = conn.recv()
            except (EOFError, OSError):
                call._settle(error=self._capture(self._died))
                return
            self.activity.add(span[0], span[1])
            if len(span) > 2 and self._proc is not None:  # its CPU so far (each executor counted once)
                self._cpu[self._proc.pid] = float(span[2])
            call._settle(answer=answer)
        except KeyboardInterrupt:
            call._settle(error=CandidateError(f"candidate {self.spec!r}: interrupted while waiting for its answer"))
            self._abandon()
            raise
        finally:
            self._waited(began)

    def _waited(self, began: float) -> None:
        self.activity.add(began, time.monotonic())

    def _abandon(self) -> None:
        # Ctrl-C or SIGTERM in the middle of a call: the executor's answer would be read as the
        # next call's. The run is ending anyway: end the executor with it.
        self._in_flight = None
        self._kill()
        self._cleanup()

    @staticmethod
    def _capture(func: Any, *args: Any) -> BaseException:
        try:
            func(*args)
        except CandidateCrash as exc:
            return exc
        raise AssertionError("unreachable: the handler always raises")  # pragma: no cover

    def _died(self) -> Any:
        code = self._reap()
        how = signal_name(code)
        stack = self._fault_text()
        self.crashes += 1
        self._kill()
        output = self.output()[-OUTPUT_KEPT:]  # (what it printed, before its directory goes)
        self._cleanup()
        hint = " (killed: out of memory?)" if code == -signal.SIGKILL else ""
        # The type names how it died, so that deaths by different signals or exit statuses are
        # different findings (`grouping.finding_key` keys crashes by exception type).
        raise CandidateDied(self.spec, f"ProcessDied[{how}]", f"the candidate's process died: {how}{hint}",
                            stack or f"(no Python stack was recorded; {how})", signal=how, returncode=code,
                            output=output)

    def _timed_out(self, waited: float) -> Any:
        proc = self._proc
        if proc is not None and proc.pid:
            try:
                os.kill(proc.pid, signal.SIGUSR1)
            except OSError:
                pass
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and not self._fault_text():
                time.sleep(0.02)
            time.sleep(0.05)
        stack = self._fault_text()
        self.timeouts += 1
        self._kill()
        output = self.output()[-OUTPUT_KEPT:]
        self._cleanup()
        raise CandidateTimeout(self.spec, "CallTimedOut",
                               f"no answer within {self.timeout_s:g} s (waited {waited:.1f} s); the process was killed",
                               stack or "(no Python stack was recorded)", timeout_s=self.timeout_s, output=output)


class Call:
    """A request sent to an executor: `.result()` waits for it (see IsolatedCandidate.start_call)."""

    def __init__(self, owner: IsolatedCandidate):
        self.owner = owner
        self.sent = 0.0
        self.done = False
        self._answer: tuple | None = None
        self._error: BaseException | None = None

    def _settle(self, answer: tuple | None = None, error: BaseException | None = None) -> None:
        self.done = True
        self._answer, self._error = answer, error

    def wait(self) -> str | None:
        """Wait for the answer without raising: None, or the check a failure names (`timeout`
        for a hang, `crash` for a death or a raise)."""
        if not self.done:
            self.owner._receive(self)
        if self._error is not None:
            return str(getattr(self._error, "check", CRASH))
        return None

    def answer(self) -> tuple:
        """The executor's raw answer; the crash, death or timeout raised."""
        if self.wait() is not None:
            assert self._error is not None
            raise self._error
        assert self._answer is not None
        return self._answer

    def result(self) -> PreprocessResult:
        """The candidate's result; CandidateCrash subclasses on failure."""
        msg = self.answer()
        if msg[0] == "ok":
            return PreprocessResult(_unpack_tensor(msg[1]), _unpack_tensor(msg[2]))
        return self.owner._failed(msg)


__all__ = [
    "Call",
    "CallTimedOut",
    "CandidateDied",
    "CandidateRaised",
    "CandidateTimeout",
    "IsolatedCandidate",
    "ProcessDied",
    "die_with_parent",
    "signal_name",
]
