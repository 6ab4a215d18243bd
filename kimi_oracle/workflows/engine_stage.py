"""The scenario stage: an engine's request layer fuzzed with request scenarios, for fuzz, gate, nightly.

`run_scenarios` plays the scenarios on the engine in its executor and returns the run and its JSON
summary; `write_outputs` writes that summary as JSON, JUnit (one case per request check) and
Markdown; `engine_stage` does both into a folder (the gate's and nightly's `--engine` stage:
OUT/engine/summary.json, summary.md, junit.xml, findings/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from kimi_oracle.core.activity import Activity
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import start_timeout
from kimi_oracle.core.files import atomic_write_text, write_json
from kimi_oracle.fuzzers.engine_sandbox import IsolatedEngine
from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions, ScenarioRun, fuzz_engine
from kimi_oracle.oracle.request_checks import REQUEST_CHECKS
from kimi_oracle.results.report import write_junit
from kimi_oracle.results.scenario_report import scenario_junit_cases, scenario_summary_markdown


def run_scenarios(spec: str, config: PreprocessConfig, options: ScenarioFuzzOptions, out_dir: Path | None,
                  case_timeout_s: float = 60.0, memory_limit_mb: int | None = None, activity: Activity | None = None
                  ) -> tuple[ScenarioRun, dict[str, Any]]:
    """The engine (isolated, confined, under `memory_limit_mb`) on `options.examples` scenarios,
    within `options.budget_s`; findings under out_dir/findings (`activity`: the spans in which the
    engine's process worked, added to it)."""
    runner = IsolatedEngine(spec, config, timeout_s=max(case_timeout_s, 1.0), memory_limit_mb=memory_limit_mb,
                            start_timeout_s=start_timeout(options.budget_s))
    if activity is not None:
        runner.activity = activity
    with runner:
        run = fuzz_engine(runner, config, options, out_dir=out_dir)
    summary = {**run.summary(), "profile": config.name, "mixed_configs": options.mixed_configs,
               "pixels": options.pixels, "tolerance": options.tolerance}
    return run, summary


def write_outputs(spec: str, summary: dict[str, Any], findings: Sequence[Any], json_path: Path | None,
                  junit_path: Path | None, markdown_path: Path | None, elapsed: float) -> None:
    """The run's JSON summary, JUnit XML and Markdown (each atomic; None: not written)."""
    if json_path is not None:
        write_json(json_path, summary)
    if junit_path is not None:
        write_junit(junit_path, f"kimi-oracle fuzz --engine {spec}", scenario_junit_cases(findings, REQUEST_CHECKS),
                    time=elapsed, properties={"engine": spec, "seed": summary.get("seed")})
    if markdown_path is not None:
        atomic_write_text(markdown_path, scenario_summary_markdown(spec, summary, findings))


def engine_stage(spec: str, config: PreprocessConfig, out: Path, options: ScenarioFuzzOptions,
                 case_timeout_s: float = 60.0, memory_limit_mb: int | None = None,
                 activity: Activity | None = None) -> dict[str, Any]:
    """The scenario stage into `out`: its summary with a verdict (`pass`, `fail`, `interrupted`)."""
    out.mkdir(parents=True, exist_ok=True)
    run, summary = run_scenarios(spec, config, options, out, case_timeout_s, memory_limit_mb, activity)
    summary["verdict"] = ("interrupted" if run.stopped == "interrupted" else "fail" if run.findings else "pass")
    write_outputs(spec, summary, run.findings, out / "summary.json", out / "junit.xml", out / "summary.md",
                  run.elapsed_s)
    return summary


__all__ = ["engine_stage", "run_scenarios", "write_outputs"]
