"""Fuzzing a video candidate (issue 42): drawn batches of one video's chunks, and with `--media
both` images among them (`inputs.video_media`), judged against the checkpoint's video processing
(`oracle.video_judge`), findings grouped and diagnosed by reproduction.

Grouping: each finding is keyed by its check and what explains it; then a group whose kept
findings the steps of another group reproduce bit for bit is merged into it (two variants that
tie on a case, such as a pad one level brighter and a clamp at one level on an image without
black, are one bug), and each group's steps are confirmed on its kept findings
(`confirmed` of `kept`). A crash is grouped by its error's type and first line.

`run_media_isolated(...)` runs it in a forked process: a candidate that kills the interpreter or
hangs past the budget ends the report with an error (exit 1), never as a pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.threads import one_torch_thread
from kimi_oracle.inputs.video_media import MediaCase, media_cases
from kimi_oracle.oracle.checks import CRASH
from kimi_oracle.oracle.video_candidates import load_media_candidate
from kimi_oracle.oracle.video_judge import MediaVerdict, explain_case, judge_case, reproduces

DEFAULT_EXAMPLES = 300
KEPT_PER_GROUP = 8
DEFAULT_BUDGET_S = 600.0


def _pixels(case: MediaCase) -> int:
    total = 0
    for item in case.items:
        for p in (item if isinstance(item, tuple) else (item,)):
            total += p.width * p.height
    return total


@dataclass
class MediaGroup:
    """The findings of one cause."""

    key: str
    check: str
    count: int = 0
    findings: list[MediaVerdict] = field(default_factory=list)
    explained_by: list[str] = field(default_factory=list)
    explanation: str = "unexplained"
    confirmed: int = 0
    merged: list[str] = field(default_factory=list)

    def add(self, found: MediaVerdict) -> None:
        """Count a finding and keep the smallest ones."""
        self.count += 1
        self.findings.append(found)
        self.findings.sort(key=lambda f: _pixels(f.case))
        del self.findings[KEPT_PER_GROUP:]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"key": self.key, "check": self.check, "count": self.count, "explained_by": self.explained_by,
                "explanation": self.explanation, "confirmed": self.confirmed, "kept": len(self.findings),
                "merged": self.merged, "smallest": self.findings[0].to_dict() if self.findings else None}


@dataclass
class MediaReport:
    """What a video fuzz found."""

    candidate: str
    media: str
    profile: str
    seed: int
    examples: int = 0
    groups: list[MediaGroup] = field(default_factory=list)
    error: str | None = None
    stopped: str | None = None  # "budget": fewer batches than asked were judged (not a failure)

    @property
    def ok(self) -> bool:
        """No finding, no error, and at least one batch judged."""
        return not self.groups and self.error is None and self.examples > 0  # (nothing judged: no pass)

    @property
    def unexplained(self) -> int:
        """Groups no step explains."""
        return sum(g.explanation == "unexplained" and g.check != CRASH for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"candidate": self.candidate, "media": self.media, "profile": self.profile, "seed": self.seed,
                "examples": self.examples, "ok": self.ok, "error": self.error, "stopped": self.stopped,
                "findings": sum(g.count for g in self.groups), "unexplained": self.unexplained,
                "groups": [g.to_dict() for g in self.groups]}

    def lines(self) -> list[str]:
        """The report as text."""
        found = sum(g.count for g in self.groups)
        out = [f"video candidate {self.candidate} (--media {self.media}, {self.profile}, seed {self.seed}): "
               f"{self.examples} batches, {found} findings in {len(self.groups)} groups"
               + (f"; ERROR: {self.error}" if self.error else "")
               + (f"; stopped at the budget ({self.stopped})" if self.stopped else "")]
        for g in self.groups:
            if g.check == CRASH:
                out.append(f"  {g.key}: {g.count} batches")
            else:
                why = (": " + ", ".join(g.explained_by)) if g.explained_by else ""
                out.append(f"  {g.key}: {g.count} batches; {g.explanation}{why} (reproduced on {g.confirmed} of "
                           f"{len(g.findings)} kept)")
            out.append(f"    smallest: {g.findings[0].case.describe()}: {g.findings[0].verdict.message[:160]}")
        return out


def _covers(host: MediaGroup, g: MediaGroup) -> bool:
    return (host is not g and host.check == g.check and g.check != CRASH and bool(host.explained_by)
            and host.explanation == "explained" and bool(g.findings)
            and all(f.verdict.actual is not None and reproduces(host.explained_by, f.case, f.verdict.actual)
                    for f in g.findings))


def _merge(groups: list[MediaGroup]) -> list[MediaGroup]:
    """Fold a group into another of its check whose steps reproduce each of its kept findings
    exactly (the host that covers the most findings first); until none folds."""
    groups = sorted(groups, key=lambda g: -g.count)
    while True:
        move = None
        for g in sorted(groups, key=lambda g: g.count):
            hosts = [h for h in groups if _covers(h, g)]
            if hosts:
                move = (g, max(hosts, key=lambda h: h.count))
                break
        if move is None:
            return sorted(groups, key=lambda g: -g.count)
        g, host = move
        groups.remove(g)
        host.count += g.count
        host.merged.extend([g.key] + g.merged)
        host.findings = sorted(host.findings + g.findings, key=lambda f: _pixels(f.case))[:KEPT_PER_GROUP]


def _confirm(g: MediaGroup) -> None:
    if g.check == CRASH:
        g.confirmed = len(g.findings)
        return
    if not g.explained_by:
        return
    g.confirmed = sum(f.verdict.actual is not None and reproduces(g.explained_by, f.case, f.verdict.actual)
                      for f in g.findings)
    if g.explanation == "explained" and g.confirmed < len(g.findings):
        g.explanation = "partly explained"


def _known_group(groups: dict[str, MediaGroup], verdict: Any, case: MediaCase, batch: list[Any]) -> MediaGroup | None:
    """The largest explained group of the finding's check whose steps reproduce it exactly."""
    if verdict.actual is None or verdict.check == CRASH:
        return None
    for g in sorted(groups.values(), key=lambda g: -g.count):
        if g.check == verdict.check and g.explanation == "explained" and g.explained_by \
                and reproduces(g.explained_by, case, verdict.actual, batch):
            return g
    return None


