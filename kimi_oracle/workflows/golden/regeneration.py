"""Golden pixel checks with diagnosis, and regeneration: replacing goldens when accepted."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterable, Sequence

from kimi_oracle.core import files as core_files
from kimi_oracle.workflows import golden_manifest as manifest
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.workflows.golden.common import (
    DEFAULT_MAX_CHANGES, GoldenError, default_golden_dir, golden_path,
)
from kimi_oracle.workflows.golden.fileformat import CaseFilter, remove_stale_temporaries
from kimi_oracle.workflows.golden.diffs import FileReport, GoldenReport, _display
from kimi_oracle.workflows.golden.checking import (
    _check_out_dir, _compare, _compute, _pillow_warning, _selection, _write_obtained, check, write_report,
)


def check_pixels(
    candidate: str | Callable | None = None,
    golden_dir: Path | str | None = None,
    *,
    profiles: Iterable[str] | None = None,
    write_obtained: bool = False,
    select: CaseFilter | None = None,
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
    memory_limit_mb: int | None = None,
    diagnose: bool = True,
) -> GoldenReport:
    """The pixel goldens of every profile (small-limit included) run with `candidate`.

    The gate's entry point: by default it writes nothing (no `.obtained` files). The report's
    `files[i].changes` name each differing case; `PixelCase.from_entry(profile, change.new or
    change.old)` rebuilds its image and config (for diff images).
    """
    return check(golden_dir, candidate, kinds=("pixels",), profiles=profiles,
                 write_obtained=write_obtained, select=select, case_timeout_s=case_timeout_s,
                 memory_limit_mb=memory_limit_mb, diagnose=diagnose)


def regen(
    golden_dir: Path | str | None = None,
    *,
    accept: bool = False,
    max_changes: int = DEFAULT_MAX_CHANGES,
    force: bool = False,
    kinds: Iterable[str] | None = None,
    profiles: Iterable[str] | None = None,
    out_dir: Path | str | None = None,
) -> GoldenReport:
    """Record the goldens anew with the reference; write `.obtained` files for the differing ones
    (under `out_dir`, default `default_out_dir()`) and the report files.

    Only with `accept` are the goldens replaced (atomically, all files staged before any is
    renamed), and only if at most `max_changes` entries changed overall, unless `force`.
    """
    if max_changes < 0:
        raise GoldenError(f"--max-changes must be >= 0, got {max_changes}")
    gdir = Path(golden_dir) if golden_dir is not None else default_golden_dir()
    if gdir.exists() and not gdir.is_dir():
        raise GoldenError(f"golden directory {gdir} is not a directory")
    out = _check_out_dir(out_dir, gdir)
    remove_stale_temporaries(gdir)
    report = GoldenReport("reference", gdir, command="regen")
    for kind, profile in _selection(kinds, profiles):
        new = _compute(kind, profile, None)
        file_report, _ = _compare(kind, profile, golden_path(gdir, kind, profile), new)
        report.files.append(file_report)
        _write_obtained(file_report, out, report.messages)
    report.warnings = _pillow_warning(report.files)
    try:
        _accept(report, accept=accept, max_changes=max_changes, force=force)
    finally:
        write_report(report, out)
    return report


def _manifest_file(gdir: Path, replaced: Sequence[FileReport]) -> dict[Path, str]:
    """The manifest (golden_manifest) of the golden directory once `replaced` are written."""
    new = {manifest.relative_name(f.kind, f.profile): f.new_text or "" for f in replaced}
    return {Path(gdir) / manifest.MANIFEST_NAME: manifest.manifest_text(Path(gdir), new)}


def _accept(report: GoldenReport, *, accept: bool, max_changes: int, force: bool) -> None:
    failing = report.failing()
    if accept and not failing:
        # Nothing to replace: the manifest is (re)written when it does not match the files.
        files = _manifest_file(report.golden_dir, [])
        path, text = next(iter(files.items()))
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current != text:
            core_files.atomic_write_many(files)
            report.messages.append(f"accepted: {_display(path)} written (the golden files' SHA-256)")
        return
    if not accept or not failing:
        return
    total = report.num_changes
    unreadable = [f for f in failing if f.problems and not f.changes]
    if unreadable and not force:
        # An unreadable or missing file has no entries to count: replacing it would rewrite the
        # whole file without anyone reviewing it, so it always needs --force.
        report.messages.append(
            "refused: " + ", ".join(_display(f.path) for f in unreadable) + " could not be compared entry "
            "by entry (" + "; ".join(f.problems[0] for f in unreadable) + "); review the .obtained "
            "files, then rerun with --force"
        )
        return
    if total > max_changes and not force:
        report.messages.append(
            f"refused: {total} changed entries is more than --max-changes {max_changes}; review the "
            f".obtained files, then rerun with a larger --max-changes or with --force"
        )
        return
    core_files.atomic_write_many({**{f.path: f.new_text or "" for f in failing},
                                  **_manifest_file(report.golden_dir, failing)})
    for f in failing:
        f.accepted = True
        if f.obtained is not None:
            with contextlib.suppress(OSError):
                f.obtained.unlink()
            f.obtained = None
    report.messages.append(
        f"accepted: {len(failing)} golden files replaced ({total} entries): "
        + ", ".join(_display(f.path) for f in failing)
    )
