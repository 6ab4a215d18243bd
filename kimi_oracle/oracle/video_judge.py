"""Judging a video candidate on one batch of chunks (and images), and saying what it does otherwise
(issue 42, items 1 and 4).

`judge_case(candidate, case)`: the reference (`pipelines.video.preprocess_media`) against the
candidate's result by the image checks (`checks.compare`: grids `(t, h, w)`, feature length,
shape and dtype, pixels), then, when they pass, the invariances (a chunk alone equals its rows in
the batch with images and other chunks; subsets; permutations; determinism).

`explain_case(case, verdict)` diagnoses a finding by reproduction:
- grids or feature length: every chunk rule of `variants.chunk_rules` (the budget's divisor,
  the frame the chunk's size is taken from, the fixed count's key) is planned for the batch;
  those whose grids are the candidate's, exactly, are named (fewest steps first);
- pixels: first the chunk rules again (frames of unequal sizes resized to another frame's plan
  give the checkpoint's grids and other pixels), then, per differing chunk, the image diagnosis
  (`diagnosis.attribute`) on its frames as images under the chunk's frame budget: every image
  family (resampler, pad, normalization, patch order, conversion, ...) names what it names for
  an image; an image of a mixed batch is diagnosed as an image.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError, ConfigError, InputError
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks import ACCEPTS_INVALID, CRASH, Verdict, check_invariance, compare
from kimi_oracle.oracle.kinds import GRID_MISMATCH, PIXEL_MISMATCH
from kimi_oracle.pipelines.variants.chunk_rules import (CHECKPOINT_RULE, ChunkRule, all_rules, is_rule_name, layout_frame,
                                                          parse_rule,
                                                          plan_for, rule_frame_limit)
from kimi_oracle.pipelines.video import is_chunk, preprocess_media, rgb_frame, video_frame_count

class MediaCase(Protocol):
    """What the judge needs of a drawn batch (`inputs.video_media.MediaCase`)."""

    config: PreprocessConfig

    @property
    def chunks(self) -> int: ...

    def media(self) -> list[Any]: ...

    def describe(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


DIAGNOSIS_RUNS = 300  # reference runs the pixel diagnosis of one chunk may spend
MAX_KEEPING_RULES = 4  # chunk rules (besides the checkpoint's) a pixel diagnosis is tried under


@dataclass
class MediaVerdict:
    """A failed check on one batch: the verdict, and what explains it (`family/variant` names)."""

    verdict: Verdict
    case: MediaCase
    explained_by: list[str] = field(default_factory=list)
    explanation: str = "unexplained"
    diagnosis: dict[str, Any] = field(default_factory=dict)

    @property
    def check(self) -> str:
        """The failed check."""
        return str(self.verdict.check)

    def key(self) -> str:
        """The finding's group: its check and what explains it (a crash: the error's type and
        first line, never the case)."""
        if self.check == CRASH:
            return f"{CRASH}{{{str(self.verdict.stats.get('exception', '')).splitlines()[0][:120]}}}"
        return f"{self.check}{{{'+'.join(self.explained_by) or self.explanation}}}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"check": self.check, "message": self.verdict.message, "case": self.case.describe(),
                "items": self.case.to_dict()["items"], "explained_by": list(self.explained_by),
                "explanation": self.explanation, "diagnosis": self.diagnosis,
                "stats": _plain(self.verdict.stats)}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if k != "traceback"}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def _copies(media: list[Any]) -> list[Any]:
    """Fresh copies of a batch (a candidate may change what it is given)."""
    return [[f.copy() for f in item] if is_chunk(item) else item.copy() for item in media]


def _crash(exc: BaseException) -> Verdict:
    text = f"{type(exc).__name__}: {exc}"
    return Verdict(CRASH, f"candidate raised {text}"[:500], {"exception": text[:2000]})


def judge_case(candidate: Callable[[list, PreprocessConfig], PreprocessResult], case: MediaCase,
               tolerance: str = "exact", *, invariance: bool = True, media: list[Any] | None = None) -> Verdict:
    """The verdict on one batch (ok when every check passes). A candidate that raises is a
    `crash` verdict, unless the reference refuses the batch too; a result that is no result is a
    CandidateError (a harness error)."""
    media = case.media() if media is None else media
    config = case.config
    try:
        expected = preprocess_media(_copies(media), config)
    except (InputError, ConfigError) as exc:
        try:
            candidate(_copies(media), config)
        except CandidateError:
            raise
        except Exception:  # noqa: BLE001 - the reference refuses too: they agree
            return Verdict(None, f"the checkpoint refuses this batch ({exc}); so does the candidate")
        return Verdict(ACCEPTS_INVALID, f"the checkpoint refuses this batch ({exc}) but the candidate returned a "
                       "result"[:500], {"reference_error": str(exc)[:2000]})
    try:
        actual = candidate(_copies(media), config)
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - a candidate's exception on a valid batch is a finding
        return _crash(exc)
    verdict = compare(expected, actual, config, tolerance)
    if not verdict.ok or not invariance:
        return verdict
    try:
        inv = check_invariance(lambda batch: candidate(_copies(batch), config), media, full=actual, config=config)
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001
        return _crash(exc)
    return inv if not inv.ok else verdict


# ---------------------------------------------------------------------------------------------
# diagnosis


def rule_grids(case: MediaCase, rule: ChunkRule, media: list[Any] | None = None) -> list[tuple[int, int, int]]:
    """The batch's grids under `rule` (images planned as the checkpoint plans them); geometry only."""
    from kimi_oracle.core.geometry import plan

    media = case.media() if media is None else media
    total = video_frame_count(media)
    grids = []
    for item in media:
        if is_chunk(item):
            sizes = [layout_frame(rule, f).size for f in item]
            hwc = dataclasses.replace(rule, layout=CHECKPOINT_RULE.layout)
            grids.append(tuple(plan_for(hwc, sizes, total, case.config).grid_thw))
        else:
            grids.append(tuple(plan(item.width, item.height, case.config).grid_thw))
    return grids  # type: ignore[return-value]


