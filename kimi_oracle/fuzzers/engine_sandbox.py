"""Run an engine (request layer) in an executor subprocess: its death or hang is a finding.

`IsolatedEngine(spec)` loads the engine factory in a process forked from the candidates' fork
server (`fuzzers.sandbox`), and plays whole programs there (`oracle.engines.run_program`): one
round trip per scenario. A death raises `EngineDied` (kind `crash`), no answer within
`timeout_s` raises `EngineTimeout` (kind `timeout`); the next call starts a fresh executor.
`LocalEngine(factory)` has the same interface in this process (library callers and tests that
plant engines in-process by choice).
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import shutil
import signal
import tempfile
import time
from typing import Any, Sequence

import torch
from PIL import Image

from kimi_oracle.core import memory, wire
from kimi_oracle.core.activity import Activity
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import START_TIMEOUT_S
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.images import pack_raw, unpack_raw
from kimi_oracle.core.lifecycle import Started
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.fuzzers.confine import absolute_spec, confine, output_tail, settle_output
from kimi_oracle.fuzzers.executor import candidate_threads, die_with_parent, kill_group, lead_own_group, limit_memory
from kimi_oracle.fuzzers.sandbox import _context, _hidden_main, signal_name
from kimi_oracle.oracle.checks import CRASH, TIMEOUT
from kimi_oracle.oracle.request_checks import ENGINE_ERROR
from kimi_oracle.oracle.engines import (EngineFactory, Raised, Step, Trace, alone_rows, engine_paths, load_engine,
                                        rows_from_wire, rows_to_wire, run_program, trace_from_wire, trace_to_wire)
from kimi_oracle.pipelines import outputs


class EngineCrash(Exception):
    """The engine's process died or hung: `check` is `crash` or `timeout`."""

    check = CRASH

    def __init__(self, spec: str, exc_type: str, message: str):
        super().__init__(f"engine {spec!r}: {message}")
        self.spec, self.exc_type, self.message = spec, exc_type, message


class EngineDied(EngineCrash):
    """The executor died (a signal, an exit)."""


class EngineRaised(EngineCrash):
    """The engine raised outside prepare and encode (its factory, its configure)."""

    check = ENGINE_ERROR


class EngineTimeout(EngineCrash):
    """The executor did not answer in time."""

    check = TIMEOUT


def _describe(factory: EngineFactory, base: PreprocessConfig) -> tuple[tuple[str, ...], bool]:
    engine = factory(base, Tokenizer())
    return engine_paths(engine), callable(getattr(engine, "configure", None))


def _send(conn: Any, reply: tuple) -> None:
    conn.send_bytes(wire.dumps(reply))


def _serve(conn: Any, spec: str, base: PreprocessConfig, fault_path: str, memory_limit_mb: int | None,
           workdir: str) -> None:
    # Confined as a candidate's executor is (fuzzers.executor): SIGINT is its parent's to handle,
    # it dies with its parent, it leads its own process group (whatever it forks is killed with
    # it), it works in its own directory with its output in a capped log, under the memory limit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL)
    lead_own_group()
    load_spec = absolute_spec(spec)
    fault_file = open(fault_path, "w")
    confine(workdir)
    faulthandler.enable(file=fault_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=fault_file, all_threads=True, chain=False)
    memory.bound_heap_growth()
    if memory_limit_mb:
        outputs.disable()
        limit_memory(memory_limit_mb)
    torch.set_num_threads(candidate_threads())
    try:
        factory = load_engine(load_spec)
    except CandidateError as exc:
        return _send(conn, ("error", str(exc).replace(load_spec, spec)))
    except Exception as exc:  # noqa: BLE001 - an import that fails in an unexpected way
        return _send(conn, ("error", f"engine {spec!r} cannot be loaded: {type(exc).__name__}: {exc}"))
    _send(conn, ("loaded",))
    try:  # (the factory's own time counts against the case timeout, not the start's)
        paths, configurable = _describe(factory, base)
    except CandidateError as exc:
        return _send(conn, ("error", str(exc)))
    except Exception as exc:  # noqa: BLE001 - the factory itself fails: a load error
        return _send(conn, ("error", f"engine {spec!r} cannot be made: {type(exc).__name__}: {exc}"))
    _send(conn, ("ready", [str(p) for p in paths], bool(configurable), str(factory.description)))
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())  # (from our own parent)
        except (EOFError, OSError):
            return
        if msg is None:
            return
        _send(conn, _answer(factory, msg))


