"""Golden diffs: changed entries, their descriptions, and the per-file and whole-check reports
(and the interrupt that carries one)."""

from __future__ import annotations

import contextlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kimi_oracle.workflows.golden.catalogue import _generators
from kimi_oracle.workflows.golden.fileformat import GoldenFile


# ---------------------------------------------------------------------------------------------
# diffs and reports


@dataclass
class EntryChange:
    """One entry that differs: `changed` (both sides), `added` (new only), `removed` (old only)."""

    kind: str
    key: str
    change: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    # For a changed pixel case run by a candidate: oracle.diagnosis.finding_diagnosis of its
    # output against the reference (root_causes, max/mean levels, residual), without attribution.
    diagnosis: dict[str, Any] | None = None

    def describe(self) -> str:
        """One readable line."""
        if self.kind == "grids":
            return _describe_grid(self)
        if self.kind == "video":
            from kimi_oracle.workflows.golden.video import describe_change

            return describe_change(self.key, self.old, self.new)
        text = _describe_pixels(self)
        d = self.diagnosis
        if d and d.get("root_causes"):
            top = d.get("max_levels")
            text += (f"; root causes: {', '.join(d['root_causes'])}"
                     + (f" (max {top:.3g} levels)" if isinstance(top, (int, float)) else ""))
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {"key": self.key, "change": self.change, "old": self.old, "new": self.new}
        if self.diagnosis is not None:
            out["diagnosis"] = self.diagnosis
        return out


def _grid_text(entry: Mapping[str, Any] | None) -> str:
    if entry is None:
        return "-"
    if "error" in entry:
        return f"error ({entry['error']})"
    grid = entry.get("grid_thw")
    grid_s = "x".join(str(v) for v in grid) if isinstance(grid, list) and all(isinstance(v, int) for v in grid) else str(grid)
    return f"grid {grid_s}, {_tokens(entry.get('num_tokens'))}"


def _tokens(n: Any) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _size_text(entry: Mapping[str, Any]) -> str:
    return f"{entry.get('new_w')}x{entry.get('new_h')} +{entry.get('pad_w')}+{entry.get('pad_h')}"


def _describe_grid(c: EntryChange) -> str:
    ref = c.new if c.new is not None else c.old or {}
    label = f"{c.key} [{ref.get('class', '?')}]"
    if c.change == "added":
        return f"+ {label}: not in the golden file; now {_grid_text(c.new)}"
    if c.change == "removed":
        return f"- {label}: in the golden file ({_grid_text(c.old)}) but not in the catalogue"
    old, new = c.old or {}, c.new or {}
    parts = [f"{_grid_text(old)} -> {_grid_text(new)}"]
    if "error" not in old and "error" not in new:
        if _size_text(old) != _size_text(new):
            parts.append(f"resize+pad {_size_text(old)} -> {_size_text(new)}")
    other = sorted(k for k in set(old) | set(new)
                   if k not in ("new_w", "new_h", "pad_w", "pad_h", "grid_thw", "num_tokens", "error")
                   and old.get(k) != new.get(k))
    parts += [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in other]
    if _grid_text(old) == _grid_text(new) and len(parts) == 1:
        parts[0] = f"{_grid_text(new)} (grid unchanged)"
    return f"~ {label}: " + "; ".join(parts)


def _pixel_grid_text(entry: Mapping[str, Any]) -> str:
    grid = entry.get("grid_thw")
    if isinstance(grid, list) and len(grid) == 3 and all(isinstance(v, int) for v in grid):
        t, h, w = grid
        # Patch rows, not tokens: a pixel entry does not say the merge size (t·h·w // 4 assumed 2).
        return f"grid {t}x{h}x{w}, {t * h * w} patch{'' if t * h * w == 1 else 'es'}"
    return f"grid {grid!r}"


def _case_label(entry: Mapping[str, Any]) -> str:
    params = entry.get("params") or {}
    try:
        text = _generators().CaseParams.from_dict(params).describe()
    except Exception:
        text = json.dumps(params)
    return text


def _describe_pixels(c: EntryChange) -> str:
    ref = c.new if c.new is not None else c.old or {}
    label = f"{c.key} ({_case_label(ref)})"
    if c.change == "added":
        what = f"error ({c.new['error']})" if "error" in (c.new or {}) else _pixel_grid_text(c.new or {})
        return f"+ {label}: not in the golden file; now {what}"
    if c.change == "removed":
        return f"- {label}: in the golden file but not in the catalogue"
    old, new = c.old or {}, c.new or {}
    parts = []
    if "error" in old or "error" in new:
        parts.append(f"{old.get('error', 'ok')} -> {new.get('error', 'ok')}".replace("\n", " "))
    if old.get("sha256") != new.get("sha256") and "error" not in old and "error" not in new:
        parts.append(f"digest changed {str(old.get('sha256'))[:12]} -> {str(new.get('sha256'))[:12]}")
    og, ng = _pixel_grid_text(old), _pixel_grid_text(new)
    if "error" not in old and "error" not in new:
        parts.append(f"{og} -> {ng}" if og != ng else f"{ng} (unchanged)")
    os_, ns = old.get("stats") or {}, new.get("stats") or {}
    for k in sorted(set(os_) | set(ns)):
        if os_.get(k) != ns.get(k):
            parts.append(f"{k} {os_.get(k)!r} -> {ns.get(k)!r}")
    for k in ("params", "overrides"):
        if old.get(k) != new.get(k):
            parts.append(f"{k} {json.dumps(old.get(k), sort_keys=True)} -> {json.dumps(new.get(k), sort_keys=True)}")
    return f"~ {label}: " + "; ".join(parts)


