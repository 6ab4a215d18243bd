"""`kimi-oracle golden check|regen`: compare with the recorded goldens, or record them anew."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kimi_oracle.cli.common import interpret_option, isolation_options, out_dir_callback, setup_interpret
from kimi_oracle.core.config import PROFILES
from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK
from kimi_oracle.core.text import safe_text

KIND_CHOICES = ("grids", "pixels", "video")
MEDIA_CHOICES = ("image", "video", "both")


def _common(func):
    func = click.option("--max-lines", type=click.IntRange(min=0), default=40, show_default=True,
                        help="Differing entries printed per file (all of them are in the .obtained file).")(func)
    func = click.option("--kind", "kinds", type=click.Choice(KIND_CHOICES), multiple=True,
                        help="Only these kinds of golden file (repeatable; default: those of --media).")(func)
    func = click.option("--media", type=click.Choice(MEDIA_CHOICES), default="image", show_default=True,
                        help="image: the grid and pixel goldens; video: the K2.5 video golden (sampling, "
                             "timestamps, chunk plans, chunk pixel digests; --candidate is then a video "
                             "candidate); both: all three.")(func)
    func = click.option("--profile", "profiles", type=click.Choice(PROFILES), multiple=True,
                        help="Only these profiles (repeatable; default: all).")(func)
    func = click.option("--golden-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                        help="Directory of the golden files (default: the ones shipped with kimi-oracle).")(func)
    func = click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), callback=out_dir_callback,
                        default=None,
                        help="Where .obtained files and golden-report.json/.md go (default: "
                             "./kimi-oracle-out/golden; never inside the golden directory).")(func)
    return func


def _emit(report, as_json: bool, max_lines: int) -> None:
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(report.render(max_lines=max_lines))


def register(group: click.Group) -> None:
    """Attach the `golden` group (`check`, `regen`) to the CLI."""
    group.add_command(golden_group)


def _check_planner(planner: str, golden_dir: Path | None, profiles: tuple[str, ...], case_timeout: float,
                   as_json: bool) -> int:
    """`golden check --planner`: every recorded grid through the planner; exit 0 all back, 1 otherwise."""
    from kimi_oracle.workflows import golden

    planner_report = golden.check_planner(planner, golden_dir=golden_dir, profiles=profiles or None,
                                          case_timeout_s=case_timeout)
    if as_json:
        click.echo(json.dumps({"command": "golden check --planner", **planner_report.to_dict()}, indent=2))
    else:
        for line in planner_report.lines():
            click.echo(safe_text(line))  # messages carry the planner's own exception text
    return EXIT_OK if planner_report.ok else EXIT_FINDINGS


@click.group("golden")
def golden_group() -> None:
    """Golden files: recorded grids and pixel digests of every profile.

    `check` recomputes them (grids with the geometry, pixels with a candidate) and exits 1 on
    any difference; `regen` records them with the reference and replaces them only with
    --accept. Both write OUT/<kind>/<profile>.jsonl.obtained for each file that differs and
    OUT/golden-report.json/.md (candidate, versions, every difference); OUT is --out.
    """


@golden_group.command("check")
@click.option("--candidate", default="reference", show_default=True,
              help="Pipeline for the pixel goldens: reference, gpu, eager, module:function, file.py:function, "
                   "a module with preprocess(), or an installed entry point's name.")
@click.option("--planner", default=None, metavar="SPEC",
              help="Check this planner (width, height, config) -> plan against every recorded grid of every "
                   "profile (--profile narrows) instead: a ResizePlan or the engine's dict {num_tokens, "
                   "new_width, new_height, pad_width, pad_height}. Spec forms as for --candidate; a module "
                   "or entry point with plan().")
@_common
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@interpret_option
@isolation_options
def check_cmd(candidate: str, planner: str | None, golden_dir: Path | None, out_dir: Path | None,
              profiles: tuple[str, ...], kinds: tuple[str, ...], media: str, max_lines: int, as_json: bool,
              interpret: bool | None, case_timeout: float, memory_limit_mb: int | None) -> int:
    """Compare the golden files with what is computed now; exit 0 match, 1 differ.

    A candidate other than the reference runs in its own process: its crash, exit or hang
    (--case-timeout) on a case is that case's error entry, so the case differs. Exit 2 on a
    harness error, 130/143 when interrupted (the report is written and says so).

    With --planner, only the planner is checked (in its own process): each finding names the
    size, the profile and the first field that differs; sizes the checkpoint rejects are
    reported, not failed. Exit 0 when every recorded grid comes back, 1 otherwise.
    """
    from kimi_oracle.core import interrupts
    from kimi_oracle.workflows import golden

    setup_interpret(interpret)
    if planner is not None:
        return _check_planner(planner, golden_dir, profiles, case_timeout, as_json)

    kinds = kinds or golden.MEDIA_KINDS[media]
    try:
        report = golden.check(golden_dir, candidate, kinds=kinds or None, profiles=profiles or None,
                              out_dir=out_dir, case_timeout_s=case_timeout, memory_limit_mb=memory_limit_mb)
    except golden.CheckInterrupted as stop:
        _emit(stop.report, as_json, max_lines)
        click.echo("interrupted: the report covers only the files compared before it", err=True)
        return interrupts.exit_code()
    _emit(report, as_json, max_lines)
    return EXIT_OK if report.ok else EXIT_FINDINGS


@golden_group.command("regen")
@click.option("--accept", is_flag=True, help="Replace the differing golden files (atomically).")
@click.option("--max-changes", type=click.IntRange(min=0), default=None,
              help="With --accept: refuse when more entries changed than this (default: 20).")
@click.option("--force", is_flag=True, help="With --accept: accept however many entries changed.")
@_common
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def regen_cmd(accept: bool, max_changes: int | None, force: bool, golden_dir: Path | None, out_dir: Path | None,
              profiles: tuple[str, ...], kinds: tuple[str, ...], media: str, max_lines: int, as_json: bool) -> int:
    """Record the goldens with the reference and write .obtained files for those that differ.

    Nothing else under the golden directory changes unless --accept is given. Exit 0 when
    everything matches or was accepted, 1 when differences remain (not accepted, or refused).
    """
    from kimi_oracle.workflows import golden

    report = golden.regen(
        golden_dir,
        accept=accept,
        max_changes=golden.DEFAULT_MAX_CHANGES if max_changes is None else max_changes,
        force=force,
        kinds=kinds or golden.MEDIA_KINDS[media],
        profiles=profiles or None,
        out_dir=out_dir,
    )
    _emit(report, as_json, max_lines)
    return EXIT_OK if report.ok or all(f.accepted for f in report.failing()) else EXIT_FINDINGS
