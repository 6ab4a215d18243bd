"""The gate's engine stage: `--engine SPEC`'s request layer fuzzed with request scenarios, in the verdict.

It runs after the invariances and before the timing, within what the budget keeps for it
(`Budget.engine_s`), and writes OUT/engine/ (summary.json, summary.md, junit.xml, findings/). Any
finding fails the stage, and so the gate: the report, its JUnit and the exit code agree.
Interrupted (SIGINT/SIGTERM), it raises as every stage does, so the verdict is `error`.
"""

from __future__ import annotations

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions
from kimi_oracle.workflows.engine_stage import engine_stage
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.options import Stage

# The stage's place in the gate (workflows.gate.run finds it).
NAME = "engine"
ORDER = 55
COMPARED = False


def run(ctx: GateContext) -> Stage:
    """The scenario stage on `ctx.options.engine` (skipped without one)."""
    opts = ctx.options
    if opts.engine is None:
        return Stage(NAME, "skipped", summary="no --engine given")
    budget_s = ctx.budget.engine_s() if ctx.budget is not None else None
    options = ScenarioFuzzOptions(examples=opts.engine_scenarios, seed=ctx.seed, mixed_configs=opts.mixed_configs,
                                  tolerance=opts.tolerance, budget_s=budget_s)
    summary = engine_stage(opts.engine, PreprocessConfig.profile(opts.profile), ctx.out_dir / "engine", options,
                           opts.case_timeout_s, opts.memory_limit_mb, ctx.engine_activity)
    if summary["verdict"] == "interrupted":
        interrupts.raise_if_requested()
        raise KeyboardInterrupt
    return stage_of(opts.engine, summary)


def stage_of(spec: str, summary: dict) -> Stage:
    """The stage's result from the scenario stage's summary (its findings as the reasons)."""
    findings = summary.get("findings") or []
    stage = Stage(NAME, "fail" if findings else "pass",
                  summary=f"engine {spec}: {summary.get('examples', 0)} scenarios (stopped: {summary.get('stopped')}), "
                          f"{len(findings)} finding(s)",
                  details={"engine": spec, "examples": summary.get("examples", 0), "seed": summary.get("seed"),
                           "stopped": summary.get("stopped"), "findings": [
                               {"check": f["check"], "message": f["message"], "path": f["path"]} for f in findings]})
    stage.reasons = [f"engine {spec}: {f['check']}: {str(f['message'])[:300]} ({f['path']})" for f in findings]
    return stage


__all__ = ["COMPARED", "NAME", "ORDER", "run", "stage_of"]
