"""Nightly's planner check: its spec validated before the campaign, its run and JUnit cases after.

`validate(spec)` loads the planner in its own process before any worker starts (a misspelt
`--planner` is exit 2 at once, not after the whole campaign). `run(...)` fuzzes it in its own
process (`fuzzers.planner_fuzz.run_isolated`: each call within the case timeout, the whole within
what the campaign left of its budget) and writes OUT/planner.json; the campaign's summary.json
carries the same report under `planner`, its exit code counts it, and `junit_cases` gives its
JUnit test cases (one per planner finding kind, and one per error).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import start_timeout
from kimi_oracle.core.files import utc_now, versions, write_json
from kimi_oracle.results.report import JUnitCase

if TYPE_CHECKING:
    from kimi_oracle.oracle.planner import PlannerReport

# The planner's fuzzing and loading import torch (the engines behind them): imported where they run,
# so a campaign without --planner never does.

CLASSNAME = "kimi-oracle.nightly.planner"


def _loaded(spec: str) -> "PlannerReport":
    from kimi_oracle.oracle.planner import PlannerReport, load_planner

    load_planner(spec)  # CandidateError (sent back, raised by run_isolated) when it cannot load
    return PlannerReport(spec)


def validate(spec: str, budget_s: float) -> None:
    """Load the planner in its own process; CandidateError (exit 2) when it cannot be loaded,
    also when loading it hangs past `start_timeout(budget_s)`."""
    from kimi_oracle.core.errors import CandidateError
    from kimi_oracle.fuzzers.planner_fuzz import run_isolated

    report = run_isolated(_loaded, spec, planner=spec, budget_s=start_timeout(budget_s))
    if report.errors:
        raise CandidateError(f"planner {spec!r} cannot be loaded: {report.errors[0]}")


def run(spec: str, sizes: int, config: PreprocessConfig, seed: int, vary_config: bool, out: Path,
        case_timeout_s: float, budget_s: float) -> dict[str, Any]:
    """The planner fuzzed in its own process; OUT/planner.json; the report as a dict."""
    from kimi_oracle.fuzzers.planner_fuzz import fuzz_planner, run_isolated

    report = run_isolated(fuzz_planner, spec, config, planner=spec, sizes=sizes, seed=seed, vary_config=vary_config,
                          case_timeout_s=case_timeout_s, budget_s=budget_s)
    data = report.to_dict()
    write_json(out / "planner.json", {"schema": "kimi-oracle.nightly-planner", "schema_version": 1,
                                      "created": utc_now(), "seed": seed, "profile": config.name,
                                      "versions": versions(), **data})
    data["lines"] = report.lines()
    return data


def junit_cases(planner: Mapping[str, Any] | None) -> list[JUnitCase]:
    """One case per planner finding kind (failing when it has findings) and one per error."""
    if not planner:
        return []
    from kimi_oracle.oracle.planner import PLANNER_KINDS

    cases = []
    findings = list(planner.get("findings") or [])
    for kind in PLANNER_KINDS:
        mine = [f for f in findings if f.get("check") == kind]
        cases.append(JUnitCase(kind, CLASSNAME, failure=str(mine[0].get("message")) if mine else None,
                               details="\n".join(str(f.get("message")) for f in mine)))
    for err in planner.get("errors") or []:
        cases.append(JUnitCase("planner", CLASSNAME, error=str(err), details=str(err)))
    return cases


def failed(planner: Mapping[str, Any] | None) -> bool:
    """Whether the planner check failed (a finding, or a planner that hung or died)."""
    return bool(planner) and not planner.get("ok", False)


__all__ = ["junit_cases", "failed", "run", "validate"]
