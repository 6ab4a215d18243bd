"""Levels: normalized values mapped back, per channel, to the 8-bit input's levels (float64)."""

from __future__ import annotations

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.pipelines.reference import normalization_lut

# Level differences are measured in float64 from float32 values: allow for that rounding.
_LEVEL_EPS = 1e-3


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