def diff_entries(kind: str, old: GoldenFile | None, new: GoldenFile) -> list[EntryChange]:
    """Entry-level differences, in the new file's order, then removed entries in the old order."""
    old_map = old.by_key() if old is not None else {}
    new_map = new.by_key()
    changes: list[EntryChange] = []
    for key, entry in new_map.items():
        if key not in old_map:
            changes.append(EntryChange(kind, key, "added", None, entry))
        elif old_map[key] != entry:
            changes.append(EntryChange(kind, key, "changed", old_map[key], entry))
    for key, entry in old_map.items():
        if key not in new_map:
            changes.append(EntryChange(kind, key, "removed", entry, None))
    return changes


@dataclass
class FileReport:
    """The comparison of one golden file with what is obtained now."""

    kind: str
    profile: str
    path: Path
    changes: list[EntryChange] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # failures not tied to one entry
    notes: list[str] = field(default_factory=list)  # informational (versions)
    obtained: Path | None = None  # the .obtained file written, if any
    accepted: bool = False
    recorded_pillow: str | None = None
    new_text: str | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """True when the file matches exactly."""
        return not self.changes and not self.problems

    def counts(self) -> dict[str, int]:
        """Number of changed, added and removed entries."""
        out = {"changed": 0, "added": 0, "removed": 0}
        for c in self.changes:
            out[c.change] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "kind": self.kind,
            "profile": self.profile,
            "path": str(self.path),
            "ok": self.ok,
            "counts": self.counts(),
            "problems": list(self.problems),
            "notes": list(self.notes),
            "obtained": str(self.obtained) if self.obtained else None,
            "accepted": self.accepted,
            "changes": [c.to_dict() for c in self.changes],
        }


@dataclass
class GoldenReport:
    """The result of a check or a regeneration over several golden files."""

    candidate: str
    golden_dir: Path
    command: str = "check"
    files: list[FileReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # printed first (Pillow mismatch)
    messages: list[str] = field(default_factory=list)  # printed last (refusals, acceptance)
    stopped: str = "done"  # or "interrupted": `files` holds only the files compared before it
    timed_out: dict[str, str] = field(default_factory=dict)  # mode class -> the case the candidate hung on
    planned: int = 0  # files the check was to compare

    @property
    def ok(self) -> bool:
        """True when every file matches (never after an interrupt)."""
        return self.stopped != "interrupted" and all(f.ok for f in self.files)

    @property
    def num_changes(self) -> int:
        """Changed + added + removed entries over all files."""
        return sum(len(f.changes) for f in self.files)

    def failing(self) -> list[FileReport]:
        """The files that differ."""
        return [f for f in self.files if not f.ok]

    def render(self, max_lines: int = 40) -> str:
        """The readable report: warnings first, one block per differing file, then a summary."""
        out: list[str] = [f"WARNING: {w}" for w in self.warnings]
        for f in self.files:
            name = _display(f.path)
            if f.ok:
                out.append(f"ok   {name} ({f.kind}, {f.profile})")
                continue
            counts = f.counts()
            summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
            status = "ACCEPTED" if f.accepted else "FAIL"
            out.append(f"{status} {name} ({f.kind}, {f.profile}): {summary or 'metadata differs'}")
            for problem in f.problems:
                out.append(f"  ! {problem}")
            shown = 0 if "missing golden file" in f.problems else max_lines
            for c in f.changes[:shown]:
                out.append(f"  {c.describe()}")
            if len(f.changes) > shown:
                where = "the golden file now" if f.accepted else "the .obtained file"
                out.append(f"  ... and {len(f.changes) - shown} more (see {where})")
            if f.obtained is not None:
                out.append(f"  obtained: {_display(f.obtained)}")
        for f in self.files:
            for note in f.notes:
                out.append(f"note: {_display(f.path)}: {note}")
        out.extend(self.messages)
        failing = self.failing()
        if self.stopped == "interrupted":
            out.append(f"golden {self.candidate}: INTERRUPTED after {len(self.files)} of "
                       f"{self.planned or len(self.files)} files ({len(failing)} differ so far): not a pass")
        elif failing and all(f.accepted for f in failing):
            out.append(f"golden {self.candidate}: {len(failing)} of {len(self.files)} files replaced, "
                       f"{self.num_changes} entries")
        elif failing:
            out.append(f"golden {self.candidate}: {len(failing)} of {len(self.files)} files differ, "
                       f"{self.num_changes} entries")
        else:
            out.append(f"golden {self.candidate}: all {len(self.files)} files match")
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for the gate's report)."""
        return {
            "candidate": self.candidate,
            "golden_dir": str(self.golden_dir),
            "ok": self.ok,
            "stopped": self.stopped,
            "files_planned": self.planned or len(self.files),
            "num_changes": self.num_changes,
            "warnings": list(self.warnings),
            "messages": list(self.messages),
            "files": [f.to_dict() for f in self.files],
        }


def _display(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(Path.cwd()))
    return str(path)


class CheckInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a check; `report` says what was compared before it (its report
    files are written, saying `stopped: interrupted`)."""

    def __init__(self, report: "GoldenReport"):
        super().__init__("interrupted")
        self.report = report