def _answer(factory: EngineFactory, msg: tuple) -> tuple:
    """One request's answer, as plain data."""
    try:
        if msg[0] == "run":
            _, cfg, steps, packed, alone = msg
            reply: tuple = ("ok", trace_to_wire(run_program(factory, cfg, steps, [unpack_raw(p) for p in packed],
                                                            alone=alone)))
        else:
            _, cfg, packed, path = msg
            reply = ("ok", rows_to_wire(alone_rows(factory, Tokenizer(), cfg, unpack_raw(packed), path)))
    except CandidateError as exc:
        reply = ("error", str(exc))
    except Exception as exc:  # noqa: BLE001 - the engine raised outside prepare/encode (its factory)
        reply = ("raised", type(exc).__name__, str(exc))
    settle_output()
    return reply


class LocalEngine(Started):
    """An engine factory run in this process (no isolation)."""

    def __init__(self, factory: EngineFactory, base: PreprocessConfig):
        self.spec = factory.spec
        self.factory = factory
        self.description = factory.description
        self.paths, self.configurable = _describe(factory, base)

    def run(self, base: PreprocessConfig, steps: Sequence[Step], table: Sequence[Image.Image],
            alone: bool = True) -> Trace:
        """`run_program` here."""
        try:
            return run_program(self.factory, base, steps, table, alone=alone)
        except CandidateError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in the executor: the engine raised outside prepare/encode
            raise EngineRaised(self.spec, type(exc).__name__, f"the engine raised {type(exc).__name__}: {exc}") from exc

    def alone(self, config: PreprocessConfig, img: Image.Image, path: str) -> torch.Tensor | Raised:
        """One image prepared and encoded alone in a fresh engine."""
        return alone_rows(self.factory, Tokenizer(), config, img, path)

    def start(self) -> None:
        """Nothing to start."""

    def close(self) -> None:
        """Nothing to stop."""


