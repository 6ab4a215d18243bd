"""Levels: how far a model output is from the candidate's values, in steps of the 8-bit input.

One level is one step of the 8-bit input (`checks.levels_of`); a distance is over the values
that differ bitwise. Rule: docs/diagnosis.md ("Levels").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.candidates import as_result
from kimi_oracle.oracle.checks import levels_at, levels_of


@dataclass(frozen=True)
class LevelSummary:
    """Max and mean level difference over the values that differ, and how many differ."""

    max_levels: float
    mean_levels: float
    differing: int
    total_levels: float



class Target:
    """The candidate's values of one image, in levels, and distances of model outputs from them."""

    def __init__(self, values: torch.Tensor, config: PreprocessConfig):
        self.config = config
        # A bfloat16 candidate is compared with model outputs rounded to bfloat16 (the `bf16`
        # tolerance's rule), so that the rounding itself is not a difference.
        self.bf16 = values.dtype == torch.bfloat16
        self.bits = values.float().contiguous().view(torch.int32).numpy()
        self.levels = levels_of(values, config)
        self.finite = np.isfinite(values.float().numpy())

    def summary(self, model: torch.Tensor) -> LevelSummary:
        """The distance of a model output (float32 patches) from the candidate's values."""
        if self.bf16:
            model = model.to(torch.bfloat16).float()
        differ = self.bits != model.contiguous().view(torch.int32).numpy()
        if not differ.any():
            return LevelSummary(0.0, 0.0, 0, 0.0)
        # Levels of the model's differing finite values (only those, when few): the same values,
        # in the same order, as indexing levels_of(model) by the mask.
        mask = differ & self.finite
        d = np.abs(self.levels[mask] - levels_at(model, mask, self.config))
        total = float(d.sum())
        infinite = int((differ & ~self.finite).sum())
        n = int(differ.sum())
        if infinite:
            return LevelSummary(float("inf"), float("inf"), n, total)
        return LevelSummary(float(d.max()), total / n, n, total)


def merge(parts: Sequence[LevelSummary]) -> LevelSummary:
    """The distances of several images as one."""
    n = sum(s.differing for s in parts)
    if not n:
        return LevelSummary(0.0, 0.0, 0, 0.0)
    total = sum(s.total_levels for s in parts)
    worst = max(s.max_levels for s in parts)
    mean = float("inf") if not np.isfinite(worst) else total / n
    return LevelSummary(worst, mean, n, total)


def level_summary(expected: PreprocessResult, actual: Any, config: PreprocessConfig) -> LevelSummary:
    """The candidate's distance from the reference in levels (the cheap part of a diagnosis)."""
    act = as_result(actual)
    if act.pixel_values.shape != expected.pixel_values.shape:
        raise CandidateError(f"pixel_values shape {list(act.pixel_values.shape)} != "
                             f"{list(expected.pixel_values.shape)}: no level distance")
    return Target(act.pixel_values, config).summary(expected.pixel_values)

