"""A root cause's levels: its max is never below its mean (hand-computed drops)."""

from __future__ import annotations

from kimi_oracle.results.aggregation import cause_levels
from kimi_oracle.workflows.known import aggregate


def _finding(before_max, before_mean, after_max, after_mean):
    return {"check": "pixel_mismatch", "key": "pixel_mismatch[RGB]", "root_causes": ["resample-float"],
            "max_levels": before_max, "mean_levels": before_mean, "input": "a", "stage": "fuzz",
            "attribution": {"max_levels": before_max, "mean_levels": before_mean,
                            "explained": [{"root_cause": "resample-float", "image": 0,
                                           "residual_max_levels": after_max, "residual_mean_levels": after_mean}]}}


def test_a_cause_that_lowers_the_mean_more_than_the_max():
    # 200 -> 136.25 at the largest value (a drop of 63.75), 80 -> 5.8 on average (a drop of 74.2):
    # some value moved by 74.2 levels at least, so the cause's max is 74.2, not 63.75.
    f = _finding(200.0, 80.0, 136.25, 5.8)
    top, mean = cause_levels(f)["resample-float"]
    assert abs(mean - 74.2) < 1e-9 and abs(top - 74.2) < 1e-9
    # A cause whose largest drop is the larger keeps it (200 -> 0, 80 -> 0).
    assert cause_levels(_finding(200.0, 80.0, 0.0, 0.0))["resample-float"] == (200.0, 80.0)
    rows = aggregate([f])
    side = rows[("resample-float", "RGB")]
    assert side.max_levels >= side.mean_levels
