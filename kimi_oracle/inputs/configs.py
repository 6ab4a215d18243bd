"""Configuration choices: variations of a base config, what the fuzzers vary it over, its label."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

from kimi_oracle.core.config import FILL_STAGES, PATTERNS, PreprocessConfig, TransparentBgConfig

# in_patch_limit values small enough that test-sized images are resampled.
SMALL_PATCH_LIMITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 100, 256, 1024)


def side_caps(config: PreprocessConfig, max_cap: int | None = None) -> list[int]:
    """Side caps that are multiples of the merge size (so the checkpoint's assert cannot fail)."""
    m = config.merge_kernel_size
    top = config.patch_limit_on_one_side if max_cap is None else max_cap
    caps = {m * k for k in (1, 2, 3, 4, 6, 8, 16, 32, 64, 128, 256)}
    caps.add(config.patch_limit_on_one_side)
    return sorted(c for c in caps if c <= max(top, m))


def vary_config(base: PreprocessConfig, **changes: Any) -> PreprocessConfig:
    """`base` with some fields replaced; `background={...}` updates the background's fields.

    Example: `vary_config(k3, in_patch_limit=16, background={"pattern": "white"})`.
    """
    bg_changes = changes.pop("background", None)
    if bg_changes:
        bg = base.transparent_bg_config or TransparentBgConfig()
        changes["transparent_bg_config"] = dataclasses.replace(bg, **bg_changes)
    if not changes:
        return base
    name = changes.pop("name", None) or (base.name if base.name.endswith("~var") else f"{base.name}~var")
    return dataclasses.replace(base, name=name, **changes)


def config_variants(base: PreprocessConfig) -> list[PreprocessConfig]:
    """A deterministic set of variations around `base` that make small images resample.

    Small budgets × (when `base` has a background) every pattern, both fill stages and a few
    chessboard squares; plus small side caps. Used by golden catalogues and smoke tests.
    """
    out: list[PreprocessConfig] = []
    for limit in (4, 16, 64):
        out.append(vary_config(base, in_patch_limit=limit))
    for cap in side_caps(base, max_cap=8):
        out.append(vary_config(base, in_patch_limit=1024, patch_limit_on_one_side=cap))
    if base.transparent_bg_config is not None:
        for pattern in PATTERNS:
            for stage in FILL_STAGES:
                out.append(vary_config(base, in_patch_limit=16, transparent_bg_fill_stage=stage,
                                       background={"pattern": pattern}))
        for square, top_left in ((1, True), (3, False), (5, True), (16, False)):
            out.append(vary_config(base, in_patch_limit=16, background={
                "pattern": "chessboard", "chessboard_square_size": square,
                "chessboard_square_on_top_left": top_left}))
    unique: list[PreprocessConfig] = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique


# Chessboard squares and (white, grey) values the fuzzers vary the background with.
CHECKER_SQUARES = (1, 2, 3, 5, 8, 16)
CHESS_VALUES = ((255, 180), (255, 200), (240, 0), (0, 255))
# What a candidate could hard-code, varied within what the checkpoint's processor accepts (positive
# integer patch and merge sizes, a positive token count or null, finite non-zero stds); few,
# realistic values, the base's own put first by `config_choices`.
PATCH_SIZES = (14, 16, 8)
MERGE_SIZES = (2, 1)
FIXED_TOKENS = (None, 1, 64, 729)
NORMALIZATIONS = (
    ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # Kimi K2.5 / K3
    ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),  # CLIP
    ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # ImageNet
    ((0.0, 1.0, 0.25), (1.0, 0.1, 3.0)),  # odd but valid: every channel different, mean 0 and 1
)



