"""The gate's driver (`Gate`): runs the stages in order, compares the rows, writes the report."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from kimi_oracle.core import interrupts
from kimi_oracle.core.errors import KimiOracleError
from kimi_oracle.core.files import utc_now
from kimi_oracle.core.threads import one_torch_thread
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import TIMEOUT
from kimi_oracle.workflows.gate import corpus, fuzz, goldens, invariance, planner, report, timing
from kimi_oracle.workflows.gate.budget import Budget
from kimi_oracle.workflows.gate.changes import named_by_change
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.observations import crash_check
from kimi_oracle.workflows.gate.options import GateOptions, Stage
from kimi_oracle.workflows.gate.timing import BaselineCrash
from kimi_oracle.workflows.known import aggregate, compare_rows


def stage_modules(folder: Path = Path(__file__).parent, package: str = __package__) -> tuple[ModuleType, ...]:
    """The stage modules of `package` (this one; its `folder`), in their `ORDER`: every module that
    names its place (`NAME`, `ORDER`, `COMPARED`) and has `run(ctx) -> Stage`. A new stage is one
    new module."""
    found = []
    for info in pkgutil.iter_modules([str(folder)]):
        module = importlib.import_module(f"{package}.{info.name}")
        if hasattr(module, "NAME"):
            order, compared, run = (getattr(module, k, None) for k in ("ORDER", "COMPARED", "run"))
            if not (isinstance(order, int) and not isinstance(order, bool) and isinstance(compared, bool)
                    and callable(run)):
                raise TypeError(f"{module.__name__}: a stage needs ORDER (int), COMPARED (bool) and run(ctx)")
            found.append(module)
    found.sort(key=lambda m: m.ORDER)
    for key in ("NAME", "ORDER"):
        values = [getattr(m, key) for m in found]
        if len(set(values)) != len(values):
            raise ValueError(f"two gate stages share a {key}: {values}")
    return tuple(found)


_STAGE_MODULES = stage_modules()
# The stages in order, each `run(ctx) -> Stage`; the rows are compared once the last stage in
# `COMPARED_STAGES` has run (before `performance`).
STAGE_RUNS: tuple[tuple[str, Callable[[GateContext], Stage]], ...] = tuple((m.NAME, m.run) for m in _STAGE_MODULES)
STAGES = tuple(name for name, _ in STAGE_RUNS)
# The stages whose rows take part in the relative verdict (a stage fails when a failing row has
# an input from it).
COMPARED_STAGES = tuple(m.NAME for m in _STAGE_MODULES if m.COMPARED)
# The stage after which the rows are compared (the last compared one; none compared: the last).
_COMPARE_AFTER = (COMPARED_STAGES or STAGES)[-1]


class _Shared:
    """A `Gate` attribute that is its context's (library callers and tests read and set them)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, gate: Any, owner: type | None = None) -> Any:
        return self if gate is None else getattr(gate.ctx, self.name)

    def __set__(self, gate: Any, value: Any) -> None:
        setattr(gate.ctx, self.name, value)


