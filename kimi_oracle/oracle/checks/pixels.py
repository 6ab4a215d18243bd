"""Pixel statistics: level differences, ulps, histogram and the worst value, per tolerance policy."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks.levels import _LEVEL_EPS, _level_divisor, _level_of, _level_slopes
from kimi_oracle.oracle.checks.locations import locate
from kimi_oracle.oracle.checks.normalize import _rows_of
from kimi_oracle.oracle.kinds import Tolerance


# The stats key of a brief verdict (`pixel_stats(..., brief=True)`, `chain.full_verdict`).
BRIEF = "brief"


def _mean(flat: np.ndarray) -> float:
    """`float(flat.mean())` of a non-empty 1-d float64 array, without np.mean's Python layer: the
    same pairwise sum divided by the same count."""
    return float(np.add.reduce(flat)) / flat.size


def _differs_bitwise(expected: torch.Tensor, actual: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    if tol.kind == "bf16":
        # Both sides cast to bfloat16 (round to nearest even), then compared bit for bit: a
        # float32 candidate passes when its values round to the reference's bf16 values.
        target = expected.to(torch.bfloat16).contiguous()
        return actual.to(torch.bfloat16).contiguous().view(torch.int16) != target.view(torch.int16)
    return actual.contiguous().view(torch.int32) != expected.contiguous().view(torch.int32)


def pixel_stats(
    expected: torch.Tensor,
    actual: torch.Tensor,
    grids: Sequence[Sequence[int]],
    config: PreprocessConfig,
    tol: Tolerance,
    plans: Sequence[ResizePlan | None] | None = None,
    sizes: Sequence[tuple[int, int]] | None = None,
    *,
    brief: bool = False,
) -> dict[str, Any]:
    """Level differences, the share of differing values and the worst location, per policy.

    Level differences are |actual - expected| in float64 over the channel's level step, a NaN
    counted as an infinite difference; the mean is over the finite ones.

    `brief`: where values fail, no histogram, ulps or location: the worst image's index only
    (`"worst": {"image": i}`), and `BRIEF` set (`chain.compare`)."""
    exp = expected.detach().cpu().contiguous()
    act = actual.detach().cpu().contiguous()
    act32 = act.float()
    e = exp.numpy()
    a = act32.numpy()
    a_bits = a.view(np.int32)
    e_bits = e.view(np.int32)
    bitwise = a_bits != e_bits
    if tol.kind == "exact" and act.dtype == torch.float32:
        policy_fail = bitwise  # what `_differs_bitwise` computes for a float32 result
    elif tol.kind != "levels":
        policy_fail = _differs_bitwise(exp, act, tol).numpy()
    diff, top = _level_differences(a, e, config)
    if tol.kind == "levels":
        policy_fail = diff > tol.levels + _LEVEL_EPS
    stats, mean = _totals(tol, a, diff, top, bitwise, policy_fail, brief)
    if stats["differing"] and not (brief and stats["failing"]):
        stats["max_ulp"] = _max_ulp(a_bits, e_bits)
    offsets = [0]
    for g in grids:
        offsets.append(offsets[-1] + _rows_of(g))
    per_image = _per_image(grids, offsets, diff, top, mean, bitwise, policy_fail, stats["differing"])
    stats["per_image"] = per_image
    if stats["failing"]:
        worst = max(per_image, key=lambda r: (r["failing"] > 0, r["max_level_diff"], r["failing"]))
        if brief:
            stats["worst"] = {"image": worst["image"]}
            stats[BRIEF] = True
            return stats
        stats["worst"] = _worst(worst["image"], offsets, diff, policy_fail, e, a, grids, config, plans, sizes)
    return stats


# Large outputs are compared in row blocks of about this many values (1 MiB of float64), each
# block's passes made while it is in the cache: a real photo's 36 Mi values took 3-4 times as
# long in whole-array passes (docs/measurements.md). The values computed are the same.
_BLOCK_VALUES = 1 << 17


def _block_rows(values: np.ndarray) -> int:
    """How many rows (first-axis entries) of `values` one block holds."""
    return max(1, _BLOCK_VALUES // max(values[0].size, 1)) if len(values) else 1


def _level_differences(a: np.ndarray, e: np.ndarray, config: PreprocessConfig) -> tuple[np.ndarray, float]:
    """|a - e| in levels, NaN counted as infinite, and its largest value (0.0 when empty)."""
    # One float64 buffer, each block operated on in place: the values of np.abs(a64 - e64) / slopes.
    diff = np.empty(a.shape, dtype=np.float64)
    divisor = _level_divisor(config)
    tops = []
    step = _block_rows(a)
    for lo in range(0, len(a), step):
        d = diff[lo:lo + step]
        np.copyto(d, a[lo:lo + step])
        np.subtract(d, e[lo:lo + step], out=d)
        np.abs(d, out=d)
        np.divide(d, divisor, out=d)
        tops.append(d.max() if d.size else 0.0)
    top = float(np.max(tops)) if diff.size else 0.0  # (np.max propagates a block's NaN)
    if math.isnan(top):  # a NaN difference counts as infinite
        diff[np.isnan(diff)] = np.inf
        top = float(diff.max())
    return diff, top


def _totals(tol: Tolerance, a: np.ndarray, diff: np.ndarray, top: float, bitwise: np.ndarray,
            policy_fail: np.ndarray, brief: bool = False) -> tuple[dict[str, Any], float]:
    """The batch's statistics (without ulps and per-image rows; `brief` where values fail: nor
    the histogram), and its mean level difference."""
    values = int(diff.size)
    # A finite largest difference means every difference (and every actual value) is finite.
    if math.isfinite(top):
        mean = _mean(diff.reshape(-1)) if values else 0.0
        non_finite = 0
    else:
        finite = diff[np.isfinite(diff)]
        mean = float(finite.mean()) if finite.size else 0.0
        non_finite = int(np.count_nonzero(~np.isfinite(a)))
    differing = int(np.count_nonzero(bitwise))
    failing = differing if policy_fail is bitwise else int(np.count_nonzero(policy_fail))
    stats: dict[str, Any] = {
        "tolerance": str(tol),
        "values": values,
        "differing": differing,
        "share_differing": differing / values if values else 0.0,
        "failing": failing,
        "max_level_diff": top,
        "mean_level_diff": mean,
        "non_finite": non_finite,
    }
    if not (brief and failing):
        stats["histogram"] = _histogram(diff, bitwise, differing, all_finite=math.isfinite(top))
    return stats, mean


def _max_ulp(a_bits: np.ndarray, e_bits: np.ndarray) -> int | None:
    """The most ulps between differing values of the same sign (None when none is)."""
    # Their int32 difference cannot overflow, and equal values (0 apart) change no maximum of
    # differing ones (>= 1 apart). Block by block (`_BLOCK_VALUES`).
    top_ulp = 0
    step = _block_rows(a_bits)
    for lo in range(0, len(a_bits), step):
        a, e = a_bits[lo:lo + step], e_bits[lo:lo + step]
        ulps = np.subtract(a, e)
        ulps[(a ^ e) < 0] = 0
        if ulps.size:
            top_ulp = max(top_ulp, int(np.abs(ulps, out=ulps).max()))
    return top_ulp if top_ulp > 0 else None


def _per_image(grids: Sequence[Sequence[int]], offsets: list[int], diff: np.ndarray, top: float,
               mean: float, bitwise: np.ndarray, policy_fail: np.ndarray,
               differing: int) -> list[dict[str, Any]]:
    """Per image: its largest and mean level difference, differing and failing values."""
    all_finite = math.isfinite(top)
    per_image = []
    for i, g in enumerate(grids):
        lo, hi = offsets[i], offsets[i + 1]
        d = diff[lo:hi]
        n_whole = lo == 0 and hi == len(diff)
        if n_whole:  # the whole batch: its max, mean and counts are known
            d_max, d_mean = (top, mean) if d.size else (0.0, 0.0)
        elif all_finite:
            d_max, d_mean = (float(d.max()), _mean(d.reshape(-1))) if d.size else (0.0, 0.0)
        else:
            d_max = float(d.max()) if d.size else 0.0
            d_mean = float(d[np.isfinite(d)].mean()) if d.size and np.isfinite(d).any() else 0.0
        img_differing = differing if n_whole else int(np.count_nonzero(bitwise[lo:hi]))
        per_image.append({
            "image": i,
            "grid_thw": list(g),
            "max_level_diff": d_max,
            "mean_level_diff": d_mean,
            "differing": img_differing,
            "failing": img_differing if policy_fail is bitwise else int(np.count_nonzero(policy_fail[lo:hi])),
        })
    return per_image


def _worst(i: int, offsets: list[int], diff: np.ndarray, policy_fail: np.ndarray, e: np.ndarray,
           a: np.ndarray, grids: Sequence[Sequence[int]], config: PreprocessConfig,
           plans: Sequence[ResizePlan | None] | None,
           sizes: Sequence[tuple[int, int]] | None) -> dict[str, Any]:
    """The location of image i's worst failing value, with both values and their levels."""
    lo, hi = offsets[i], offsets[i + 1]
    # Worst value among the failing ones of that image: the first largest difference, when
    # it is a failing value (then no failing value before it is as large), else searched
    # among the failing values only.
    d = diff[lo:hi]
    flat = int(np.argmax(d))
    if not policy_fail[lo:hi].reshape(-1)[flat]:
        flat = int(np.argmax(np.where(policy_fail[lo:hi], d, -1.0)))
    row, c, py, px = (int(v) for v in np.unravel_index(flat, d.shape))
    exp_value = float(e[lo + row, c, py, px])
    act_value = float(a[lo + row, c, py, px])
    exp_levels = _level_of(exp_value, c, config)
    act_levels = _level_of(act_value, c, config)
    loc = locate(i, row, c, py, px, grids[i], config.patch_size,
                 plans[i] if plans else None, tuple(sizes[i]) if sizes else None)
    loc.update({
        "expected_value": exp_value,
        "actual_value": act_value,
        "expected_level": round(exp_levels, 4),
        "actual_level": round(act_levels, 4) if math.isfinite(act_levels) else str(act_levels),
        "level_diff": float(diff[lo + row, c, py, px]),
        "ulp_diff": ulp_distance(exp_value, act_value),
    })
    return loc


