"""The golden check: recompute, compare entry by entry, diagnose, write .obtained files and the report."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterable, Mapping

from kimi_oracle.core import files as core_files
from kimi_oracle.workflows import golden_manifest as manifest
from kimi_oracle.core.config import PROFILES, PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.core.errors import InputError
from kimi_oracle.oracle.checks import PIXEL_MISMATCH
from kimi_oracle.workflows.golden.common import (
    IMAGE_KINDS, GoldenError, KINDS, REPORT_NAME, default_golden_dir, default_out_dir, golden_path, obtained_path,
)
from kimi_oracle.workflows.golden.catalogue import PixelCase
from kimi_oracle.workflows.golden.entries import _error_text
from kimi_oracle.workflows.golden.candidates import open_candidate
from kimi_oracle.workflows.golden.fileformat import (
    CaseFilter, GoldenFile, GoldenFormatError, load, parse, record, record_pixels,
)
from kimi_oracle.workflows.golden.diffs import (
    CheckInterrupted, FileReport, GoldenReport, _display, diff_entries,
)


# ---------------------------------------------------------------------------------------------
# check and regen


def _compare(kind: str, profile: str, path: Path, new: GoldenFile,
             partial: bool = False, data: bytes | None | str = "read") -> tuple[FileReport, GoldenFile | None]:
    """`data`: the golden file's bytes as read before the candidate ran (None: missing); by default
    the file is read now."""
    report = FileReport(kind, profile, path, new_text=new.dumps())
    if data is None or (data == "read" and not path.exists()):
        report.problems.append("missing golden file")
        report.changes = diff_entries(kind, None, new)
        return report, None
    try:
        old = load(path, kind, profile) if data == "read" else parse(bytes(data).decode("utf-8"), kind, profile)
    except GoldenFormatError as exc:
        report.problems.append(f"unreadable golden file: {exc}")
        return report, None
    except (OSError, UnicodeDecodeError, InputError) as exc:
        report.problems.append(f"unreadable golden file: {_error_text(exc)}")
        return report, None
    report.recorded_pillow = (old.meta.get("versions") or {}).get("pillow")
    if old.meta.get("config_sha256") != new.meta["config_sha256"]:
        report.problems.append(
            f"profile {profile!r} config changed since recording: config_sha256 "
            f"{str(old.meta.get('config_sha256'))[:12]} -> {new.meta['config_sha256'][:12]}"
        )
    if old.meta.get("generator_version") != new.meta["generator_version"]:
        report.notes.append(
            f"recorded with generator version {old.meta.get('generator_version')}, "
            f"now {new.meta['generator_version']}: generator changes alter the catalogue and images"
        )
    old_versions = old.meta.get("versions") or {}
    for lib, now in new.meta["versions"].items():
        was = old_versions.get(lib)
        if was != now and lib != "pillow":
            report.notes.append(f"recorded with {lib} {was}, running {now}")
    if partial:
        # Only the selected cases were computed: compare those, ignore the rest of the file.
        wanted = set(new.by_key())
        old = GoldenFile(old.kind, old.profile, old.meta, [e for e in old.entries if old.key(e) in wanted])
    report.changes = diff_entries(kind, old, new)
    return report, old


def _selection(kinds: Iterable[str] | None, profiles: Iterable[str] | None) -> list[tuple[str, str]]:
    """(kind, profile) pairs to compare; the video kind only for profiles with the video rules
    (a profile named explicitly without them is an error)."""
    asked = list(profiles) if profiles else None
    kinds = list(kinds) if kinds else list(IMAGE_KINDS)
    profiles = list(profiles) if profiles else list(PROFILES)
    for k in kinds:
        if k not in KINDS:
            raise GoldenError(f"unknown golden kind {k!r}; expected one of {', '.join(KINDS)}")
    for p in profiles:
        if p not in PROFILES:
            raise GoldenError(f"unknown profile {p!r}; expected one of {', '.join(PROFILES)}")
    out = []
    for k in kinds:
        for p in profiles:
            if k == "video" and not PreprocessConfig.profile(p).has_video:
                if asked is not None and kinds == ["video"] and not any(PreprocessConfig.profile(q).has_video
                                                                        for q in asked):
                    raise GoldenError(f"profile {p!r} has no video rules (K3's processor is image-only): "
                                      "no video golden; --media video checks k25")
                continue
            out.append((k, p))
    return out


def _pillow_warning(files: list[FileReport]) -> list[str]:
    import PIL

    recorded = sorted({f.recorded_pillow for f in files if f.recorded_pillow and f.recorded_pillow != PIL.__version__})
    if not recorded:
        return []
    return [f"the golden files were recorded with Pillow {', '.join(recorded)}, the installed Pillow is "
            f"{PIL.__version__}: pixel digests can differ because of Pillow itself, not the pipeline"]


def _write_obtained(report: FileReport, out_dir: Path, messages: list[str]) -> None:
    target = obtained_path(out_dir, report.kind, report.profile)
    if report.ok:
        # A stale .obtained from an earlier run no longer describes anything.
        with contextlib.suppress(FileNotFoundError, OSError):
            target.unlink()
        return
    try:
        core_files.atomic_write_text(target, report.new_text or "")
        report.obtained = target
    except OSError as exc:
        messages.append(f"could not write {_display(target)}: {_error_text(exc)}")


def _check_out_dir(out_dir: Path | str | None, golden_dir: Path) -> Path:
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    with contextlib.suppress(OSError):
        if out.resolve() == golden_dir.resolve() or golden_dir.resolve() in out.resolve().parents:
            raise GoldenError(f"the output folder {out} is inside the golden directory {golden_dir}: "
                              "choose another --out")
    return out


def write_report(report: "GoldenReport", out_dir: Path) -> None:
    """`golden-report.json` and `.md` under `out_dir`: the candidate, versions, every file's result."""
    data = {"schema": "kimi-oracle.golden-report", "schema_version": 1, "command": report.command,
            "created": core_files.utc_now(), "versions": core_files.versions(), **report.to_dict()}
    try:
        core_files.atomic_write_many({out_dir / f"{REPORT_NAME}.json": core_files.to_json(data),
                                      out_dir / f"{REPORT_NAME}.md": _report_markdown(report)})
    except OSError as exc:
        report.messages.append(f"could not write the report under {_display(out_dir)}: {_error_text(exc)}")


