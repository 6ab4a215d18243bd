"""Hypothesis strategies over the generators: draw parameters and a seed, never pixel buffers.

Every strategy lists its simplest choice first, so hypothesis shrinks towards an RGB, opaque,
flat, seed-0, one-image batch under the base configuration with a 16-patch budget.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

from hypothesis import strategies as st

from .config import FILL_STAGES, PATTERNS, PreprocessConfig
from .generators import (
    ALPHA_PATTERNS,
    CONTENTS,
    MODES,
    SMALL_PATCH_LIMITS,
    CaseParams,
    FuzzCase,
    alpha_patterns_for,
    budget_sizes,
    multiple_sides,
    pass_order_sizes,
    pow2_sides,
    PRIME_SIDES,
    side_cap_sizes,
    side_caps,
    tiny_sizes,
    vary_config,
)

DEFAULT_MAX_SIDE = 64
MODE_WEIGHTS = {"RGB": 2, "RGBA": 4, "LA": 2, "P": 4, "1": 2, "CMYK": 2, "I;16": 2}


@functools.lru_cache(maxsize=256)
def _threshold_sizes(config: PreprocessConfig, max_side: int) -> tuple[tuple[int, int], ...]:
    sizes = pass_order_sizes(config, count=9, max_side=max_side) + budget_sizes(config) + side_cap_sizes(config)
    return tuple(sorted({s for s in sizes if max(s) <= max_side}))


def sizes(config: PreprocessConfig | None = None, *, max_side: int = DEFAULT_MAX_SIDE) -> st.SearchStrategy[tuple[int, int]]:
    """(width, height) from every size class, sides ≤ max_side (ratio sizes reach ~4× that)."""
    side = st.integers(1, max_side)
    specials = [s for s in multiple_sides(12) + pow2_sides(13) + list(PRIME_SIDES) if s <= max_side] or [1]
    special_side = st.sampled_from(sorted(set(specials)))
    long_side = max(100, 4 * max_side)
    ratio = st.integers(1, 2).flatmap(
        lambda short: st.tuples(st.integers(100 * short, max(100 * short, long_side)), st.just(short))
    ).flatmap(lambda wh: st.sampled_from([wh, (wh[1], wh[0])]))
    medium = st.integers(min(14, max_side), max_side)
    medium_sizes = st.tuples(medium, medium)
    # Medium sizes (both sides >= one patch) are weighted up: they are the ones that resample.
    options = [
        medium_sizes,
        medium_sizes,
        medium_sizes,
        st.tuples(side, side),
        st.sampled_from(tiny_sizes()),
        st.tuples(special_side, special_side),
        st.tuples(special_side, side),
        ratio,
    ]
    if config is not None:
        thresholds = _threshold_sizes(config, max_side)
        if thresholds:
            options.append(st.sampled_from(thresholds))
    return st.one_of(options)


def case_params(
    config: PreprocessConfig | None = None,
    *,
    max_side: int = DEFAULT_MAX_SIDE,
    modes: Sequence[str] = MODES,
    alpha_patterns: Sequence[str] | None = None,
    contents: Sequence[str] = CONTENTS,
) -> st.SearchStrategy[CaseParams]:
    """One image's parameters; the checker square follows the config's chessboard when it has one."""
    bg = config.transparent_bg_config if config is not None else None
    base_square = bg.chessboard_square_size if bg is not None else 8
    squares = sorted({base_square, 1, 2, 3, 5, 8, 16}, key=lambda s: (s != base_square, s))
    # Modes whose resize path is special (premultiplied, NEAREST, own-domain) are drawn more often.
    weighted_modes = [m for m in modes for _ in range(MODE_WEIGHTS.get(m, 1))]
    pattern_choices = [a for a in ALPHA_PATTERNS if alpha_patterns is None or a in alpha_patterns] or ["opaque"]

    @st.composite
    def build(draw: st.DrawFn) -> CaseParams:
        w, h = draw(sizes(config, max_side=max_side))
        mode = draw(st.sampled_from(weighted_modes))
        # Same draws for every mode (an inexpressible pattern falls back to opaque), so that
        # shrinking prefers the first mode (RGB) instead of modes with fewer alpha choices.
        alpha = draw(st.sampled_from(pattern_choices))
        if alpha not in alpha_patterns_for(mode):
            alpha = "opaque"
        content = draw(st.sampled_from(list(contents)))
        seed = draw(st.integers(0, 2**32 - 1))
        square = draw(st.sampled_from(squares))
        if not alpha.startswith("checker"):
            square = 8
        return CaseParams(w, h, mode, alpha, content, seed, square)

    return build()


def configs(base: PreprocessConfig, *, vary: bool = True) -> st.SearchStrategy[PreprocessConfig]:
    """Variations around `base`: small budgets, side caps (multiples of the merge size),
    background patterns, squares, colours and fill stages (only when `base` has a background)."""
    if not vary:
        return st.just(base)
    # Two thirds of the draws use budgets of at most 16 patches (most of them below 9), so that
    # images of a few dozen pixels resample.
    tiny_limits = [4] + [v for v in SMALL_PATCH_LIMITS if v <= 16 and v != 4]
    other_limits = [v for v in SMALL_PATCH_LIMITS if v > 16] + [base.in_patch_limit]
    limit_strategy = st.one_of(st.sampled_from(tiny_limits), st.sampled_from(tiny_limits[1:]),
                               st.sampled_from(other_limits))
    caps = [base.patch_limit_on_one_side] + [c for c in side_caps(base, max_cap=16) if c != base.patch_limit_on_one_side]
    bg = base.transparent_bg_config

    @st.composite
    def build(draw: st.DrawFn) -> PreprocessConfig:
        changes: dict = {
            "in_patch_limit": draw(limit_strategy),
            "patch_limit_on_one_side": draw(st.sampled_from(caps)),
        }
        if bg is not None:
            pattern = draw(st.sampled_from([bg.pattern] + [p for p in PATTERNS if p != bg.pattern]))
            background = {"pattern": pattern}
            if pattern == "chessboard":
                background["chessboard_square_size"] = draw(
                    st.sampled_from([bg.chessboard_square_size] + [s for s in (1, 2, 3, 5, 16) if s != bg.chessboard_square_size])
                )
                background["chessboard_square_on_top_left"] = draw(
                    st.sampled_from([bg.chessboard_square_on_top_left, not bg.chessboard_square_on_top_left])
                )
                white, gray = draw(st.sampled_from([
                    (bg.chessboard_white_value, bg.chessboard_gray_value), (255, 200), (240, 0), (0, 255),
                ]))
                background["chessboard_white_value"] = white
                background["chessboard_gray_value"] = gray
            changes["background"] = background
            # The base stage twice: the profile's own behaviour gets half the draws.
            stages = [base.transparent_bg_fill_stage] * 2 + [s for s in (*FILL_STAGES, None) if s != base.transparent_bg_fill_stage]
            changes["transparent_bg_fill_stage"] = draw(st.sampled_from(stages))
        return vary_config(base, **changes)

    return build()


def fuzz_cases(
    base: PreprocessConfig,
    *,
    vary_config: bool = True,
    max_images: int = 3,
    max_side: int = DEFAULT_MAX_SIDE,
    modes: Sequence[str] = MODES,
    alpha_patterns: Sequence[str] | None = None,
    contents: Sequence[str] = CONTENTS,
) -> st.SearchStrategy[FuzzCase]:
    """A configuration and a batch of 1..max_images images drawn for it."""

    @st.composite
    def build(draw: st.DrawFn) -> FuzzCase:
        config = draw(configs(base, vary=vary_config))
        count = draw(st.integers(1, max(1, max_images)))
        params = case_params(config, max_side=max_side, modes=modes, alpha_patterns=alpha_patterns, contents=contents)
        images = tuple(draw(params) for _ in range(count))
        if vary_config and draw(st.sampled_from([False, True, True])):
            # Force the first image to resample: a budget just below its floored patch count.
            first = images[0]
            patches = max(1, first.width // config.patch_size) * max(1, first.height // config.patch_size)
            if patches >= 2:
                limit = draw(st.integers(1, patches - 1))
                config = dataclasses.replace(config, in_patch_limit=limit)
        return FuzzCase(config, images)

    return build()


__all__ = ["DEFAULT_MAX_SIDE", "case_params", "configs", "fuzz_cases", "sizes"]
