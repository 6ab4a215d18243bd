"""Chunk geometry variants (issue 42, item 4): what engines do otherwise when they plan a K2.5
video chunk (`core.video.plan_chunk` is the checkpoint's rule).

A `ChunkRule` names one choice per step:

    budget-divisor   the frame budget `in_patch_limit_video / D`: D is the chunk's frame count
                     (`chunk`, the checkpoint), all the video's sampled frames (`video`), or no
                     video cap at all (`none`: `in_patch_limit_each_frame` alone)
    chunk-size       the chunk planned from its `first` frame's size (the checkpoint), its
                     `last` frame's, or the `largest` frame's (by area)
    fixed-tokens     a fixed count read from the image key `fixed_output_tokens` (the
                     checkpoint), from `fixed_output_tokens_each_frame` (`each-frame`), or from
                     neither (`none`: the natural count)
    frame-layout     a frame's pixels read as rows x columns x channels (`hwc`, the checkpoint), or
                     (`channels-first-guess`) a frame 1 or 3 rows tall read as channels first: its
                     rows become the channels and its columns the rows (transformers'
                     `infer_channel_dimension_format` on a `(t, h, w, 3)` video: 3 rows give a
                     3-wide RGB image whose channel k is row k; 1 row a 3-wide gray image;
                     transformers guesses once a call, from its first video: the variant reads
                     each frame by its own height, which is the same where a batch holds one
                     video's chunks, as the fuzzer draws them)

`plan_for(rule, sizes, video_frames, config)` plans one chunk of frames of `sizes` whose video
has `video_frames` sampled frames in all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.video import require_video

DIVISORS = ("chunk", "video", "none")
SIZES_FROM = ("first", "last", "largest")
FIXED_FROM = ("image", "each-frame", "none")
LAYOUTS = ("hwc", "channels-first-guess")
# The families, in the order the diagnosis names them, and the checkpoint's variant of each.
FAMILIES = {"budget-divisor": ("chunk", DIVISORS), "chunk-size": ("first", SIZES_FROM),
            "fixed-tokens": ("image", FIXED_FROM), "frame-layout": ("hwc", LAYOUTS)}
_FIELDS = {"budget-divisor": "divisor", "chunk-size": "size_from", "fixed-tokens": "fixed", "frame-layout": "layout"}


@dataclass(frozen=True)
class ChunkRule:
    """One way to plan a chunk; the default is the checkpoint's."""

    divisor: str = "chunk"
    size_from: str = "first"
    fixed: str = "image"
    layout: str = "hwc"

    def __post_init__(self) -> None:
        for value, allowed in ((self.divisor, DIVISORS), (self.size_from, SIZES_FROM), (self.fixed, FIXED_FROM),
                               (self.layout, LAYOUTS)):
            if value not in allowed:
                raise ValueError(f"unknown chunk rule {value!r}; expected one of {', '.join(allowed)}")

    @property
    def changes(self) -> tuple[str, ...]:
        """`family/variant` of every step done otherwise than the checkpoint."""
        out = []
        for family, value in zip(FAMILIES, (self.divisor, self.size_from, self.fixed, self.layout)):
            if value != FAMILIES[family][0]:
                out.append(f"{family}/{value}")
        return tuple(out)


CHECKPOINT_RULE = ChunkRule()


def all_rules() -> list[ChunkRule]:
    """Every rule, the checkpoint's first, then by the number of steps done otherwise."""
    rules = [ChunkRule(d, s, f, lay) for d in DIVISORS for s in SIZES_FROM for f in FIXED_FROM for lay in LAYOUTS]
    return sorted(rules, key=lambda r: len(r.changes))


def rule_frame_limit(rule: ChunkRule, frames: int, video_frames: int, config: PreprocessConfig) -> int:
    """The frame budget under `rule` (the checkpoint: `core.video.frame_limit`)."""
    require_video(config)
    limit = config.in_patch_limit_each_frame or config.in_patch_limit
    if config.in_patch_limit_video is not None and rule.divisor != "none":
        divisor = frames if rule.divisor == "chunk" else max(int(video_frames), frames)
        limit = min(limit, round(config.in_patch_limit_video / divisor))
    return int(limit)


def guessed(rule: ChunkRule, frame: Image.Image) -> bool:
    """Whether `rule` reads `frame` channels first (an RGB or RGBA frame 1 or 3 rows tall)."""
    return rule.layout == "channels-first-guess" and frame.height in (1, 3) and frame.mode in ("RGB", "RGBA")


def layout_frame(rule: ChunkRule, frame: Image.Image) -> Image.Image:
    """A frame as `rule` reads its pixels: under the guess, its (h, w, c) array (c = 3 for RGB,
    4 for RGBA) taken as (channels, rows, columns): 3 rows give a c-wide RGB image whose channel
    k is row k, 1 row a c-wide gray image (made RGB by Pillow)."""
    if not guessed(rule, frame):
        return frame
    a = np.asarray(frame)  # (h, w, c), h in (1, 3)
    if a.shape[0] == 3:
        return Image.fromarray(np.ascontiguousarray(a.transpose(1, 2, 0)), "RGB")
    return Image.fromarray(np.ascontiguousarray(a[0]), "L").convert("RGB")


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
    fixed = {"image": config.fixed_output_tokens, "each-frame": config.fixed_output_tokens_each_frame,
             "none": None}[rule.fixed]
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
    fields = _FIELDS
    values: dict[str, str] = {}
    for name in names:
        if not is_rule_name(name):
            raise ValueError(f"{name!r} is no chunk rule step; expected one of "
                             + ", ".join(f"{f}/{v}" for f, (_, vs) in FAMILIES.items() for v in vs))
        family, _, variant = name.partition("/")
        values[fields[family]] = variant
    return ChunkRule(**values)


__all__ = ["CHECKPOINT_RULE", "DIVISORS", "FAMILIES", "FIXED_FROM", "LAYOUTS", "SIZES_FROM", "ChunkRule", "all_rules",
           "guessed", "is_rule_name", "layout_frame", "parse_rule", "plan_for", "rule_frame_limit"]
