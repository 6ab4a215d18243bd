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

import os
import signal
import time
import traceback
from typing import Any, Callable, Iterator

import numpy as np

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import BackendError, CandidateError
from kimi_oracle.inputs.draw import GeneratorSource, Source
from kimi_oracle.inputs.plan_draw import PLAN_MAX_SIDE, draw_plan_config, draw_plan_sizes
from kimi_oracle.oracle.planner import Planner, PlannerReport, check_sizes, load_planner

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


def _child(conn: Any, function: Callable[..., PlannerReport], args: tuple, kwargs: dict) -> None:
    from kimi_oracle.fuzzers.sandbox import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the run
    die_with_parent(signal.SIGKILL)
    try:
        report = function(*args, **kwargs)
        conn.send(("ok", report.to_dict()))
    except (CandidateError, BackendError) as exc:
        conn.send(("error", type(exc).__name__, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, told apart by type
        conn.send(("raised", f"{type(exc).__name__}: {exc}",
                   "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]))


def run_isolated(function: Callable[..., PlannerReport], *args: Any, planner: str = "planner",
                 timeout_s: float = 3600.0, **kwargs: Any) -> PlannerReport:
    """`function(*args, **kwargs)` (a module-level function returning a PlannerReport) in a
    forked process. A planner that cannot load raises CandidateError (exit 2); one that kills
    or hangs the process gives a report with an error line. An interrupt ends the process."""
    from kimi_oracle.fuzzers.sandbox import _context, _hidden_main, signal_name

    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, function, args, kwargs), name=f"kimi-planner[{planner}]",
                       daemon=True)
    with _hidden_main():
        proc.start()
    child.close()
    started = time.monotonic()
    try:
        ready = parent.poll(timeout_s)
        msg = None
        if ready:
            try:
                msg = parent.recv()
            except (EOFError, OSError):
                msg = None
    except KeyboardInterrupt:
        _end(proc)
        raise
    finally:
        parent.close()
    if msg is None:
        _end(proc)
        report = PlannerReport(planner, elapsed_s=time.monotonic() - started)
        how = "did not finish within %.0f s" % timeout_s if not ready else f"died ({signal_name(proc.exitcode)})"
        report.errors.append(f"the planner's process {how}")
        return report
    proc.join(5)
    if proc.is_alive():
        _end(proc)
    if msg[0] == "ok":
        return PlannerReport.from_dict(msg[1])
    if msg[0] == "error":
        raise CandidateError(msg[2]) if msg[1] != "BackendError" else BackendError(msg[2])
    report = PlannerReport(planner, elapsed_s=time.monotonic() - started)
    report.errors.append(f"the planner check raised {msg[1]}")
    return report


def _end(proc: Any) -> None:
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