def pixel_rules() -> list[ChunkRule]:
    """The chunk rules that can change a candidate's result (the fixed count changes only the
    token count: the planner's and the prompt's, `oracle.video_planner`)."""
    return [r for r in all_rules()[1:] if r.fixed == CHECKPOINT_RULE.fixed]


def _grid_rules(case: MediaCase, media: list[Any], actual: PreprocessResult) -> list[ChunkRule]:
    want = [tuple(int(v) for v in row) for row in actual.grid_thws.tolist()] if actual.grid_thws.ndim == 2 else None
    found = []
    for rule in pixel_rules():
        try:
            if rule_grids(case, rule, media) == want:
                found.append(rule)
        except (InputError, ConfigError, ValueError):
            continue
    return found


def _fewest(rules: list[ChunkRule]) -> list[ChunkRule]:
    if not rules:
        return []
    least = min(len(r.changes) for r in rules)
    return [r for r in rules if len(r.changes) == least]


class _RuleRuns:
    """The reference under each chunk rule for one batch, run once per rule (None: it refuses)."""

    def __init__(self, case: MediaCase, media: list[Any]):
        self.case, self.media = case, media
        self._done: dict[ChunkRule, PreprocessResult | None] = {}

    def __call__(self, rule: ChunkRule) -> PreprocessResult | None:
        if rule not in self._done:
            try:
                self._done[rule] = preprocess_media(_copies(self.media), self.case.config, rule=rule)
            except (InputError, ConfigError, ValueError):
                self._done[rule] = None
        return self._done[rule]


def _distance(runs: _RuleRuns, actual: PreprocessResult, rule: ChunkRule) -> int:
    """How many values the reference under `rule` leaves different from `actual` (the closest
    rules are diagnosed first)."""
    out = runs(rule)
    if out is None or out.pixel_values.shape != actual.pixel_values.shape:
        return 1 << 62
    return int((out.pixel_values != actual.pixel_values.to(out.pixel_values.dtype)).sum())


def _exact_rule(runs: _RuleRuns, actual: PreprocessResult, rules: list[ChunkRule]) -> ChunkRule | None:
    for rule in rules:
        out = runs(rule)
        if out is not None and out.pixel_values.shape == actual.pixel_values.shape \
                and out.pixel_values.dtype == actual.pixel_values.dtype and torch.equal(out.pixel_values, actual.pixel_values):
            return rule
    return None


def frame_config(config: PreprocessConfig, frames: int, *, rule: ChunkRule = CHECKPOINT_RULE,
                 video_frames: int = 0) -> PreprocessConfig:
    """The image config a chunk's frames are processed under: the frame budget (under `rule`)
    as `in_patch_limit` (the fixed count stays the image key's)."""
    limit = rule_frame_limit(rule, frames, video_frames, config)
    return dataclasses.replace(config, in_patch_limit=max(1, limit))


def _attribute_item(case: MediaCase, media: list[Any], i: int, rows: PreprocessResult,
                    rule: ChunkRule) -> dict[str, Any] | None:
    from kimi_oracle.oracle.diagnosis import attribute

    item = media[i]
    if not is_chunk(item):
        return attribute([item], case.config, rows, max_runs=DIAGNOSIS_RUNS).to_dict()
    frames = [rgb_frame(layout_frame(rule, f)) for f in item]
    total = video_frame_count(media)
    rule = dataclasses.replace(rule, layout=CHECKPOINT_RULE.layout)  # (the frames are read as the rule reads them)
    if len({f.size for f in frames}) != 1 or rule_frame_limit(rule, len(frames), total, case.config) < 1:
        return None  # (frames of unequal sizes: the image diagnosis plans each by its own size)
    t, gh, gw = (int(v) for v in rows.grid_thws[0].tolist())
    per_frame = PreprocessResult(rows.pixel_values, torch.tensor([[1, gh, gw]] * t, dtype=torch.int64))
    config = frame_config(case.config, len(frames), rule=rule, video_frames=total)
    return attribute(frames, config, per_frame, max_runs=DIAGNOSIS_RUNS).to_dict()


