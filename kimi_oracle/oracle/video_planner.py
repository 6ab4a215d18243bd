"""Judging a video planner (issue 42): `(width, height, num_frames, config) -> dict` with the image
planner's keys (`num_tokens, new_width, new_height, pad_width, pad_height`; a `grid_thw`, when
given, is checked too: `(num_frames, h, w)`), against the checkpoint's plan of a chunk of
`num_frames` frames whose first frame is W x H (`core.video.plan_chunk`).

Drawn cases: real video sizes (480p to 4K, portrait and square), small and odd ones, 1..4 frames a
chunk, `in_patch_limit_video` absent or dividing to below the frame limit, the image key's
`fixed_output_tokens` and `fixed_output_tokens_each_frame` now and then set. A difference is
diagnosed by reproduction with the chunk rules (`variants.chunk_rules`): the budget's divisor
(`none`: the frame limit alone) and the fixed count's key (`each-frame`); a planner sees one
chunk, so the video divisor (`budget-divisor/video`) is the candidates' fuzzer's to find.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError, InputError, PlanError
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.video import plan_chunk, require_video
from kimi_oracle.oracle.candidates import as_plan
from kimi_oracle.oracle.video_candidates import VideoPlanner, load_video_planner
from kimi_oracle.pipelines.variants.chunk_rules import all_rules, plan_for

VIDEO_SIZES = ((640, 360), (854, 480), (1280, 720), (1920, 1080), (2560, 1440), (3840, 2160), (1080, 1920),
               (720, 1280), (1080, 1080), (480, 640), (1, 1), (13, 7), (29, 57), (333, 100))
FIELDS = ("new_w", "new_h", "pad_w", "pad_h", "grid_thw", "num_tokens")
KEPT = 5


def planner_cases(base: PreprocessConfig, count: int, seed: int) -> Iterator[tuple[int, int, int, PreprocessConfig]]:
    """`count` (width, height, num_frames, config) cases, deterministic from `seed`."""
    require_video(base)
    rng = np.random.default_rng([int(seed), 0x91A7])
    k = int(base.temporal_merge_kernel_size)  # type: ignore[arg-type]
    for _ in range(int(count)):
        if rng.integers(0, 3):
            w, h = VIDEO_SIZES[int(rng.integers(0, len(VIDEO_SIZES)))]
        else:
            w, h = int(np.exp(rng.uniform(0, np.log(4000)))) + 1, int(np.exp(rng.uniform(0, np.log(4000)))) + 1
        t = int(rng.integers(1, k + 1))
        changes: dict[str, Any] = {}
        if rng.integers(0, 3):
            per_frame = int(base.in_patch_limit_each_frame or base.in_patch_limit)
            changes["in_patch_limit_video"] = int(t * per_frame * rng.uniform(0.05, 1.5))
        if rng.integers(0, 5) == 0:
            changes["fixed_output_tokens_each_frame"] = int(rng.integers(16, 1024))
        if rng.integers(0, 8) == 0:
            changes["fixed_output_tokens"] = int(rng.integers(16, 1024))
        yield w, h, t, (dataclasses.replace(base, **changes) if changes else base)


@dataclass
class VideoPlanFinding:
    """One planned chunk the planner plans otherwise (or raises on)."""

    width: int
    height: int
    frames: int
    config: PreprocessConfig
    field: str
    expected: Any
    actual: Any
    explained_by: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"size": [self.width, self.height], "num_frames": self.frames, "field": self.field,
                "expected": self.expected, "actual": self.actual, "explained_by": self.explained_by,
                "config": self.config.to_hf_json()}


@dataclass
class VideoPlanReport:
    """What a video planner fuzz found, grouped by field and explanation."""

    planner: str
    profile: str
    seed: int
    cases: int = 0
    groups: dict[str, list[VideoPlanFinding]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No finding."""
        return not self.counts

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"planner": self.planner, "profile": self.profile, "seed": self.seed, "cases": self.cases,
                "ok": self.ok, "groups": [{"key": k, "count": self.counts[k], "findings": [f.to_dict() for f in v]}
                                          for k, v in self.groups.items()]}

    def lines(self) -> list[str]:
        """The report as text."""
        out = [f"video planner {self.planner} ({self.profile}, seed {self.seed}): {self.cases} chunks planned, "
               f"{sum(self.counts.values())} differ"]
        for key, found in self.groups.items():
            f = found[0]
            out.append(f"  {key}: {self.counts[key]} chunks")
            out.append(f"    smallest: {f.width}x{f.height}, {f.frames} frames: {f.field} {f.actual!r} != expected "
                       f"{f.expected!r}")
        return out


