"""The oracle: compare a candidate's result with the reference's, and check its invariances.

`compare` runs the checks in a fixed order and names the first that fails:
`grid_mismatch` → `feature_length` → `shape_dtype` → `pixel_mismatch`. Later checks are
meaningless once an earlier one fails (rows cannot be matched to images when the grids differ).
`check_invariance` compares the candidate with itself: batch vs one-by-one, subsets,
permutations, and two identical runs. `self_check` compares a result with the candidate's own
plan (an engine that exposes its planner): the engine's own two errors. `accepts_invalid` is the
kind of a result returned for an input the checkpoint rejects (`judge.evaluate`); it is reported
but fails a run only under `--strict` (`REPORTED_ONLY`, `failing`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.pipelines.reference import normalization_lut

# The vocabulary (kinds, tolerance policies) lives in `oracle.kinds`, which imports no torch:
# the CLI parses options with it before anything runs.
from kimi_oracle.oracle.kinds import (  # noqa: F401 - re-exported: its public home was here
    ACCEPTS_INVALID,
    CHECKS,
    CRASH,
    FEATURE_LENGTH,
    FINDING_KINDS,
    GRID_MISMATCH,
    INVARIANCE,
    INVARIANCE_KINDS,
    PIXEL_MISMATCH,
    REPORTED_ONLY,
    SHAPE_DTYPE,
    TIMEOUT,
    Tolerance,
    ToleranceError,
    failing,
)

# Level differences are measured in float64 from float32 values: allow for that rounding.
_LEVEL_EPS = 1e-3


@dataclass
class Verdict:
    """The outcome of a comparison: the failed check (None when all passed), a message, stats."""

    check: str | None = None
    message: str = "all checks passed"
    stats: dict[str, Any] = field(default_factory=dict)
    # The two results that were compared (for diff images); not part of the JSON form.
    expected: PreprocessResult | None = field(default=None, repr=False, compare=False)
    actual: PreprocessResult | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return self.check is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"ok": self.ok, "check": self.check, "message": self.message, "stats": self.stats}


# Result normalization lives here (re-exported by `oracle.candidates`, whose public name it is)
# so that candidates can import the checks without a cycle.
def as_result(out: Any, spec: str = "candidate") -> PreprocessResult:
    """Normalize a candidate's return value, or raise CandidateError saying what was wrong."""
    if isinstance(out, PreprocessResult):
        pixel_values, grid_thws = out.pixel_values, out.grid_thws
    elif isinstance(out, (tuple, list)) and len(out) == 2:
        pixel_values, grid_thws = out
    elif hasattr(out, "pixel_values") and hasattr(out, "grid_thws"):
        pixel_values, grid_thws = out.pixel_values, out.grid_thws
    else:
        raise CandidateError(
            f"candidate {spec!r} returned {_describe(out)}; expected a PreprocessResult or a "
            "(pixel_values, grid_thws) pair"
        )
    return PreprocessResult(_tensor(pixel_values, spec, "pixel_values"), _tensor(grid_thws, spec, "grid_thws"))


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__module__}.{type(value).__qualname__}" if value is not None else "None"


def _tensor(value: Any, spec: str, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise CandidateError(f"candidate {spec!r}: {name} is an object array, expected numbers")
        return torch.from_numpy(np.ascontiguousarray(value))
    raise CandidateError(f"candidate {spec!r}: {name} is {_describe(value)}, expected a torch tensor or NumPy array")


def _coerce(result: Any) -> PreprocessResult:
    if isinstance(result, PreprocessResult):
        return result
    return as_result(result)


_INT_DTYPES = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})


def _grid_rows(grids: torch.Tensor) -> list[tuple[Any, ...]] | None:
    """Grid rows as Python numbers, or None when the table does not have (n, 3) shape."""
    if grids.ndim != 2 or grids.shape[1] != 3:
        return None
    if grids.dtype in _INT_DTYPES:  # tolist() gives ints already
        return [tuple(row) for row in grids.tolist()]
    rows = []
    for row in grids.tolist():
        rows.append(tuple(int(v) if float(v).is_integer() else v for v in row))
    return rows


