"""The gate's performance stage: with a baseline, the interleaved A/B timing of NEW against OLD."""

from __future__ import annotations

import time
from typing import Any

from kimi_oracle.core import interrupts
from kimi_oracle.core.errors import InputError
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import Verdict, compare
from kimi_oracle.oracle.grouping import mode_class
from kimi_oracle.pipelines import reference
from kimi_oracle.workflows.bench import BENCH_INPUTS, interleaved_ratio
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.observations import crash_check
from kimi_oracle.workflows.gate.options import Stage

# The stage's place in the gate (workflows.gate.run finds it): its name in the report, its
# order among the stages, and whether its rows take part in the relative verdict.
NAME = "performance"
ORDER = 60
COMPARED = False

# Inputs of the A/B timing, cheapest first; as many as the timing share allows are run.
PERF_INPUTS = ("rgb-640x480", "rgba-1920x1080-chessboard", "batch16-mixed", "rgb-4032x3024-k25",
               "rgb-1920x1080", "rgb-7680x4320")


class BaselineCrash(Exception):
    """OLD crashed, died or hung during the timing: an error of the gate, not a finding on NEW."""

    def __init__(self, crash: CandidateCrash):
        super().__init__(f"the baseline failed: {crash}")
        self.crash = crash


class _VirtualClock:
    """A timer that advances by the seconds the executors report (`interleaved_ratio`'s timer)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(ctx: GateContext) -> Stage:
    """The timing stage within its share of the gate's budget (what is left, at most PERF_SHARE)."""
    return timed(ctx, ctx.budget.timing_s())


# An input's timing ends early, after this many rounds, once its ratio is clear of the threshold
# by DECIDED_NOISES times its noise (at least 0.02): more rounds would not change the verdict.
DECIDED_MIN_ROUNDS = 3
DECIDED_NOISES = 3.0


def decided(stats: dict[str, Any], limit: float) -> bool:
    """Whether interleaved ratios `stats` so far put the input clearly on one side of `limit`."""
    return abs(stats["ratio"] - limit) > DECIDED_NOISES * max(stats["noise"], 0.02)


def timed(ctx: GateContext, budget_s: float) -> Stage:
    """NEW against OLD on PERF_INPUTS, cheapest first, as many as `budget_s` allows; fails where
    NEW is slower than --perf-threshold allows."""
    stage = Stage(NAME)
    if ctx.old is None:
        stage.summary = "no baseline given"
        return stage
    limit = 1.0 + ctx.options.perf_threshold_pct / 100.0
    deadline = time.monotonic() + budget_s
    rows: list[dict[str, Any]] = []
    clock = _VirtualClock()  # advanced by the seconds measured inside the executors
    stage.details["timed_in"] = "each candidate's own executor process (transfers not counted)"
    for k, name in enumerate(PERF_INPUTS):
        in_time = not rows or time.monotonic() <= deadline
        row = _time_input(ctx, name, clock, limit, deadline, rows, stage) if in_time else None
        if row is None:  # (no time left for it: the inputs after it, dearer, fit no better)
            stage.details["not_timed"] = list(PERF_INPUTS[k:])
            break
        rows.append(row)
        if row["slower"]:
            stage.reasons.append(
                f"performance on {name}: NEW takes {row['ratio']:.2f}x OLD's time "
                f"(±{row['noise']:.2f}; threshold {limit:.2f}x)")
    stage.details.update({"threshold_ratio": limit, "inputs": rows,
                          "outputs_compared": [r["input"] for r in rows if r.get("compared")]})
    stage.status = "fail" if stage.reasons else "pass"
    worst = max(rows, key=lambda r: r["ratio"])
    stage.summary = (f"{len(rows)} inputs timed; worst {worst['input']} at {worst['ratio']:.2f}x "
                     f"(threshold {limit:.2f}x)")
    return stage


