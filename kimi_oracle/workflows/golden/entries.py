"""Golden entries: one grid's or one pixel case's recorded line (digest, grid, statistics, error)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import PlanError
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.workflows.golden.catalogue import PixelCase


# ---------------------------------------------------------------------------------------------
# entries


def grid_entry(width: int, height: int, size_class: str, config: PreprocessConfig) -> dict[str, Any]:
    """The golden record of one size: plan fields, or the checkpoint's error."""
    entry: dict[str, Any] = {"width": int(width), "height": int(height), "class": size_class}
    try:
        p = plan(width, height, config)
    except PlanError as exc:
        entry["error"] = f"PlanError: {exc}"
        return entry
    entry.update(
        new_w=p.new_w,
        new_h=p.new_h,
        pad_w=p.pad_w,
        pad_h=p.pad_h,
        grid_thw=list(p.grid_thw),
        num_tokens=p.num_tokens,
    )
    return entry


def _pixel_stats(values: np.ndarray) -> dict[str, Any]:
    flat = values.reshape(-1)
    stats: dict[str, Any] = {"patches": int(values.shape[0]) if values.ndim else 0, "dtype": str(values.dtype)}
    if flat.size and np.issubdtype(values.dtype, np.number):
        stats["min"] = float(flat.min())
        stats["max"] = float(flat.max())
        # float64 accumulation, rounded: stable across summation orders.
        stats["mean"] = round(float(flat.mean(dtype=np.float64)), 6)
    return stats


def digest(pixel_values: Any) -> str:
    """SHA-256 of the tensor's bytes in C order (float32 for every conforming pipeline)."""
    return hashlib.sha256(_to_numpy(pixel_values).tobytes()).hexdigest()


def _to_numpy(values: Any) -> np.ndarray:
    try:
        import torch

        if isinstance(values, torch.Tensor):
            values = values.detach().cpu().contiguous().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return np.ascontiguousarray(np.asarray(values))


def pixel_entry(case: PixelCase, result: PreprocessResult | BaseException) -> dict[str, Any]:
    """The golden record of one pixel case from a one-image result (or the error it raised)."""
    entry: dict[str, Any] = {
        "id": case.id,
        "params": case.params.to_dict(),
        "overrides": dict(case.overrides),
    }
    if isinstance(result, BaseException):
        entry["error"] = _error_text(result)
        return entry
    values = _to_numpy(result.pixel_values)
    grids = _to_numpy(result.grid_thws).reshape(-1, 3).tolist()
    # One image, one row; anything else is recorded as is so that the diff shows it.
    entry["grid_thw"] = [int(v) for v in grids[0]] if len(grids) == 1 else grids
    entry["sha256"] = hashlib.sha256(values.tobytes()).hexdigest()
    entry["stats"] = _pixel_stats(values)
    return entry


def _error_text(exc: BaseException) -> str:
    # kimi_oracle.oracle.candidates wraps a candidate's own exception (CandidateCrash): record the
    # original, so that a candidate rejecting an input exactly as the reference does matches.
    name = getattr(exc, "exc_type", None) or type(exc).__name__
    text = str(getattr(exc, "exc_message", None) or exc).strip()
    return f"{name}: {text}" if text else name