@dataclass(frozen=True)
class ConfigChoices:
    """What the fuzzers vary a base configuration over, each list with the base's own value first
    (so both engines shrink towards the profile)."""

    tiny_limits: tuple[int, ...]      # budgets of at most 16 patches: small images resample
    other_limits: tuple[int, ...]     # larger budgets and the base's
    caps: tuple[int, ...]             # side caps, multiples of the merge size
    patterns: tuple[str, ...]         # empty when the base has no background
    squares: tuple[int, ...]
    top_left: tuple[bool, ...]
    chess_values: tuple[tuple[int, int], ...]
    stages: tuple[str | None, ...]    # the base's stage first
    # What a kernel could hard-code (`PATCH_SIZES`, ...), the base's value first; the caps above
    # are multiples of every merge size here, so a drawn merge never trips the side assert.
    patch_sizes: tuple[int, ...] = ()
    merge_sizes: tuple[int, ...] = ()
    fixed_tokens: tuple[int | None, ...] = ()
    norms: tuple[tuple[tuple[float, float, float], tuple[float, float, float]], ...] = ()

    @property
    def limits(self) -> tuple[int, ...]:
        """Every budget, the 16-patch one first."""
        return self.tiny_limits + self.other_limits


@functools.lru_cache(maxsize=64)
def config_choices(base: PreprocessConfig) -> ConfigChoices:
    """The choices `vary_config` is drawn from around `base`."""
    tiny = (16,) + tuple(v for v in SMALL_PATCH_LIMITS if v <= 16 and v != 16)
    other = tuple(v for v in SMALL_PATCH_LIMITS if v > 16) + (base.in_patch_limit,)
    shape = dict(
        patch_sizes=_base_first(base.patch_size, PATCH_SIZES),
        merge_sizes=_base_first(base.merge_kernel_size, MERGE_SIZES),
        fixed_tokens=_base_first(base.fixed_output_tokens, FIXED_TOKENS),
        norms=_base_first((base.image_mean, base.image_std), NORMALIZATIONS),
    )
    every_merge = vary_config(base, merge_kernel_size=math.lcm(*shape["merge_sizes"]))
    caps = (base.patch_limit_on_one_side,) + tuple(c for c in side_caps(every_merge, max_cap=16)
                                                   if c != base.patch_limit_on_one_side)
    bg = base.transparent_bg_config
    if bg is None:
        return ConfigChoices(tiny, other, caps, (), (), (), (), (base.transparent_bg_fill_stage,), **shape)
    base_values = (bg.chessboard_white_value, bg.chessboard_gray_value)
    return ConfigChoices(
        tiny, other, caps, **shape,
        patterns=(bg.pattern,) + tuple(p for p in PATTERNS if p != bg.pattern),
        squares=(bg.chessboard_square_size,) + tuple(q for q in CHECKER_SQUARES if q != bg.chessboard_square_size),
        top_left=(bg.chessboard_square_on_top_left, not bg.chessboard_square_on_top_left),
        chess_values=(base_values,) + tuple(v for v in CHESS_VALUES if v != base_values),
        stages=(base.transparent_bg_fill_stage,) + tuple(s for s in (*FILL_STAGES, None)
                                                         if s != base.transparent_bg_fill_stage),
    )


def _base_first(base: Any, values: tuple) -> tuple:
    return (base,) + tuple(v for v in values if v != base)


def config_label(config: PreprocessConfig) -> str:
    """A compact description of how a config differs from nothing (for reports and ids); patch,
    merge, fixed tokens and mean/std only when they differ from the Kimi profiles'."""
    bg = config.transparent_bg_config
    parts = [f"limit={config.in_patch_limit}", f"side={config.patch_limit_on_one_side}"]
    if (config.patch_size, config.merge_kernel_size) != (14, 2):
        parts.append(f"patch={config.patch_size} merge={config.merge_kernel_size}")
    if config.fixed_output_tokens is not None:
        parts.append(f"tokens={config.fixed_output_tokens}")
    if (config.image_mean, config.image_std) != NORMALIZATIONS[0]:
        parts.append(f"mean={list(config.image_mean)} std={list(config.image_std)}")
    if bg is not None:
        parts.append(f"bg={bg.pattern}")
        if bg.pattern == "chessboard":
            parts.append(f"sq={bg.chessboard_square_size}{'' if bg.chessboard_square_on_top_left else '!'}")
        parts.append(f"fill={config.fill_stage}")
    return " ".join(parts)