def _value(p: ResizePlan, name: str) -> Any:
    v = getattr(p, name)
    return list(v) if name == "grid_thw" else v


def _explain(w: int, h: int, t: int, config: PreprocessConfig, actual: ResizePlan, grid_given: bool) -> list[str]:
    for rule in all_rules()[1:]:
        if rule.divisor == "video" or rule.size_from != "first" or rule.layout != "hwc" or (
                rule.fixed == "each-frame" and config.fixed_output_tokens_each_frame is None):
            continue  # (one chunk of equal frames: not told apart)
        try:
            p = plan_for(rule, [(w, h)] * t, t, config)
        except (InputError, PlanError):
            continue
        if all(_value(p, n) == _value(actual, n) for n in FIELDS if n != "grid_thw" or grid_given):
            return list(rule.changes)
    return []


def judge_plan(planner: VideoPlanner, w: int, h: int, t: int, config: PreprocessConfig) -> VideoPlanFinding | None:
    """The first field the planner plans otherwise, explained; None when it agrees (or both
    refuse). A raise on a plannable chunk is a finding of field `exception`."""
    try:
        expected = plan_chunk(w, h, t, config)
    except (InputError, PlanError):
        expected = None
    try:
        out = planner.func(w, h, t, config)
        shape = as_plan(out, config, planner.spec, (w, h))
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - a planner's raise is judged, not fatal
        if expected is None:
            return None
        return VideoPlanFinding(w, h, t, config, "exception", None, f"{type(exc).__name__}: {exc}"[:300])
    if expected is None:
        return VideoPlanFinding(w, h, t, config, "accepts_invalid", None, "planned a chunk the checkpoint refuses")
    actual = shape.plan
    grid_given = shape.names.get("grid_thw") == "grid_thw"
    for name in FIELDS:
        if name == "grid_thw" and not grid_given:
            continue
        if _value(actual, name) != _value(expected, name):
            found = VideoPlanFinding(w, h, t, config, shape.names.get(name, name), _value(expected, name),
                                     _value(actual, name))
            found.explained_by = _explain(w, h, t, config, actual, grid_given)
            return found
    return None


def fuzz_video_planner(spec: str, base: PreprocessConfig, count: int, seed: int) -> VideoPlanReport:
    """Judge `count` drawn chunks (CandidateError when the planner cannot load)."""
    planner = load_video_planner(spec)
    report = VideoPlanReport(spec, base.name, int(seed))
    for i, (w, h, t, config) in enumerate(planner_cases(base, count, seed)):
        found = judge_plan(planner, w, h, t, config)
        report.cases = i + 1
        if found is None:
            continue
        key = f"{found.field}{{{'+'.join(found.explained_by) or 'unexplained'}}}"
        report.counts[key] = report.counts.get(key, 0) + 1
        kept = report.groups.setdefault(key, [])
        kept.append(found)
        kept.sort(key=lambda f: (f.width * f.height, f.frames))
        del kept[KEPT:]
    return report


__all__ = ["VIDEO_SIZES", "VideoPlanFinding", "VideoPlanReport", "fuzz_video_planner", "judge_plan", "planner_cases"]
