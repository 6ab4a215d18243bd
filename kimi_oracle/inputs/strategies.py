"""Hypothesis strategies over the one definition of the draw (`inputs.draw`): parameters and
seeds, never pixel buffers.

Each strategy runs a draw function of `inputs.draw` with hypothesis as its source of integers
(one `st.integers(lo, hi)` per integer), so the choice list a `draw.RandomSource` records for a
case IS the hypothesis choice sequence of `fuzz_cases(...)` for that case: the fast fuzzing loop
finds a case, hypothesis replays and shrinks it. Every draw lists its simplest choice first, so
hypothesis shrinks towards an RGB, opaque, flat, seed-0, one-image batch under the base
configuration with a 16-patch budget.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from hypothesis import strategies as st

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.inputs.draw import (MODE_WEIGHTS, DrawOptions,
                                     config_thresholds, draw_case_params,
                                     draw_config, draw_fuzz_case, draw_size,
                                     image_choices)
from kimi_oracle.inputs.generators import (CONTENTS, DEFAULT_MAX_SIDE, MODES,
                                           CaseParams, FuzzCase)
from kimi_oracle.inputs.scenarios import Scenario, ScenarioOptions, draw_scenario


@functools.lru_cache(maxsize=4096)
def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


class HypothesisSource:
    """`draw.Source` over a hypothesis draw function; `choices` records what it returned."""

    __slots__ = ("_draw", "choices")

    def __init__(self, draw: st.DrawFn):
        self._draw = draw
        self.choices: list[int] = []

    def integer(self, lo: int, hi: int) -> int:
        if lo == hi:
            return lo
        value = self._draw(_integers(lo, hi))
        self.choices.append(value)
        return value

    def sub(self, function: Callable[..., Any], *args: Any) -> Any:
        try:
            strategy = _recorded(function, args)
        except TypeError:  # an unhashable argument: a strategy of its own
            strategy = _run_draw(function, args, True)
        value, choices = self._draw(strategy)
        self.choices.extend(choices)
        return value


# One composite for every draw function: decorating with @st.composite inspects the function's
# source (the cost that once dominated fuzz runs), so it happens once, at import; strategies are
# built once per distinct argument tuple (lru caches) and reused.
@st.composite
def _run_draw(draw: st.DrawFn, function: Callable[..., Any], args: tuple, record: bool) -> Any:
    source = HypothesisSource(draw)
    value = function(source, *args)
    return (value, tuple(source.choices)) if record else value


@functools.lru_cache(maxsize=8192)
def _recorded(function: Callable[..., Any], args: tuple) -> st.SearchStrategy[Any]:
    # A part of a draw as a strategy, built once: hypothesis validates and labels every new
    # strategy object, which cost more than shrinking's candidate calls when built per draw.
    return _run_draw(function, args, True)


@functools.lru_cache(maxsize=64)
def _sizes(thresholds: tuple[tuple[int, int], ...], max_side: int) -> st.SearchStrategy[tuple[int, int]]:
    return _run_draw(draw_size, (thresholds, max_side), False)


def sizes(config: PreprocessConfig | None = None, *, max_side: int = DEFAULT_MAX_SIDE) -> st.SearchStrategy[tuple[int, int]]:
    """(width, height) from every size class, sides ≤ max_side (ratio sizes reach ~4× that)."""
    return _sizes(config_thresholds(config, max_side) if config is not None else (), max_side)


@functools.lru_cache(maxsize=1024)
def _case_params(thresholds: tuple[tuple[int, int], ...], base_square: int, max_side: int,
                 modes: tuple[str, ...], alpha_patterns: tuple[str, ...] | None,
                 contents: tuple[str, ...]) -> st.SearchStrategy[CaseParams]:
    choices = image_choices(modes, alpha_patterns, contents, base_square)
    return _run_draw(draw_case_params, (thresholds, max_side, choices), False)


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
        config_thresholds(config, max_side) if config is not None else (),
        bg.chessboard_square_size if bg is not None else 8,
        max_side,
        tuple(modes),
        tuple(alpha_patterns) if alpha_patterns is not None else None,
        tuple(contents),
    )


@functools.lru_cache(maxsize=64)
def configs(base: PreprocessConfig, *, vary: bool = True) -> st.SearchStrategy[PreprocessConfig]:
    """Variations around `base`: small budgets, side caps (multiples of the merge size),
    background patterns, squares, colours and fill stages (only when `base` has a background)."""
    if not vary:
        return st.just(base)
    return _run_draw(draw_config, (base, True), False)


def fuzz_cases(
    base: PreprocessConfig,
    *,
    vary_config: bool = True,
    max_images: int = 3,
    max_side: int = DEFAULT_MAX_SIDE,
    modes: Sequence[str] = MODES,
    alpha_patterns: Sequence[str] | None = None,
    contents: Sequence[str] = CONTENTS,
    tiles: bool = False,
) -> st.SearchStrategy[FuzzCase]:
    """A configuration and a batch of 1..max_images images drawn for it (with `tiles`, a first
    choice of 1 makes it one tile-crossing image instead: `draw.draw_fuzz_case`)."""
    return recorded_fuzz_cases(base, DrawOptions(vary_config, max_images, max_side, tuple(modes),
                                                 tuple(alpha_patterns) if alpha_patterns is not None else None,
                                                 tuple(contents), tiles), record=False)


@functools.lru_cache(maxsize=64)
def recorded_fuzz_cases(base: PreprocessConfig, options: DrawOptions, *, record: bool = True) -> st.SearchStrategy[Any]:
    """`draw.draw_fuzz_case` as a strategy; with `record`, each value is (case, its choice list)."""
    return _run_draw(draw_fuzz_case, (base, options), record)


@functools.lru_cache(maxsize=64)
def scenarios(base: PreprocessConfig, options: ScenarioOptions = ScenarioOptions(), framing: str = "k3"
              ) -> st.SearchStrategy[Scenario]:
    """`scenarios.draw_scenario` as a strategy: request scenarios hypothesis can shrink."""
    return _run_draw(draw_scenario, (base, options, framing), False)


__all__ = ["DEFAULT_MAX_SIDE", "MODE_WEIGHTS", "HypothesisSource", "case_params", "configs", "fuzz_cases",
           "recorded_fuzz_cases", "scenarios", "sizes"]
