"""The planner fuzz's draw of sizes and configurations, over `inputs.draw`'s sources of integers.

A planner case is a size and a configuration, judged by arithmetic alone, so cases are drawn in
blocks: one configuration (`draw_plan_config`), then `count` sizes for it (`draw_plan_sizes`).
Both take a `draw.Source`: the planner fuzz gives them a `draw.GeneratorSource` (a NumPy
generator), and a recorded choice list replays to the same cases (`draw.ChoiceSource`). The
lists come from `inputs.generators` (`config_choices`, threshold sizes, special sides, ratios),
the budget from `draw.draw_limit` (its small-budget weighting), as for the pixel fuzzers.
"""

from __future__ import annotations

import dataclasses
import math

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.inputs.draw import Source, choice, draw_limit
from kimi_oracle.inputs.generators import (
    budget_sizes,
    config_choices,
    ratio_sizes,
    side_cap_sizes,
    special_sides,
)

# The planner's sides reach far beyond the pixel fuzzers' (it renders no image).
PLAN_MAX_SIDE = 20_000
# One configuration in four is the base itself; the others keep the base's fixed token count
# with a choice of 1 in KEEP_FIXED_TOKENS_OF (half of them) and draw another one otherwise.
BASE_SHARE_OF = 4
KEEP_FIXED_TOKENS_OF = 2
# A drawn fraction's resolution (log-uniform sides and multiples).
_UNIT = 1 << 24
# Size kinds: log-uniform, a multiple of the patch or merged-patch size ±1, special sides; one
# special size in RATIO_OF is a >100:1 ratio instead.
RATIO_OF = 16


def draw_plan_config(source: Source, base: PreprocessConfig) -> PreprocessConfig:
    """One configuration around `base` (the base itself with the first choice, a quarter of the
    time): budget, side cap (also one past a multiple of the merge size, so that the checkpoint's
    side assert fails for some sizes), patch size, merge size and, in half of them, the fixed
    token count, from `generators.config_choices(base)`."""
    if source.integer(0, BASE_SHARE_OF - 1) == 0:
        return base
    c = config_choices(base)
    caps = c.caps + tuple(cap + 1 for cap in c.caps)  # +1: not a multiple of the merge size
    patch = choice(source, c.patch_sizes)
    merge = choice(source, c.merge_sizes)
    fixed = base.fixed_output_tokens
    if source.integer(0, KEEP_FIXED_TOKENS_OF - 1) != 0:
        fixed = choice(source, c.fixed_tokens[1:])
    return dataclasses.replace(base, name=f"{base.name}~planner", patch_size=patch, merge_kernel_size=merge,
                               in_patch_limit=draw_limit(source, c), patch_limit_on_one_side=choice(source, caps),
                               fixed_output_tokens=fixed)


def _fraction(source: Source) -> float:
    return source.integer(0, _UNIT) / _UNIT


def _log_side(source: Source, log_max: float) -> int:
    return max(1, int(math.exp(_fraction(source) * log_max)))


def _near_side(source: Source, units: tuple[int, int], log_k: float) -> int:
    unit = choice(source, units)
    k = int(math.exp(_fraction(source) * log_k))
    return max(1, unit * k + source.integer(0, 2) - 1)


def _plan_size(source: Source, config: PreprocessConfig, max_side: int, special: tuple[int, ...]
               ) -> tuple[int, int]:
    kind = source.integer(0, 2)
    if kind == 0:  # log-uniform
        log_max = math.log(max_side)
        return _log_side(source, log_max), _log_side(source, log_max)
    if kind == 1:  # multiples of p and p * merge, ±1
        p = config.patch_size
        units = (p, p * config.merge_kernel_size)
        log_k = math.log(max(2, max_side // max(p, 1)))
        return _near_side(source, units, log_k), _near_side(source, units, log_k)
    if source.integer(0, RATIO_OF - 1) == RATIO_OF - 1:
        return choice(source, ratio_sizes())
    return choice(source, special), choice(source, special)


def draw_plan_sizes(source: Source, config: PreprocessConfig, count: int, max_side: int = PLAN_MAX_SIDE
                    ) -> list[tuple[int, int]]:
    """`count` sizes for `config`: its threshold sizes first (the budget's and the side cap's, at
    most a quarter of them; no choice), then drawn ones: log-uniform sides, multiples of the patch
    and merged-patch sizes ±1, special sides (primes, powers of two ±1, ...) and >100:1 ratios."""
    fixed = [s for s in budget_sizes(config) + side_cap_sizes(config) if max(s) <= 8 * max_side][: count // 4]
    special = special_sides(max_side)
    return fixed + [_plan_size(source, config, max_side, special) for _ in range(count - len(fixed))]


__all__ = ["PLAN_MAX_SIDE", "draw_plan_config", "draw_plan_sizes"]