def ulp_distance(a: float, b: float) -> int | None:
    """How many float32 values lie between `a` and `b` (None across a sign change or non-finite)."""
    fa, fb = np.float32(a), np.float32(b)
    if not (np.isfinite(fa) and np.isfinite(fb)) or (fa < 0) != (fb < 0):
        return None
    return int(abs(int(fa.view(np.int32)) - int(fb.view(np.int32))))


def difference_magnitude(want: PreprocessResult, got: PreprocessResult, config: PreprocessConfig) -> dict[str, Any]:
    """Max/mean levels (over the values that differ) and max ulps between two same-shape results."""
    a = want.pixel_values.detach().cpu().float().contiguous()
    b = got.pixel_values.detach().cpu().float().contiguous()
    bitwise = (a.view(torch.int32) != b.view(torch.int32)).numpy()
    if not bitwise.any():
        return {"max_level_diff": 0.0, "mean_level_diff": 0.0, "differing": 0, "max_ulp": 0}
    diff = np.abs(a.numpy().astype(np.float64) - b.numpy().astype(np.float64)) / _level_slopes(config)
    d = diff[bitwise]
    finite = d[np.isfinite(d)]
    ai = a.view(torch.int32).numpy().astype(np.int64)
    bi = b.view(torch.int32).numpy().astype(np.int64)
    same_sign = ((ai >= 0) == (bi >= 0)) & bitwise
    ulps = np.abs(ai - bi)[same_sign]
    return {"max_level_diff": float(d.max()) if np.isfinite(d).all() else float("inf"),
            "mean_level_diff": float(finite.mean()) if finite.size else 0.0,
            "differing": int(bitwise.sum()),
            "max_ulp": int(ulps.max()) if ulps.size else None}


