"""A batch's values in another axis order: rows that mix the images of a batch (`patch-order`).

An engine that stacks a batch of same-size images into one (B, C, H, W) tensor and cuts patches
with a wrong axis order (PaddleFormers 1.2's `navit_patchify`: a `Tensor.transpose` that swaps two
axes where a six-axis permutation was meant) gives rows that are neither one image's patches in
another order (`fitted.fit_patch_order`, per image) nor another image's rows (`rows-of-image-J`):
each row holds values of several images. `batch_layout` measures the order from the data: the
reference's rows of every image of the batch, as one tensor of axes (image, gy, py, gx, px, c),
read in each of the 720 axis orders as (N, C, p, p) rows; the order that brings the most of the
batch's values within one level of the candidate's (more than any per-image order, at least half of them,
and at least half of those the best per-image order leaves apart; the fewest axis swaps from the (B, C, H, W) tensor's own order among ties) is the finding's `patch-order/batch-axes-A,B,C,D,E,F` (the axes by
name, outermost first), and the normalization variant that then makes them bit-identical, if any,
its second step. What is left (another image's own defect, mixed into these rows) is the residual. The checkpoint's own order is `image,gy,gx,c,py,px`.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np
import torch

from kimi_oracle.core.levels import ONE_LEVEL
from kimi_oracle.oracle.diagnosis.catalogue import BY_ID
from kimi_oracle.oracle.diagnosis.levels import LevelSummary, Target, levels_of
from kimi_oracle.oracle.diagnosis.search import Explained, OutOfRuns
from kimi_oracle.pipelines.reference import patches_chw

AXES = ("image", "gy", "py", "gx", "px", "c")  # the canonical tensor's axes
CHECKPOINT_ORDER = ("image", "gy", "gx", "c", "py", "px")
FAMILY = "patch-order"
NORMALIZE = "normalize-float"
PREFIX = "batch-axes-"
MAX_VALUES = 1 << 18  # a batch of more values is not read in 720 orders (a tile-crossing case)
IMAGE_PREFIX = "axes-"
IMAGE_AXES = ("gy", "py", "gx", "px", "c")


def describe(variant: str) -> str | None:
    """`the batch's values read in axis order (gy, c, image, py, gx, px) instead of (image, gy, gx,
    c, py, px)` for a `batch-axes-...` variant, else None."""
    if variant.startswith(IMAGE_PREFIX):  # fitted.fit_patch_order's, per image: (gy, py, gx, px, c) numbered
        try:
            order = [IMAGE_AXES[int(a)] for a in variant[len(IMAGE_PREFIX):].split(",")]
        except (ValueError, IndexError):
            return None
        return (f"each image's values read as rows in axis order ({', '.join(order)}) instead of the "
                f"checkpoint's ({', '.join(CHECKPOINT_ORDER[1:])})")
    if not variant.startswith(PREFIX):
        return None
    order = variant[len(PREFIX):].split(",")
    return (f"the batch's values read as rows in axis order ({', '.join(order)}) instead of the checkpoint's "
            f"({', '.join(CHECKPOINT_ORDER)}): each row mixes images")


def _canonical(rows: Sequence[torch.Tensor], gh: int, gw: int, patch: int) -> torch.Tensor:
    stacked = torch.stack([r.reshape(gh, gw, 3, patch, patch) for r in rows])  # image, gy, gx, c, py, px
    return stacked.permute(0, 1, 4, 2, 5, 3)  # image, gy, py, gx, px, c


def _read(canonical: torch.Tensor, order: tuple[int, ...], patch: int) -> torch.Tensor:
    return canonical.permute(*order).contiguous().reshape(-1, 3, patch, patch)


# The order a batch tensor is in before it is cut (B, C, H, W): among orders the data cannot tell
# apart (equal channels, one-patch sides), the one fewest axis swaps away from it is named.
SOURCE_ORDER = ("image", "c", "gy", "py", "gx", "px")


def _inversions(order: tuple[int, ...]) -> int:
    rank = [SOURCE_ORDER.index(AXES[a]) for a in order]
    return sum(1 for x in range(6) for y in range(x + 1, 6) if rank[x] > rank[y])


def _near(rows: torch.Tensor, target: Target) -> int:
    """How many of the rows' values lie within one level of the candidate's."""
    return int((np.abs(levels_of(rows, target.config) - target.levels) < ONE_LEVEL).sum())


def batch_layout(search: Any, i: int, target: Target, offsets: list[int],
                 whole: Target) -> tuple[list[Explained], LevelSummary] | None:
    """(steps, what they leave) when image i's rows (`target`) are the batch's values in another
    axis order (every image the same plan; `whole`: the candidate's rows of the whole batch), else
    None. Spends one reference run per image and value base."""
    n = len(offsets) - 1
    plans = search.plans
    if n < 2 or any((p.new_w + p.pad_w, p.new_h + p.pad_h) != (plans[0].new_w + plans[0].pad_w,
                                                            plans[0].new_h + plans[0].pad_h) for p in plans):
        return None
    patch = search.config.patch_size
    gh, gw = (plans[0].new_h + plans[0].pad_h) // patch, (plans[0].new_w + plans[0].pad_w) // patch
    lo, hi = offsets[i], offsets[i + 1]
    base = search.base.replace(patchify=patches_chw)  # (a per-image order taken before: the rows as cut)
    try:
        canonical = _canonical([search.run(j, base) for j in range(n)], gh, gw, patch)
        if canonical.numel() > MAX_VALUES:  # (720 readings of the batch: small batches only)
            return None
        # Judged on the whole batch: one order of the batch tensor holds for every image's rows (a
        # chance match of a few values of image i, which the other images' rows then contradict,
        # is no finding).
        near = {order: _near(_read(canonical, order, patch), whole)
                for order in sorted(itertools.permutations(range(6)), key=_inversions)}
        # The best order of each kind (the first of a tie: the fewest swaps): with the image axis
        # outermost, a per-image order (the checkpoint's among them: fitted per image, not here).
        best = max((o for o in near if o[0] != 0), key=lambda o: near[o])
        own = max((o for o in near if o[0] == 0), key=lambda o: near[o])
        missed = whole.levels.size - near[own]
        # Named when it beats every per-image order, brings at least half of the values within one
        # level, and mends at least half of those the best per-image order leaves apart (a flat
        # image's rows match in many orders: a near tie is no finding). Other images' own defects
        # (a palette resized its own way), mixed into these rows, stay in the residual.
        if near[best] <= near[own] or 2 * near[best] < whole.levels.size or 2 * (near[best] - near[own]) < missed:
            return None
        order = best
        left = target.summary(_read(canonical, order, patch)[lo:hi])
        name = PREFIX + ",".join(AXES[a] for a in order)
        steps = [Explained(FAMILY, name, left.max_levels, left.mean_levels, left.total_levels, (), i)]
        if left.differing:
            for variant in BY_ID[NORMALIZE].variants(search.config):
                values = variant.apply(base)
                rows = [search.run(j, values) for j in range(n)]
                exact = target.summary(_read(_canonical(rows, gh, gw, patch), order, patch)[lo:hi])
                if not exact.differing:
                    steps.append(Explained(NORMALIZE, variant.name, 0.0, 0.0, 0.0, (), i))
                    return steps, exact
        return steps, left
    except OutOfRuns:
        return None


__all__ = ["AXES", "CHECKPOINT_ORDER", "batch_layout", "describe"]
