"""NaViT geometry: the checkpoint's `navit_resize_config`, float order included (spec §2)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError, PlanError


@dataclass(frozen=True)
class ResizePlan:
    """Target size, bottom/right padding, patch grid and token count for one image."""

    new_w: int
    new_h: int
    pad_w: int
    pad_h: int
    grid_thw: tuple[int, int, int]
    num_tokens: int

    @property
    def padded_size(self) -> tuple[int, int]:
        """(width, height) after padding."""
        return self.new_w + self.pad_w, self.new_h + self.pad_h

    @property
    def num_patches(self) -> int:
        """Rows this image contributes to `pixel_values` (t·h·w)."""
        t, h, w = self.grid_thw
        return t * h * w


def _check_size(name: str, value: object) -> int:
    if type(value) is int and value > 0:  # the common case, without the ABC check below
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"image {name} must be an integer, got {value!r}")
    if value <= 0:
        raise InputError(f"image {name} must be positive, got {value}")
    return int(value)


_CONFIG = object()


def plan(width: int, height: int, config: PreprocessConfig, *, side_assert: bool = True,
         limit: int | None = None, fixed: object = _CONFIG) -> ResizePlan:
    """Plan the resize of a W × H image exactly as the checkpoint does; with `side_assert=False`,
    the same arithmetic without the checkpoint's side assert (as engines plan: never raises it).
    `limit` and `fixed` replace `in_patch_limit` and `fixed_output_tokens` (a video frame's
    budget, which may be 0: `core.video.plan_chunk`)."""
    w = _check_size("width", width)
    h = _check_size("height", height)
    p = config.patch_size
    m = config.merge_kernel_size
    limit = config.in_patch_limit if limit is None else limit
    fixed_tokens = config.fixed_output_tokens if fixed is _CONFIG else fixed
    side = config.patch_limit_on_one_side
    # Same operations, same order, same types as the checkpoint: floor division first,
    # then max() against 1.0, then a double-precision sqrt.
    s1 = math.sqrt(limit / (max(1.0, w // p) * max(1.0, h // p)))
    s2 = side * p / w
    s3 = side * p / h
    scale = min(1.0, s1, s2, s3)
    new_w = min(max(1, int(w * scale)), side * p)
    new_h = min(max(1, int(h * scale)), side * p)
    f = m * p
    pad_w = (f - new_w % f) % f
    pad_h = (f - new_h % f) % f
    grid = (1, (new_h + pad_h) // p, (new_w + pad_w) // p)
    if fixed_tokens is not None:
        tokens = int(fixed_tokens)  # type: ignore[call-overload]
    else:
        merged_h = (new_h + pad_h) // f
        merged_w = (new_w + pad_w) // f
        # The checkpoint asserts both sides fit the side cap; it raises instead of planning.
        if side_assert and (merged_h * m > side or merged_w * m > side):
            raise PlanError(
                f"{w}x{h}: padded grid {merged_w * m}x{merged_h * m} patches exceeds "
                f"patch_limit_on_one_side={side} (the checkpoint's side assert fails)"
            )
        tokens = merged_h * merged_w
    return ResizePlan(new_w, new_h, pad_w, pad_h, grid, tokens)
