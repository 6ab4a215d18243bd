"""`kimi-oracle conformance`: the built-in engines' adapted paths judged in one report."""

from __future__ import annotations

from pathlib import Path

import click

from kimi_oracle.cli.common import out_dir_callback


@click.command("conformance")
@click.option("--engines", "engines", default="sglang,transformers,vllm", show_default=True, metavar="LIST",
              help="Comma-separated engine specs, each ENGINE or ENGINE@SOURCE (a release version, a wheel, "
                   "a directory, a git checkout: as for --candidate).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              callback=out_dir_callback, help="Folder for conformance.md, conformance.json and each part's findings.")
@click.option("--examples", type=click.IntRange(min=1), default=300, show_default=True,
              help="Fuzzed examples of each image path.")
@click.option("--planner-sizes", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Fuzzed sizes of each planner (besides every recorded golden grid).")
@click.option("--scenarios", type=click.IntRange(min=1), default=200, show_default=True,
              help="Request scenarios of each request engine, with and without --mixed-configs.")
@click.option("--corpus", "corpus_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Also check each image path on the real files under this folder.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of every fuzzed part.")
@click.option("--parts", "parts", default=None, metavar="LIST",
              help="Only these parts (comma-separated): planner-goldens, planner-fuzz, image-fuzz, image-goldens, "
                   "image-corpus, requests, requests-mixed (default: all).")
@click.option("--media", type=click.Choice(["image", "video", "both"]), default="image", show_default=True,
              help="video/both: also each engine's K2.5 video paths (video-fuzz: --examples batches of chunks, "
                   "with images for both; video-planner-fuzz: --planner-sizes chunks), docs/video.md.")
@click.option("--part-timeout", type=click.FloatRange(min=1.0), default=1800.0, show_default=True, metavar="SECONDS",
              help="A part still running after this long is killed and reported as an error.")
def conformance_cmd(engines: str, out_dir: Path, examples: int, planner_sizes: int, scenarios: int,
                    corpus_dir: Path | None, seed: int, parts: str | None, part_timeout: float,
                    media: str = "image") -> None:
    """Run every adapted path of each engine against the reference and write one report.

    Per engine: its planner (every recorded golden grid, and fuzzed sizes), its image paths
    (fuzzing with root causes per mode class, the pixel goldens, the --corpus files) and its
    request layer (scenario fuzzing, without and with --mixed-configs), each part in its own
    process with its own findings and repro folders under OUT/<engine>/. Paths not adapted yet
    are listed. Exit 0 nothing found, 1 findings, 2 an engine that cannot load or a part that
    did not complete.
    """
    from kimi_oracle.workflows.conformance import ConformanceOptions, parse_engines, parse_parts, run_conformance

    options = ConformanceOptions(engines=parse_engines(engines), out=out_dir, examples=examples,
                                 planner_sizes=planner_sizes, scenarios=scenarios, corpus=corpus_dir, seed=seed,
                                 part_timeout_s=part_timeout, parts=parse_parts(parts), media=media)
    report, code = run_conformance(options, progress=lambda line: click.echo(f"conformance: {line}", err=True))
    for entry in report["engines"]:
        state = entry.get("error") or f"{len(entry['parts'])} part(s), {len(entry['not_adapted'])} path(s) not adapted"
        click.echo(f"{entry['engine']} {entry.get('version') or ''}: {state}")
    click.echo(f"report: {out_dir / 'conformance.md'}")
    raise SystemExit(code)


def register(group: click.Group) -> None:
    """Attach `conformance` to the CLI group."""
    group.add_command(conformance_cmd)


__all__ = ["register"]
