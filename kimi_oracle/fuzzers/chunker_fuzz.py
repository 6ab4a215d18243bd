"""Fuzzing a video chunker (issue 42): drawn videos (`inputs.video_cases`) judged against the
checkpoint's sampling (`oracle.chunker`), findings grouped by what differs and diagnosed by
reproduction (`oracle.chunker.CHUNK_VARIANTS`).

`run_chunker_isolated(spec, config, videos, seed)` runs it in a forked process: a chunker that
kills the interpreter or hangs past the budget ends as an error of the report, not the command.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.inputs.video_cases import video_cases
from kimi_oracle.oracle.chunker import ChunkFinding, explain, fps_text, load_chunker, judge_video

DEFAULT_VIDEOS = 2000
KEPT_PER_GROUP = 20  # findings kept (and explained on) per group
DEFAULT_BUDGET_S = 600.0


@dataclass
class ChunkerGroup:
    """The findings of one kind (`field` and the variants that explain them)."""

    field: str
    count: int = 0
    findings: list[ChunkFinding] = field(default_factory=list)
    explained_by: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"field": self.field, "count": self.count, "explained_by": self.explained_by,
                "explanation": "explained" if self.explained_by else "unexplained",
                "smallest": self.findings[0].to_dict() if self.findings else None,
                "findings": [f.to_dict() for f in self.findings]}


@dataclass
class ChunkerReport:
    """What a chunker fuzz found: videos judged, groups of findings, an error that ended it."""

    chunker: str
    profile: str
    seed: int
    videos: int = 0
    groups: list[ChunkerGroup] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """No finding and no error."""
        return not self.groups and self.error is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"chunker": self.chunker, "profile": self.profile, "seed": self.seed, "videos": self.videos,
                "ok": self.ok, "error": self.error, "groups": [g.to_dict() for g in self.groups]}

    def lines(self) -> list[str]:
        """The report as text lines."""
        head = (f"chunker {self.chunker} ({self.profile}): {self.videos} videos, "
                f"{sum(g.count for g in self.groups)} differ" + (f"; ERROR: {self.error}" if self.error else ""))
        out = [head]
        for g in self.groups:
            f = g.findings[0]
            why = ("explained by " + ", ".join(g.explained_by)) if g.explained_by else "unexplained"
            out.append(f"  {g.field}: {g.count} videos, {why}")
            out.append(f"    smallest: {f.num_frames} frames at {fps_text(f.fps)} fps, {f.timestamp_mode}: {f.message}")
        return out


def _size(f: ChunkFinding) -> tuple[int, float]:
    return f.num_frames, f.fps


def fuzz_chunker(spec: str, base: PreprocessConfig, videos: int = DEFAULT_VIDEOS, seed: int = 0, *,
                 progress: Callable[[int, int], None] | None = None,
                 budget_s: float | None = None) -> ChunkerReport:
    """Judge `videos` drawn videos (CandidateError when the chunker cannot load); the groups'
    findings kept smallest first, each group explained on its kept findings."""
    chunker = load_chunker(spec)
    report = ChunkerReport(spec, base.name, int(seed))
    groups: dict[str, ChunkerGroup] = {}
    deadline = None if budget_s is None else time.monotonic() + budget_s
    for i, (n, fps, config) in enumerate(video_cases(base, videos, seed)):
        if deadline is not None and time.monotonic() > deadline:
            report.error = f"stopped at the budget ({budget_s:g} s) after {i} videos"
            break
        found = judge_video(chunker, n, fps, config)
        report.videos = i + 1
        if progress is not None:
            progress(i + 1, videos)
        if found is None:
            continue
        g = groups.setdefault(found.field, ChunkerGroup(found.field))
        g.count += 1
        g.findings.append(found)
        g.findings.sort(key=_size)
        del g.findings[KEPT_PER_GROUP:]
    for g in groups.values():
        g.explained_by = explain(g.findings, base)
        for f in g.findings:
            f.explained_by = list(g.explained_by)
    report.groups = sorted(groups.values(), key=lambda g: -g.count)
    return report


def run_chunker_isolated(spec: str, base: PreprocessConfig, videos: int, seed: int,
                         budget_s: float = DEFAULT_BUDGET_S) -> ChunkerReport:
    """`fuzz_chunker` in a forked process; a chunker that kills it or hangs past `budget_s` (and
    a grace of 10 s) gives a report with the error. CandidateError when it cannot load."""
    from kimi_oracle.fuzzers.isolated import run_forked

    load_chunker(spec)  # (a spec that cannot load: exit 2, here)
    kind, payload = run_forked(f"kimi-chunker[{spec}]", fuzz_chunker, (spec, base, videos, seed),
                               {"budget_s": budget_s}, budget_s + 10.0)
    if kind == "result":
        return payload
    return ChunkerReport(spec, base.name, int(seed), error=payload.replace("the run", "the chunker"))
