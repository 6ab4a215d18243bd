"""`kimi-oracle fuzz`, `repro` and `check`: differential testing of a candidate against the reference."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import click
from rich.text import Text

from kimi_oracle.cli.engine_fuzz import ENGINE_HELP, MIXED_HELP, PIXELS_HELP
from kimi_oracle.cli.common import (
    interpret_option,
    isolation_options,
    open_candidate,
    parse_duration,
    profile_options,
    resolve_config,
    setup_interpret,
)
from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT
from kimi_oracle.core.errors import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, InputError, KimiOracleError
from kimi_oracle.core.text import rich_text, safe_text
from kimi_oracle.inputs.generators import DEFAULT_MAX_SIDE, MODES
from kimi_oracle.oracle.kinds import FINDING_KINDS, REPORTED_ONLY, Tolerance, ToleranceError, failing

CANDIDATE_HELP = ("reference | gpu | eager | sglang-0.5.23 | package.module:function | path/to/file.py:function | "
                  "a module with preprocess() | an installed entry point's name (kimi_oracle.candidates)")
TOLERANCE_HELP = ("exact (bit for bit) | levels:K (within K uint8 levels) | bf16 (both sides cast to bfloat16, "
                  "then bit for bit: for float32 or bfloat16 candidates)")
STRICT_HELP = ("Also fail (exit 1) on accepts_invalid findings: a result for an input the checkpoint rejects "
               "(by default reported, exit 0 when it is the only kind found).")

ASSUME_HELP = ("Compare against the reference with this step variant of the diagnosis catalogue applied "
               "(repeatable; e.g. resample-float=uint8-aa, normalize-float='(x/255-mean)/std'): a known "
               "difference silenced, to see what is left. Families and variants: docs/diagnosis.md.")

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm",
                  ".pnm", ".ico", ".tga", ".jp2", ".avif", ".heic", ".psd", ".im", ".pcx", ".sgi", ".dds"}


def _positive_duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    return parse_duration(value)


def _tolerance(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return str(Tolerance.parse(value))
    except ToleranceError as exc:
        raise click.BadParameter(str(exc)) from None


def _assumptions(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> tuple[tuple[str, str], ...]:
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


def _print_pipeline(summary: dict[str, Any]) -> None:
    """The candidate's inferred pipeline (the fewest variants explaining the findings) and the
    pixel findings it does not explain."""
    if not summary.get("pipeline") and not summary.get("pipeline_apart"):
        return
    console = _stdout_console()
    console.print(rich_text("inferred pipeline: " + (summary.get("pipeline_summary") or "(none)")), style="bold")
    if summary.get("pipeline_apart"):
        console.print(rich_text("  not explained by it: " + ", ".join(summary["pipeline_apart"])))
    if summary.get("assume"):
        console.print(rich_text("  assumed (compared with the reference with these applied): "
                                + ", ".join(summary["assume"])))


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def _stdout_console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 140, highlight=False)


def _print_root_causes(console: Any, findings: Sequence[Any]) -> None:
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


def _print_findings_table(title: str, findings: Sequence[Any], checks: Sequence[str], first_found: dict[str, int],
                          footer: str, strict: bool = False) -> None:
    from rich.table import Table

    console = _stdout_console()
    if findings:
        _print_root_causes(console, findings)
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


def _write_outputs(summary: dict[str, Any], findings: Sequence[Any], checks: Sequence[str], suite: str,
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
_input_form_option = click.option("--input-form", type=click.Choice(["pil", "bytes", "both"]), default=None,
                                  help=INPUT_FORM_HELP)


def _open_with_form(spec: str, case_timeout: float, memory_limit_mb: int | None, form: str | None,
                    budget_s: float | None = None) -> Any:
    candidate = open_candidate(spec, case_timeout, memory_limit_mb, budget_s)
    try:
        candidate.use_input_form(form)  # CandidateError (exit 2) when it does not take that form
    except BaseException:
        candidate.close()
        raise
    return candidate


def register(group: click.Group) -> None:
    """Attach `fuzz`, `repro` and `check` to the CLI group."""

    @group.command("fuzz")
    @click.option("--candidate", "candidate_spec", default=None, metavar="SPEC",
                  help=CANDIDATE_HELP + " (required unless --planner is given)")
    @click.option("--planner", "planner_spec", default=None, metavar="SPEC",
                  help="Also (or only) fuzz this planner (width, height, config) -> plan on drawn sizes and configs: "
                       "pure arithmetic against the checkpoint's geometry; each finding names the size and the "
                       "first differing field. Spec forms as for --candidate (a module or entry point with plan()).")
    @click.option("--planner-sizes", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Sizes the planner is judged on (default 200000, a few seconds).")
    @click.option("--engine", "engine_spec", default=None, metavar="SPEC", help=ENGINE_HELP)
    @click.option("--mixed-configs", is_flag=True, help=MIXED_HELP)
    @click.option("--pixels", is_flag=True, help=PIXELS_HELP)
    @click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="With --engine: write a Markdown summary here.")
    @profile_options
    @click.option("--examples", type=click.IntRange(min=1), default=None,
                  help="Number of examples, run exactly (saved failures replayed first count; shrinking does not). "
                       "Default: from --hypothesis-profile.")
    @click.option("--budget", default=None, metavar="DURATION",
                  help="Time budget instead of (or as well as) an example count, e.g. 90s, 10m; it covers shrinking "
                       "(the search stops at 80% of it once a failure waits to be shrunk).")
    @click.option("--hypothesis-profile", type=click.Choice(["dev", "ci", "nightly"]), default="ci",
                  show_default=True, help="Example count when neither --examples nor --budget is given "
                                          "(dev 25, ci 100, nightly 2000).")
    @click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed (default: random, printed).")
    @click.option("--tolerance", default="exact", show_default=True, callback=_tolerance, help=TOLERANCE_HELP)
    @click.option("--assume", "assume", multiple=True, metavar="FAMILY=VARIANT", callback=_assumptions,
                  help=ASSUME_HELP)
    @click.option("--strict", is_flag=True, help=STRICT_HELP)
    @click.option("--fixed-config", is_flag=True,
                  help="Use the profile/config as is (default: vary budget, side cap, background, fill stage).")
    @click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
                  default=Path("kimi-oracle-out"), show_default=True, help="Findings go to OUT/findings/<id>/.")
    @click.option("--db", "db_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Hypothesis example database (default OUT/hypothesis-db; failures replay first).")
    @click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Write a machine-readable summary here (its `time`: seconds in the candidate, the "
                       "reference, diagnosis, shrinking, writing and the harness).")
    @click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Write JUnit XML (one test case per check) here.")
    @click.option("--max-images", type=click.IntRange(1, 16), default=3, show_default=True,
                  help="Largest batch drawn.")
    @click.option("--max-side", type=click.IntRange(1, 20000), default=DEFAULT_MAX_SIDE, show_default=True,
                  help="Longest side drawn (ratio sizes reach about 4x).")
    @click.option("--modes", default=None, metavar="M1,M2", help=f"Restrict modes (default all: {','.join(MODES)}).")
    @click.option("--no-invariance", is_flag=True, help="Skip the batch/subset/permutation/determinism checks "
                  "(by default they run on every 4th generated example).")
    @click.option("--no-shrink", is_flag=True, help="Report failures as found, without shrinking them.")
    @click.option("--group-by", type=click.Choice(["mode", "check"]), default="mode", show_default=True,
                  help="One pixel_mismatch/crash finding per mode class of the failing image, or per check.")
    @click.option("--stop-early", is_flag=True,
                  help="End soon after the first failure (at once with --no-shrink): at twice the example number of "
                       "the latest new failure, at least 10 examples, as one hypothesis round did (default: spend "
                       "all examples).")
    @_input_form_option
    @interpret_option
    @isolation_options
    def fuzz_cmd(candidate_spec: str | None, planner_spec: str | None, planner_sizes: int | None,
                 profile: str | None, config_path: Path | None, examples: int | None,
                 budget: str | None, hypothesis_profile: str, seed: int | None, tolerance: str,
                 assume: tuple[tuple[str, str], ...], strict: bool, fixed_config: bool, out_dir: Path,
                 db_dir: Path | None, json_path: Path | None, junit_path: Path | None, max_images: int, max_side: int, modes: str | None, no_invariance: bool,
                 no_shrink: bool, group_by: str, stop_early: bool, input_form: str | None, interpret: bool | None,
                 case_timeout: float, memory_limit_mb: int | None, engine_spec: str | None = None,
                 mixed_configs: bool = False, pixels: bool = False, markdown_path: Path | None = None) -> int:
        """Differential fuzzing of a candidate against the reference; findings written under --out.

        The candidate runs in a separate process: its crash, exit, hang or memory exhaustion is a
        finding. Exit 0 when nothing was found, 1 when something was, 2 on usage or harness
        errors, 130/143 when interrupted (the report then says so). `accepts_invalid` findings
        (a result for an input the checkpoint rejects) are reported and fail only with --strict.

        --planner SPEC fuzzes an engine's planner too (in its own process): sizes and configs
        drawn in bulk, each plan compared field by field with the checkpoint's; sizes the
        checkpoint rejects are reported, not failed.
        """
        if engine_spec is not None:
            if candidate_spec is not None or planner_spec is not None or budget is not None:
                raise click.UsageError("--engine fuzzes a request layer for --examples scenarios; give it without "
                                       "--candidate, --planner or --budget")
            from kimi_oracle.cli.engine_fuzz import run_fuzz

            return run_fuzz(engine_spec, resolve_config(profile, config_path), examples=examples, seed=seed,
                            mixed_configs=mixed_configs, pixels=pixels, tolerance=tolerance, shrink=not no_shrink,
                            out_dir=out_dir, json_path=json_path, junit_path=junit_path,
                            markdown_path=markdown_path, case_timeout=case_timeout)
        if mixed_configs or pixels or markdown_path is not None:
            raise click.UsageError("--mixed-configs, --pixels and --markdown go with --engine")
        if candidate_spec is None and planner_spec is None:
            raise click.UsageError("give --candidate SPEC, --planner SPEC, --engine SPEC, or a combination")
        config = resolve_config(profile, config_path)
        _check_outputs(out_dir if candidate_spec is not None else None, json_path, junit_path)
        if candidate_spec is None:
            setup_interpret(interpret)
            return _planner_only(planner_spec, planner_sizes, config, seed, fixed_config, json_path, junit_path,
                                 case_timeout, parse_duration(budget) if budget else None)
        budget_s = parse_duration(budget) if budget else None
        mode_list = tuple(MODES)
        if modes:
            mode_list = tuple(m.strip() for m in modes.split(",") if m.strip())
            bad = [m for m in mode_list if m not in MODES]
            if bad or not mode_list:
                raise click.BadParameter(f"unknown mode(s) {', '.join(bad) or '(none)'}; known: {', '.join(MODES)}",
                                         param_hint="--modes")
        # Here, after the usage checks: a usage error or a bad config imports no torch.
        setup_interpret(interpret)
        from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz

        options = FuzzOptions(
            examples=examples, budget_s=budget_s, seed=seed, tolerance=tolerance, vary_config=not fixed_config,
            max_images=max_images, max_side=max_side, modes=mode_list, invariance=not no_invariance,
            shrink=not no_shrink, hypothesis_profile=hypothesis_profile,
            split_by_mode=group_by == "mode", keep_searching=not stop_early,
            db_dir=db_dir if db_dir is not None else out_dir / "hypothesis-db", assume=assume,
        )
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        err = _stderr_console()
        total = float(budget_s) if budget_s is not None and examples is None else float(options.max_examples())
        by_time = budget_s is not None and examples is None
        started = time.monotonic()
        candidate = _open_with_form(candidate_spec, case_timeout, memory_limit_mb, input_form, budget_s)
        with candidate, Progress(TextColumn("[bold]fuzz[/bold] {task.description}"), BarColumn(),
                      TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=err,
                      transient=False, disable=not err.is_terminal) as progress:
            task = progress.add_task(candidate.spec, total=total, detail="")
            last = [0.0]

            def on_example(run: Any) -> None:
                now = time.monotonic()
                if now - last[0] < 0.1:
                    return
                last[0] = now
                done = min(now - started, total) if by_time else min(run.examples, total)
                progress.update(task, completed=done,
                                detail=f"{run.examples} examples, {len(run.first_found)} failing check(s)")

            run = fuzz(candidate, config, options, out_dir=out_dir, on_example=on_example)
            progress.update(task, completed=total, detail=f"{run.examples} examples, {len(run.findings)} finding(s)")
        summary = run.summary()
        planner_report = None
        if planner_spec is not None and run.stopped != "interrupted":
            # (what the fuzz run left of the budget, a case timeout at least)
            left = None if budget_s is None else max(budget_s - (time.monotonic() - started), case_timeout)
            planner_report = _run_planner(planner_spec, planner_sizes, config, run.seed, fixed_config,
                                          case_timeout, left)
            summary["planner"] = planner_report.to_dict()
        summary["strict"] = strict
        _write_outputs(summary, run.findings, FINDING_KINDS, "kimi-oracle fuzz", json_path, junit_path, run.elapsed_s)
        footer = (f"{run.examples} examples ({run.calls} runs incl. shrinking, {run.rejected} rejected) in "
                  f"{run.elapsed_s:.1f} s; seed {run.seed}; stopped: {run.stopped}; "
                  f"{len(run.findings)} finding(s)" + (f" under {out_dir / 'findings'}" if run.findings else ""))
        _print_findings_table(f"kimi-oracle fuzz: {candidate.spec} vs reference ({config.describe()}, "
                              f"tolerance {tolerance}, config variation {'off' if fixed_config else 'on'})",
                              run.findings, FINDING_KINDS, run.first_found, footer, strict)
        _print_pipeline(summary)
        if planner_report is not None:
            _print_planner(planner_report)
        if run.stopped == "interrupted":
            click.echo("interrupted: the report covers only the examples that ran", err=True)
            return interrupts.exit_code()
        failed = failing([f.check for f in run.findings], strict)
        return EXIT_FINDINGS if failed or (planner_report is not None and not planner_report.ok) else EXIT_OK

    @group.command("repro")
    @click.argument("finding", type=click.Path(exists=True, path_type=Path))
    @click.option("--candidate", "candidate_spec", default=None, metavar="SPEC",
                  help="Candidate to replay against (default: the one recorded in case.json).")
    @click.option("--engine", "engine_spec", default=None, metavar="SPEC",
                  help="Engine to replay a scenario finding against (default: the one in scenario.json).")
    @click.option("--tolerance", default=None, callback=_tolerance, help="Override the recorded tolerance.")
    @click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Write the verdict as JSON here.")
    @click.option("--case-timeout", "case_timeout", default=DEFAULT_CASE_TIMEOUT, show_default=True,
                  callback=_positive_duration,
                  help="Per-call limit for the candidate, which runs in a separate process: a hang is a timeout.")
    @_input_form_option
    @interpret_option
    def repro_cmd(finding: Path, candidate_spec: str | None, tolerance: str | None, json_path: Path | None,
                  case_timeout: float, input_form: str | None, interpret: bool | None,
                  engine_spec: str | None = None) -> int:
        """Replay one finding (its directory or case.json). Exit 1 while it still fails, 0 once fixed.

        The finding folder is untrusted: case.json is validated, files must be plain names inside
        the folder with their recorded SHA-256, and a candidate is never imported from inside it.
        The candidate runs in a separate process, so a crash or hang is reported, never fatal.
        """
        from kimi_oracle.core.files import write_json
        from kimi_oracle.fuzzers.fuzzing import finding_from, replay_case
        from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
        from kimi_oracle.results.report import finding_lines, read_case
        from kimi_oracle.results.scenario_report import SCENARIO_FILE

        if (finding / SCENARIO_FILE).is_file() or finding.name == SCENARIO_FILE:
            from kimi_oracle.cli.engine_fuzz import run_repro

            return run_repro(finding, engine_spec, json_path, case_timeout)
        setup_interpret(interpret)
        case, directory = read_case(finding)
        spec = candidate_spec or case.get("candidate")
        if not spec:
            raise InputError("case.json names no candidate; give --candidate", source=str(finding))
        if candidate_spec is None:
            _refuse_candidate_inside(spec, directory)
        console = _stdout_console()
        origin = "--candidate" if candidate_spec else "recorded in case.json"
        console.print(rich_text(f"candidate: {spec} ({origin})"), highlight=False)
        candidate = IsolatedCandidate(spec, timeout_s=case_timeout)
        try:
            candidate.start()
            candidate.use_input_form(input_form)
            verdict, images, config, notes = replay_case(case, directory, candidate, tolerance=tolerance)
        finally:
            candidate.close()
        for note in notes:
            console.print(rich_text(f"note: {note}"))
        was = case.get("check")
        tol = tolerance or case.get("tolerance") or "exact"
        if verdict.ok:
            console.print(Text.assemble(("fixed", "green"), safe_text(
                f": {directory.name} ({was}) now passes every check with candidate {spec}, tolerance {tol}")),
                highlight=False)
            code = EXIT_OK
        else:
            f = finding_from(verdict, spec, config, images,
                             params=[e.get("params") for e in case["images"]], tolerance=tol,
                             engine=case.get("engine", "hypothesis"), seed=case.get("seed"),
                             sources=[e.get("source") for e in case["images"]])
            lines = finding_lines(f)
            head = "still fails" if verdict.check == was else f"fails a different check now (was {was})"
            console.print(Text.assemble((head, "bold red"), safe_text(f": {lines[0]}")), highlight=False,
                          soft_wrap=True)
            for line in lines[1:]:
                console.print(rich_text("  " + line), soft_wrap=True)
            if f.root_causes:  # diagnosed now (a fuzz run may have deferred it: its budget's share spent)
                console.print(rich_text("  root causes: " + ", ".join(f.root_causes)), soft_wrap=True)
            code = EXIT_FINDINGS
        if json_path is not None:
            write_json(json_path, {"finding": str(directory), "candidate": spec, "was": was,
                                   "verdict": verdict.to_dict(), "notes": notes,
                                   "root_causes": None if verdict.ok else list(f.root_causes)})
        return code

    @group.command("check")
    @click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
    @click.option("--candidate", "candidate_spec", required=True, metavar="SPEC", help=CANDIDATE_HELP)
    @profile_options
    @click.option("--tolerance", default="exact", show_default=True, callback=_tolerance, help=TOLERANCE_HELP)
    @click.option("--strict", is_flag=True, help=STRICT_HELP)
    @click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
                  default=Path("kimi-oracle-out"), show_default=True, help="Findings go to OUT/findings/<id>/.")
    @click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
    @click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
    @click.option("--no-invariance", is_flag=True, help="Skip the batch/subset/permutation/determinism checks.")
    @_input_form_option
    @interpret_option
    @isolation_options
    def check_cmd(paths: tuple[Path, ...], candidate_spec: str, profile: str | None, config_path: Path | None,
                  tolerance: str, strict: bool, out_dir: Path, json_path: Path | None, junit_path: Path | None,
                  no_invariance: bool, input_form: str | None, interpret: bool | None, case_timeout: float,
                  memory_limit_mb: int | None) -> int:
        """Run the oracle over real image files or folders (searched recursively).

        Exit 0 all pass, 1 findings, 2 when an input could not be read (and nothing failed).
        An image the checkpoint rejects is still given to the candidate: a result is an
        `accepts_invalid` finding (reported; exit 1 only with --strict), a raise agrees.
        """
        from rich.table import Table

        from kimi_oracle.core.files import utc_now, versions
        from kimi_oracle.core.images import decode, read_file
        from kimi_oracle.results.report import finding_summary, root_cause_rows

        config = resolve_config(profile, config_path)
        files, skipped = _expand(paths)
        for line in skipped[:20]:
            click.echo(f"skipped: {line}", err=True)
        if len(skipped) > 20:
            click.echo(f"skipped: ... and {len(skipped) - 20} more (all listed in --json)", err=True)
        if not files:
            raise InputError("no image files found", source=" ".join(str(p) for p in paths))
        loaded: list[tuple[str, Any, bytes | None]] = []
        errors: list[str] = []
        for path in files:
            try:
                raw = read_file(path)
                loaded.append((str(path), decode(raw, name=str(path)), raw))
            except InputError as exc:
                errors.append(str(exc))
        if not loaded:  # refused before the candidate starts (and before torch is imported)
            more = f" (and {len(errors) - 1} more unreadable)" if len(errors) > 1 else ""
            raise InputError(f"no readable image: {errors[0]}{more}")
        setup_interpret(interpret)
        from kimi_oracle.fuzzers.fuzzing import check_images

        started = time.monotonic()
        with _open_with_form(candidate_spec, case_timeout, memory_limit_mb, input_form) as candidate:
            checked = check_images(candidate, loaded, config, tolerance or "exact",
                                   invariance=not no_invariance, out_dir=out_dir)
        findings, rows = checked.findings, checked.rows
        elapsed = time.monotonic() - started
        console = _stdout_console()
        table = Table(title=rich_text(f"kimi-oracle check: {candidate.spec} vs reference ({config.describe()}, "
                                      f"tolerance {tolerance})"), title_justify="left")
        for column in ("image", "size", "mode", "result", "detail"):
            table.add_column(column, overflow="fold")
        for r in rows:
            result = Text(r["result"], style="green" if r["result"] == "ok" else "red")
            name = Path(r["image"]).name if r["size"] != "batch" else r["image"]
            table.add_row(rich_text(name), r["size"], rich_text(r["mode"]), result, rich_text(r["detail"]))
        console.print(table)
        _print_findings_table("findings per check", findings, FINDING_KINDS, {}, f"{len(rows)} row(s), "
                              f"{len(findings)} finding(s), {len(errors)} unreadable, {elapsed:.1f} s", strict)
        for line in errors:
            click.echo(f"error: {line}", err=True)
        summary = {
            "schema": "kimi-oracle.check-run", "schema_version": 1, "command": "check",
            "candidate": candidate.spec, "profile": config.name, "config": config.to_hf_json(),
            "tolerance": tolerance, "strict": strict, "started": utc_now(), "elapsed_s": round(elapsed, 3),
            "images": rows, "errors": errors, "skipped": skipped, "stopped": checked.stopped,
            "root_causes": root_cause_rows(findings),
            "findings": [finding_summary(f) for f in findings],
            "versions": versions(),
        }
        _write_outputs(summary, findings, FINDING_KINDS, "kimi-oracle check", json_path, junit_path, elapsed)
        if checked.stopped == "interrupted":
            click.echo(f"interrupted: {len(rows)} of {len(loaded)} images judged", err=True)
            return interrupts.exit_code()
        if failing([f.check for f in findings], strict):
            return EXIT_FINDINGS
        return EXIT_ERROR if errors else EXIT_OK


def _check_outputs(out_dir: Path | None, json_path: Path | None, junit_path: Path | None) -> None:
    """The paths a run writes, checked before it starts (InputError, exit 2, naming the option)."""
    from kimi_oracle.core.files import check_writable

    if out_dir is not None:
        check_writable(out_dir, "--out", directory=True)
    for option, path in (("--json", json_path), ("--junit", junit_path)):
        if path is not None and str(path) != "-":
            check_writable(path, option)


def _run_planner(spec: str, sizes: int | None, config: PreprocessConfig, seed: int | None, fixed_config: bool,
                 case_timeout_s: float | None, budget_s: float | None) -> Any:
    """The planner fuzzed in its own process (CandidateError, exit 2, when it cannot load), each
    call within `case_timeout_s`, the whole within `budget_s`."""
    from kimi_oracle.fuzzers.planner_fuzz import DEFAULT_SIZES, fuzz_planner, run_isolated

    return run_isolated(fuzz_planner, spec, config, planner=spec, sizes=sizes or DEFAULT_SIZES,
                        seed=int(seed or 0), vary_config=not fixed_config, case_timeout_s=case_timeout_s,
                        budget_s=budget_s)


def _print_planner(report: Any) -> None:
    console = _stdout_console()
    console.print()
    for line in report.lines():
        style = "bold red" if line.startswith(("FAIL", "error")) else None
        console.print(rich_text(line), style=style, highlight=False, soft_wrap=True)


def _planner_only(spec: str, sizes: int | None, config: PreprocessConfig, seed: int | None, fixed_config: bool,
                  json_path: Path | None, junit_path: Path | None, case_timeout_s: float | None,
                  budget_s: float | None) -> int:
    from kimi_oracle.core.defaults import fresh_seed
    from kimi_oracle.core.files import utc_now, versions, write_json
    from kimi_oracle.results.report import JUnitCase, write_junit

    seed = seed if seed is not None else fresh_seed()
    started = utc_now()
    report = _run_planner(spec, sizes, config, seed, fixed_config, case_timeout_s, budget_s)
    _print_planner(report)
    click.echo(f"seed {seed}")
    if json_path is not None:
        write_json(json_path, {"schema": "kimi-oracle.fuzz-run", "schema_version": 1, "command": "fuzz",
                               "candidate": None, "profile": config.name, "config": config.to_hf_json(), "seed": seed,
                               "vary_config": not fixed_config, "started": started, "planner": report.to_dict(),
                               "versions": versions()})
    if junit_path is not None:
        from kimi_oracle.oracle.planner import PLANNER_KINDS

        cases = []
        for kind in PLANNER_KINDS:
            mine = [f for f in report.findings.values() if f.kind == kind]
            cases.append(JUnitCase(kind, "kimi-oracle fuzz --planner", failure=mine[0].message if mine else None,
                                   details="\n".join(f.message for f in mine)))
        for err in report.errors:
            cases.append(JUnitCase("planner", "kimi-oracle fuzz --planner", error=err))
        write_junit(junit_path, "kimi-oracle fuzz --planner", cases, time=report.elapsed_s,
                    properties={"planner": spec, "profile": config.name, "seed": seed})
    return EXIT_OK if report.ok else EXIT_FINDINGS


def _refuse_candidate_inside(spec: str, directory: Path) -> None:
    """A finding folder is untrusted: never import a candidate file that lives inside it."""
    target = spec.rpartition(":")[0]
    if not (target.endswith(".py") or "/" in target or "\\" in target):
        return
    candidates = [Path(target), directory / target]
    for path in candidates:
        try:
            resolved = path.resolve()
        except OSError:
            continue
        if resolved == directory.resolve() or directory.resolve() in resolved.parents:
            raise InputError(f"case.json names candidate {spec!r}, a file inside the finding folder: refused "
                             "(a finding folder is untrusted); give --candidate to replay it", source=str(directory))


def _expand(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """Files to check, and what a folder scan skipped (with why). A path named explicitly is
    always tried: a missing, odd or non-regular file is then reported as unreadable."""
    out: list[Path] = []
    skipped: list[str] = []
    for path in paths:
        if not path.is_dir():
            out.append(path)
            continue
        for p in sorted(path.rglob("*")):
            try:
                mode = p.stat().st_mode
            except OSError as exc:
                skipped.append(f"{p}: cannot stat: {exc.strerror or exc}")
                continue
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                skipped.append(f"{p}: not a regular file")
            elif p.suffix.lower() not in IMAGE_SUFFIXES:
                skipped.append(f"{p}: {p.suffix or 'no suffix'} is not an image suffix")
            else:
                out.append(p)
    return out, skipped


__all__ = ["register"]