def _time_input(ctx: GateContext, name: str, clock: _VirtualClock, limit: float, deadline: float,
                rows: list[dict[str, Any]], stage: Stage) -> dict[str, Any] | None:
    """One input's row (None: after the first, it does not fit before `deadline`); an input that
    is timed has its outputs compared first (`check_outputs`)."""
    spec = BENCH_INPUTS[name]
    images = spec.images()
    config = spec.config()
    new, old = ctx.new, ctx.old

    def new_fn() -> None:
        clock.now += new.time_call(images, config)

    def old_fn() -> None:
        try:
            clock.now += old.time_call(images, config)  # type: ignore[union-attr]
        except CandidateCrash as exc:
            raise BaselineCrash(exc) from exc

    interrupts.raise_if_requested()
    t_pair = time.monotonic()
    new_fn()  # also sends the images to each executor, once
    old_fn()
    t_pair = time.monotonic() - t_pair
    if rows and t_pair * (DECIDED_MIN_ROUNDS + 1) > deadline - time.monotonic():
        return None  # (an input's ratio rests on DECIDED_MIN_ROUNDS pairs at least)
    compared = check_outputs(ctx, name, images, config, stage)
    if rows and time.monotonic() + t_pair * DECIDED_MIN_ROUNDS > deadline:
        return None  # (compared, not timed: no time for its pairs)
    # (the rounds end early once the ratio is decided, or when another pair would end past the
    # stage's deadline: the timing keeps to its share of the budget)
    result = interleaved_ratio(new_fn, old_fn, rounds=ctx.options.perf_rounds, warmup=0, timer=clock,
                               min_rounds=DECIDED_MIN_ROUNDS,
                               decided=lambda st: decided(st, limit) or time.monotonic() + t_pair > deadline)
    retried = False
    if (abs(result["ratio"] - limit) <= max(result["noise"], 0.02)
            and t_pair * 2 * ctx.options.perf_rounds <= deadline - time.monotonic()):
        # Within noise of the threshold: measure once more with twice the rounds (when
        # they fit in the stage's budget; else the first measurement stands).
        interrupts.raise_if_requested()
        result = interleaved_ratio(new_fn, old_fn, rounds=2 * ctx.options.perf_rounds, warmup=0,
                                   timer=clock)
        retried = True
    return {"input": name, "description": spec.description, "ratio": result["ratio"],
            "noise": result["noise"], "new_median_s": result["new_median_s"],
            "old_median_s": result["old_median_s"], "rounds": result["rounds"], "retried": retried,
            "slower": result["ratio"] > limit, "compared": compared}


def check_outputs(ctx: GateContext, name: str, images: list[Any], config: Any, stage: Stage) -> bool:
    """Issue 34: every output the gate computes is compared. NEW's (and OLD's) output on timing
    input `name` against the reference's, under the gate's tolerance: where NEW's differs and
    OLD's (with a baseline) does not, a finding of the stage and a reason that fails it. Returns
    whether the outputs were compared (False: the reference rejects the input)."""
    interrupts.raise_if_requested()
    try:
        expected = reference.preprocess(images, config)
    except InputError:
        return False
    sizes = [img.size for img in images]
    try:
        new_verdict = compare(expected, ctx.new(images, config), config, ctx.options.tolerance, sizes=sizes)
    except CandidateCrash as exc:
        new_verdict = Verdict(crash_check(exc), str(exc))
    old_verdict = None
    if ctx.old is not None:
        try:
            old_verdict = compare(expected, ctx.old(images, config), config, ctx.options.tolerance, sizes=sizes)
        except CandidateCrash as exc:
            raise BaselineCrash(exc) from exc
    if new_verdict.ok or (old_verdict is not None and not old_verdict.ok):
        if not new_verdict.ok:  # both differ: OLD's too, recorded, not failed
            stage.details.setdefault("differ_on_both", []).append(name)
        return True
    stats = new_verdict.stats
    classes = sorted({mode_class(img) for img in images})
    ctx.findings.append({"stage": NAME, "check": str(new_verdict.check), "input": name, "mode_classes": classes,
                         "max_levels": stats.get("max_level_diff"), "mean_levels": stats.get("mean_level_diff"),
                         "message": new_verdict.message})
    stage.reasons.append(f"outputs on {name} ({', '.join(classes)}): {new_verdict.check}: {new_verdict.message}")
    return True
