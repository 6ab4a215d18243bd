"""Resampling variants: 8-bit images resized by another resampler than Pillow's fixed-point bicubic.

Each is a `Steps.resample`: uint8 (h, w, c) -> uint8 (h', w', c) at `size` = (w', h'). The
checkpoint's own is `reference.pillow_resample` (Pillow's BICUBIC, a = −0.5, antialiased by
widening the filter when downscaling, 8-bit fixed point, two passes).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

Size = tuple[int, int]


def _round(y: torch.Tensor, rounding: str) -> torch.Tensor:
    if rounding == "round":
        y = torch.round(y)  # half to even
    elif rounding == "half-up":
        y = torch.floor(y + 0.5)
    return y.clamp(0, 255).to(torch.uint8)  # "truncate": clamped, then truncated (= floor)


def _torch_float(arr: np.ndarray, size: Size, mode: str, *, antialias: bool, rounding: str) -> np.ndarray:
    x = torch.from_numpy(np.array(arr.transpose(2, 0, 1), dtype=np.float32))[None]
    y = F.interpolate(x, size=(size[1], size[0]), mode=mode, align_corners=False, antialias=antialias)
    return _round(y, rounding)[0].permute(1, 2, 0).numpy()


def torch_bicubic_antialias(arr: np.ndarray, size: Size) -> np.ndarray:
    """float32 `F.interpolate` bicubic with antialias (a = −0.5), rounded half to even, clamped:
    a torch reimplementation of Pillow's filter (SGLang 0.5.23's GPU resize, HF fast processors
    on float tensors)."""
    return _torch_float(arr, size, "bicubic", antialias=True, rounding="round")


def torch_bicubic_no_antialias(arr: np.ndarray, size: Size) -> np.ndarray:
    """float32 `F.interpolate` bicubic without antialias (a = −0.75, the arithmetic of OpenCV's
    INTER_CUBIC in float), rounded half to even, clamped: kernels that port cv2.resize or
    call interpolate with its defaults."""
    return _torch_float(arr, size, "bicubic", antialias=False, rounding="round")


def torch_bicubic_antialias_truncated(arr: np.ndarray, size: Size) -> np.ndarray:
    """float32 bicubic with antialias, clamped and truncated (`.to(torch.uint8)` without a round)."""
    return _torch_float(arr, size, "bicubic", antialias=True, rounding="truncate")


def torch_bicubic_truncated(arr: np.ndarray, size: Size) -> np.ndarray:
    """float32 bicubic without antialias, clamped and truncated."""
    return _torch_float(arr, size, "bicubic", antialias=False, rounding="truncate")


def torch_bicubic_antialias_half_up(arr: np.ndarray, size: Size) -> np.ndarray:
    """float32 bicubic with antialias, rounded half up (`floor(y + 0.5)`, CUDA kernels' idiom)."""
    return _torch_float(arr, size, "bicubic", antialias=True, rounding="half-up")


def _torch_uint8(arr: np.ndarray, size: Size, mode: str) -> np.ndarray:
    c = arr.shape[2]
    # torch 2.13's 3-channel uint8 kernel fails an internal assert on 1x1 outputs and crashed the
    # process on a (146, 48) -> (28, 9) bilinear resize in a long run; run as 4 channels (a zero
    # band added) it gave the same bytes on 2995 random shapes and sizes (measured).
    x = np.zeros((4 if c == 3 else c, *arr.shape[:2]), dtype=np.uint8)
    x[:c] = arr.transpose(2, 0, 1)
    y = F.interpolate(torch.from_numpy(x)[None], size=(size[1], size[0]), mode=mode, align_corners=False,
                      antialias=True)
    return y[0, :c].permute(1, 2, 0).contiguous().numpy()


def torch_uint8_bicubic_antialias(arr: np.ndarray, size: Size) -> np.ndarray:
    """torch's uint8 antialiased bicubic (`F.interpolate` on a uint8 tensor, its own fixed-point
    path): what `torchvision.transforms.v2.functional.resize(..., BICUBIC, antialias=True)`
    runs on uint8 image tensors (processors built on torchvision's tensor transforms)."""
    return _torch_uint8(arr, size, "bicubic")


def torch_uint8_bilinear_antialias(arr: np.ndarray, size: Size) -> np.ndarray:
    """torch's uint8 antialiased bilinear: torchvision's resize with its default BILINEAR
    interpolation on uint8 tensors."""
    return _torch_uint8(arr, size, "bilinear")


def _pillow(arr: np.ndarray, size: Size, resample: Image.Resampling) -> np.ndarray:
    bands = [Image.frombytes("L", (arr.shape[1], arr.shape[0]), np.ascontiguousarray(arr[..., c]).tobytes())
             .resize(size, resample) for c in range(arr.shape[2])]
    return np.stack([np.asarray(b) for b in bands], axis=-1)


def pillow_bilinear(arr: np.ndarray, size: Size) -> np.ndarray:
    """Pillow's BILINEAR (a processor whose `resample` default is bilinear, e.g. a config
    without `resample`)."""
    return _pillow(arr, size, Image.Resampling.BILINEAR)


def pillow_nearest(arr: np.ndarray, size: Size) -> np.ndarray:
    """Pillow's NEAREST (a `resample=0` in a processor config)."""
    return _pillow(arr, size, Image.Resampling.NEAREST)


# ---------------------------------------------------------------------------------------------
# separable filters with public arithmetic, in float64, rounded half to even


def _cubic(a: float) -> Callable[[np.ndarray], np.ndarray]:
    def k(x: np.ndarray) -> np.ndarray:
        x = np.abs(x)
        near = ((a + 2) * x - (a + 3)) * x * x + 1
        far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return np.where(x < 1, near, np.where(x < 2, far, 0.0))
    return k


Taps = tuple[np.ndarray, np.ndarray]  # (n_out, K) input indices and their weights


def _band(n_in: int, n_out: int, reach: float) -> tuple[np.ndarray, np.ndarray, float]:
    # each output's input indices within `reach` input pixels of its centre (clipped), the centres
    scale = n_in / n_out
    centres = (np.arange(n_out) + 0.5) * scale
    lo = np.clip(np.floor(centres - reach).astype(np.int64), 0, n_in - 1)
    k = int(np.ceil(2 * reach)) + 2
    idx = np.minimum(lo[:, None] + np.arange(k)[None, :], n_in - 1)
    valid = (lo[:, None] + np.arange(k)[None, :]) < n_in
    return idx, valid, scale


def _filter_taps(n_in: int, n_out: int, kernel: Callable[[np.ndarray], np.ndarray], support: float) -> Taps:
    # Pillow's placement (centre (i + 0.5)·scale, the filter widened by the scale when downscaling)
    ss = max(n_in / n_out, 1.0)
    idx, valid, scale = _band(n_in, n_out, support * ss)
    centres = (np.arange(n_out) + 0.5) * scale
    w = np.where(valid, kernel((idx + 0.5 - centres[:, None]) / ss), 0.0)
    return idx, w / w.sum(axis=1, keepdims=True)


def _area_taps(n_in: int, n_out: int) -> Taps:
    # OpenCV INTER_AREA: the overlap of each output pixel's source interval with each input pixel
    scale = n_in / n_out
    if scale <= 1.0:  # upscaling: OpenCV falls back to a linear interpolation
        return _filter_taps(n_in, n_out, lambda x: np.maximum(0.0, 1 - np.abs(x)), 1.0)
    idx, valid, _ = _band(n_in, n_out, scale / 2 + 1)
    left = (np.arange(n_out) * scale)[:, None]
    w = np.clip(np.minimum(left + scale, idx + 1) - np.maximum(left, idx), 0.0, None) / scale
    return idx, np.where(valid, w, 0.0)


def _along(x: np.ndarray, taps: Taps, axis: int) -> np.ndarray:
    idx, w = taps
    shape = [1] * x.ndim
    shape[axis] = idx.shape[0]
    out = np.zeros(x.shape[:axis] + (idx.shape[0],) + x.shape[axis + 1:])
    for k in range(idx.shape[1]):
        out += w[:, k].reshape(shape) * np.take(x, idx[:, k], axis=axis)
    return out


def _separable(arr: np.ndarray, size: Size, taps: Callable[[int, int], Taps]) -> np.ndarray:
    h, w, _ = arr.shape
    y = _along(arr.astype(np.float64), taps(h, size[1]), 0)
    y = _along(y, taps(w, size[0]), 1)
    return np.clip(np.rint(y), 0, 255).astype(np.uint8)


def opencv_area(arr: np.ndarray, size: Size) -> np.ndarray:
    """OpenCV's INTER_AREA in float (pixel-area averaging when downscaling, linear when
    upscaling), rounded: processors that resize with cv2 to avoid aliasing."""
    return _separable(arr, size, _area_taps)


def bicubic_a075_antialias(arr: np.ndarray, size: Size) -> np.ndarray:
    """Pillow's antialiased placement with the a = −0.75 cubic (Keys' OpenCV/torch constant) in
    float: ports of Pillow's filter that took the constant from cv2/torch."""
    return _separable(arr, size, lambda n_in, n_out: _filter_taps(n_in, n_out, _cubic(-0.75), 2.0))