# The histogram's bins of differing values by level difference: "<1" below the first bound, then
# [bound, next bound) for "1", "2", "3-5", "6-20", and ">20" from the last bound up (infinity too).
_HISTOGRAM_BINS = ("<1", "1", "2", "3-5", "6-20", ">20")
_HISTOGRAM_BOUNDS = np.array([1.0 - _LEVEL_EPS, 1.5, 2.5, 5.5, 20.5])


def _histogram(diff: np.ndarray, bitwise: np.ndarray, differing: int | None = None,
               all_finite: bool = False) -> dict[str, int]:
    """Counts of equal values and of differing ones per level-difference bin (`diff` holds no NaN:
    `pixel_stats` counts a NaN difference as infinite). With `all_finite` (every difference is
    finite, so every equal value's difference is 0, below every bound) the differing values below
    a bound are all values below it less the equal ones: no copy of the differing values is made
    (a real photo's output has 36 Mi of them)."""
    if differing is None:
        differing = int(np.count_nonzero(bitwise))
    equal = int(bitwise.size) - differing
    if all_finite:
        bounds = _HISTOGRAM_BOUNDS.tolist()
        below = [-equal] * len(bounds)
        step = _block_rows(diff)
        for lo in range(0, len(diff), step):
            block = diff[lo:lo + step]
            for k, bound in enumerate(bounds):
                below[k] += int(np.count_nonzero(block < bound))
    else:
        values = np.compress(bitwise.reshape(-1), diff.reshape(-1))
        below = [int(np.count_nonzero(values < bound)) for bound in _HISTOGRAM_BOUNDS.tolist()]
    edges = [0, *below, differing]
    out: dict[str, int] = {"equal": equal}
    for k, name in enumerate(_HISTOGRAM_BINS):
        out[name] = edges[k + 1] - edges[k]
    return out

