"""Chunk geometry variants (issue 42, item 4): what engines do otherwise when they plan a K2.5
video chunk (`core.video.plan_chunk` is the checkpoint's rule).

A `ChunkRule` names one choice per step:

    budget-divisor   the frame budget `in_patch_limit_video / D`: D is the chunk's frame count
                     (`chunk`, the checkpoint), all the video's sampled frames (`video`), or no
                     video cap at all (`none`: `in_patch_limit_each_frame` alone)
    chunk-size       the chunk planned from its `first` frame's size (the checkpoint), its
                     `last` frame's, or the `largest` frame's (by area)
    fixed-tokens     a fixed count read from the image key `fixed_output_tokens` (the
                     checkpoint) or from `fixed_output_tokens_each_frame` (`each-frame`)

`plan_for(rule, sizes, video_frames, config)` plans one chunk of frames of `sizes` whose video
has `video_frames` sampled frames in all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.video import require_video

DIVISORS = ("chunk", "video", "none")
SIZES_FROM = ("first", "last", "largest")
FIXED_FROM = ("image", "each-frame")
# The families, in the order the diagnosis names them, and the checkpoint's variant of each.
FAMILIES = {"budget-divisor": ("chunk", DIVISORS), "chunk-size": ("first", SIZES_FROM),
            "fixed-tokens": ("image", FIXED_FROM)}


@dataclass(frozen=True)
class ChunkRule:
    """One way to plan a chunk; the default is the checkpoint's."""

    divisor: str = "chunk"
    size_from: str = "first"
    fixed: str = "image"

    def __post_init__(self) -> None:
        for value, allowed in ((self.divisor, DIVISORS), (self.size_from, SIZES_FROM), (self.fixed, FIXED_FROM)):
            if value not in allowed:
                raise ValueError(f"unknown chunk rule {value!r}; expected one of {', '.join(allowed)}")

    @property
    def changes(self) -> tuple[str, ...]:
        """`family/variant` of every step done otherwise than the checkpoint."""
        out = []
        for family, value in zip(FAMILIES, (self.divisor, self.size_from, self.fixed)):
            if value != FAMILIES[family][0]:
                out.append(f"{family}/{value}")
        return tuple(out)


CHECKPOINT_RULE = ChunkRule()


def all_rules() -> list[ChunkRule]:
    """Every rule, the checkpoint's first, then by the number of steps done otherwise."""
    rules = [ChunkRule(d, s, f) for d in DIVISORS for s in SIZES_FROM for f in FIXED_FROM]
    return sorted(rules, key=lambda r: len(r.changes))


def rule_frame_limit(rule: ChunkRule, frames: int, video_frames: int, config: PreprocessConfig) -> int:
    """The frame budget under `rule` (the checkpoint: `core.video.frame_limit`)."""
    require_video(config)
    limit = config.in_patch_limit_each_frame or config.in_patch_limit
    if config.in_patch_limit_video is not None and rule.divisor != "none":
        divisor = frames if rule.divisor == "chunk" else max(int(video_frames), frames)
        limit = min(limit, round(config.in_patch_limit_video / divisor))
    return int(limit)


def _size(rule: ChunkRule, sizes: Sequence[tuple[int, int]]) -> tuple[int, int]:
    if rule.size_from == "first":
        return sizes[0]
    if rule.size_from == "last":
        return sizes[-1]
    return max(sizes, key=lambda s: (s[0] * s[1], s))  # (ties: the wider, then the first of them)


def plan_for(rule: ChunkRule, sizes: Sequence[tuple[int, int]], video_frames: int, config: PreprocessConfig, *,
             side_assert: bool = True) -> ResizePlan:
    """The plan of a chunk of frames of `sizes` (width, height) under `rule`; `grid_thw = (t, h, w)`."""
    frames = len(sizes)
    w, h = _size(rule, sizes)
    fixed = config.fixed_output_tokens if rule.fixed == "image" else config.fixed_output_tokens_each_frame
    one = plan(w, h, config, side_assert=side_assert, limit=rule_frame_limit(rule, frames, video_frames, config),
               fixed=fixed)
    _, gh, gw = one.grid_thw
    return dataclasses.replace(one, grid_thw=(frames, gh, gw))




def is_rule_name(name: str) -> bool:
    """Whether `family/variant` names a chunk rule's step (not an image family's)."""
    family, _, variant = name.partition("/")
    return family in FAMILIES and variant in FAMILIES[family][1]


def parse_rule(names: Sequence[str]) -> ChunkRule:
    """The rule that does the named chunk steps otherwise (the others as the checkpoint)."""
    fields = {"budget-divisor": "divisor", "chunk-size": "size_from", "fixed-tokens": "fixed"}
    values: dict[str, str] = {}
    for name in names:
        if not is_rule_name(name):
            raise ValueError(f"{name!r} is no chunk rule step; expected one of "
                             + ", ".join(f"{f}/{v}" for f, (_, vs) in FAMILIES.items() for v in vs))
        family, _, variant = name.partition("/")
        values[fields[family]] = variant
    return ChunkRule(**values)


__all__ = ["CHECKPOINT_RULE", "DIVISORS", "FAMILIES", "FIXED_FROM", "SIZES_FROM", "ChunkRule", "all_rules",
           "is_rule_name", "parse_rule", "plan_for", "rule_frame_limit"]
