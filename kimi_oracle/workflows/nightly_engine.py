"""Nightly's engine stage (`--engine SPEC`): the request layer fuzzed after the workers, in the summary.

`run(...)` plays the scenario stage (`workflows.engine_stage`: OUT/engine/summary.json, summary.md,
junit.xml, findings/) within what the campaign kept of its budget for it (`ENGINE_SHARE`); the
campaign's summary.json carries it under `request_engine`, its findings among the campaign's
`findings` (kind = the request check), its exit code counts it, `junit_cases` gives its JUnit
cases and `markdown` its section of summary.md: the four always agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.text import safe_text
from kimi_oracle.results.report import JUnitCase

# The stage itself (the engine, its scenarios, the request checks) imports torch: imported where it
# runs, so a campaign without --engine (its runner and its atheris worker) never does.

CLASSNAME = "kimi-oracle.nightly.engine"
# The share of the campaign's budget kept for the engine stage when there is one (the workers get
# the rest; with --max-examples they may end sooner and leave it more).
ENGINE_SHARE = 0.25
DEFAULT_SCENARIOS = 2000


def worker_budget(budget_s: float, engine: str | None) -> float:
    """The workers' part of the campaign's budget."""
    return budget_s * (1.0 - ENGINE_SHARE) if engine else budget_s


def run(spec: str, config: PreprocessConfig, out: Path, scenarios: int, seed: int, tolerance: str,
        case_timeout_s: float, memory_limit_mb: int | None, budget_s: float) -> dict[str, Any]:
    """The scenario stage into OUT/engine within `budget_s`; its summary (with `verdict`)."""
    from kimi_oracle.core.activity import Activity
    from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions
    from kimi_oracle.workflows.engine_stage import engine_stage

    options = ScenarioFuzzOptions(examples=scenarios, seed=seed, tolerance=tolerance, budget_s=max(budget_s, 0.0))
    summary = engine_stage(spec, config, out / "engine", options, case_timeout_s, memory_limit_mb, Activity())
    summary["engine"] = spec
    return summary


def finding_entries(info: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The stage's findings as entries of the campaign's `findings` (kind: the request check)."""
    out = []
    for f in (info or {}).get("findings") or []:
        path = f.get("path") or ""
        out.append({"id": Path(path).name if path else f["check"], "engine": "requests", "kind": f["check"],
                    "check": f["check"], "path": path, "message": f.get("message", ""), "signature": None,
                    "key": f"requests:{f['check']}", "root_causes": [], "hits": 1})
    return out


def failed(info: Mapping[str, Any] | None) -> bool:
    """Whether the stage found anything."""
    return bool(info) and bool(info.get("findings"))


def interrupted(info: Mapping[str, Any] | None) -> bool:
    """Whether the stage was interrupted (SIGINT/SIGTERM)."""
    return bool(info) and info.get("verdict") == "interrupted"


def junit_cases(info: Mapping[str, Any] | None) -> list[JUnitCase]:
    """One case per request check (failing when a finding's first check is it)."""
    if not info:
        return []
    from kimi_oracle.oracle.request_checks import REQUEST_CHECKS

    cases = []
    for check in REQUEST_CHECKS:
        mine = [f for f in info.get("findings") or [] if f.get("check") == check]
        cases.append(JUnitCase(check, CLASSNAME, failure=f"{len(mine)} finding(s): {mine[0]['message']}" if mine else None,
                               details="\n".join(f"{f['message']} ({f.get('path')})" for f in mine)))
    return cases


def markdown(info: Mapping[str, Any] | None) -> list[str]:
    """summary.md's section for the stage."""
    if not info:
        return []
    lines = ["", "## Request layer", "",
             f"- engine `{safe_text(str(info.get('engine')))}`: {info.get('examples', 0)} scenarios, seed "
             f"{info.get('seed')}, stopped: {info.get('stopped')}, verdict **{str(info.get('verdict')).upper()}**"]
    for f in info.get("findings") or []:
        lines.append(f"- {f['check']}: {safe_text(str(f.get('message', '')))[:300]} ([folder]({f.get('path')}))")
    return lines


__all__ = ["DEFAULT_SCENARIOS", "ENGINE_SHARE", "failed", "finding_entries", "interrupted", "junit_cases", "markdown",
           "run", "worker_budget"]
