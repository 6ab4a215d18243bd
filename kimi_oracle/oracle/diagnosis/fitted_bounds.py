"""Fitted clamps and pad offsets (issue 41, item 2): a clip of the 8-bit levels the data bounds,
and the image placed k pixels into its padded canvas.

- `normalize-float/clamp-LO,HI`: the levels clipped to [LO, HI] before the normalization's
  table (a video-range 16..235 clip, a `clamp(1, 254)` guard): every observed level below LO
  gives the table's value of LO, above HI that of HI, the rest their own. Fitted from the
  (level, value) pairs of one image: LO and HI are the levels whose table values the clipped
  ones show.
- `pad/offset-DX,DY[-FILL]`: the resized image at (DX, DY) of its canvas instead of the top
  left, the rest filled with level 0 (or FILL: `level-N`, `levels-a,b,c`, `normalized-V`, as
  `fitted.PadLevels`/`PadValues` name it); `pad-top-left` is the offset (pad_w, pad_h). An offset
  larger than an image's padding is cut to it.

As every fitted variant, each explains a finding only when it reproduces the candidate bit for
bit; names parse back (`parse_clamp`, `parse_pad_offset`). Rule: docs/diagnosis.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.oracle.diagnosis.fitted import (Fitted, FitInput, PadLevels, PadValues, level_pairs, pad_fill,
                                                 parse_pad)
from kimi_oracle.oracle.diagnosis.regions import canvas

# ---------------------------------------------------------------------------------------------
# clamp


@dataclass(frozen=True)
class ClampedTable:
    """A `Steps.normalize`: the base normalization's table read at the levels clipped to [lo, hi]."""

    lo: int
    hi: int
    base: Callable[[PreprocessConfig], np.ndarray]

    @property
    def name(self) -> str:
        return f"clamp-{self.lo},{self.hi}"

    def __call__(self, config: PreprocessConfig) -> np.ndarray:
        table = np.asarray(self.base(config))
        return np.ascontiguousarray(table[:, np.clip(np.arange(256), self.lo, self.hi)])


def _clamp_variant(lo: int, hi: int) -> Fitted:
    return f"clamp-{lo},{hi}", lambda s: s.replace(normalize=ClampedTable(lo, hi, s.normalize))


def fit_clamp(fi: FitInput) -> list[Fitted]:
    """The clip of the levels the candidate shows: every value its level's under the base's
    table, except levels past two bounds, which show a bound's value."""
    pairs = level_pairs(fi.model.numpy(), fi.target, fi.config)
    if pairs is None:
        return []
    table = np.asarray(fi.steps.normalize(fi.config), dtype=np.float32)
    los, his = set(), set()
    for c, (lv, y) in enumerate(pairs):
        row = table[c].view(np.int32)
        for level, value in zip(lv.tolist(), y.view(np.int32).tolist()):
            if row[level] == value:
                continue
            hit = np.flatnonzero(row == value)
            if len(hit) != 1:
                return []
            (los if level < hit[0] else his).add(int(hit[0]))
    if len(los) > 1 or len(his) > 1 or not (los or his):
        return []
    lo, hi = (min(los) if los else 0), (max(his) if his else 255)
    if lo > hi:
        return []
    for c, (lv, y) in enumerate(pairs):
        if not np.array_equal(table[c][np.clip(lv, lo, hi)].view(np.int32), y.view(np.int32)):
            return []
    return [_clamp_variant(lo, hi)]


def parse_clamp(name: str) -> Fitted | None:
    """`clamp-LO,HI` (0 <= LO <= HI <= 255; None for another name)."""
    m = re.fullmatch(r"clamp-(\d{1,3}),(\d{1,3})", name)
    if not m or not 0 <= int(m[1]) <= int(m[2]) <= 255:
        return None
    return _clamp_variant(int(m[1]), int(m[2]))


# ---------------------------------------------------------------------------------------------
# pad offset


@dataclass(frozen=True)
class PadOffset:
    """A `Steps.pad`: the values at (dx, dy) of the canvas (cut to the padding), the rest `fill`
    (None: level 0, the checkpoint's fill)."""

    dx: int
    dy: int
    fill: PadLevels | PadValues | None = None

    @property
    def name(self) -> str:
        return f"offset-{self.dx},{self.dy}" + (f"-{self.fill.name}" if self.fill is not None else "")

    def __call__(self, values: np.ndarray, p: ResizePlan, normalized: Callable, back: Callable) -> np.ndarray:
        out = np.empty((p.new_h + p.pad_h, p.new_w + p.pad_w, 3), dtype=np.float32)
        if isinstance(self.fill, PadValues):
            out[...] = np.array(self.fill.values, dtype=np.float32)
        else:
            levels = self.fill.levels if isinstance(self.fill, PadLevels) else (0, 0, 0)
            out[...] = normalized(np.array(levels, dtype=np.uint8).reshape(1, 1, 3))[0, 0]
        dx, dy = min(self.dx, p.pad_w), min(self.dy, p.pad_h)
        out[dy: dy + p.new_h, dx: dx + p.new_w] = values
        return out


def _offset_variant(fn: PadOffset) -> Fitted:
    return fn.name, lambda s: s.replace(pad=fn)


def fit_pad_offset(fi: FitInput) -> list[Fitted]:
    """The offset of the image in the candidate's canvas, when the model's image shows there bit
    for bit (tried where the canvas holds the image's first value) and the rest is one value per
    channel; none for (0, 0) (the fill alone: `fitted.fit_pad`) or the catalogue's top-left pad."""
    p, patch = fi.plan, fi.config.patch_size
    if not (p.pad_w or p.pad_h):
        return []
    model, target = canvas(fi.model, p, patch), canvas(fi.target, p, patch)
    image = model[: p.new_h, : p.new_w].view(np.int32)
    bits = target.view(np.int32)
    first = image[0, 0]
    lut = fi.steps.normalize(fi.config)
    for dy in range(p.pad_h + 1):
        for dx in range(p.pad_w + 1):
            if (dx, dy) == (0, 0) or not np.array_equal(bits[dy, dx], first):
                continue
            if not np.array_equal(bits[dy: dy + p.new_h, dx: dx + p.new_w], image):
                continue
            mask = np.ones(target.shape[:2], dtype=bool)
            mask[dy: dy + p.new_h, dx: dx + p.new_w] = False
            fill = pad_fill(target[mask], lut)
            if fill is None:
                continue
            plain = fill == PadLevels((0, 0, 0))
            if plain and (dx, dy) == (p.pad_w, p.pad_h):
                continue  # (pad-top-left)
            return [_offset_variant(PadOffset(dx, dy, None if plain else fill))]
    return []


def parse_pad_offset(name: str) -> Fitted | None:
    """`offset-DX,DY` or `offset-DX,DY-FILL` (FILL a `fitted.parse_pad` name); None otherwise."""
    m = re.fullmatch(r"offset-(\d{1,5}),(\d{1,5})(?:-(.+))?", name)
    if not m:
        return None
    fill: Any = None
    if m[3]:
        parsed = parse_pad(m[3])
        if parsed is None:
            return None
        fill = parsed[1](_Probe()).pad  # the fill object the pad variant sets
        if not isinstance(fill, (PadLevels, PadValues)):
            return None
    return _offset_variant(PadOffset(int(m[1]), int(m[2]), fill))


class _Probe:
    """Stands for `Steps` to read which pad a parsed pad variant sets."""

    pad: Any = None

    def replace(self, **fields: Any) -> "_Probe":
        out = _Probe()
        out.pad = fields.get("pad")
        return out
