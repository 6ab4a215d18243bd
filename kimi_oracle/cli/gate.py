"""`kimi-oracle gate`: may this kernel replace the old one? One verdict, with reasons."""

from __future__ import annotations

from pathlib import Path

import click

from kimi_oracle.cli.common import (interpret_option, isolation_options, make_oracle, oracle_options,
                                    out_dir_callback, parse_duration, parse_percent, setup_interpret)
from kimi_oracle.core.config import PROFILES
from kimi_oracle.inputs.sizes import GATE_PHOTO_EXAMPLES
from kimi_oracle.workflows.known import DEFAULT_MARGIN_PCT


def register(group: click.Group) -> None:
    """Attach `gate` to the CLI group."""
    group.add_command(gate_cmd)


@click.command("gate")
@click.option("--candidate", "new", default=None, metavar="NEW",
              help="The kernel under review (candidate spec); required unless --engine is given.")
@click.option("--baseline", "old", default=None, metavar="OLD",
              help="The kernel it replaces: the correctness verdict becomes relative to it, and the "
                   "interleaved A/B timing runs.")
@click.option("--profile", type=click.Choice(PROFILES), default="k3", show_default=True,
              help="Profile fuzzed around and timed (the goldens of every profile always run).")
@click.option("--budget", default="10m", show_default=True, metavar="DURATION",
              help="Total time budget, e.g. 90s, 10m.")
@click.option("--perf-threshold", default="10%", show_default=True, metavar="PCT",
              help="Fail when NEW is more than PCT slower than OLD.")
@click.option("--tolerance", default="exact", show_default=True, metavar="exact|levels:K|bf16",
              help="Pixel policy of fuzzing and invariance-free comparisons; a golden case whose digest "
                   "differs is re-compared against the reference under this policy.")
@click.option("--seed", type=int, default=None,
              help="Seed of the fuzzing stage (default: random, recorded in the report).")
@click.option("--fuzz-examples", type=click.IntRange(min=1), default=None, metavar="N",
              help="Fuzz exactly N examples instead of what fits into the budget, so that the verdict "
                   "does not depend on the machine's speed (the budget still bounds the timing).")
@click.option("--golden-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Golden files to use (default: the installed ones).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), callback=out_dir_callback,
              default=Path("gate-out"),
              show_default=True, help="Where gate-report.json/.md, findings and diff images go.")
@click.option("--margin", default=f"{DEFAULT_MARGIN_PCT:g}%", show_default=True, metavar="PCT",
              help="How far a shared root cause's max/mean levels or share of values may grow (beyond OLD, "
                   "or beyond --known limits) before it is `worse` (plus a small absolute slack).")
@click.option("--known", "known_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="TOML file of accepted divergences (root cause, mode class, limits); "
                                   "without --baseline, anything outside it fails (docs/gate.md).")
@click.option("--write-known", "write_known_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, metavar="FILE",
              help="Write NEW's root causes and levels of this run as a --known file, for review.")
@click.option("--strict", is_flag=True,
              help="accepts_invalid rows (NEW returns a result for an input the checkpoint rejects) and new "
                   "root causes under one level (float rounding only) fail too.")
@click.option("--corpus", "corpus_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR", help="Real image files (searched recursively) judged on NEW and OLD too, "
                                  "e.g. tests/data/corpus/decodable.")
@click.option("--planner", default=None, metavar="SPEC",
              help="NEW's planner (width, height, config) -> plan (docs/adapters.md): checked against every "
                   "recorded grid and on --planner-sizes fuzzed sizes and configs; any differing field fails.")
@click.option("--planner-sizes", type=click.IntRange(min=0), default=200_000, show_default=True,
              help="Fuzzed sizes the planner is judged on.")
@click.option("--engine", "engine_spec", default=None, metavar="SPEC",
              help="Also (or only) gate this engine's request layer: a scenario stage (--engine-scenarios "
                   "scenarios, findings under OUT/engine/); any finding fails.")
@click.option("--engine-scenarios", type=click.IntRange(min=1), default=500, show_default=True, metavar="N",
              help="Scenarios of the --engine stage.")
@click.option("--mixed-configs", is_flag=True, help="With --engine: also vary mean, std and background.")
@click.option("--photo-examples", type=click.IntRange(min=0), default=GATE_PHOTO_EXAMPLES, show_default=True,
              metavar="N",
              help="Real-photo examples (12 Mpx and 4K, the mode classes in turn from the seed's) of the fuzz "
                   "stage, on both sides: generated examples 8k+7; 0 for none (the timing stage compares its "
                   "large outputs anyway).")
@click.option("--media", type=click.Choice(["image", "video", "both"]), default="image", show_default=True,
              help="video/both: also a video stage, NEW (and OLD) fuzzed on --video-examples drawn batches of "
                   "K2.5 chunks (both: with images; NEW then declares kimi_oracle_media); needs a profile "
                   "with the video rules (--profile k25). docs/video.md.")
