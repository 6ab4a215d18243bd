"""Fitted backgrounds (issue 41, item 2): the solid level or the chessboard (square size and the
two levels) the candidate composited transparent pixels on, read off its output.

- `background/level-N`: every transparent pixel on level N (R = G = B).
- `background/chessboard-S-A,B`: squares of S pixels, level A on the top-left square and on
  every square of the same parity, level B on the others (the checkpoint's K3 board is
  `chessboard-8-255,180`; its phase flipped, `chessboard-8-180,255`).

Read where the background shows directly: the fill after the resize (K3's
`transparent_bg_fill_stage`), on the resized image's grid, at the values where the candidate
differs from the base and shows one grey level (a fully transparent pixel). The sizes and levels
consistent with every such value are proposed, fewest changed parameters first (at most
`MAX_PROPOSED`); before the resize (the board resampled with the image) none is fitted. As
every fitted variant, one explains a finding only when it reproduces the candidate bit for bit,
and an enumerated variant (`chessboard-phase-flipped`, `solid-white`, ...) wins an exact tie.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import numpy as np

from kimi_oracle.core.config import TransparentBgConfig
from kimi_oracle.oracle.diagnosis.fitted import Fitted, FitInput
from kimi_oracle.oracle.diagnosis.regions import canvas

MAX_PROPOSED = 3
MAX_SQUARE = 64  # the largest square size tried (the checkpoint's are 8 and 16)
MAX_POINTS = 4096  # the grey values read, at most (spread over the image)


def _board(square: int, first: int, other: int) -> Callable[[TransparentBgConfig], TransparentBgConfig]:
    # The checkpoint's board with the grey on the odd parity is white (first) on the top left.
    return lambda b: dataclasses.replace(b, pattern="chessboard", chessboard_square_size=square,
                                         chessboard_square_on_top_left=True, chessboard_white_value=first,
                                         chessboard_gray_value=other)


def background_name(square: int, first: int, other: int) -> str:
    """`level-N` for a solid level, else `chessboard-S-A,B`."""
    return f"level-{first}" if first == other else f"chessboard-{square}-{first},{other}"


def _variant(square: int, first: int, other: int) -> Fitted:
    from kimi_oracle.pipelines.variants.modes import OtherBackground

    name = background_name(square, first, other)
    change = _board(square, first, other)
    return name, lambda s: s.replace(background=OtherBackground(name, change))


def parse_background(name: str) -> Fitted | None:
    """`level-N` or `chessboard-S-A,B` (levels 0..255, S >= 1); None for another name."""
    m = re.fullmatch(r"level-(\d{1,3})", name)
    if m and int(m[1]) <= 255:
        return _variant(1, int(m[1]), int(m[1]))
    m = re.fullmatch(r"chessboard-(\d{1,4})-(\d{1,3}),(\d{1,3})", name)
    if m and int(m[1]) >= 1 and int(m[2]) <= 255 and int(m[3]) <= 255:
        return _variant(int(m[1]), int(m[2]), int(m[3]))
    return None


def _grey_points(fi: FitInput) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(ys, xs, levels) of the image's values where the candidate differs from the base and
    shows one level on all three channels under the base's table; None when there are none."""
    p, patch = fi.plan, fi.config.patch_size
    model = canvas(fi.model, p, patch)[: p.new_h, : p.new_w]
    target = np.ascontiguousarray(canvas(fi.target, p, patch)[: p.new_h, : p.new_w], dtype=np.float32)
    differs = (model.view(np.int32) != target.view(np.int32)).any(axis=-1)
    table = np.asarray(fi.steps.normalize(fi.config), dtype=np.float32)
    levels = np.full(target.shape, -1, dtype=np.int64)
    for c in range(3):
        row = table[c].view(np.int32)
        order = np.argsort(row, kind="stable")
        bits = target[..., c].view(np.int32)
        at = np.clip(np.searchsorted(row[order], bits), 0, 255)
        hit = row[order][at] == bits
        levels[..., c] = np.where(hit, order[at], -1)
    grey = differs & (levels[..., 0] >= 0) & (levels[..., 0] == levels[..., 1]) & (levels[..., 1] == levels[..., 2])
    ys, xs = np.nonzero(grey)
    if not len(ys):
        return None
    step = max(1, len(ys) // MAX_POINTS)
    ys, xs = ys[::step], xs[::step]
    return ys, xs, levels[ys, xs, 0]


def fit_background(fi: FitInput) -> list[Fitted]:
    """The boards (or solid level) that give every grey differing value of the candidate, fewest
    changed parameters from the config's background first; none before the resize or without a
    background."""
    bg = fi.config.transparent_bg_config
    if bg is None or fi.config.fill_stage != "after_resize":
        return []
    points = _grey_points(fi)
    if points is None:
        return []
    ys, xs, seen = points
    shown = sorted(set(seen.tolist()))
    if len(shown) > 2:
        return []
    ref = _reference_board(bg)
    colours = sorted(set(shown) | set(ref[1:]))
    found = []
    for square in range(1, min(MAX_SQUARE, max(fi.plan.new_w, fi.plan.new_h)) + 1):
        odd = ((ys // square + xs // square) % 2).astype(bool)
        for first in colours:
            if not (seen[~odd] == first).all():
                continue
            for other in colours:
                if (seen[odd] == other).all() and (square, first, other) != ref:
                    changed = sum(a != b for a, b in zip((square, first, other), ref))
                    found.append((changed, abs(square - ref[0]), (square, first, other)))
    seen_names: set[str] = set()
    out: list[Fitted] = []
    for _, _, (square, first, other) in sorted(found):
        name = background_name(square, first, other)
        if name not in seen_names:
            seen_names.add(name)
            out.append(_variant(square, first, other))
        if len(out) == MAX_PROPOSED:
            break
    return out


def _reference_board(bg: TransparentBgConfig) -> tuple[int, int, int]:
    """The config's background as (square, top-left level, other level)."""
    from kimi_oracle.pipelines.reference import PATTERN_VALUES

    if bg.pattern in PATTERN_VALUES:
        level = PATTERN_VALUES[bg.pattern]
        return 1, level, level
    white, grey = bg.chessboard_white_value, bg.chessboard_gray_value
    first, other = (white, grey) if bg.chessboard_square_on_top_left else (grey, white)
    return bg.chessboard_square_size, first, other
