"""Options, consoles and report printing shared by `fuzz`, `repro` and `check`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

import click
from rich.text import Text

from kimi_oracle.cli.common import open_candidate, parse_duration
from kimi_oracle.core.text import rich_text, safe_text
from kimi_oracle.oracle.kinds import REPORTED_ONLY, Tolerance, ToleranceError

CANDIDATE_HELP = ("reference | gpu | eager | sglang-0.5.23 | package.module:function | path/to/file.py:function | "
                  "a module with preprocess() | an installed entry point's name (kimi_oracle.candidates)")
TOLERANCE_HELP = ("exact (bit for bit) | levels:K (within K uint8 levels) | bf16 (both sides cast to bfloat16, "
                  "then bit for bit: for float32 or bfloat16 candidates)")
STRICT_HELP = ("Also fail (exit 1) on accepts_invalid findings: a result for an input the checkpoint rejects "
               "(by default reported, exit 0 when it is the only kind found).")

ASSUME_HELP = ("Compare against the reference with this step variant of the diagnosis catalogue applied "
               "(repeatable; e.g. resample-float=uint8-aa, normalize-float='(x/255-mean)/std'): a known "
               "difference silenced, to see what is left. Families and variants: docs/diagnosis.md.")

def duration_callback(ctx: click.Context, param: click.Parameter, value: str) -> float:
    return parse_duration(value)


def tolerance_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return str(Tolerance.parse(value))
    except ToleranceError as exc:
        raise click.BadParameter(str(exc)) from None


def assumptions_callback(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> tuple[tuple[str, str], ...]:
    if not value:  # the catalogue imports torch: not for a run that assumes nothing
        return ()
    from kimi_oracle.core.errors import AssumptionError
    from kimi_oracle.oracle.diagnosis import parse_assumption

    out: list[tuple[str, str]] = []
    for text in value or ():
        try:
            pair = parse_assumption(text)
        except AssumptionError as exc:
            raise click.BadParameter(str(exc)) from None
        if any(family == pair[0] for family, _ in out):
            raise click.BadParameter(f"{text!r}: family {pair[0]!r} assumed twice")
        out.append(pair)
    return tuple(out)


def print_pipeline(summary: dict[str, Any]) -> None:
    """The candidate's inferred pipeline (the fewest variants explaining the findings) and the
    pixel findings it does not explain."""
    if not summary.get("pipeline") and not summary.get("pipeline_apart"):
        return
    console = stdout_console()
    console.print(rich_text("inferred pipeline: " + (summary.get("pipeline_summary") or "(none)")), style="bold")
    if summary.get("pipeline_apart"):
        console.print(rich_text("  not explained by it: " + ", ".join(summary["pipeline_apart"])))
    if summary.get("assume"):
        console.print(rich_text("  assumed (compared with the reference with these applied): "
                                + ", ".join(summary["assume"])))


def stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def stdout_console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 140, highlight=False)


def print_root_causes(console: Any, findings: Sequence[Any]) -> None:
    """The root-cause table first: real differences, then float rounding only (under one level)."""
    from rich.table import Table

    from kimi_oracle.results.report import cause_meaning, root_cause_rows

    rows = root_cause_rows(findings)
    for noise in (False, True):
        mine = [r for r in rows if r["float_rounding_only"] == noise]
        if not mine:
            continue
        table = Table(title="float rounding only (under one level)" if noise else "root causes",
                      title_justify="left")
        for column in ("root cause", "mode class", "max levels", "mean", "examples", "repro"):
            table.add_column(column, overflow="fold")
        for r in mine:
            table.add_row(Text(r["root_cause"], style="yellow" if noise else "bold red"),
                          rich_text(r["mode_class"] or "-"), _levels_text(r["max_levels"]),
                          _levels_text(r["mean_levels"]), str(r["hits"]), rich_text(r["repro"] or "-"))
        console.print(table)
    for cause in dict.fromkeys(r["root_cause"] for r in rows):
        console.print(Text.assemble((f"  {cause}", "bold"), safe_text(f": {cause_meaning(cause)}")))


def _levels_text(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"


def print_findings_table(title: str, findings: Sequence[Any], checks: Sequence[str], first_found: dict[str, int],
                          footer: str, strict: bool = False) -> None:
    from rich.table import Table

    console = stdout_console()
    if findings:
        print_root_causes(console, findings)
    table = Table(title=title, title_justify="left")
    for column in ("check", "result", "findings", "found after", "finding"):
        table.add_column(column, overflow="fold")
    for check in checks:
        mine = [f for f in findings if f.check == check]
        result = "[red]FAIL[/red]" if mine else "[green]pass[/green]"
        if mine and check in REPORTED_ONLY and not strict:
            result = "[yellow]reported[/yellow]"
        after = f"{first_found[check]} examples" if check in first_found else ""
        where = str(mine[0].path) if mine and mine[0].path else ("" if not mine else "(not written)")
        table.add_row(check, result, str(len(mine)), after, rich_text(where))
    console.print(table)
    console.print(rich_text(footer))
    from kimi_oracle.results.report import finding_lines

    for f in findings:
        console.print()
        lines = finding_lines(f)
        console.print(rich_text(lines[0]), style="bold red", highlight=False, soft_wrap=True)
        for line in lines[1:]:
            console.print(rich_text("  " + line), soft_wrap=True)
        if f.path is not None:
            console.print(rich_text(f"  reproduce: kimi-oracle repro {f.path}"))


def write_outputs(summary: dict[str, Any], findings: Sequence[Any], checks: Sequence[str], suite: str,
                   json_path: Path | None, junit_path: Path | None, elapsed: float) -> None:
    from kimi_oracle.core.files import write_json
    from kimi_oracle.results.report import JUnitCase, junit_cases_for, root_cause_junit, write_junit

    if json_path is not None:
        write_json(json_path, summary)
    if junit_path is not None:
        cases = root_cause_junit(summary.get("root_causes") or [], suite) + junit_cases_for(findings, checks)
        if summary.get("stopped") == "interrupted":
            cases.append(JUnitCase("interrupted", suite, error="the run was interrupted before it ended",
                                   details="interrupted (SIGINT/SIGTERM): the checks above cover only what ran"))
        write_junit(junit_path, suite, cases, time=elapsed,
                    properties={"candidate": summary.get("candidate"), "profile": summary.get("profile"),
                                "seed": summary.get("seed")})


INPUT_FORM_HELP = ("How the candidate takes its images: pil (decoded PIL images), bytes (each image's encoded "
                   "file; the reference decodes the same bytes with Pillow) or both (per image). Default: both "
                   "when the candidate declares kimi_oracle_input = ('pil', 'bytes'), else the form it declares "
                   "(docs/inputs.md).")
input_form_option = click.option("--input-form", type=click.Choice(["pil", "bytes", "both"]), default=None,
                                  help=INPUT_FORM_HELP)


def open_with_form(spec: str, case_timeout: float, memory_limit_mb: int | None, form: str | None,
                    budget_s: float | None = None) -> Any:
    candidate = open_candidate(spec, case_timeout, memory_limit_mb, budget_s)
    try:
        candidate.use_input_form(form)  # CandidateError (exit 2) when it does not take that form
    except BaseException:
        candidate.close()
        raise
    return candidate