@click.option("--video-examples", type=click.IntRange(min=1), default=200, show_default=True, metavar="N",
              help="Batches of the video stage.")
@interpret_option
@oracle_options
@isolation_options
def gate_cmd(new, old, profile, budget, perf_threshold, tolerance, seed, fuzz_examples, golden_dir,
             out_dir, margin, known_path, write_known_path, strict, corpus_dir, planner, planner_sizes,
             interpret, case_timeout, memory_limit_mb, engine_spec=None, engine_scenarios=500,
             mixed_configs=False, photo_examples=GATE_PHOTO_EXAMPLES, media="image", video_examples=200,
             oracle_name="reference", oracle_check_share=0.05) -> int:
    """Run goldens, differential fuzzing, invariances and (with --baseline) A/B timing.

    With --baseline OLD, NEW and OLD are judged on the same inputs and compared root cause by
    root cause and mode class by mode class: a root cause NEW adds (`new`) or makes worse
    beyond --margin (`worse`) fails; the same (`known`) or less (`improved`) passes. Without
    it the verdict is absolute (any divergence fails) unless --known FILE accepts it.

    NEW and OLD run in their own processes: a crash, exit or hang of NEW (--case-timeout) is a
    fail with findings; of OLD during the timing an error. Exit 0 pass, 1 fail, 2 error (bad
    candidate spec, bad options or --known file, a failing baseline), 130/143 interrupted (the
    report says so; verdict ERROR).
    """
    from kimi_oracle.core import interrupts
    from kimi_oracle.oracle.kinds import Tolerance

    Tolerance.parse(tolerance)  # a bad policy is a usage error before anything runs
    if new is None and engine_spec is None:
        raise click.UsageError("give --candidate NEW, --engine SPEC, or both")
    budget_s, perf_pct, margin_pct = parse_duration(budget), parse_percent(perf_threshold), parse_percent(margin)
    if new is None:
        return _engine_only(engine_spec, profile, engine_scenarios, seed, mixed_configs, tolerance, out_dir,
                            case_timeout, memory_limit_mb, budget_s)
    oracle = make_oracle(oracle_name, oracle_check_share, seed)  # (--oracle gpu without CUDA: exit 2)
    setup_interpret(interpret)  # before NEW and OLD are imported (in their own processes)
    from kimi_oracle.workflows.gate import Gate, GateOptions  # here: usage errors import no torch

    options = GateOptions(profile=profile, budget_s=budget_s,
                          perf_threshold_pct=perf_pct, tolerance=tolerance, seed=seed,
                          golden_dir=golden_dir, fuzz_examples=fuzz_examples, case_timeout_s=case_timeout,
                          memory_limit_mb=memory_limit_mb, margin_pct=margin_pct,
                          known_path=known_path, write_known_path=write_known_path, strict=strict,
                          corpus_dir=corpus_dir, planner=planner, planner_sizes=planner_sizes,
                          engine=engine_spec, engine_scenarios=engine_scenarios, mixed_configs=mixed_configs,
                          photo_examples=photo_examples, media=media, video_examples=video_examples,
                          oracle=oracle)
    gate = Gate(new, old, options, out_dir, progress=lambda m: click.echo(m, err=True))
    report = gate.run()
    click.echo((out_dir / "gate-report.md").read_text())
    click.echo(f"verdict: {report['verdict'].upper()} (report: {out_dir / 'gate-report.json'})")
    if report.get("stopped") == "interrupted":
        click.echo("interrupted: the verdict is ERROR", err=True)
        return interrupts.exit_code()
    # (with --engine, the engine stage is one of the gate's: in the verdict, the report and JUnit)
    return {"pass": 0, "fail": 1}.get(report["verdict"], 2)


def _engine_only(spec: str, profile: str, scenarios: int, seed, mixed: bool, tolerance: str, out_dir: Path,
                 case_timeout: float, memory_limit_mb: int | None, budget_s: float) -> int:
    """`gate --engine` alone: the scenario stage (OUT/engine/) within the budget: exit 0 pass, 1
    fail, 130/143 interrupted."""
    from kimi_oracle.cli.engine_fuzz import print_stage
    from kimi_oracle.core import interrupts
    from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK
    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions
    from kimi_oracle.workflows.engine_stage import engine_stage

    summary = engine_stage(spec, PreprocessConfig.profile(profile), out_dir / "engine",
                           ScenarioFuzzOptions(examples=scenarios, seed=seed, mixed_configs=mixed, tolerance=tolerance,
                                               budget_s=budget_s), case_timeout, memory_limit_mb)
    print_stage(spec, summary, click.echo)
    if summary["verdict"] == "interrupted":
        return interrupts.exit_code()
    return EXIT_OK if summary["verdict"] == "pass" else EXIT_FINDINGS