def explain_case(case: MediaCase, verdict: Verdict, media: list[Any] | None = None) -> MediaVerdict:
    """The finding of `verdict` on `case`, with what explains it: a chunk rule alone when it
    reproduces the result, else the best chunk rule for the grids (the checkpoint's when they
    agree) and, under it, the image families of the first item that still differs."""
    media = case.media() if media is None else media
    found = MediaVerdict(verdict, case)
    actual = verdict.actual
    if verdict.check == CRASH:
        found.explanation = "a crash"  # (grouped by the error: `key`)
        return found
    if actual is None or verdict.check not in (GRID_MISMATCH, PIXEL_MISMATCH):
        return found
    runs = _RuleRuns(case, media)
    matching = _grid_rules(case, media, actual) if case.chunks else []  # (rules that give the candidate's grids)
    rules = _fewest(matching)
    exact = _exact_rule(runs, actual, rules if verdict.check == GRID_MISMATCH else matching)
    if exact is not None:
        found.explained_by, found.explanation = list(exact.changes), "explained"
        return found
    if verdict.check == GRID_MISMATCH:
        if not rules:
            return found  # (no rule gives the candidate's grids)
        found.diagnosis = {"rules": ["+".join(r.changes) for r in rules]}
        return _pixel_diagnosis(found, case, media, actual, rules[0], runs)
    # The grids agree: the checkpoint's rule first, then the rules that keep them (one that
    # resizes to another size under the same padded grid, stacked with an image family).
    keeping = sorted(matching, key=lambda r: (_distance(runs, actual, r), len(r.changes)))
    best = found
    for rule in [CHECKPOINT_RULE] + keeping[:MAX_KEEPING_RULES]:
        tried = _pixel_diagnosis(MediaVerdict(verdict, case), case, media, actual, rule, runs)
        if tried.explanation == "explained":
            return tried
        if best is found:
            best = tried
    return best


def _pixel_diagnosis(found: MediaVerdict, case: MediaCase, media: list[Any], actual: PreprocessResult,
                     rule: ChunkRule, runs: _RuleRuns) -> MediaVerdict:
    expected = runs(rule)
    if expected is None or expected.pixel_values.shape != actual.pixel_values.shape or expected.pixel_values.dtype != actual.pixel_values.dtype:
        return found
    names: list[str] = list(rule.changes)
    per_item: dict[str, Any] = {}
    complete = True
    for i in range(expected.num_images):
        want, got = expected.image(i), actual.image(i)
        if torch.equal(want.pixel_values.view(torch.int32), got.pixel_values.contiguous().view(torch.int32)):
            continue
        diagnosis = _attribute_item(case, media, i, got, rule)
        if diagnosis is None:
            complete = False
            break
        per_item[str(i)] = diagnosis
        complete = diagnosis["explanation"] == "explained"
        names.extend(v for v in diagnosis["variants"] if v not in names)
        break  # (the first differing item: the group's cause; the others are judged alike)
    found.explained_by = names
    found.explanation = "explained" if names and complete else ("partly explained" if names else "unexplained")
    found.diagnosis.update(per_item)
    return found


def reproduces(names: list[str], case: MediaCase, actual: PreprocessResult, media: list[Any] | None = None) -> bool:
    """Whether the reference with the named steps done otherwise (chunk rules and image
    families, `family/variant`) gives `actual` bit for bit."""
    from kimi_oracle.oracle.diagnosis import steps_for

    media = case.media() if media is None else media
    try:
        rule = parse_rule([n for n in names if is_rule_name(n)])
        steps = steps_for(case.config, [tuple(n.split("/", 1)) for n in names if not is_rule_name(n)])  # type: ignore[misc]
        out = preprocess_media(_copies(media), case.config, steps=steps, rule=rule)
    except (InputError, ConfigError, ValueError, KeyError):
        return False
    return (out.grid_thws.shape == actual.grid_thws.shape and torch.equal(out.grid_thws, actual.grid_thws.to(torch.int64))
            and out.pixel_values.shape == actual.pixel_values.shape and out.pixel_values.dtype == actual.pixel_values.dtype
            and torch.equal(out.pixel_values, actual.pixel_values))


__all__ = ["DIAGNOSIS_RUNS", "reproduces", "pixel_rules", "MediaVerdict", "explain_case", "frame_config", "judge_case", "rule_grids"]
