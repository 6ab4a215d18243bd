"""`kimi-oracle nightly` (the campaign runner) and `kimi-oracle corpus seed|dict`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kimi_oracle.cli.common import (interpret_option, isolation_options, make_oracle, oracle_options,
                                    out_dir_callback, parse_duration, profile_options, resolve_config,
                                    setup_interpret)
from kimi_oracle.cli.fuzz import TOLERANCE_HELP
from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK, KimiOracleError
from kimi_oracle.core.text import safe_text

if TYPE_CHECKING:  # (no torch at CLI start)
    from kimi_oracle.workflows.nightly import CampaignResult


class _UsageError(KimiOracleError):
    """A bad option value (exit 2)."""


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    # The CLI's one duration syntax (click.BadParameter names the option on a bad value).
    return None if value is None else parse_duration(value)


def register(group: click.Group) -> None:
    """Add `nightly` and the `corpus` group to the CLI."""
    group.add_command(nightly)
    group.add_command(corpus)


@click.command()
@click.option("--budget", default="30m", show_default=True, callback=_duration,
              help="Wall-clock budget of the whole campaign (90s, 30m, 1.5h).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), callback=out_dir_callback,
              required=True,
              help="Output directory: summary.json, summary.md, junit.xml, findings/.")
@click.option("--candidate", default="reference", show_default=True,
              help="Candidate spec: reference, gpu, eager, sglang-0.5.23, package.module:function, "
                   "file.py:function, a module with preprocess(), or an installed entry point's name.")
@click.option("--planner", "planner_spec", default=None, metavar="SPEC",
              help="Also fuzz this planner (width, height, config) -> plan after the campaign (its own process; "
                   "pure arithmetic): OUT/planner.json; its findings make the exit code 1.")
@click.option("--planner-sizes", type=click.IntRange(min=1), default=1_000_000, show_default=True, metavar="N",
              help="Sizes and configs the planner is judged on.")
@profile_options
@click.option("--corpus", "corpus_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Persistent atheris corpus (default OUT/corpus); new entries are added atomically.")
@click.option("--db", "db_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Persistent hypothesis example database (default OUT/hypothesis-db).")
@click.option("--engines", default="hypothesis,atheris", show_default=True,
              help="Comma-separated engines to run.")
@click.option("--shard", default="1/1", show_default=True,
              help="I/N: this machine's part of a campaign split over N machines (1-based).")
@click.option("--jobs", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Worker processes on this machine.")
@click.option("--tolerance", default="exact", show_default=True, help=TOLERANCE_HELP)
@click.option("--seed", type=int, default=None, help="Base seed (default: random, recorded in the summary).")
@click.option("--fixed-config", is_flag=True, help="Do not vary the configuration around the profile.")
@click.option("--max-findings", type=click.IntRange(1, None), default=100, show_default=True,
              help="Distinct findings kept per harness.")
@click.option("--max-examples", type=click.IntRange(1, None), default=None,
              help="Stop each worker after N examples (atheris: N inputs per harness, libFuzzer -runs=N, "
                   "after its starting corpus); the budget then only bounds a run that cannot get there.")
@click.option("--no-shrink", is_flag=True,
              help="Report findings as found: hypothesis does not shrink, atheris does not minimize crashes.")
@click.option("--log-limit", "log_limit_mb", type=click.FloatRange(min=0.01), default=8, show_default=True,
              metavar="MB", help="Each worker's log (and libFuzzer's) keeps at most its last MB MiB: a chatty "
                                 "candidate cannot fill the disk.")
@click.option("--engine", "engine_spec", default=None, metavar="SPEC",
              help="Also fuzz this engine's request layer after the workers: a scenario stage of --max-examples "
                   "(default 2000) scenarios within a quarter of --budget, findings under OUT/engine/ and in "
                   "the summary, its JUnit and the exit code.")
@click.option("--engine-scenarios", type=click.IntRange(min=1), default=None, metavar="N",
              help="Scenarios of the --engine stage (default: --max-examples, else 2000).")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto",
              help="Place the --jobs workers on a Ray cluster (auto: join a running one or start a local "
                   "one); the driver alone writes OUT, --corpus and --db. Needs pip install 'kimi-oracle[ray]'.")
@click.option("--gpus-per-worker", type=click.FloatRange(min=0), default=None, metavar="N",
              help="GPUs Ray gives each worker under --ray (default: 1 for the gpu candidate, else 0).")
@click.option("--media", type=click.Choice(["image", "video", "both"]), default="image", show_default=True,
              help="video/both: after the workers, the candidate fuzzed on --video-examples drawn batches of K2.5 "
                   "chunks (both: with images): OUT/video.json, the summary, JUnit, exit code (docs/video.md).")
@click.option("--video-examples", type=click.IntRange(min=1), default=300, show_default=True, metavar="N",
              help="Batches of the --media video stage.")
@interpret_option
@oracle_options
@isolation_options
def nightly(budget: float, out_dir: Path, candidate: str, planner_spec: str | None, planner_sizes: int,
            interpret: bool | None, profile: str | None, config_path: Path | None,
            corpus_dir: Path | None, db_dir: Path | None, engines: str, shard: str, jobs: int,
            case_timeout: float, tolerance: str, seed: int | None, fixed_config: bool,
            memory_limit_mb: int | None, max_findings: int, max_examples: int | None, no_shrink: bool,
            log_limit_mb: float, engine_spec: str | None = None, engine_scenarios: int | None = None,
            ray_address: str | None = None, gpus_per_worker: float | None = None, media: str = "image",
            video_examples: int = 300, oracle_name: str = "reference", oracle_check_share: float = 0.05) -> int:
    """Run a time-boxed fuzzing campaign (hypothesis + atheris) against a candidate.

    The candidate runs in worker subprocesses: a segfault, abort, out-of-memory kill or hang
    becomes a `crash` / `timeout` finding with its input, and the campaign goes on. Corpus and
    example database persist between runs. `--max-examples N` ends the run after N examples
    per worker instead (the budget stays as a bound). Writes OUT/summary.json, OUT/summary.md,
    OUT/junit.xml and OUT/findings/<id>/. One run per OUT (a second one is refused). Exit 0 no
    findings, 1 findings, 2 harness error (or OUT in use, or a full disk), 130 (SIGINT) / 143
    (SIGTERM) interrupted, whatever was found (the summary is written in every case).
    """
    # Both checked before any work (and before torch is imported): --profile with --config, and
    # a bad config file, are usage errors.
    config = resolve_config(profile, config_path)
    if ray_address is not None:  # (before any work: without Ray, one line saying how to install it)
        _import_ray()
    from kimi_oracle.fuzzers.harnesses import parse_shard
    from kimi_oracle.oracle.kinds import Tolerance
    from kimi_oracle.workflows.nightly import CampaignOptions

    make_oracle(oracle_name, oracle_check_share, seed)  # (--oracle gpu without CUDA: one line, exit 2)
    setup_interpret(interpret)
    names = tuple(e.strip() for e in engines.split(",") if e.strip())
    try:
        shard_tuple = parse_shard(shard)
        Tolerance.parse(tolerance)
        options = CampaignOptions(
            out=out_dir, budget_s=float(budget), candidate=candidate, profile=profile,
            config_path=config_path, corpus=corpus_dir, db=db_dir, engines=names,
            engines_explicit=engines.replace(" ", "") != "hypothesis,atheris", shard=shard_tuple, jobs=jobs,
            case_timeout_s=float(case_timeout), tolerance=tolerance, seed=seed, vary_config=not fixed_config,
            max_findings=max_findings, memory_limit_mb=memory_limit_mb, max_examples=max_examples,
            shrink=not no_shrink, log_limit_mb=log_limit_mb, planner=planner_spec, planner_sizes=planner_sizes,
            engine=engine_spec, engine_scenarios=engine_scenarios or max_examples or NIGHTLY_SCENARIOS,
            media=media, video_examples=video_examples, oracle=oracle_name, oracle_check_share=oracle_check_share,
        )
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    limit = f", at most {max_examples} examples per worker" if max_examples else ""
    click.echo(f"nightly: candidate {candidate}, {config_path or config.name}, "
               f"budget {budget:.0f} s{limit}, engines {','.join(names)}, shard {shard_tuple[0]}/{shard_tuple[1]}, "
               f"jobs {jobs}", err=True)
    result = _run(options, ray_address, gpus_per_worker)
    s = result.summary
    _print_result(result)
    # (summary.json and junit.xml carry the planner's results and the campaign's exit code)
    # (and the --engine stage's: its findings are among the campaign's, its exit code counts them)
    if s.get("request_engine"):
        from kimi_oracle.cli.engine_fuzz import print_stage

        print_stage(engine_spec, s["request_engine"], click.echo)
    raise SystemExit(result.exit_code)


NIGHTLY_SCENARIOS = 2000


def _import_ray() -> None:
    from kimi_oracle.workflows.nightly.ray_runner import import_ray

    import_ray()


def _run(options: Any, ray_address: str | None, gpus_per_worker: float | None) -> CampaignResult:
    """The campaign on this machine, or with its workers on the Ray cluster at `ray_address`."""
    def say(msg: str) -> None:
        click.echo(f"  {msg}", err=True)

    if ray_address is not None:
        from kimi_oracle.workflows.nightly.ray_driver import run_ray_campaign

        return run_ray_campaign(options, ray_address, gpus_per_worker, progress=say)
    from kimi_oracle.workflows.nightly import run_campaign

    return run_campaign(options, progress=say)


def _print_result(result: CampaignResult) -> None:
    """The campaign's engines, harnesses, notes, findings and errors, as the terminal shows them."""
    from kimi_oracle.workflows.nightly import coverage_text

    s = result.summary
    for name, info in s["engines"].items():
        cov_text = f", coverage {coverage_text(info.get('coverage'))}" if info.get("coverage") else ""
        click.echo(f"{name}: {info.get('status')}, {info.get('examples', 0)} examples{cov_text}, "
                   f"{info.get('findings', 0)} findings")
        for harness, h in (info.get("harnesses") or {}).items():
            note = f" ({h['note']})" if h.get("note") and h.get("status") != "ran" else ""
            click.echo(f"  {harness}: {h.get('status')}{note}, {h.get('examples', 0)} inputs judged, "
                       f"{h.get('execs', 0)} libFuzzer executions")
    for note in s.get("notes", []):
        click.echo(f"note: {note}", err=True)
    for f in s["findings"]:
        click.echo(f"  {f['kind']:<15} {f['engine']:<10} {f['path']}")
        click.echo(f"      {str(f['message'])[:160]}")
    for err in s["errors"]:
        click.echo(f"error: {err.splitlines()[0] if err else err}", err=True)
    click.echo(f"{len(s['findings'])} finding(s); stopped: {s['stopped']}; summary: {result.out / 'summary.md'}")
    for line in (s.get("planner") or {}).get("lines") or []:
        click.echo(safe_text(line))  # (the planner's own exception text)
    for line in (s.get("video") or {}).get("lines") or []:
        click.echo(safe_text(line))


@click.group()
def corpus() -> None:
    """Seed corpora and the dictionary of the atheris harnesses."""


@corpus.command("seed")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--structured", "structured_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the structured harness' seeds here.")
def corpus_seed(directory: Path, structured_dir: Path | None) -> None:
    """Write generated seed images into DIRECTORY: PNG with tRNS and palettes, LA, 16-bit grey,
    CMYK JPEG/TIFF, GIF, WebP, odd sizes (files already there are kept)."""
    from kimi_oracle.inputs.corpus import write_seed_corpus

    paths = write_seed_corpus(directory, structured_dir=structured_dir)
    for p in paths:
        click.echo(str(p))
    click.echo(f"{len(paths)} seed files in {directory}", err=True)


@corpus.command("dict")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def corpus_dict(path: Path) -> None:
    """Write the PNG/JPEG dictionary (libFuzzer `-dict=` format) to PATH."""
    from kimi_oracle.core.files import atomic_write_text
    from kimi_oracle.inputs.corpus import dictionary_text

    atomic_write_text(path, dictionary_text())
    click.echo(str(path))