def fuzz_media(spec: str, base: PreprocessConfig, media: str = "video", examples: int = DEFAULT_EXAMPLES,
               seed: int = 0, *, tolerance: str = "exact", progress: Callable[[int, int], None] | None = None,
               budget_s: float | None = None) -> MediaReport:
    """Judge `examples` drawn batches (CandidateError when the candidate cannot load), on one
    intra-op torch thread (`core.threads`: small tensors; the candidate runs in the same loop)."""
    with one_torch_thread():
        return _fuzz_media(spec, base, media, examples, seed, tolerance=tolerance, progress=progress,
                           budget_s=budget_s)


def _fuzz_media(spec: str, base: PreprocessConfig, media: str, examples: int, seed: int, *, tolerance: str,
                progress: Callable[[int, int], None] | None, budget_s: float | None) -> MediaReport:
    candidate = load_media_candidate(spec, media)
    report = MediaReport(spec, media, base.name, int(seed))
    groups: dict[str, MediaGroup] = {}
    deadline = None if budget_s is None else time.monotonic() + budget_s
    for i, case in enumerate(media_cases(base, examples, seed, media)):
        if deadline is not None and time.monotonic() > deadline:
            report.stopped = f"{budget_s:g} s, after {i} of {examples} batches"
            break
        batch = case.media()
        try:
            verdict = judge_case(candidate, case, tolerance, media=batch)
        except CandidateError as exc:  # a return that is no result, mid-run: the run's error, never a pass
            report.error = f"batch {i}: {exc}"
            break
        report.examples = i + 1
        if progress is not None:
            progress(i + 1, examples)
        if verdict.ok or verdict.check is None:
            continue
        known = _known_group(groups, verdict, case, batch)
        if known is not None:  # reproduced by a group's steps already: no search
            known.add(MediaVerdict(verdict, case, list(known.explained_by), known.explanation))
            continue
        found = explain_case(case, verdict, batch)
        g = groups.setdefault(found.key(), MediaGroup(found.key(), found.check))
        if not g.explained_by:
            g.explained_by, g.explanation = list(found.explained_by), found.explanation
        g.add(found)
    report.groups = _merge(list(groups.values()))
    for g in report.groups:
        _confirm(g)
    return report


def run_media_isolated(spec: str, base: PreprocessConfig, media: str, examples: int, seed: int, *,
                       tolerance: str = "exact", budget_s: float = DEFAULT_BUDGET_S) -> MediaReport:
    """`fuzz_media` in a forked process (`fuzzers.isolated.run_forked`); CandidateError when the
    candidate cannot load."""
    from kimi_oracle.fuzzers.isolated import run_forked

    # (A candidate that cannot load raises CandidateError in the child, raised again here: exit 2.
    # It is loaded there only: an engine's files are loaded once a process.)
    kind, payload = run_forked(f"kimi-video[{spec}]", fuzz_media, (spec, base, media, examples, seed),
                               {"tolerance": tolerance, "budget_s": budget_s}, budget_s + 10.0)
    if kind == "result":
        return payload
    return MediaReport(spec, media, base.name, int(seed), error=payload)


__all__ = ["DEFAULT_EXAMPLES", "MediaGroup", "MediaReport", "fuzz_media", "run_media_isolated"]
