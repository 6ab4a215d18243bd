"""Run an engine (request layer) in an executor subprocess: its death or hang is a finding.

`IsolatedEngine(spec)` loads the engine factory in a process forked from the candidates' fork
server (`fuzzers.sandbox`), and plays whole programs there (`oracle.engines.run_program`): one
round trip per scenario. A death raises `EngineDied` (kind `crash`), no answer within
`timeout_s` raises `EngineTimeout` (kind `timeout`); the next call starts a fresh executor.
`LocalEngine(factory)` has the same interface in this process (library callers and tests that
plant engines in-process by choice).
"""

from __future__ import annotations

import pickle
import signal
from typing import Any, Sequence

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.images import pack_raw, unpack_raw
from kimi_oracle.core.lifecycle import Started
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.fuzzers.sandbox import _context, _hidden_main, candidate_threads, die_with_parent, signal_name
from kimi_oracle.oracle.checks import CRASH, TIMEOUT
from kimi_oracle.oracle.request_checks import ENGINE_ERROR
from kimi_oracle.oracle.engines import EngineFactory, Raised, Step, Trace, alone_rows, engine_paths, load_engine, run_program


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


def _serve(conn: Any, spec: str, base: PreprocessConfig) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL)
    torch.set_num_threads(candidate_threads())
    try:
        factory = load_engine(spec)
        paths, configurable = _describe(factory, base)
    except CandidateError as exc:
        conn.send_bytes(pickle.dumps(("error", str(exc))))
        return
    except Exception as exc:  # noqa: BLE001 - the factory itself fails: a load error
        conn.send_bytes(pickle.dumps(("error", f"engine {spec!r} cannot be made: {type(exc).__name__}: {exc}")))
        return
    conn.send_bytes(pickle.dumps(("ready", paths, configurable, factory.description)))
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if msg is None:
            return
        try:
            if msg[0] == "run":
                _, cfg, steps, packed, alone = msg
                reply: tuple = ("ok", run_program(factory, cfg, steps, [unpack_raw(p) for p in packed], alone=alone))
            else:
                _, cfg, packed, path = msg
                reply = ("ok", alone_rows(factory, Tokenizer(), cfg, unpack_raw(packed), path))
        except CandidateError as exc:
            reply = ("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - the engine raised outside prepare/encode (its factory)
            reply = ("raised", type(exc).__name__, str(exc))
        conn.send_bytes(pickle.dumps(reply))


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
    """An engine in an executor process, restarted after a death or a hang."""

    def __init__(self, spec: str, base: PreprocessConfig, *, timeout_s: float = 60.0, start_timeout_s: float = 120.0):
        self.spec, self.base = spec, base
        self.timeout_s, self.start_timeout_s = float(timeout_s), float(start_timeout_s)
        self._proc: Any = None
        self._conn: Any = None
        self.paths: tuple[str, ...] = ("default",)
        self.configurable = False
        self.description = ""
        self.restarts = -1

    def start(self) -> None:
        """Start the executor; CandidateError when the engine cannot be loaded."""
        if self._proc is not None and self._proc.is_alive():
            return
        self.restarts += 1
        ctx = _context()
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_serve, args=(child, self.spec, self.base), name=f"kimi-engine[{self.spec}]",
                           daemon=True)
        with _hidden_main():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        msg = self._receive(self.start_timeout_s, starting=True)
        if msg[0] == "error":
            self.close()
            raise CandidateError(msg[1])
        _, self.paths, self.configurable, self.description = msg

    def _receive(self, timeout: float, starting: bool = False) -> tuple:
        if not self._conn.poll(timeout):
            self._kill()
            if starting:
                raise CandidateError(f"engine {self.spec!r}: the executor did not start within {timeout:.0f} s")
            raise EngineTimeout(self.spec, "CallTimedOut", f"no answer within {timeout:g} s; the process was killed")
        try:
            return pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            self._proc.join(5.0)
            how = signal_name(self._proc.exitcode)
            self._kill()
            if starting:
                raise CandidateError(f"engine {self.spec!r}: the executor died while loading it ({how})") from None
            raise EngineDied(self.spec, f"ProcessDied[{how}]", f"the engine's process died: {how}") from None

    def _call(self, msg: tuple) -> Any:
        self.start()
        self._conn.send_bytes(pickle.dumps(msg))
        try:
            reply = self._receive(self.timeout_s)
        except KeyboardInterrupt:  # the answer would be read as the next call's: end the executor
            self._kill()
            raise
        if reply[0] == "error":
            raise CandidateError(reply[1])
        if reply[0] == "raised":
            raise EngineRaised(self.spec, reply[1], f"the engine raised {reply[1]}: {reply[2]}")
        return reply[1]

    def run(self, base: PreprocessConfig, steps: Sequence[Step], table: Sequence[Image.Image],
            alone: bool = True) -> Trace:
        """`run_program` in the executor."""
        return self._call(("run", base, list(steps), [pack_raw(im) for im in table], alone))

    def alone(self, config: PreprocessConfig, img: Image.Image, path: str) -> torch.Tensor | Raised:
        """One image prepared and encoded alone in a fresh engine, in the executor."""
        return self._call(("alone", config, pack_raw(img), path))

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(5.0)
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
        self._proc = self._conn = None

    def close(self) -> None:
        """Stop the executor."""
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send_bytes(pickle.dumps(None))
            except OSError:
                pass
            self._proc.join(1.0)
        self._kill()



__all__ = ["EngineCrash", "EngineDied", "EngineRaised", "EngineTimeout", "IsolatedEngine", "LocalEngine"]
