"""Normalization variants: the (3, 256) table from uint8 levels to model values, in float32 arithmetic.

The checkpoint's own table is `reference.normalization_lut` (float64 steps stored as float32).
Each variant here is a `Steps.normalize`: config -> float32 (3, 256), read-only, cached.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig

# kind -> how the float32 table is computed from x (levels), m (mean), s (std), all float32 (3, 1)


def _scale_bias(x, m, s, mean, std):
    # x·scale + bias, two roundings (a multiply, then an add)
    return x * (1.0 / (255.0 * s)) + (-m / s)


def _fma(x, m, s, mean, std):
    # one rounding of the exact x·scale + bias (a product of two float32 is exact in float64)
    scale, bias = 1.0 / (255.0 * s), -m / s
    return (x.double() * scale.double() + bias.double()).float()


def _fma_float64_constants(x, m, s, mean, std):
    scale = torch.tensor([1.0 / (255.0 * v) for v in std], dtype=torch.float32).view(3, 1)
    bias = torch.tensor([-a / v for a, v in zip(mean, std)], dtype=torch.float32).view(3, 1)
    return (x.double() * scale.double() + bias.double()).float()


def _divide(x, m, s, mean, std):
    return (x / 255.0 - m) / s


def _reciprocal(x, m, s, mean, std):
    return (x / 255.0 - m) * (1.0 / s)


def _fused_255(x, m, s, mean, std):
    return (x - 255.0 * m) / (255.0 * s)


def _table(x, m, s, mean, std):
    # the checkpoint's table (as reference.normalization_lut), rounded to a half-precision type later
    u8 = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
    y = (u8 / 255.0).astype(np.float32)
    y -= np.array(mean)
    y *= 1.0 / np.array(std)
    return torch.from_numpy(np.ascontiguousarray(y.T))


_KINDS = {
    "scale-bias": _scale_bias, "fused": _fma, "fused-float64-constants": _fma_float64_constants,
    "divide": _divide, "reciprocal": _reciprocal, "fused-255": _fused_255,
    "bfloat16": _table, "float16": _table,
}


@functools.lru_cache(maxsize=128)
def float_lut(kind: str, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """The float32 (3, 256) table of normalization `kind` for these statistics (read-only)."""
    x = torch.arange(256, dtype=torch.float32).repeat(3, 1)
    m = torch.tensor(mean, dtype=torch.float32).view(3, 1)
    s = torch.tensor(std, dtype=torch.float32).view(3, 1)
    out = _KINDS[kind](x, m, s, mean, std)
    if kind in ("bfloat16", "float16"):
        out = out.to(getattr(torch, kind)).float()
    lut = np.ascontiguousarray(out.numpy())
    lut.setflags(write=False)
    return lut


def normalize_in(kind: str, doc: str) -> Callable[[PreprocessConfig], np.ndarray]:
    """A `Steps.normalize` computing the table as `kind` does; `doc` says where it occurs."""

    def normalize(config: PreprocessConfig) -> np.ndarray:
        return float_lut(kind, tuple(config.image_mean), tuple(config.image_std))

    normalize.__name__ = f"normalize_{kind.replace('-', '_')}"
    normalize.__doc__ = doc
    return normalize


NORMALIZE_SCALE_BIAS = normalize_in(
    "scale-bias", "float32 x·(1/(255·std)) + (−mean/std), two roundings: a hand-written torch/numpy kernel, "
    "the eager path of several serving engines")
NORMALIZE_FUSED = normalize_in(
    "fused", "the same with one rounding: torch.addcmul on CPU, a fused multiply-add in a GPU kernel")
NORMALIZE_FUSED_FLOAT64_CONSTANTS = normalize_in(
    "fused-float64-constants", "addcmul with scale and bias computed in float64 and stored as float32 "
    "(SGLang 0.5.23)")
NORMALIZE_DIVIDE = normalize_in(
    "divide", "float32 (x/255 − mean)/std: torchvision's to_dtype(scale=True) then normalize, HF's "
    "rescale then normalize in float32")
NORMALIZE_RECIPROCAL = normalize_in(
    "reciprocal", "float32 (x/255 − mean)·(1/std): a normalize that multiplies by a precomputed inverse")
NORMALIZE_FUSED_255 = normalize_in(
    "fused-255", "float32 (x − 255·mean)/(255·std): rescale folded into the statistics (DALI-style, "
    "fused preprocessing kernels)")
NORMALIZE_BFLOAT16 = normalize_in(
    "bfloat16", "the checkpoint's values rounded to bfloat16 and back (a bf16 model input cast early)")
NORMALIZE_FLOAT16 = normalize_in(
    "float16", "the checkpoint's values rounded to float16 and back (an fp16 model input cast early)")