class IsolatedEngine(Started):
    """An engine in an executor process, restarted after a death or a hang. The executor is
    confined as a candidate's is (see `_serve`); what it answers is plain data (`core.wire`):
    nothing of the engine is ever loaded in this process."""

    def __init__(self, spec: str, base: PreprocessConfig, *, timeout_s: float = 60.0,
                 start_timeout_s: float = START_TIMEOUT_S, memory_limit_mb: int | None = None):
        self.spec, self.base = spec, base
        self.timeout_s, self.start_timeout_s = float(timeout_s), float(start_timeout_s)
        self.memory_limit_mb = memory_limit_mb
        self._proc: Any = None
        self._conn: Any = None
        self._workdir: str | None = None
        self._fault_path: str | None = None
        self.paths: tuple[str, ...] = ("default",)
        self.configurable = False
        self.description = ""
        self.restarts = -1
        self.activity = Activity()  # spans in which the executor worked on a request (or was waited for)

    def start(self) -> None:
        """Start the executor; CandidateError when the engine cannot be loaded or made (its import
        within the start timeout, its factory within the case timeout)."""
        if self._proc is not None and self._proc.is_alive():
            return
        self._cleanup()
        self.restarts += 1
        ctx = _context()
        self._workdir = os.path.abspath(tempfile.mkdtemp(prefix="kimi-engine-"))
        fd, fault_path = tempfile.mkstemp(prefix="kimi-engine-", suffix=".fault")
        os.close(fd)
        self._fault_path = os.path.abspath(fault_path)
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_serve, args=(child, self.spec, self.base, self._fault_path, self.memory_limit_mb,
                                                self._workdir),
                           name=f"kimi-engine[{self.spec}]", daemon=True)
        with _hidden_main():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        try:  # (a start that fails leaves nothing behind: its directory and fault file go with it)
            msg = self._receive(self.start_timeout_s, starting="loading it")
            if msg[0] == "loaded":
                msg = self._receive(self.timeout_s, starting="making an engine (its factory)")
        except BaseException:
            self.close()
            raise
        if msg[0] == "error":
            self.close()
            raise CandidateError(str(msg[1]))
        if msg[0] != "ready" or len(msg) != 4:
            self.close()
            raise CandidateError(f"engine {self.spec!r}: its executor answered {str(msg[0])[:40]!r} on start")
        _, paths, self.configurable, self.description = msg
        self.paths = tuple(paths)

    def output(self) -> str:
        """The end of what the engine's process printed (its capped log)."""
        return output_tail(self._workdir)

    def _receive(self, timeout: float, starting: str = "") -> tuple:
        if not self._conn.poll(timeout):
            self._kill()
            if starting:
                raise CandidateError(f"engine {self.spec!r}: no answer within {timeout:g} s while {starting}; the "
                                     "process was killed" + ("" if "factory" not in starting else " (--case-timeout)"))
            raise EngineTimeout(self.spec, "CallTimedOut", f"no answer within {timeout:g} s; the process was killed"
                                + self._said())
        try:
            blob = self._conn.recv_bytes()
        except (EOFError, OSError):
            self._proc.join(5.0)
            how = signal_name(self._proc.exitcode)
            hint = " (killed: out of memory?)" if self._proc.exitcode == -signal.SIGKILL else ""
            self._kill()
            if starting:
                raise CandidateError(f"engine {self.spec!r}: the executor died while {starting} ({how}){self._said()}"
                                     ) from None
            raise EngineDied(self.spec, f"ProcessDied[{how}]", f"the engine's process died: {how}{hint}"
                             + self._said()) from None
        reply = wire.loads(blob, f"engine {self.spec!r}'s executor")
        if not isinstance(reply, tuple) or not reply or not isinstance(reply[0], str):
            raise CandidateError(f"engine {self.spec!r}: its executor answered with no known message")
        return reply

    def _said(self) -> str:
        text = " | ".join(line for line in self.output().strip().splitlines()[-3:] if line.strip())
        return f"; its last output: {text[-300:]}" if text else ""

    def _call(self, msg: tuple) -> Any:
        self.start()
        sent = time.monotonic()
        self._conn.send_bytes(pickle.dumps(msg))
        try:
            reply = self._receive(self.timeout_s)
        except KeyboardInterrupt:  # the answer would be read as the next call's: end the executor
            self._kill()
            raise
        finally:
            self.activity.add(sent, time.monotonic())
        if reply[0] == "error":
            raise CandidateError(str(reply[1]))
        if reply[0] == "raised":
            raise EngineRaised(self.spec, str(reply[1]), f"the engine raised {reply[1]}: {reply[2]}")
        return reply[1]

    def run(self, base: PreprocessConfig, steps: Sequence[Step], table: Sequence[Image.Image],
            alone: bool = True) -> Trace:
        """`run_program` in the executor."""
        return trace_from_wire(self._call(("run", base, list(steps), [pack_raw(im) for im in table], alone)))

    def alone(self, config: PreprocessConfig, img: Image.Image, path: str) -> torch.Tensor | Raised:
        """One image prepared and encoded alone in a fresh engine, in the executor."""
        return rows_from_wire(self._call(("alone", config, pack_raw(img), path)))

    def _kill(self) -> None:
        if self._proc is not None:
            kill_group(self._proc.pid)  # (whatever the engine forked goes with it)
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(5.0)
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
        self._proc = self._conn = None

    def _cleanup(self) -> None:
        for path, remove in ((self._workdir, lambda p: shutil.rmtree(p, ignore_errors=True)),
                             (self._fault_path, os.unlink)):
            if path:
                try:
                    remove(path)
                except OSError:
                    pass
        self._workdir = self._fault_path = None

    def close(self) -> None:
        """Stop the executor (and everything it forked); remove its directory."""
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send_bytes(pickle.dumps(None))
            except OSError:
                pass
            self._proc.join(1.0)
        self._kill()
        self._cleanup()


__all__ = ["EngineCrash", "EngineDied", "EngineRaised", "EngineTimeout", "IsolatedEngine", "LocalEngine"]