def _rows_of(grid: Sequence[Any]) -> int:
    t, h, w = grid
    return int(t) * int(h) * int(w)


def update_digest(h: Any, result: PreprocessResult) -> None:
    """Feed a result's grids and pixel values (shape, dtype and bytes) to a hashlib object: equal
    digests for bit-identical results (`same_output`)."""
    for t in (result.grid_thws, result.pixel_values):
        t = torch.as_tensor(t).detach().cpu().contiguous()
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def same_output(a: Any, b: Any) -> bool:
    """Two results with the same dtypes, shapes and bytes, pixel values and grids alike (NaN
    payloads and signed zeros told apart): bit-identical outputs."""
    if not isinstance(a, PreprocessResult) or not isinstance(b, PreprocessResult):
        return False
    for x, y in ((a.pixel_values, b.pixel_values), (a.grid_thws, b.grid_thws)):
        x, y = torch.as_tensor(x).detach().cpu(), torch.as_tensor(y).detach().cpu()
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.numel() and not torch.equal(x.contiguous().reshape(-1).view(torch.uint8),
                                         y.contiguous().reshape(-1).view(torch.uint8)):
            return False
    return True


def compare(
    expected: Any,
    actual: Any,
    config: PreprocessConfig,
    tolerance: "str | Tolerance" = "exact",
    *,
    sizes: Sequence[tuple[int, int]] | None = None,
) -> Verdict:
    """Check `actual` against `expected` (the reference's result for the same images).

    `sizes` are the input images' (width, height), used to map a differing pixel back to the
    original image; without them the report gives padded-image coordinates only.
    """
    exp = _coerce(expected)
    act = _coerce(actual)
    verdict = _compare(exp, act, config, Tolerance.parse(tolerance), sizes)
    verdict.expected, verdict.actual = exp, act
    return verdict


def _compare(
    exp: PreprocessResult,
    act: PreprocessResult,
    config: PreprocessConfig,
    tol: Tolerance,
    sizes: Sequence[tuple[int, int]] | None,
) -> Verdict:
    exp_grids = _grid_rows(exp.grid_thws)
    if exp_grids is None:
        raise ValueError(f"expected grid table has shape {tuple(exp.grid_thws.shape)}")
    n = len(exp_grids)
    plans: list[ResizePlan | None] = [None] * n
    if sizes is not None:
        if len(sizes) != n:
            raise ValueError(f"{len(sizes)} sizes given for {n} images")
        plans = [plan(w, h, config) for w, h in sizes]

    # 1. grids, per image
    act_grids = _grid_rows(act.grid_thws)
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

    # 2. feature length: the rows produced must match the advertised grids
    total = sum(_rows_of(g) for g in act_grids)
    rows = int(act.pixel_values.shape[0]) if act.pixel_values.ndim >= 1 else None
    if rows != total:
        return Verdict(FEATURE_LENGTH, f"grids advertise {total} patch rows but pixel_values has {rows}", {
            "advertised_rows": total,
            "produced_rows": rows,
            "rows_per_image": [_rows_of(g) for g in act_grids],
            "pixel_values_shape": list(act.pixel_values.shape),
        })

    # 3. shapes and dtypes
    want_shape = [total, 3, config.patch_size, config.patch_size]
    problems = shape_dtype_problems(act, config, tol)
    if problems:
        return Verdict(SHAPE_DTYPE, "; ".join(problems), {
            "pixel_values_shape": list(act.pixel_values.shape),
            "pixel_values_dtype": str(act.pixel_values.dtype),
            "grid_thws_dtype": str(act.grid_thws.dtype),
            "expected_shape": want_shape,
        })

    # 4. pixels
    stats = pixel_stats(exp.pixel_values, act.pixel_values, exp_grids, config, tol, plans, sizes)
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


def levels_of(values: torch.Tensor, config: PreprocessConfig) -> np.ndarray:
    """Undo the normalization: float64 uint8 levels of an (N, 3, p, p) tensor (per channel)."""
    offset, slope = _level_params(config)
    v = values.detach().cpu().float().numpy().astype(np.float64)
    return (v - offset.reshape(1, 3, 1, 1)) / slope.reshape(1, 3, 1, 1)


