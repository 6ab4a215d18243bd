"""Fuzzing a planner: sizes and configurations drawn in bulk, judged by pure arithmetic.

`fuzz_planner(planner, base, sizes=N, seed=S)` judges N sizes over configurations varied around
`base` against `core.geometry.plan` (`oracle.planner.judge_size`), `BLOCK` sizes per
configuration (so that the first 300 sizes already span about ten configurations). The sizes and
configurations are drawn by `inputs.plan_draw` (over `inputs.draw.GeneratorSource`): the choices
of `inputs.generators.config_choices`, the pixel fuzzers' too, with side caps that are not a
multiple of the merge size, and the threshold sizes, special sides, ratios and log-uniform sizes
of the generators' input space. Throughput: docs/measurements.md.

`run_isolated(function, *args)` runs such a job (or the golden grid check of
`workflows.golden.check_planner`) in a forked process, so that a planner that crashes the
interpreter, exhausts memory or hangs ends as an error line of the report, not the command.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
import traceback
from typing import Any, Callable, Iterator

import numpy as np

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import START_TIMEOUT_S
from kimi_oracle.core.errors import BackendError, CandidateError
from kimi_oracle.core.files import to_json
from kimi_oracle.fuzzers.confine import absolute_spec, confine
from kimi_oracle.inputs.draw import GeneratorSource, Source
from kimi_oracle.inputs.plan_draw import PLAN_MAX_SIDE, draw_plan_config, draw_plan_sizes
from kimi_oracle.oracle.planner import CallWatch, Planner, PlannerReport, check_sizes, load_planner

DEFAULT_SIZES = 200_000
# Sizes judged per drawn configuration: small, so that a planner that ignores a rarely varied key
# (a fixed token count) is caught within 300 sizes (docs/measurements.md: the cost of a block).
BLOCK = 32
DEFAULT_MAX_SIDE = PLAN_MAX_SIDE


def cases(base: PreprocessConfig, count: int, seed: int, *, vary_config: bool = True,
          max_side: int = DEFAULT_MAX_SIDE, source: Source | None = None
          ) -> Iterator[tuple[int, int, PreprocessConfig, None]]:
    """`count` (width, height, config, None) cases, deterministic from `seed`: blocks of `BLOCK`
    sizes drawn by `inputs.plan_draw` from a NumPy generator seeded (seed, 0x91A7), or from
    `source` when given (a recorded choice list replays to the same cases)."""
    if source is None:
        source = GeneratorSource(np.random.default_rng([int(seed), 0x91A7]))
    left = int(count)
    while left > 0:
        config = draw_plan_config(source, base) if vary_config else base
        n = min(BLOCK, left)
        for w, h in draw_plan_sizes(source, config, n, max_side):
            yield w, h, config, None
        left -= n


def fuzz_planner(planner: Planner | str, base: PreprocessConfig, *, sizes: int = DEFAULT_SIZES, seed: int = 0,
                 vary_config: bool = True, max_side: int = DEFAULT_MAX_SIDE) -> PlannerReport:
    """Judge `sizes` drawn sizes and configurations (in this process)."""
    if isinstance(planner, str):
        planner = load_planner(planner)
    report = PlannerReport(planner.spec)
    return check_sizes(planner, cases(base, sizes, seed, vary_config=vary_config, max_side=max_side), report,
                       source="fuzz", should_stop=interrupts.requested)


# ---------------------------------------------------------------------------------------------
# isolation


class _SharedWatch(CallWatch):
    """The planner process's side of the watch: calls begun and ended and the size in flight, in
    memory the watching parent reads; the deadline (monotonic clock, system-wide) stops
    `check_sizes` with the report so far."""

    def __init__(self, shared: Any, deadline: float | None):
        self.shared, self.deadline = shared, deadline

    def began(self, width: int, height: int) -> None:
        self.shared[1], self.shared[2] = width, height
        self.shared[0] += 1

    def ended(self) -> None:
        self.shared[3] += 1

    def should_stop(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def _child(conn: Any, function: Callable[..., PlannerReport], args: tuple, kwargs: dict, shared: Any,
           deadline: float | None, workdir: str) -> None:
    from kimi_oracle.fuzzers.sandbox import die_with_parent
    from kimi_oracle.oracle import planner as planner_module

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the run
    die_with_parent(signal.SIGKILL)
    # Its own directory and capped log (fuzzers.confine): its prints never reach our stdout.
    args = tuple(absolute_spec(a) if isinstance(a, str) and i == 0 else a for i, a in enumerate(args))
    confine(workdir)
    planner_module.CALL_WATCH = _SharedWatch(shared, deadline)
    try:
        report = function(*args, **kwargs)
        # Plain data only: a planner's own objects (a class of its module) cannot cross the pipe.
        conn.send(("ok", json.loads(to_json(report.to_dict()))))
    except (CandidateError, BackendError) as exc:
        conn.send(("error", type(exc).__name__, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, told apart by type
        conn.send(("raised", f"{type(exc).__name__}: {exc}",
                   "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]))


# How often the parent looks at a planner's process, and the time past the budget's end it gives
# the process to send its report (it stops itself at the budget's end).
WATCH_EVERY_S = 0.05
BUDGET_GRACE_S = 5.0


def run_isolated(function: Callable[..., PlannerReport], *args: Any, planner: str = "planner",
                 case_timeout_s: float | None = None, budget_s: float | None = None, **kwargs: Any) -> PlannerReport:
    """`function(*args, **kwargs)` (a module-level function returning a PlannerReport; args[0] the
    planner's spec) in a forked process, confined (`fuzzers.confine`). A planner that cannot load
    raises CandidateError (exit 2); one that kills the process, spends more than `case_timeout_s`
    on one size, or does not finish within `budget_s` (it stops itself there with the report so
    far; a grace later it is killed) gives a report with an error line naming the size. An
    interrupt ends the process."""
    from kimi_oracle.fuzzers.sandbox import _context, _hidden_main

    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    shared = ctx.Array("q", 4, lock=False)  # calls begun, width, height, calls ended
    started = time.monotonic()
    deadline = started + budget_s if budget_s is not None else None
    workdir = os.path.abspath(tempfile.mkdtemp(prefix="kimi-planner-"))
    proc = ctx.Process(target=_child, args=(child, function, args, kwargs, shared, deadline, workdir),
                       name=f"kimi-planner[{planner}]", daemon=True)
    try:
        with _hidden_main():
            proc.start()
        child.close()
        try:
            msg, why = _watch(parent, proc, shared, case_timeout_s, deadline)
        finally:
            parent.close()
        return _answer(msg, why, proc, planner, started, int(shared[3]))
    finally:
        _end(proc)  # (an interrupt included)
        shutil.rmtree(workdir, ignore_errors=True)


def _answer(msg: Any, why: str | None, proc: Any, planner: str, started: float, calls: int) -> PlannerReport:
    from kimi_oracle.fuzzers.sandbox import signal_name

    if msg is None:
        _end(proc)
        report = PlannerReport(planner, elapsed_s=time.monotonic() - started, checked=calls)
        report.errors.append(f"the planner's process {why or 'died (' + signal_name(proc.exitcode) + ')'}")
        return report
    if msg[0] == "ok":
        return PlannerReport.from_dict(msg[1])
    if msg[0] == "error":
        raise CandidateError(msg[2]) if msg[1] != "BackendError" else BackendError(msg[2])
    report = PlannerReport(planner, elapsed_s=time.monotonic() - started)
    report.errors.append(f"the planner check raised {msg[1]}")
    return report


def _watch(conn: Any, proc: Any, shared: Any, case_timeout_s: float | None, deadline: float | None
           ) -> tuple[Any, str | None]:
    """The process's message, or (None, why it was given up on: a size past the case timeout,
    the budget's end past its grace, no call begun within START_TIMEOUT_S: a planner whose import
    hangs; None when it died)."""
    seen = -1
    since = began = time.monotonic()
    while True:
        if conn.poll(WATCH_EVERY_S):
            try:
                return conn.recv(), None
            except (EOFError, OSError):
                return None, None
        now = time.monotonic()
        begun, ended = int(shared[0]), int(shared[3])
        if begun != seen:
            seen, since = begun, now
        if case_timeout_s is not None and begun > ended and now - since > case_timeout_s:
            return None, (f"got no answer from the planner within {case_timeout_s:g} s on {shared[1]}x{shared[2]} "
                          f"(after {ended} sizes): it was killed")
        if deadline is not None and now > deadline + BUDGET_GRACE_S:
            return None, f"did not finish within the budget (after {ended} sizes): it was killed"
        if begun == 0 and now - began > START_TIMEOUT_S:
            return None, f"did not load the planner within {START_TIMEOUT_S:g} s: it was killed"
        if not proc.is_alive() and not conn.poll(0):
            return None, None


def _end(proc: Any) -> None:
    if proc.pid is None:  # never started
        return
    if proc.is_alive():
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    proc.join(5)


__all__ = [
    "BLOCK",
    "DEFAULT_SIZES",
    "cases",
    "fuzz_planner",
    "run_isolated",
]
