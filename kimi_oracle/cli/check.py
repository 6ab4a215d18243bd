"""`kimi-oracle check`: the oracle over real image files or folders."""

from __future__ import annotations

import stat
import time
from pathlib import Path
from typing import Any, Sequence

import click
from rich.text import Text

from kimi_oracle.cli.common import (check_outputs, interpret_option, isolation_options, out_dir_callback,
                                    profile_options, resolve_config, setup_interpret)
from kimi_oracle.cli.differential import (
    CANDIDATE_HELP,
    STRICT_HELP,
    TOLERANCE_HELP,
    input_form_option,
    open_with_form,
    print_findings_table,
    stdout_console,
    tolerance_callback,
    write_outputs,
)
from kimi_oracle.core import interrupts
from kimi_oracle.core.errors import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, InputError
from kimi_oracle.core.text import rich_text
from kimi_oracle.oracle.kinds import FINDING_KINDS, failing

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm",
                  ".pnm", ".ico", ".tga", ".jp2", ".avif", ".heic", ".psd", ".im", ".pcx", ".sgi", ".dds"}


@click.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--candidate", "candidate_spec", required=True, metavar="SPEC", help=CANDIDATE_HELP)
@profile_options
@click.option("--tolerance", default="exact", show_default=True, callback=tolerance_callback, help=TOLERANCE_HELP)
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), callback=out_dir_callback,
              default=Path("kimi-oracle-out"), show_default=True, help="Findings go to OUT/findings/<id>/.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--no-invariance", is_flag=True, help="Skip the batch/subset/permutation/determinism checks.")
@input_form_option
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
    from kimi_oracle.core.files import utc_now, versions
    from kimi_oracle.results.report import finding_summary, root_cause_rows

    check_outputs(None, json_path, junit_path)
    config = resolve_config(profile, config_path)
    loaded, errors, skipped = _load(paths)
    setup_interpret(interpret)
    from kimi_oracle.fuzzers.fuzzing import check_images

    started = time.monotonic()
    with open_with_form(candidate_spec, case_timeout, memory_limit_mb, input_form) as candidate:
        checked = check_images(candidate, loaded, config, tolerance or "exact",
                               invariance=not no_invariance, out_dir=out_dir)
    findings, rows = checked.findings, checked.rows
    elapsed = time.monotonic() - started
    console = stdout_console()
    _print_rows(console, candidate.spec, config, tolerance, rows)
    print_findings_table("findings per check", findings, FINDING_KINDS, {}, f"{len(rows)} row(s), "
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
    write_outputs(summary, findings, FINDING_KINDS, "kimi-oracle check", json_path, junit_path, elapsed)
    if checked.stopped == "interrupted":
        click.echo(f"interrupted: {len(rows)} of {len(loaded)} images judged", err=True)
        return interrupts.exit_code()
    if failing([f.check for f in findings], strict):
        return EXIT_FINDINGS
    return EXIT_ERROR if errors else EXIT_OK


def _load(paths: Sequence[Path]) -> tuple[list[tuple[str, Any, bytes | None]], list[str], list[str]]:
    """The images read and decoded (name, image, bytes), the unreadable ones' errors and what the
    folder scan skipped; InputError (exit 2) when nothing is readable, before the candidate starts."""
    from kimi_oracle.core.images import decode, read_file

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
    return loaded, errors, skipped


def _print_rows(console: Any, spec: str, config: Any, tolerance: str, rows: Sequence[dict[str, Any]]) -> None:
    """One table row per image (and batch check) judged."""
    from rich.table import Table

    table = Table(title=rich_text(f"kimi-oracle check: {spec} vs reference ({config.describe()}, "
                                  f"tolerance {tolerance})"), title_justify="left")
    for column in ("image", "size", "mode", "result", "detail"):
        table.add_column(column, overflow="fold")
    for r in rows:
        result = Text(r["result"], style="green" if r["result"] == "ok" else "red")
        name = Path(r["image"]).name if r["size"] != "batch" else r["image"]
        table.add_row(rich_text(name), r["size"], rich_text(r["mode"]), result, rich_text(r["detail"]))
    console.print(table)


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


def register(group: click.Group) -> None:
    """Attach `check` to the CLI group."""
    group.add_command(check_cmd)


__all__ = ["IMAGE_SUFFIXES", "register"]
