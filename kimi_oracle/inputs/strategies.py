"""Hypothesis strategies over the generators: draw parameters and a seed, never pixel buffers.

Every strategy lists its simplest choice first, so hypothesis shrinks towards an RGB, opaque,
flat, seed-0, one-image batch under the base configuration with a 16-patch budget.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

from hypothesis import strategies as st

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.inputs.generators import (
    ALPHA_PATTERNS,
    CHECKER_SQUARES,
    CONTENTS,
    DEFAULT_MAX_SIDE,
    MODES,
    CaseParams,
    FuzzCase,
    alpha_patterns_for,
    config_choices,
    ratio_long_side,
    special_sides,
    threshold_sizes,
    tiny_sizes,
    vary_config,
)

MODE_WEIGHTS = {"RGB": 2, "RGBA": 4, "LA": 2, "P": 4, "1": 2, "CMYK": 2, "I;16": 2}


# Strategies are built once per distinct argument tuple and reused: constructing a strategy (an
# `@st.composite` above all, whose decoration inspects the function's source) costs far more than
# drawing from it, and the fuzz loop draws a configuration and a batch of images per example.
# Every cache key is hashable and small; the drawn choice sequence is the same as building the
# strategies afresh for every draw.


@functools.lru_cache(maxsize=64)
def _ratio_side(short: int, long_side: int) -> st.SearchStrategy[tuple[int, int]]:
    return st.tuples(st.integers(100 * short, max(100 * short, long_side)), st.just(short))


@functools.lru_cache(maxsize=1024)
def _orientations(wh: tuple[int, int]) -> st.SearchStrategy[tuple[int, int]]:
    return st.sampled_from([wh, (wh[1], wh[0])])


@functools.lru_cache(maxsize=1024)
def _sizes(thresholds: tuple[tuple[int, int], ...], max_side: int) -> st.SearchStrategy[tuple[int, int]]:
    side = st.integers(1, max_side)
    special_side = st.sampled_from(special_sides(max_side))
    long_side = ratio_long_side(max_side)
    ratio = st.integers(1, 2).flatmap(lambda short: _ratio_side(short, long_side)).flatmap(_orientations)
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
    if thresholds:
        options.append(st.sampled_from(thresholds))
    return st.one_of(options)


def sizes(config: PreprocessConfig | None = None, *, max_side: int = DEFAULT_MAX_SIDE) -> st.SearchStrategy[tuple[int, int]]:
    """(width, height) from every size class, sides ≤ max_side (ratio sizes reach ~4× that)."""
    return _sizes(threshold_sizes(config, max_side) if config is not None else (), max_side)


@st.composite
def _draw_case_params(draw: st.DrawFn, size_strategy: st.SearchStrategy[tuple[int, int]],
                      mode_strategy: st.SearchStrategy[str], pattern_strategy: st.SearchStrategy[str],
                      content_strategy: st.SearchStrategy[str], seed_strategy: st.SearchStrategy[int],
                      square_strategy: st.SearchStrategy[int]) -> CaseParams:
    w, h = draw(size_strategy)
    mode = draw(mode_strategy)
    # Same draws for every mode (an inexpressible pattern falls back to opaque), so that
    # shrinking prefers the first mode (RGB) instead of modes with fewer alpha choices.
    alpha = draw(pattern_strategy)
    if alpha not in alpha_patterns_for(mode):
        alpha = "opaque"
    content = draw(content_strategy)
    seed = draw(seed_strategy)
    square = draw(square_strategy)
    if not alpha.startswith("checker"):
        square = 8
    return CaseParams(w, h, mode, alpha, content, seed, square)


@functools.lru_cache(maxsize=1024)
def _case_params(thresholds: tuple[tuple[int, int], ...] | None, base_square: int, max_side: int,
                 modes: tuple[str, ...], alpha_patterns: tuple[str, ...] | None,
                 contents: tuple[str, ...]) -> st.SearchStrategy[CaseParams]:
    squares = sorted({base_square, *CHECKER_SQUARES}, key=lambda s: (s != base_square, s))
    # Modes whose resize path is special (premultiplied, NEAREST, own-domain) are drawn more often.
    weighted_modes = [m for m in modes for _ in range(MODE_WEIGHTS.get(m, 1))]
    pattern_choices = [a for a in ALPHA_PATTERNS if alpha_patterns is None or a in alpha_patterns] or ["opaque"]
    return _draw_case_params(
        _sizes(thresholds or (), max_side),
        st.sampled_from(weighted_modes),
        st.sampled_from(pattern_choices),
        st.sampled_from(list(contents)),
        st.integers(0, 2**32 - 1),
        st.sampled_from(squares),
    )


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
    # The strategy depends on the config only through its threshold sizes and chessboard square.
    return _case_params(
        threshold_sizes(config, max_side) if config is not None else None,
        bg.chessboard_square_size if bg is not None else 8,
        max_side,
        tuple(modes),
        tuple(alpha_patterns) if alpha_patterns is not None else None,
        tuple(contents),
    )


@st.composite
def _draw_config(draw: st.DrawFn, base: PreprocessConfig, limit_strategy: st.SearchStrategy[int],
                 cap_strategy: st.SearchStrategy[int], background: tuple[st.SearchStrategy[Any], ...] | None
                 ) -> PreprocessConfig:
    changes: dict = {
        "in_patch_limit": draw(limit_strategy),
        "patch_limit_on_one_side": draw(cap_strategy),
    }
    if background is not None:
        pattern_strategy, square_strategy, top_left_strategy, values_strategy, stage_strategy = background
        pattern = draw(pattern_strategy)
        changes_bg: dict[str, Any] = {"pattern": pattern}
        if pattern == "chessboard":
            changes_bg["chessboard_square_size"] = draw(square_strategy)
            changes_bg["chessboard_square_on_top_left"] = draw(top_left_strategy)
            white, gray = draw(values_strategy)
            changes_bg["chessboard_white_value"] = white
            changes_bg["chessboard_gray_value"] = gray
        changes["background"] = changes_bg
        changes["transparent_bg_fill_stage"] = draw(stage_strategy)
    return vary_config(base, **changes)


@functools.lru_cache(maxsize=64)
def configs(base: PreprocessConfig, *, vary: bool = True) -> st.SearchStrategy[PreprocessConfig]:
    """Variations around `base`: small budgets, side caps (multiples of the merge size),
    background patterns, squares, colours and fill stages (only when `base` has a background)."""
    if not vary:
        return st.just(base)
    # Two thirds of the draws use budgets of at most 16 patches (most of them below 9), so that
    # images of a few dozen pixels resample.
    choices = config_choices(base)
    limit_strategy = st.one_of(st.sampled_from(choices.tiny_limits), st.sampled_from(choices.tiny_limits[1:]),
                               st.sampled_from(choices.other_limits))
    caps = choices.caps
    background = None
    if base.transparent_bg_config is not None:
        # The base stage twice: the profile's own behaviour gets half the draws.
        background = (
            st.sampled_from(choices.patterns),
            st.sampled_from(choices.squares),
            st.sampled_from(choices.top_left),
            st.sampled_from(choices.chess_values),
            st.sampled_from(choices.stages[:1] + choices.stages),
        )
    return _draw_config(base, limit_strategy, st.sampled_from(caps), background)


@functools.lru_cache(maxsize=4096)
def _limits_below(patches: int) -> st.SearchStrategy[int]:
    return st.integers(1, patches - 1)


_FORCE_RESAMPLE = st.sampled_from([False, True, True])


@st.composite
def _draw_fuzz_case(draw: st.DrawFn, config_strategy: st.SearchStrategy[PreprocessConfig],
                    count_strategy: st.SearchStrategy[int], vary_config: bool, params_args: tuple) -> FuzzCase:
    config = draw(config_strategy)
    count = draw(count_strategy)
    params = case_params(config, **dict(params_args))
    images = tuple(draw(params) for _ in range(count))
    if vary_config and draw(_FORCE_RESAMPLE):
        # Force the first image to resample: a budget just below its floored patch count.
        first = images[0]
        patches = max(1, first.width // config.patch_size) * max(1, first.height // config.patch_size)
        if patches >= 2:
            limit = draw(_limits_below(patches))
            config = dataclasses.replace(config, in_patch_limit=limit)
    return FuzzCase(config, images)


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
    return _fuzz_cases(base, vary_config, max_images, max_side, tuple(modes),
                       tuple(alpha_patterns) if alpha_patterns is not None else None, tuple(contents))


@functools.lru_cache(maxsize=64)
def _fuzz_cases(base: PreprocessConfig, vary: bool, max_images: int, max_side: int, modes: tuple[str, ...],
                alpha_patterns: tuple[str, ...] | None, contents: tuple[str, ...]) -> st.SearchStrategy[FuzzCase]:
    params_args = (("max_side", max_side), ("modes", modes), ("alpha_patterns", alpha_patterns),
                   ("contents", contents))
    return _draw_fuzz_case(configs(base, vary=vary), st.integers(1, max(1, max_images)), vary, params_args)


__all__ = ["DEFAULT_MAX_SIDE", "case_params", "configs", "fuzz_cases", "sizes"]
