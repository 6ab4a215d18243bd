"""`fuzz --engine` and `repro` of a scenario folder: terminal output, JSON, JUnit and Markdown."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK
from kimi_oracle.core.text import rich_text

ENGINE_HELP = ("Fuzz an engine's request layer with request scenarios: sglang-0.5.23 | package.module:factory | "
               "path/to/file.py:factory | a module with engine() | an entry point of kimi_oracle.engines "
               "(docs/adapters.md, 'Request-layer engines').")
MIXED_HELP = ("With --engine: also vary mean, std and background between the configs of one scenario (for "
              "engines whose one batch may hold items of two configs).")
PIXELS_HELP = "With --engine: also compare each image's rows with the reference under --tolerance."


def _console() -> Any:
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 140, highlight=False)


def print_findings(title: str, findings: Sequence[Any], checks: Sequence[str], first_found: dict[str, int],
                   footer: str) -> None:
    """The per-check table, then each finding with its scenario per request and image."""
    from rich.table import Table

    console = _console()
    table = Table(title=title, title_justify="left")
    for column in ("check", "result", "findings", "found after", "finding"):
        table.add_column(column, overflow="fold")
    for check in checks:
        mine = [f for f in findings if f.check == check]
        after = f"{first_found[check]} scenarios" if check in first_found else ""
        table.add_row(check, "[red]FAIL[/red]" if mine else "[green]pass[/green]", str(len(mine)), after,
                      rich_text(str(mine[0].path) if mine and mine[0].path else ""))
    console.print(table)
    console.print(rich_text(footer))
    for f in findings:
        lines = f.lines()
        console.print()
        console.print(rich_text(lines[0]), style="bold red", soft_wrap=True)
        for line in lines[1:]:
            console.print(rich_text("  " + line), soft_wrap=True)


def run_fuzz(spec: str, config: PreprocessConfig, *, examples: int | None, seed: int | None, mixed_configs: bool,
             pixels: bool, tolerance: str, shrink: bool, out_dir: Path, json_path: Path | None,
             junit_path: Path | None, markdown_path: Path | None, case_timeout: float,
             memory_limit_mb: int | None = None) -> int:
    """`kimi-oracle fuzz --engine SPEC`: exit 0 when every scenario passed, 1 on a finding."""
    from kimi_oracle.fuzzers.scenario_fuzz import DEFAULT_SCENARIOS, ScenarioFuzzOptions
    from kimi_oracle.oracle.request_checks import REQUEST_CHECKS
    from kimi_oracle.workflows.engine_stage import run_scenarios, write_outputs

    options = ScenarioFuzzOptions(examples=examples or DEFAULT_SCENARIOS, seed=seed, mixed_configs=mixed_configs,
                                  pixels=pixels, tolerance=tolerance, shrink=shrink)
    run, summary = run_scenarios(spec, config, options, out_dir, case_timeout, memory_limit_mb)
    write_outputs(spec, summary, run.findings, json_path, junit_path, markdown_path, run.elapsed_s)
    footer = (f"{run.examples} scenarios ({run.runs} runs incl. shrinking) in {run.elapsed_s:.1f} s; seed {run.seed}; "
              f"stopped: {run.stopped}; {len(run.findings)} finding(s)"
              + (f" under {out_dir / 'findings'}" if run.findings else ""))
    print_findings(f"kimi-oracle fuzz --engine {spec} ({config.describe()}, mixed configs "
                   f"{'on' if mixed_configs else 'off'}, pixels {'on' if pixels else 'off'})",
                   run.findings, REQUEST_CHECKS, run.first_found, footer)
    if run.stopped == "interrupted":
        return interrupts.exit_code()
    return EXIT_FINDINGS if run.findings else EXIT_OK


def print_stage(spec: str, summary: dict[str, Any], echo: Any) -> None:
    """The gate's and nightly's scenario stage in a few lines."""
    echo(f"engine {spec}: {summary['examples']} scenarios, {len(summary['findings'])} finding(s), "
         f"verdict {summary['verdict'].upper()}")
    for f in summary["findings"]:
        echo(f"  {f['check']:<15} {f['path']}")
        echo(f"      {str(f['message'])[:200]}")


def run_repro(folder: Path, spec: str | None, json_path: Path | None, case_timeout: float) -> int:
    """`kimi-oracle repro FOLDER` of a scenario finding: exit 1 while it still fails, 0 once fixed.
    The folder is checked as a case folder is (`read_scenario`); an engine that scenario.json names
    inside the folder is refused as case.json's candidate is (`core.specs.refuse_spec_inside`)."""
    from kimi_oracle.core.errors import InputError
    from kimi_oracle.results.scenario_report import read_scenario

    doc, scenario, images, directory = read_scenario(folder)  # (every check before the heavy imports)
    from kimi_oracle.core.files import write_json
    from kimi_oracle.fuzzers.engine_sandbox import IsolatedEngine
    from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions, evaluate

    given = spec
    spec = spec or doc.get("engine")
    if not isinstance(spec, str) or not spec:
        raise InputError("scenario.json names no engine; give --engine", source=str(folder))
    if given is None:
        from kimi_oracle.core.specs import refuse_spec_inside

        refuse_spec_inside(spec, directory, "engine", "scenario.json")
    options = ScenarioFuzzOptions(pixels=bool(doc.get("pixels")), tolerance=str(doc.get("tolerance") or "exact"))
    with IsolatedEngine(spec, scenario.configs[0], timeout_s=max(case_timeout, 1.0)) as runner:
        found = evaluate(runner, scenario, options, images)
    console = _console()
    was = doc.get("check")
    for line in scenario.describe():
        console.print(rich_text(line))
    if not found:
        console.print(rich_text(f"fixed: {directory.name} ({was}) now passes every request check with engine {spec}"))
    else:
        head = "still fails" if found[0].check == was else f"fails a different check now (was {was})"
        console.print(rich_text(f"{head}: {found[0].check}: {found[0].message}"), style="bold red", soft_wrap=True)
        for f in found[1:6]:
            console.print(rich_text(f"  also {f.check} at {f.where()}: {f.message}"), soft_wrap=True)
    if json_path is not None:
        write_json(json_path, {"finding": str(directory), "engine": spec, "was": was,
                               "findings": [f.to_dict() for f in found]})
    return EXIT_FINDINGS if found else EXIT_OK


__all__ = ["ENGINE_HELP", "MIXED_HELP", "PIXELS_HELP", "print_findings", "print_stage", "run_fuzz", "run_repro"]
