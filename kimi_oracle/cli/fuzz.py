"""`kimi-oracle fuzz`: differential fuzzing of a candidate (and a planner) against the reference."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from kimi_oracle.cli.check import IMAGE_SUFFIXES
from kimi_oracle.cli.common import (
    interpret_option,
    make_oracle,
    oracle_options,
    check_outputs,
    out_dir_callback,
    isolation_options,
    parse_duration,
    profile_options,
    resolve_config,
    setup_interpret,
)
from kimi_oracle.cli.differential import (
    ASSUME_HELP,
    CANDIDATE_HELP,
    INPUT_FORM_HELP,
    STRICT_HELP,
    TOLERANCE_HELP,
    assumptions_callback,
    input_form_option,
    open_with_form,
    print_findings_table,
    print_pipeline,
    stderr_console,
    stdout_console,
    tolerance_callback,
    write_outputs,
)
from kimi_oracle.cli.engine_fuzz import ENGINE_HELP, MIXED_HELP, PIXELS_HELP
from kimi_oracle.core import interrupts
from kimi_oracle.cli.video import video_options
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK
from kimi_oracle.core.text import rich_text
from kimi_oracle.inputs.generators import DEFAULT_MAX_SIDE, MODES
from kimi_oracle.oracle.kinds import FINDING_KINDS, failing


@click.command("fuzz")
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
@click.option("--tolerance", default="exact", show_default=True, callback=tolerance_callback, help=TOLERANCE_HELP)
@click.option("--assume", "assume", multiple=True, metavar="FAMILY=VARIANT", callback=assumptions_callback,
              help=ASSUME_HELP)
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@click.option("--fixed-config", is_flag=True,
              help="Use the profile/config as is (default: vary budget, side cap, background, fill stage).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), callback=out_dir_callback,
              default=Path("kimi-oracle-out"), show_default=True, help="Findings go to OUT/findings/<id>/.")
@click.option("--db", "db_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Hypothesis example database (default OUT/hypothesis-db; failures replay first).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a machine-readable summary here (its `time`: seconds in the candidate, the "
                   "reference, diagnosis, shrinking, writing and the harness; its `cpu`: CPU seconds of this "
                   "process and of the candidate's, per example, and their ratio).")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write JUnit XML (one test case per check) here.")
@click.option("--max-images", type=click.IntRange(1, 16), default=3, show_default=True,
              help="Largest batch drawn.")
@click.option("--max-side", type=click.IntRange(1, 20000), default=DEFAULT_MAX_SIDE, show_default=True,
              help="Longest side drawn (ratio sizes reach about 4x).")
@click.option("--photo-sizes", "photo_sizes", type=click.IntRange(0, 10000), default=0, show_default=True,
              metavar="N", help="Draw N examples at real-photo sizes (one image of 4032x3024 or 3840x2160, "
              "landscape or portrait, the mode classes in turn: RGB, L, P, RGBA/LA/PA with alpha, ...), one "
              "generated example in 8 until N are drawn; each costs ~0.1-0.5 s (gate and nightly draw 8 and 32).")
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
@input_form_option
@interpret_option
@oracle_options
@isolation_options
@video_options
def fuzz_cmd(candidate_spec: str | None, planner_spec: str | None, planner_sizes: int | None, profile: str | None,
             config_path: Path | None, examples: int | None, budget: str | None, hypothesis_profile: str,
             seed: int | None, tolerance: str,
             assume: tuple[tuple[str, str], ...], strict: bool, fixed_config: bool, out_dir: Path,
             db_dir: Path | None, json_path: Path | None, junit_path: Path | None, max_images: int, max_side: int, modes: str | None, no_invariance: bool,
             photo_sizes: int, no_shrink: bool, group_by: str, stop_early: bool, input_form: str | None, interpret: bool | None,
             case_timeout: float, memory_limit_mb: int | None, oracle_name: str = "reference", oracle_check_share: float = 0.05,
             engine_spec: str | None = None, mixed_configs: bool = False, pixels: bool = False,
             markdown_path: Path | None = None) -> int:
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
        return _engine_fuzz(engine_spec, candidate_spec, planner_spec, budget, profile, config_path, examples, seed,
                            mixed_configs, pixels, tolerance, no_shrink, out_dir, json_path, junit_path,
                            markdown_path, case_timeout, memory_limit_mb)
    if mixed_configs or pixels or markdown_path is not None:
        raise click.UsageError("--mixed-configs, --pixels and --markdown go with --engine")
    if candidate_spec is None and planner_spec is None:
        raise click.UsageError("give --candidate SPEC, --planner SPEC, --engine SPEC, or a combination")
    config = resolve_config(profile, config_path)
    check_outputs(out_dir if candidate_spec is not None else None, json_path, junit_path)
    if candidate_spec is None:
        setup_interpret(interpret)
        return _planner_only(planner_spec, planner_sizes, config, seed, fixed_config, json_path, junit_path,
                             case_timeout, parse_duration(budget) if budget else None)
    budget_s, mode_list = (parse_duration(budget) if budget else None), _parse_modes(modes)
    # Here, after the usage checks: a usage error or a bad config imports no torch.
    oracle = make_oracle(oracle_name, oracle_check_share, seed)  # (--oracle gpu without CUDA: one line, exit 2)
    setup_interpret(interpret)
    from kimi_oracle.fuzzers.fuzzing import FuzzOptions

    options = FuzzOptions(
        examples=examples, budget_s=budget_s, seed=seed, tolerance=tolerance, vary_config=not fixed_config,
        max_images=max_images, max_side=max_side, modes=mode_list, invariance=not no_invariance,
        photo_examples=photo_sizes,
        shrink=not no_shrink, hypothesis_profile=hypothesis_profile, split_by_mode=group_by == "mode",
        keep_searching=not stop_early, db_dir=db_dir if db_dir is not None else out_dir / "hypothesis-db",
        assume=assume, oracle=oracle)
    started, candidate = time.monotonic(), open_with_form(candidate_spec, case_timeout, memory_limit_mb, input_form, budget_s)
    with candidate:
        run = _fuzz_with_progress(candidate, config, options, out_dir, budget_s, examples, started)
    summary = run.summary()
    planner_report = None
    if planner_spec is not None and run.stopped != "interrupted":
        planner_report = _planner_after(planner_spec, planner_sizes, config, run.seed, fixed_config, case_timeout,
                                        budget_s, started)
        summary["planner"] = planner_report.to_dict()
    summary["strict"] = strict
    write_outputs(summary, run.findings, _kinds(summary), "kimi-oracle fuzz", json_path, junit_path, run.elapsed_s)
    _print_fuzz_run(run, summary, planner_report, candidate.spec, config, tolerance, fixed_config, strict, out_dir)
    return _fuzz_exit_code(run, strict, planner_report)


def _engine_fuzz(engine_spec: str, candidate_spec: str | None, planner_spec: str | None, budget: str | None,
                 profile: str | None, config_path: Path | None, examples: int | None, seed: int | None,
                 mixed_configs: bool, pixels: bool, tolerance: str, no_shrink: bool, out_dir: Path,
                 json_path: Path | None, junit_path: Path | None, markdown_path: Path | None,
                 case_timeout: float, memory_limit_mb: int | None = None) -> int:
    """`fuzz --engine`: a request layer fuzzed on drawn scenarios (cli/engine_fuzz.py)."""
    if candidate_spec is not None or planner_spec is not None or budget is not None:
        raise click.UsageError("--engine fuzzes a request layer for --examples scenarios; give it without "
                               "--candidate, --planner or --budget")
    from kimi_oracle.cli.engine_fuzz import run_fuzz

    return run_fuzz(engine_spec, resolve_config(profile, config_path), examples=examples, seed=seed,
                    mixed_configs=mixed_configs, pixels=pixels, tolerance=tolerance, shrink=not no_shrink,
                    out_dir=out_dir, json_path=json_path, junit_path=junit_path,
                    markdown_path=markdown_path, case_timeout=case_timeout, memory_limit_mb=memory_limit_mb)


def _planner_after(spec: str, sizes: int | None, config: PreprocessConfig, seed: int | None, fixed_config: bool,
                   case_timeout: float, budget_s: float | None, started: float) -> Any:
    """The planner fuzzed after the candidate, within what the fuzz run left of the budget (a case
    timeout at least)."""
    left = None if budget_s is None else max(budget_s - (time.monotonic() - started), case_timeout)
    return _run_planner(spec, sizes, config, seed, fixed_config, case_timeout, left)


def _parse_modes(modes: str | None) -> tuple[str, ...]:
    """`--modes M1,M2` as a tuple of known modes (all of them when not given)."""
    mode_list = tuple(MODES)
    if modes:
        mode_list = tuple(m.strip() for m in modes.split(",") if m.strip())
        bad = [m for m in mode_list if m not in MODES]
        if bad or not mode_list:
            raise click.BadParameter(f"unknown mode(s) {', '.join(bad) or '(none)'}; known: {', '.join(MODES)}",
                                     param_hint="--modes")
    return mode_list


def _fuzz_with_progress(candidate: Any, config: PreprocessConfig, options: Any, out_dir: Path,
                        budget_s: float | None, examples: int | None, started: float) -> Any:
    """The fuzz run, with a progress bar on stderr when it is a terminal (by time under a budget alone)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kimi_oracle.fuzzers.fuzzing import fuzz

    err = stderr_console()
    total = float(budget_s) if budget_s is not None and examples is None else float(options.max_examples())
    by_time = budget_s is not None and examples is None
    with Progress(TextColumn("[bold]fuzz[/bold] {task.description}"), BarColumn(),
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
    return run


def _print_fuzz_run(run: Any, summary: dict[str, Any], planner_report: Any, spec: str, config: PreprocessConfig,
                    tolerance: str, fixed_config: bool, strict: bool, out_dir: Path) -> None:
    """The findings table of a fuzz run with its footer (examples, time, seed, why it stopped), the
    inferred pipeline and the planner's report."""
    footer = (f"{run.examples} examples ({run.calls} runs incl. shrinking, {run.rejected} rejected) in "
              f"{run.elapsed_s:.1f} s; seed {run.seed}; stopped: {run.stopped}; "
              f"{len(run.findings)} finding(s)" + (f" under {out_dir / 'findings'}" if run.findings else ""))
    cpu = getattr(run, "cpu", None) or {}
    if cpu.get("ratio") is not None:
        footer += (f"; CPU per example: oracle {cpu['oracle_ms_per_example']:.2f} ms, candidate "
                   f"{cpu['candidate_ms_per_example']:.2f} ms (ratio {cpu['ratio']:.2f})")
        search = cpu.get("search") or {}
        if search.get("ratio") is not None:
            footer += (f"; in the search alone: {search['oracle_ms_per_example']:.2f} ms and "
                       f"{search['candidate_ms_per_example']:.2f} ms (ratio {search['ratio']:.2f})")
    oracle = summary.get("oracle") or {}
    if oracle.get("oracle") == "gpu":
        footer += (f"; oracle: the GPU pipeline ({oracle['served']} served, {oracle['checked']} recomputed by the "
                   f"reference, {oracle['disagreements']} disagreement(s)"
                   + (", fell back to the reference)" if oracle["fell_back"] else ")"))
    print_findings_table(f"kimi-oracle fuzz: {spec} vs reference ({config.describe()}, "
                         f"tolerance {tolerance}, config variation {'off' if fixed_config else 'on'})",
                         run.findings, _kinds(summary), run.first_found, footer, strict)
    print_pipeline(summary)
    if planner_report is not None:
        _print_planner(planner_report)


def _kinds(summary: dict[str, Any]) -> tuple[str, ...]:
    """The checks a fuzz run lists: every finding kind, and with --oracle gpu the oracle's own."""
    from kimi_oracle.oracle.kinds import ORACLE_DISAGREEMENT

    gpu = (summary.get("oracle") or {}).get("oracle") == "gpu"
    return tuple(FINDING_KINDS) + ((ORACLE_DISAGREEMENT,) if gpu else ())


def _fuzz_exit_code(run: Any, strict: bool, planner_report: Any) -> int:
    """130/143 when interrupted, 1 on a failing finding or planner, else 0."""
    if run.stopped == "interrupted":
        click.echo("interrupted: the report covers only the examples that ran", err=True)
        return interrupts.exit_code()
    failed = failing([f.check for f in run.findings], strict)
    return EXIT_FINDINGS if failed or (planner_report is not None and not planner_report.ok) else EXIT_OK



def _run_planner(spec: str, sizes: int | None, config: PreprocessConfig, seed: int | None, fixed_config: bool,
                 case_timeout_s: float | None, budget_s: float | None) -> Any:
    """The planner fuzzed in its own process (CandidateError, exit 2, when it cannot load), each
    call within `case_timeout_s`, the whole within `budget_s`."""
    from kimi_oracle.fuzzers.planner_fuzz import DEFAULT_SIZES, fuzz_planner, run_isolated

    return run_isolated(fuzz_planner, spec, config, planner=spec, sizes=sizes or DEFAULT_SIZES,
                        seed=int(seed or 0), vary_config=not fixed_config, case_timeout_s=case_timeout_s,
                        budget_s=budget_s)


def _print_planner(report: Any) -> None:
    console = stdout_console()
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


def register(group: click.Group) -> None:
    """Attach `fuzz` to the CLI group."""
    group.add_command(fuzz_cmd)


__all__ = ["ASSUME_HELP", "CANDIDATE_HELP", "IMAGE_SUFFIXES", "INPUT_FORM_HELP", "STRICT_HELP", "TOLERANCE_HELP",
           "register"]
