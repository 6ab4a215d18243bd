"""The gate's planner stage: `--planner SPEC` against every recorded grid and on fuzzed sizes."""

from __future__ import annotations

from kimi_oracle.workflows import golden
from kimi_oracle.workflows.gate.budget import PLANNER_SHARE
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.options import Stage

# The stage's place in the gate (workflows.gate.run finds it): its name in the report, its
# order among the stages, and whether its rows take part in the relative verdict.
NAME = "planner"
ORDER = 20
COMPARED = False


def run(ctx: GateContext) -> Stage:
    """--planner SPEC: the planner against every recorded grid and on fuzzed sizes/configs
    (oracle.planner, in its own process). Absolute: a plan is integers, and the checkpoint's
    arithmetic is exact, so even with a baseline any differing field fails."""
    stage = Stage(NAME)
    spec = ctx.options.planner
    if spec is None:
        stage.summary = "no --planner given"
        return stage
    # (each call within --case-timeout, the whole check within its share of --budget)
    report = golden.check_planner(spec, golden_dir=ctx.options.golden_dir,
                                  fuzz_sizes=ctx.options.planner_sizes, config=ctx.config, seed=ctx.seed,
                                  case_timeout_s=ctx.options.case_timeout_s,
                                  budget_s=PLANNER_SHARE * ctx.options.budget_s)
    stage.details = report.to_dict()
    lines = report.lines()
    stage.summary = lines[-1] if lines else ""
    for f in report.findings.values():
        stage.reasons.append(f"planner {f.key} ({f.hits} sizes), first in {f.source}: {f.message}")
        ctx.findings.append({"stage": NAME, "check": f.kind, "key": f.key, "message": f.message,
                             "size": list(f.size), "field": f.field})
    stage.reasons += [f"planner: error: {e}" for e in report.errors]
    stage.status = "fail" if stage.reasons else "pass"
    return stage