def _report_markdown(report: "GoldenReport") -> str:
    versions = core_files.versions()
    head = [f"# kimi-oracle golden {report.command}: candidate `{report.candidate}`", "",
            f"- golden directory: `{report.golden_dir}`",
            "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v), "", "```"]
    return "\n".join(head + [report.render(max_lines=10_000), "```", ""])


def _compute(kind: str, profile: str, candidate: str | Callable | None, select: CaseFilter | None = None,
             hung: dict[str, str] | None = None) -> GoldenFile:
    if kind == "video":
        return record(kind, profile, candidate)
    if kind == "pixels":
        return record_pixels(profile, candidate, select, hung)
    return record(kind, profile, candidate)


def _open_for(selection: list[tuple[str, str]], candidate: str | Callable | None, case_timeout_s: float,
              memory_limit_mb: int | None) -> tuple[str, Callable | None, Callable[[], None]]:
    """The candidate's label, callable and closer: opened only when a pixel file is selected."""
    if any(kind == "pixels" for kind, _ in selection):
        return open_candidate(candidate, case_timeout_s=case_timeout_s, memory_limit_mb=memory_limit_mb)
    # grids do not run a candidate
    return (candidate if isinstance(candidate, str) else "reference"), None, lambda: None


def _check_file(kind: str, profile: str, gdir: Path, fn: Callable | None, select: CaseFilter | None,
                hung: dict[str, str], contents: Mapping[str, bytes | None], integrity: Mapping[str, str],
                *, diagnose: bool, video_candidate: str | Callable | None = None) -> FileReport:
    """One golden file recomputed and compared with the bytes read before any candidate ran."""
    # (a video candidate that takes no images records no mixed batch: only what it computed is compared)
    partial = (select is not None and kind == "pixels") or (kind == "video" and video_candidate not in (None, "reference"))
    new = _compute(kind, profile, video_candidate if kind == "video" else (fn if kind == "pixels" else None),
                   select, hung)
    name = manifest.relative_name(kind, profile)
    file_report, _ = _compare(kind, profile, golden_path(gdir, kind, profile), new, partial, contents[name])
    if name in integrity:
        file_report.problems.append(integrity[name])
    if diagnose and kind == "pixels" and fn is not None:
        _diagnose_changes(file_report, profile, fn)
    return file_report


def _stop_interrupted(report: GoldenReport, planned: int, out: Path | None) -> None:
    """Ctrl-C / SIGTERM: the report says so and is written, then `CheckInterrupted` is raised."""
    report.stopped = "interrupted"
    report.messages.append(f"interrupted: {len(report.files)} of {planned} golden files compared")
    report.warnings = _pillow_warning(report.files)
    if out is not None:
        write_report(report, out)
    raise CheckInterrupted(report) from None


def check(
    golden_dir: Path | str | None = None,
    candidate: str | Callable | None = None,
    *,
    kinds: Iterable[str] | None = None,
    profiles: Iterable[str] | None = None,
    write_obtained: bool = True,
    select: CaseFilter | None = None,
    out_dir: Path | str | None = None,
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
    memory_limit_mb: int | None = None,
    diagnose: bool = True,
) -> GoldenReport:
    """Recompute the goldens (grids with `plan()`, pixels with `candidate`) and compare.

    When `write_obtained`, writes under `out_dir` (default `default_out_dir()`) one `.obtained`
    file per differing golden file and the report files; nothing is ever written into the golden
    directory. `select` restricts the pixel cases (a partial check, which writes nothing).

    A spec string other than the reference runs in its own process (`open_candidate`), each call
    bounded by `case_timeout_s` and its address space by `memory_limit_mb`. Ctrl-C / SIGTERM
    raise `CheckInterrupted` once the report of what was compared is written.
    """
    gdir = Path(golden_dir) if golden_dir is not None else default_golden_dir()
    if not gdir.is_dir():
        raise GoldenError(f"golden directory {gdir} does not exist")
    out = _check_out_dir(out_dir, gdir) if write_obtained and select is None else None
    selection = _selection(kinds, profiles)
    # Every golden file read and hashed before any candidate runs (golden_manifest): the check
    # compares with these bytes, checked against the manifest `golden regen --accept` wrote.
    contents = manifest.read_goldens(gdir, [manifest.relative_name(k, p) for k, p in selection])
    integrity = manifest.verify(gdir, contents)
    label, fn, close = _open_for(selection, candidate, case_timeout_s, memory_limit_mb)
    report = GoldenReport(label, gdir, command="check", planned=len(selection))
    hung: dict[str, str] = {}  # mode classes the candidate timed out on, over all profiles
    try:
        for kind, profile in selection:
            file_report = _check_file(kind, profile, gdir, fn, select, hung, contents, integrity,
                                      diagnose=diagnose and label != "reference",
                                      video_candidate=candidate)
            report.files.append(file_report)
            if out is not None:
                _write_obtained(file_report, out, report.messages)
    except KeyboardInterrupt:
        close()
        _stop_interrupted(report, len(selection), out)
    finally:
        close()
        _rewritten(report, gdir, contents)
    report.timed_out = dict(hung)
    if hung:
        report.messages.append("timed out on " + ", ".join(f"a {cls} image ({case})" for cls, case in hung.items())
                               + ": the other cases of those mode classes were not run")
    report.warnings = _pillow_warning(report.files)
    if out is not None:
        write_report(report, out)
    return report


# Differing pixel cases diagnosed per golden file (each costs a reference run, a candidate call and
# an attribution: about 0.4 s a case on a 2-core machine, the attribution's search most of it);
# the rest keep their digest line only.
MAX_DIAGNOSED = 200


def _diagnose_changes(report: "FileReport", profile: str, candidate: Callable) -> None:
    """Re-run each changed pixel case with the reference and the candidate and name its root
    causes (oracle.diagnosis), so a golden difference says why, not only that a digest moved."""
    from kimi_oracle.oracle.checks import compare
    from kimi_oracle.oracle.diagnosis import finding_diagnosis
    from kimi_oracle.pipelines import reference

    done = 0
    for change in report.changes:
        if done >= MAX_DIAGNOSED:
            break
        old, new = change.old or {}, change.new or {}
        if change.change != "changed" or "error" in old or "error" in new:
            continue
        try:
            case = PixelCase.from_entry(profile, new)
            img, config = case.make_image(), case.config()
            expected = reference.preprocess([img], config)
            verdict = compare(expected, candidate([img], config), config, "exact", sizes=[img.size])
        except Exception:  # noqa: BLE001 - a case that no longer runs (or crashes now) keeps its digest line
            continue
        if verdict.check != PIXEL_MISMATCH:
            continue
        fields = finding_diagnosis(str(verdict.check), verdict.stats, [img], config,
                                   expected=verdict.expected, actual=verdict.actual)
        fields.pop("attribution", None)
        change.diagnosis = fields
        done += 1


def _rewritten(report: "GoldenReport", gdir: Path, contents: Mapping[str, bytes | None]) -> None:
    """A golden file that changed while the candidate ran fails, named (its check used the bytes
    read before)."""
    changed = manifest.changed_since(gdir, contents)
    for f in report.files:
        problem = changed.get(manifest.relative_name(f.kind, f.profile))
        if problem is not None:
            f.problems.append(problem)
    for name in changed:
        report.messages.append(f"error: {changed[name]}")
