"""The compare chain: grids, then feature length, then shapes and dtypes, then pixels."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks.locations import _describe_location
from kimi_oracle.oracle.checks.normalize import _coerce, _grid_rows, _rows_of
from kimi_oracle.oracle.checks.pixels import BRIEF, pixel_stats
from kimi_oracle.oracle.checks.verdict import Verdict
from kimi_oracle.oracle.kinds import FEATURE_LENGTH, GRID_MISMATCH, PIXEL_MISMATCH, SHAPE_DTYPE, Tolerance


def compare(
    expected: Any,
    actual: Any,
    config: PreprocessConfig,
    tolerance: "str | Tolerance" = "exact",
    *,
    sizes: Sequence[tuple[int, int]] | None = None,
    brief: bool = False,
) -> Verdict:
    """Check `actual` against `expected` (the reference's result for the same images).

    `sizes` are the input images' (width, height), used to map a differing pixel back to the
    original image; without them the report gives padded-image coordinates only.

    `brief`: a pixel mismatch's verdict stops once its group is known (`grouping.finding_key`:
    the check, the image at fault, the largest difference): its stats lack the histogram, the
    ulps and the worst value's location, and say `"brief": True` (`full_verdict` completes
    them from the two results, which it keeps). The fuzzers' search judges so, and completes
    only the verdicts it records.
    """
    exp = _coerce(expected)
    act = _coerce(actual)
    verdict = _compare(exp, act, config, Tolerance.parse(tolerance), sizes, brief)
    verdict.expected, verdict.actual = exp, act
    return verdict


def full_verdict(verdict: Verdict, config: PreprocessConfig, tolerance: "str | Tolerance",
                 sizes: Sequence[tuple[int, int]] | None = None) -> Verdict:
    """`verdict` itself, or where it is brief, the whole comparison of the results it holds."""
    if not verdict.stats.get(BRIEF):
        return verdict
    return compare(verdict.expected, verdict.actual, config, tolerance, sizes=sizes)


def _compare(
    exp: PreprocessResult,
    act: PreprocessResult,
    config: PreprocessConfig,
    tol: Tolerance,
    sizes: Sequence[tuple[int, int]] | None,
    brief: bool = False,
) -> Verdict:
    exp_grids = _grid_rows(exp.grid_thws)
    if exp_grids is None:
        raise ValueError(f"expected grid table has shape {tuple(exp.grid_thws.shape)}")
    n = len(exp_grids)
    plans: list[ResizePlan | None] = [None] * n
    if sizes is not None:
        if len(sizes) != n:
            raise ValueError(f"{len(sizes)} sizes given for {n} images")
        if not brief:  # (the worst value's location)
            plans = [plan(w, h, config) for w, h in sizes]
    act_grids = _grid_rows(act.grid_thws)
    failed = (_check_grids(exp_grids, act_grids, act, sizes)
              or _check_feature_length(act_grids, act)
              or _check_shape_dtype(act_grids, act, config, tol))
    if failed is not None:
        return failed
    return _check_pixels(exp, act, exp_grids, config, tol, plans, sizes, brief)


def _check_grids(exp_grids: list[tuple[Any, ...]], act_grids: list[tuple[Any, ...]] | None,
                 act: PreprocessResult, sizes: Sequence[tuple[int, int]] | None) -> Verdict | None:
    """1. grids, per image."""
    n = len(exp_grids)
    if act_grids is None:
        return Verdict(
            GRID_MISMATCH,
            f"grid table has shape {list(act.grid_thws.shape)}, expected [{n}, 3]",
            {"expected_grids": [list(g) for g in exp_grids], "actual_grid_shape": list(act.grid_thws.shape)},
        )
    mismatched = [
        {"image": i, "expected": list(e), "actual": list(a), "size": list(sizes[i]) if sizes else None}
        for i, (e, a) in enumerate(zip(exp_grids, act_grids))
        if tuple(e) != tuple(a)
    ]
    if len(act_grids) != n or mismatched:
        if len(act_grids) != n:
            message = f"{len(act_grids)} grids returned for {n} images"
        else:
            first = mismatched[0]
            message = (
                f"image {first['image']}: grid {tuple(first['actual'])} != expected {tuple(first['expected'])}"
                + (f" ({len(mismatched)} of {n} images differ)" if len(mismatched) > 1 else "")
            )
        return Verdict(GRID_MISMATCH, message, {
            "expected_grids": [list(g) for g in exp_grids],
            "actual_grids": [list(g) for g in act_grids],
            "mismatched": mismatched,
        })
    return None


def _check_feature_length(act_grids: list[tuple[Any, ...]], act: PreprocessResult) -> Verdict | None:
    """2. feature length: the rows produced must match the advertised grids."""
    total = sum(_rows_of(g) for g in act_grids)
    rows = int(act.pixel_values.shape[0]) if act.pixel_values.ndim >= 1 else None
    if rows != total:
        return Verdict(FEATURE_LENGTH, f"grids advertise {total} patch rows but pixel_values has {rows}", {
            "advertised_rows": total,
            "produced_rows": rows,
            "rows_per_image": [_rows_of(g) for g in act_grids],
            "pixel_values_shape": list(act.pixel_values.shape),
        })
    return None


def _check_shape_dtype(act_grids: list[tuple[Any, ...]], act: PreprocessResult, config: PreprocessConfig,
                       tol: Tolerance) -> Verdict | None:
    """3. shapes and dtypes."""
    total = sum(_rows_of(g) for g in act_grids)
    want_shape = [total, 3, config.patch_size, config.patch_size]
    problems = shape_dtype_problems(act, config, tol)
    if problems:
        return Verdict(SHAPE_DTYPE, "; ".join(problems), {
            "pixel_values_shape": list(act.pixel_values.shape),
            "pixel_values_dtype": str(act.pixel_values.dtype),
            "grid_thws_dtype": str(act.grid_thws.dtype),
            "expected_shape": want_shape,
        })
    return None


def _check_pixels(exp: PreprocessResult, act: PreprocessResult, exp_grids: list[tuple[Any, ...]],
                  config: PreprocessConfig, tol: Tolerance, plans: Sequence[ResizePlan | None],
                  sizes: Sequence[tuple[int, int]] | None, brief: bool = False) -> Verdict:
    """4. pixels."""
    stats = pixel_stats(exp.pixel_values, act.pixel_values, exp_grids, config, tol, plans, sizes, brief=brief)
    if stats["failing"] and brief:
        return Verdict(PIXEL_MISMATCH, f"{stats['failing']} of {stats['values']} values differ under {tol} "
                       f"(max {stats['max_level_diff']:.3g} levels)", stats)
    if stats["failing"]:
        loc = stats.get("worst") or {}
        where = _describe_location(loc)
        message = (
            f"{stats['failing']} of {stats['values']} values differ under {tol} "
            f"(max {stats['max_level_diff']:.3g} levels, mean {stats['mean_level_diff']:.3g}); worst {where}"
        )
        return Verdict(PIXEL_MISMATCH, message, stats)
    return Verdict(None, "all checks passed", stats)


def shape_dtype_problems(result: PreprocessResult, config: PreprocessConfig,
                         tolerance: "str | Tolerance" = "exact") -> list[str]:
    """What is wrong with a result's shapes and dtypes (empty when nothing): pixel_values must be
    float32 (N, 3, p, p) with N the rows its grids advertise (bfloat16 too under the bf16
    tolerance), grid_thws int64 (n, 3)."""
    tol = Tolerance.parse(tolerance)
    grids = _grid_rows(result.grid_thws)
    problems = []
    if grids is None:
        problems.append(f"grid_thws shape {list(result.grid_thws.shape)} != [n, 3]")
    else:
        p = config.patch_size
        want_shape = [sum(_rows_of(g) for g in grids), 3, p, p]
        if list(result.pixel_values.shape) != want_shape:
            problems.append(f"pixel_values shape {list(result.pixel_values.shape)} != {want_shape}")
    allowed = {torch.float32} | ({torch.bfloat16} if tol.kind == "bf16" else set())
    if result.pixel_values.dtype not in allowed:
        problems.append(f"pixel_values dtype {str(result.pixel_values.dtype).replace('torch.', '')} "
                        f"!= {' or '.join(sorted(str(d).replace('torch.', '') for d in allowed))}")
    if result.grid_thws.dtype != torch.int64:
        problems.append(f"grid_thws dtype {str(result.grid_thws.dtype).replace('torch.', '')} != int64")
    return problems