class Gate:
    """Runs the stages and builds the report."""

    options = _Shared()
    out_dir = _Shared()
    progress = _Shared()
    clock = _Shared()
    new = _Shared()
    old = _Shared()
    config = _Shared()
    known = _Shared()
    margin = _Shared()
    relative = _Shared()
    observations = _Shared()
    findings = _Shared()
    baseline_findings = _Shared()
    seed = _Shared()
    interrupted = _Shared()
    hung = _Shared()

    def __init__(self, new: str, baseline: str | None, options: GateOptions, out_dir: Path,
                 progress: Callable[[str], None] | None = None):
        self.ctx = GateContext(new, baseline, options, out_dir, progress)
        self.rows: list[dict[str, Any]] = []
        # each side's rows against the reference (with a baseline; the rows name the change)
        self.side_rows: list[dict[str, Any]] = []
        self.stages: list[Stage] = []

    def start(self) -> None:
        """Start both executors (CandidateError when a spec cannot be loaded)."""
        self.ctx.start()

    def close(self) -> None:
        """The findings begun written (a failed write makes its stage an error), then both
        executors stopped."""
        try:
            self._writes_done()
        finally:
            self.ctx.close()

    # -- one stage each (library callers and tests) ------------------------------------------

    def goldens(self) -> Stage:
        """The goldens stage (`workflows.gate.goldens`)."""
        return goldens.run(self.ctx)

    def planner_stage(self) -> Stage:
        """The planner stage (`workflows.gate.planner`)."""
        return planner.run(self.ctx)

    def fuzzing(self, budget_s: float, overhead_s: float | None = None) -> Stage:
        """The fuzz stage under `budget_s` (and `overhead_s` of harness time; `workflows.gate.fuzz`)."""
        stage = fuzz.fuzzed(self.ctx, budget_s, overhead_s)
        self._writes_done()
        return stage

    def corpus(self) -> Stage:
        """The corpus stage (`workflows.gate.corpus`)."""
        return corpus.run(self.ctx)

    def invariance(self) -> Stage:
        """The invariance stage (`workflows.gate.invariance`)."""
        return invariance.run(self.ctx)

    def performance(self, budget_s: float) -> Stage:
        """The timing stage under `budget_s` (`workflows.gate.timing`)."""
        return timing.timed(self.ctx, budget_s)

    # -- driver ------------------------------------------------------------------------------

    def _run_stage(self, name: str, func: Callable[[], Stage]) -> Stage:
        """Run one stage (skipped once interrupted): whatever it raises becomes its status, never the
        gate's end."""
        if self.ctx.interrupted or interrupts.requested():
            self.ctx.interrupted = True
            stage = Stage(name, "skipped", summary="not run: the gate was interrupted")
            self.stages.append(stage)
            return stage
        self.ctx.progress(f"gate: {name} ...")
        t0 = time.monotonic()
        try:
            stage = func()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (core.interrupts raises both so)
            self.ctx.interrupted = True
            stage = Stage(name, "error", summary="interrupted", reasons=[f"{name}: interrupted before it ended"])
        except BaselineCrash as exc:
            stage = Stage(name, "error", summary=f"the baseline failed: {exc.crash}", reasons=[str(exc)])
        except CandidateCrash as exc:
            check = crash_check(exc)
            how = "timed out" if check == TIMEOUT else "crashed"
            stage = Stage(name, "fail", summary=f"the candidate {how}: {exc}", reasons=[str(exc)])
            self.ctx.findings.append({"stage": name, "check": check, "message": str(exc)})
        except KimiOracleError as exc:
            stage = Stage(name, "error", summary=str(exc), reasons=[f"{name}: {exc}"])
        except Exception as exc:  # noqa: BLE001 - a stage must never take the report down with it
            stage = Stage(name, "error", summary=f"internal error: {type(exc).__name__}: {exc}",
                          reasons=[f"{name}: internal error: {type(exc).__name__}: {exc}"])
        if interrupts.requested() and stage.status != "error":
            # A signal whose exception was swallowed (it landed in a gc callback): the stage
            # may not have run to its end, so it cannot count.
            self.ctx.interrupted = True
            stage.status = "error"
            stage.reasons.insert(0, f"{name}: interrupted")
            stage.summary = "interrupted; " + stage.summary
        t1 = time.monotonic()
        stage.elapsed_s = t1 - t0
        stage.details["overhead_s"] = round(self.ctx.overhead(t0, t1), 3)
        self.stages.append(stage)
        self.ctx.progress(f"gate: {name}: {stage.status} ({stage.elapsed_s:.1f}s) {stage.summary}")
        return stage

    def run(self) -> dict[str, Any]:
        """Run every stage, write gate-report.json and gate-report.md, return the report.

        CandidateError (before any report) when a candidate cannot be loaded. An interrupt
        makes the running stage an error and skips the rest; the report is written and its
        verdict is `error` (the CLI then exits 130/143)."""
        self.ctx.out_dir.mkdir(parents=True, exist_ok=True)
        started = utc_now()
        t0 = time.monotonic()
        budget = self.ctx.options.budget_s
        self.ctx.budget = Budget(budget, t0, with_baseline=self.ctx.old is not None,
                                 with_engine=self.ctx.options.engine is not None,
                                 with_video=self.ctx.options.media != "image")
        try:
            self.start()
            with self.ctx.clock.reference_timed(), one_torch_thread():
                for name, stage_run in STAGE_RUNS:
                    if name == timing.NAME:  # (no finding is written while candidates are timed)
                        self._writes_done()
                    self._run_stage(name, functools.partial(stage_run, self.ctx))
                    if name == _COMPARE_AFTER:  # the correctness stages have run: their rows
                        self._compare()
        except KeyboardInterrupt:  # between stages, or while the executors start
            self.ctx.interrupted = True
        finally:
            try:
                self.close()
            except KeyboardInterrupt:
                self.ctx.interrupted = True
        ran = {s.name for s in self.stages}
        self.stages += [Stage(name, "skipped", summary="not run: the gate was interrupted")
                        for name in STAGES if name not in ran]
        # Held back from here on: a signal now makes the verdict `error`, and the report that
        # says so is complete before the signal's exception ends the process.
        with interrupts.held() as pending:
            self._writes_done()
            if pending():
                self.ctx.interrupted = True
            result = report.build(self.ctx, self.stages, self.rows, started, t0, budget, side_rows=self.side_rows)
            report.write(self.ctx, result, self.rows)
            return result

    def _writes_done(self) -> None:
        """Every finding folder begun in the background written (`GateContext.writes_done`); a
        write that failed makes its stage an error."""
        for stage_name, reason in self.ctx.writes_done():
            stage = next((s for s in self.stages if s.name == stage_name), None)
            if stage is not None:
                stage.status = "error"
                stage.reasons.append(reason)

    def _compare(self) -> None:
        """The rows (root cause x mode class x {OLD, NEW}) and their verdicts; with a baseline or a
        known file they decide the correctness stages (a stage fails when a failing row has an
        input from it)."""
        old = aggregate(self.ctx.observations["old"]) if self.old is not None else None
        named = self.ctx.observations["new"]
        if self.old is not None:  # NEW's causes where the change from OLD is named (gate.changes)
            named = named_by_change(named, self.ctx.observations["old"])
            self.side_rows = compare_rows(aggregate(self.ctx.observations["new"]), old, self.margin,
                                          known=self.known, strict=self.options.strict)
        self.rows = compare_rows(aggregate(named), old, self.margin, known=self.known, strict=self.options.strict)
        if not self.relative:
            return
        for stage in self.stages:
            if stage.name in COMPARED_STAGES and stage.status in ("pass", "fail"):
                failing = [r for r in self.rows if r["fails"] and stage.name in r["stages"]]
                stage.status = "fail" if failing or stage.reasons else "pass"
                if failing:
                    stage.summary += f"; {len(failing)} failing row(s)"