def levels_at(values: torch.Tensor, mask: np.ndarray, config: PreprocessConfig) -> np.ndarray:
    """`levels_of(values, config)[mask]` for a boolean (N, 3, p, p) mask: the same float64
    operations on each value, in the same (C) order; only the masked values are computed when
    they are few."""
    if mask.sum() * 4 > mask.size:
        return levels_of(values, config)[mask]
    v = values.detach().cpu().float().numpy()
    offset, slope = _level_params(config)
    flat = np.flatnonzero(mask)
    channel = (flat // (v.shape[2] * v.shape[3])) % 3
    return (v.reshape(-1)[flat].astype(np.float64) - offset[channel]) / slope[channel]


# Level offsets, steps and divisors by normalization (mean, std): all they depend on (drawn
# configurations differ in much else, so a cache by configuration would miss).
_LEVEL_PARAMS: dict[tuple, tuple[np.ndarray, np.ndarray, "np.ndarray | np.float64"]] = {}


def _level_entry(config: PreprocessConfig) -> tuple[np.ndarray, np.ndarray, "np.ndarray | np.float64"]:
    key = (tuple(config.image_mean), tuple(config.image_std))
    entry = _LEVEL_PARAMS.get(key)
    if entry is None:
        lut = normalization_lut(config).astype(np.float64)
        offset, slope = lut[:, 0].copy(), (lut[:, 255] - lut[:, 0]) / 255.0
        slopes = np.abs(slope).reshape(1, 3, 1, 1)
        # One scalar divisor when the three channels share their step: dividing by it gives
        # the same values, faster.
        divisor = slopes.flat[0] if (slopes == slopes.flat[0]).all() else slopes
        for array in (offset, slope, slopes):
            array.flags.writeable = False
        if len(_LEVEL_PARAMS) >= 64:
            _LEVEL_PARAMS.clear()
        entry = _LEVEL_PARAMS[key] = (offset, slope, divisor)
    return entry


def _level_params(config: PreprocessConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per channel, the normalized value of level 0 and the (signed) step of one level, float64
    (read-only)."""
    offset, slope, _ = _level_entry(config)
    return offset, slope


def _level_of(value: float, channel: int, config: PreprocessConfig) -> float:
    """`levels_of` for one value of one channel (the same float64 operations)."""
    offset, slope = _level_params(config)
    return float((np.float64(np.float32(value)) - offset[channel]) / slope[channel])


def _level_slopes(config: PreprocessConfig) -> np.ndarray:
    return np.abs(_level_params(config)[1]).reshape(1, 3, 1, 1)


def _level_divisor(config: PreprocessConfig) -> "np.ndarray | np.float64":
    """`_level_slopes`, as one scalar when the three channels share their step."""
    return _level_entry(config)[2]


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
) -> dict[str, Any]:
    """Level differences, the share of differing values and the worst location, per policy.

    Level differences are |actual - expected| in float64 over the channel's level step, a NaN
    counted as an infinite difference; the mean is over the finite ones."""
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
    # One float64 buffer, operated on in place: the values of np.abs(a64 - e64) / slopes.
    diff = a.astype(np.float64)
    np.subtract(diff, e, out=diff)
    np.abs(diff, out=diff)
    np.divide(diff, _level_divisor(config), out=diff)
    values = int(diff.size)
    top = float(diff.max()) if values else 0.0
    if math.isnan(top):  # max propagates NaN: a NaN difference counts as infinite
        diff[np.isnan(diff)] = np.inf
        top = float(diff.max())
    if tol.kind == "levels":
        policy_fail = diff > tol.levels + _LEVEL_EPS
    # A finite largest difference means every difference (and every actual value) is finite.
    all_finite = math.isfinite(top)
    if all_finite:
        mean = _mean(diff.reshape(-1)) if values else 0.0
        non_finite = 0
    else:
        finite = diff[np.isfinite(diff)]
        mean = float(finite.mean()) if finite.size else 0.0
        non_finite = int(np.count_nonzero(~np.isfinite(a)))
    differing = int(np.count_nonzero(bitwise))
    stats: dict[str, Any] = {
        "tolerance": str(tol),
        "values": values,
        "differing": differing,
        "share_differing": differing / values if values else 0.0,
        "failing": differing if policy_fail is bitwise else int(np.count_nonzero(policy_fail)),
        "max_level_diff": top,
        "mean_level_diff": mean,
        "non_finite": non_finite,
        "histogram": _histogram(diff, bitwise),
    }
    if differing:
        # ulps between differing values of the same sign: their int32 difference cannot overflow,
        # and equal values (0 apart) change no maximum of differing ones (>= 1 apart).
        same_sign = (a_bits ^ e_bits) >= 0
        ulps = np.where(same_sign, a_bits - e_bits, 0)
        top_ulp = int(np.abs(ulps, out=ulps).max())
        stats["max_ulp"] = top_ulp if top_ulp > 0 else None
    offsets = [0]
    for g in grids:
        offsets.append(offsets[-1] + _rows_of(g))
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
    stats["per_image"] = per_image
    if stats["failing"]:
        worst = max(per_image, key=lambda r: (r["failing"] > 0, r["max_level_diff"], r["failing"]))
        i = worst["image"]
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
        stats["worst"] = loc
    return stats


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


def _histogram(diff: np.ndarray, bitwise: np.ndarray) -> dict[str, int]:
    """Counts of equal values and of differing ones per level-difference bin (`diff` holds no NaN:
    `pixel_stats` counts a NaN difference as infinite)."""
    differing = np.compress(bitwise.reshape(-1), diff.reshape(-1))
    below = [int(np.count_nonzero(differing < bound)) for bound in _HISTOGRAM_BOUNDS.tolist()]
    edges = [0, *below, int(differing.size)]
    out: dict[str, int] = {"equal": int(bitwise.size - differing.size)}
    for k, name in enumerate(_HISTOGRAM_BINS):
        out[name] = edges[k + 1] - edges[k]
    return out


def locate(image: int, row: int, channel: int, py: int, px: int, grid: Sequence[int], patch: int,
           p: ResizePlan | None, size: tuple[int, int] | None = None) -> dict[str, Any]:
    """Where patch row `row`, (channel, py, px) of one image lies: patch, resized and original pixel."""
    _, gh, gw = (int(v) for v in grid)
    gy, gx = divmod(row, gw)
    y, x = gy * patch + py, gx * patch + px
    out: dict[str, Any] = {
        "image": image,
        "patch": row,
        "patch_yx": [gy, gx],
        "channel": "RGB"[channel] if 0 <= channel < 3 else channel,
        "pixel_in_patch": [px, py],
        "resized_xy": [x, y],
    }
    if p is not None:
        out["in_padding"] = bool(x >= p.new_w or y >= p.new_h)
        if not out["in_padding"] and size is not None:
            out["original_xy_range"] = [list(source_range(x, p.new_w, size[0])), list(source_range(y, p.new_h, size[1]))]
    return out


def source_range(i: int, out_size: int, in_size: int) -> tuple[int, int]:
    """Original-pixel span [lo, hi] that output pixel i of a resize from in_size to out_size covers."""
    if out_size == in_size:
        return i, i
    scale = in_size / out_size
    support = 2.0 * max(scale, 1.0)  # bicubic
    center = (i + 0.5) * scale
    lo = max(int(center - support + 0.5), 0)
    hi = min(int(center + support + 0.5), in_size) - 1
    return lo, max(lo, hi)


def _describe_location(loc: dict[str, Any]) -> str:
    if not loc:
        return "unknown"
    text = (f"image {loc['image']}, patch {loc['patch']} (row {loc['patch_yx'][0]}, col {loc['patch_yx'][1]}), "
            f"channel {loc['channel']}, resized pixel (x={loc['resized_xy'][0]}, y={loc['resized_xy'][1]})")
    if loc.get("in_padding"):
        text += " in the padding"
    elif "original_xy_range" in loc:
        (x0, x1), (y0, y1) = loc["original_xy_range"]
        xs = f"{x0}" if x0 == x1 else f"{x0}..{x1}"
        ys = f"{y0}" if y0 == y1 else f"{y0}..{y1}"
        text += f" from original x={xs}, y={ys}"
    if "expected_level" in loc:
        diff = loc.get("level_diff")
        if isinstance(diff, (int, float)) and is_sub_level(diff) and "expected_value" in loc:
            # Under one level both round to the same level: show the floats and their distance.
            ulp = loc.get("ulp_diff")
            text += (f": expected {loc['expected_value']:.9g}, got {loc['actual_value']:.9g} (level "
                     f"{loc['expected_level']:g} both; {diff:.3g} levels"
                     + (f", {ulp} ulp apart)" if ulp is not None else ")"))
        else:
            text += f": expected level {loc['expected_level']:g}, got {loc['actual_level']}"
    return text


def describe_location(loc: dict[str, Any]) -> str:
    """One readable line for a location dict from `pixel_stats`."""
    return _describe_location(loc)


# ---------------------------------------------------------------------------------------------
# the engine's self-check: a result against the candidate's own plan


def self_check(result: PreprocessResult, own_plans: Sequence[ResizePlan],
               sizes: Sequence[tuple[int, int]] | None = None) -> Verdict:
    """A candidate's result against the plans its own planner advertised for the same images
    (the grids that fixed the prompt's token span): the serving engine's own two checks.

    `grid_mismatch`: the grids produced differ from the advertised ones ("deferred GPU
    preprocessing produced wrong grids"); `feature_length`: the rows produced differ from Σ t·h·w
    of the advertised grids ("deferred feature length does not match image grids").
    """
    result = _coerce(result)
    advertised = [tuple(int(v) for v in p.grid_thw) for p in own_plans]
    produced = _grid_rows(result.grid_thws)
    where = (lambda i: f"image {i} ({sizes[i][0]}x{sizes[i][1]})") if sizes else (lambda i: f"image {i}")
    if produced is None or len(produced) != len(advertised) or any(
            tuple(a) != tuple(b) for a, b in zip(produced, advertised)):
        # `mismatched` as `compare` writes it (expected: what the planner advertised).
        mismatched = [] if produced is None else [
            {"image": i, "expected": list(e), "actual": list(a), "size": list(sizes[i]) if sizes else None}
            for i, (a, e) in enumerate(zip(produced, advertised)) if tuple(a) != tuple(e)]
        if produced is None or len(produced) != len(advertised):
            detail = (f"{len(produced) if produced is not None else 'no'} grids produced for "
                      f"{len(advertised)} advertised")
        else:
            first = mismatched[0]["image"]
            detail = f"{where(first)}: grid {tuple(produced[first])} produced, {advertised[first]} advertised"
        return Verdict(GRID_MISMATCH, "self-check: deferred GPU preprocessing produced wrong grids: " + detail, {
            "self_check": True,
            "advertised_grids": [list(g) for g in advertised],
            "produced_grids": [list(g) for g in produced] if produced is not None else None,
            "mismatched": mismatched,
        })
    want = sum(_rows_of(g) for g in advertised)
    rows = int(result.pixel_values.shape[0]) if result.pixel_values.ndim >= 1 else None
    if rows != want:
        return Verdict(FEATURE_LENGTH, f"self-check: deferred feature length does not match image grids: "
                       f"the advertised grids give {want} patch rows, pixel_values has {rows}", {
                           "self_check": True, "advertised_rows": want, "produced_rows": rows,
                           "rows_per_image": [_rows_of(g) for g in advertised]})
    return Verdict(None, "self-check passed", {"self_check": True})


# ---------------------------------------------------------------------------------------------
# invariances


def _same(a: PreprocessResult, b: PreprocessResult) -> tuple[bool, str]:
    if a.grid_thws.shape != b.grid_thws.shape or not torch.equal(a.grid_thws.to(torch.int64), b.grid_thws.to(torch.int64)):
        return False, f"grids {a.grid_thws.tolist()} vs {b.grid_thws.tolist()}"
    if a.pixel_values.shape != b.pixel_values.shape or a.pixel_values.dtype != b.pixel_values.dtype:
        return False, (f"pixel_values {list(a.pixel_values.shape)} {a.pixel_values.dtype} vs "
                       f"{list(b.pixel_values.shape)} {b.pixel_values.dtype}")
    pa = a.pixel_values.contiguous()
    pb = b.pixel_values.contiguous()
    if pa.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[pa.element_size()]
        diff = pa.view(width) != pb.view(width)
    else:
        diff = pa != pb
    if bool(diff.any()):
        rows = torch.nonzero(diff.reshape(diff.shape[0], -1).any(dim=1)).flatten().tolist() if diff.ndim else []
        return False, f"{int(diff.sum())} values differ, in patch rows {rows[:8]}{'...' if len(rows) > 8 else ''}"
    return True, ""


def _select(result: PreprocessResult, indices: Sequence[int]) -> PreprocessResult:
    parts = [result.image(i) for i in indices]
    return PreprocessResult(
        torch.cat([r.pixel_values for r in parts], dim=0),
        torch.cat([r.grid_thws for r in parts], dim=0),
    )


def invariance_plan(n: int) -> list[tuple[str, tuple[int, ...]]]:
    """The deterministic list of (kind, image indices) batches `check_invariance` runs for n images."""
    out: list[tuple[str, tuple[int, ...]]] = [("determinism", tuple(range(n)))]
    if n >= 2:
        out += [("batch_vs_single", (i,)) for i in range(n)]
        for k in range(2, n):
            out += [("subset", combo) for combo in itertools.combinations(range(n), k)]
        out.append(("permutation", tuple(reversed(range(n)))))
        if n >= 3:
            out.append(("permutation", tuple(range(1, n)) + (0,)))
    return out


def check_invariance(
    run: Callable[[list[Image.Image]], PreprocessResult],
    images: Sequence[Image.Image],
    *,
    full: PreprocessResult | None = None,
    kinds: Sequence[str] = INVARIANCE_KINDS,
    config: PreprocessConfig | None = None,
) -> Verdict:
    """Candidate-only checks: two runs agree, a batch equals its images one by one, any subset
    equals the matching rows of the full batch, a permuted batch gives permuted rows (bitwise)."""
    images = list(images)
    if full is None:
        full = _coerce(run(images))
    n = len(images)
    if _grid_rows(full.grid_thws) is None or len(full.grid_thws) != n or full.patch_offsets()[-1] != full.pixel_values.shape[0]:
        return Verdict(INVARIANCE, "the full batch's grids do not describe its rows; invariances undefined",
                       {"kind": "batch_vs_single"})
    for kind, indices in invariance_plan(n):
        if kind not in kinds:
            continue
        got = _coerce(run([images[i] for i in indices]))
        want = full if kind == "determinism" else _select(full, indices)
        same, why = _same(want, got)
        if not same:
            label = {
                "determinism": "a second run of the same batch differs",
                "batch_vs_single": f"image {indices[0]} alone differs from its rows in the batch of {n}",
                "subset": f"the sub-batch {list(indices)} differs from its rows in the batch of {n}",
                "permutation": f"the batch permuted to {list(indices)} does not give permuted rows",
            }[kind]
            stats: dict[str, Any] = {"kind": kind, "indices": list(indices), "batch_size": n, "detail": why}
            if config is not None and want.pixel_values.shape == got.pixel_values.shape:
                stats.update(difference_magnitude(want, got, config))
                why += (f" (max {stats['max_level_diff']:.3g} levels"
                        + (f", {stats['max_ulp']} ulp)" if stats.get("max_ulp") is not None else ")"))
            return Verdict(INVARIANCE, f"{kind}: {label}: {why}", stats, expected=want, actual=got)
    return Verdict(None, "invariances hold", {"batch_size": n})


__all__ = [
    "ACCEPTS_INVALID",
    "CHECKS",
    "CRASH",
    "FEATURE_LENGTH",
    "FINDING_KINDS",
    "GRID_MISMATCH",
    "INVARIANCE",
    "INVARIANCE_KINDS",
    "PIXEL_MISMATCH",
    "REPORTED_ONLY",
    "SHAPE_DTYPE",
    "TIMEOUT",
    "Tolerance",
    "ToleranceError",
    "Verdict",
    "as_result",
    "check_invariance",
    "compare",
    "describe_location",
    "difference_magnitude",
    "failing",
    "invariance_plan",
    "levels_at",
    "levels_of",
    "locate",
    "pixel_stats",
    "same_output",
    "self_check",
    "source_range",
    "ulp_distance",
    "update_digest",
]
