"""Golden files: recording them, their JSON Lines format and parsing them back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from kimi_oracle.core import files as core_files
from kimi_oracle.core.files import read_text
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.workflows.golden.common import (
    GoldenError, KINDS, MAX_GOLDEN_BYTES, SCHEMA_VERSION, config_hash, library_versions,
)
from kimi_oracle.workflows.golden.catalogue import PixelCase, _generators, grid_catalogue, pixel_catalogue
from kimi_oracle.workflows.golden.entries import grid_entry, pixel_entry
from kimi_oracle.workflows.golden.candidates import load_candidate, run_pixel_cases


# ---------------------------------------------------------------------------------------------
# golden files: record, serialize, parse


@dataclass
class GoldenFile:
    """A golden file's metadata and entries (in file order)."""

    kind: str
    profile: str
    meta: dict[str, Any]
    entries: list[dict[str, Any]]

    def key(self, entry: Mapping[str, Any]) -> str:
        """The identity of an entry: `WxH` for grids, the case id for pixels."""
        return entry_key(self.kind, entry)

    def by_key(self) -> dict[str, dict[str, Any]]:
        """Entries by key."""
        return {self.key(e): e for e in self.entries}

    def dumps(self) -> str:
        """The file's text: the metadata line, then one compact JSON object per entry."""
        meta = dict(self.meta, count=len(self.entries))
        lines = [json.dumps({"_meta": meta}, separators=(", ", ": "))]
        lines += [json.dumps(e, separators=(",", ":")) for e in self.entries]
        return "\n".join(lines) + "\n"


def entry_key(kind: str, entry: Mapping[str, Any]) -> str:
    """`WxH` for a grid entry, the case id for a pixel entry."""
    if kind == "grids":
        return f"{entry.get('width')}x{entry.get('height')}"
    return str(entry.get("id"))  # (pixels and video)


def _meta(kind: str, profile: str) -> dict[str, Any]:
    config = PreprocessConfig.profile(profile)
    video = kind == "video"
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "profile": profile,
        "config_sha256": config_hash(config, video=video),
        "config": config.to_hf_json() if video else config.image_hf_json(),
        "generator_version": _generators().GENERATOR_VERSION,
        "versions": library_versions(),
    }


def record_grids(profile: str) -> GoldenFile:
    """The grid golden of `profile`, computed now with `plan()`."""
    config = PreprocessConfig.profile(profile)
    entries = [grid_entry(w, h, cls, config) for w, h, cls in grid_catalogue(profile)]
    return GoldenFile("grids", profile, _meta("grids", profile), entries)


CaseFilter = Callable[[PixelCase], bool]


def record_pixels(profile: str, candidate: str | Callable | None = None,
                  select: CaseFilter | None = None, hung: dict[str, str] | None = None) -> GoldenFile:
    """The pixel golden of `profile`, computed now with `candidate` (default the reference).

    `select` keeps only some cases (a partial recording, for quick checks); `hung` as in
    `run_pixel_cases`.
    """
    _, fn = load_candidate(candidate)
    cases = pixel_catalogue(profile)
    if select is not None:
        cases = [c for c in cases if select(c)]
    results = run_pixel_cases(cases, fn, hung)
    entries = [pixel_entry(c, r) for c, r in zip(cases, results)]
    return GoldenFile("pixels", profile, _meta("pixels", profile), entries)


def record_video(profile: str, candidate: str | Callable | None = None) -> GoldenFile:
    """The video golden of `profile` (its K2.5 video rules), the pixels by `candidate`."""
    from kimi_oracle.workflows.golden.video import video_entries

    config = PreprocessConfig.profile(profile)
    if not config.has_video:
        raise GoldenError(f"profile {profile!r} has no video rules: no video golden")
    return GoldenFile("video", profile, _meta("video", profile), video_entries(config, candidate))


def record(kind: str, profile: str, candidate: str | Callable | None = None) -> GoldenFile:
    """Record one golden file now."""
    if kind == "video":
        return record_video(profile, candidate)
    if kind == "grids":
        return record_grids(profile)
    if kind == "pixels":
        return record_pixels(profile, candidate)
    raise GoldenError(f"unknown golden kind {kind!r}; expected one of {', '.join(KINDS)}")


class GoldenFormatError(ValueError):
    """A golden file is not what `GoldenFile.dumps` writes (line number in the message)."""


def parse(text: str, kind: str, profile: str) -> GoldenFile:
    """Parse a golden file's text; raise GoldenFormatError naming the bad line."""
    lines = text.split("\n")
    if not text.endswith("\n"):
        raise GoldenFormatError("file does not end with a newline (truncated?)")
    lines = lines[:-1]
    if not lines:
        raise GoldenFormatError("empty file")
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise GoldenFormatError(f"line 1: not JSON: {exc.msg}") from None
    meta = head.get("_meta") if isinstance(head, dict) else None
    if not isinstance(meta, dict):
        raise GoldenFormatError('line 1: expected the metadata object {"_meta": {...}}')
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise GoldenFormatError(
            f"line 1: schema_version {meta.get('schema_version')!r}, this kimi-oracle reads {SCHEMA_VERSION}"
        )
    if meta.get("kind") != kind or meta.get("profile") != profile:
        raise GoldenFormatError(
            f"line 1: metadata says kind {meta.get('kind')!r}, profile {meta.get('profile')!r}; "
            f"expected {kind!r}, {profile!r}"
        )
    entries: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GoldenFormatError(f"line {number}: not JSON: {exc.msg}") from None
        if not isinstance(entry, dict):
            raise GoldenFormatError(f"line {number}: expected a JSON object")
        key = entry_key(kind, entry)
        if key in seen:
            raise GoldenFormatError(f"line {number}: duplicate entry {key} (first on line {seen[key]})")
        seen[key] = number
        entries.append(entry)
    if meta.get("count") != len(entries):
        raise GoldenFormatError(f"metadata count {meta.get('count')!r} but {len(entries)} entries (truncated?)")
    meta = {k: v for k, v in meta.items() if k != "count"}
    return GoldenFile(kind, profile, meta, entries)


def load(path: Path, kind: str, profile: str) -> GoldenFile:
    """Read and parse one golden file."""
    return parse(read_text(path, max_bytes=MAX_GOLDEN_BYTES), kind, profile)  # (core.files: capped, regular)


def remove_stale_temporaries(golden_dir: Path) -> list[Path]:
    """Delete temporary files a killed writer left in the golden folders."""
    return [p for kind in KINDS for p in core_files.remove_stale_temporaries(Path(golden_dir) / kind)]
