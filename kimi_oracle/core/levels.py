"""What a level is: one step of the 8-bit input, and the under-one-level threshold (`is_sub_level`).

Differences between a candidate's output and the reference's are measured in levels
(`oracle.checks.levels_of`). A difference under one level is float rounding only: both values
round to the same level. This module imports nothing heavy, so that grouping, reports and the
gate's rules use the threshold without torch.
"""

from __future__ import annotations

ONE_LEVEL = 1.0


def is_sub_level(levels: float) -> bool:
    """True when a difference of `levels` levels is under one level (float rounding only)."""
    return float(levels) < ONE_LEVEL


__all__ = ["ONE_LEVEL", "is_sub_level"]
