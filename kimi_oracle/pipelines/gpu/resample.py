"""Pillow-exact resampling tables and pass order, computed on the host (spec §4).

Everything here is plain Python/NumPy: the device kernels only consume these tables. The
NumPy emulations at the bottom are an executable statement of the arithmetic the kernels
reproduce; the tests check them against `PIL.Image.resize` and the kernels against them.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
import PIL

from kimi_oracle.core.errors import BackendError
from kimi_oracle.pipelines.gpu import layout

# Pillow versions whose resampling arithmetic (tables, pass order, NEAREST affine, conversions)
# was verified against the installed library, bit for bit, by tests/pipelines/gpu/test_resample.py.
VERIFIED_PILLOW = ("13.0",)

PRECISION_BITS = int(layout.PRECISION_BITS)  # Pillow's 8-bit path: 32 - 8 - 2
BICUBIC_SUPPORT = 2.0

Pass = Literal["h", "v"]


def pillow_version() -> str:
    """The installed Pillow's version string."""
    return str(PIL.__version__)


def check_pillow() -> None:
    """Raise BackendError unless the installed Pillow's arithmetic is one we verified."""
    version = pillow_version()
    if not any(version == v or version.startswith(v + ".") for v in VERIFIED_PILLOW):
        raise BackendError(
            f"Pillow {version} is installed, but the GPU pipeline reproduces the resampling "
            f"arithmetic of Pillow {', '.join(VERIFIED_PILLOW)} only (pass order and tables "
            "differ between releases); install pillow>=13.0,<13.1"
        )


def _bicubic(x: float) -> float:
    # Keys' cubic with a = -0.5, evaluated in the same operation order as Pillow (doubles).
    a = -0.5
    if x < 0.0:
        x = -x
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


@functools.lru_cache(maxsize=512)
def bicubic_coeffs(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xmin int32 (out,), count int32 (out,), weights float64 (out, ksize)) for one axis."""
    in0 = 0.0
    in1 = float(np.float32(in_size))  # Pillow passes the box edges as C floats
    scale = (in1 - in0) / out_size
    filterscale = max(scale, 1.0)
    support = BICUBIC_SUPPORT * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    inv = 1.0 / filterscale
    xmin_a = np.zeros(out_size, dtype=np.int32)
    cnt_a = np.zeros(out_size, dtype=np.int32)
    kk = np.zeros((out_size, ksize), dtype=np.float64)
    for i in range(out_size):
        center = in0 + (i + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        ws = [_bicubic((j + xmin - center + 0.5) * inv) for j in range(xmax)]
        total = 0.0
        for w in ws:
            total += w
        if total != 0.0:
            ws = [w / total for w in ws]
        kk[i, :xmax] = ws
        xmin_a[i] = xmin
        cnt_a[i] = xmax
    for arr in (xmin_a, cnt_a, kk):
        arr.setflags(write=False)
    return xmin_a, cnt_a, kk


@functools.lru_cache(maxsize=512)
def coeffs_8bit(in_size: int, out_size: int) -> np.ndarray:
    """int32 (out, ksize): the weights scaled by 2**22, rounded half away from zero."""
    _, _, kk = bicubic_coeffs(in_size, out_size)
    scaled = kk * (1 << PRECISION_BITS)
    # C's (int)(x ± 0.5) truncates toward zero: round half away from zero.
    out = np.where(kk < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int32)
    out.setflags(write=False)
    return out


# Pillow 13.0 resamples the a and b bands of "LAB" as signed bytes (measured: the emulation
# matches Image.resize only with this offset). Flipping the top bit maps signed order onto
# unsigned order, so the unsigned kernels run on `value ^ mask` and the mask is undone after.
_DOMAIN_XOR = {"LAB": (0, 128, 128)}


def domain_xor(mode: str) -> np.ndarray | None:
    """uint8 per-band XOR mask that turns `mode`'s bytes into the unsigned resampling domain."""
    mask = _DOMAIN_XOR.get(mode)
    return None if mask is None else np.array(mask, dtype=np.uint8)


def pass_order(in_w: int, in_h: int, out_w: int, out_h: int) -> tuple[Pass, ...]:
    """The separable passes Pillow 13.0 runs, in order ('h' horizontal, 'v' vertical)."""
    dw, dh = in_w - out_w, in_h - out_h
    need_h, need_v = out_w != in_w, out_h != in_h
    if need_h and need_v:
        return ("v", "h") if (dh > 0 and dh > 2 * dw) else ("h", "v")
    if need_h:
        return ("h",)
    if need_v:
        return ("v",)
    return ()


@functools.lru_cache(maxsize=512)
def nearest_index(in_size: int, out_size: int) -> np.ndarray:
    """int32 (out,): Pillow's NEAREST source index per output index, -1 where none (zeros)."""
    # _imaging.c runs NEAREST as an affine scale: a = (float(in) / out) in double precision,
    # start at a/2, then the coordinate is *accumulated* (+= a) per pixel, floored via (int).
    a = float(np.float32(in_size)) / out_size
    steps = np.full(out_size, a, dtype=np.float64)
    steps[0] = 0.0 + a * 0.5
    coords = np.cumsum(steps)  # sequential left-to-right sum, as the C loop does
    idx = np.where(coords < 0.0, -1, np.trunc(coords)).astype(np.int64)
    idx = np.where((idx >= 0) & (idx < in_size), idx, -1).astype(np.int32)
    idx.setflags(write=False)
    return idx


# --------------------------------------------------------------------------------------------
# NumPy emulations (executable spec; used by the tests, never by the device pipeline)
# --------------------------------------------------------------------------------------------


def _pass_u8(arr: np.ndarray, axis: int, out_size: int) -> np.ndarray:
    in_size = arr.shape[axis]
    xmin, cnt, _ = bicubic_coeffs(in_size, out_size)
    k = coeffs_8bit(in_size, out_size)
    a = np.moveaxis(arr.astype(np.int64), axis, 0)
    acc = np.full((out_size,) + a.shape[1:], 1 << (PRECISION_BITS - 1), dtype=np.int64)
    for j in range(k.shape[1]):
        src = np.minimum(xmin + j, in_size - 1)
        w = np.where(j < cnt, k[:, j], 0).astype(np.int64)
        acc += a[src] * w.reshape((-1,) + (1,) * (a.ndim - 1))
    acc = acc.astype(np.int32)  # Pillow's accumulator is a C int
    out = np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def _pass_float(arr: np.ndarray, axis: int, out_size: int, kind: str) -> np.ndarray:
    in_size = arr.shape[axis]
    xmin, cnt, kk = bicubic_coeffs(in_size, out_size)
    a = np.moveaxis(arr, axis, 0).astype(np.float64)
    acc = np.zeros((out_size,) + a.shape[1:], dtype=np.float64)
    for j in range(kk.shape[1]):
        src = np.minimum(xmin + j, in_size - 1)
        w = np.where(j < cnt, kk[:, j], 0.0)
        term = a[src] * w.reshape((-1,) + (1,) * (a.ndim - 1))
        # Pillow only adds the first `cnt` terms; adding 0.0 afterwards is exact except -0.0.
        acc = np.where((j < cnt).reshape((-1,) + (1,) * (a.ndim - 1)), acc + term, acc)
    if kind == "u16":
        r = np.where(acc >= 0.0, acc + 0.5, acc - 0.5)
        out = np.clip(np.trunc(r), 0, 65535).astype(np.uint16)
    elif kind == "i32":
        r = np.where(acc >= 0.0, acc + 0.5, acc - 0.5)
        out = np.trunc(r).astype(np.int32)
    else:
        out = acc.astype(np.float32)
    return np.moveaxis(out, 0, axis)


def resample_numpy(arr: np.ndarray, out_w: int, out_h: int) -> np.ndarray:
    """Pillow's BICUBIC resize of an (H, W[, C]) array: uint8, uint16 (I;16 values), int32, float32."""
    h, w = arr.shape[:2]
    out = arr
    for p in pass_order(w, h, out_w, out_h):
        axis, size = (1, out_w) if p == "h" else (0, out_h)
        if arr.dtype == np.uint8:
            out = _pass_u8(out, axis, size)
        elif arr.dtype == np.uint16:
            out = _pass_float(out, axis, size, "u16")
        elif arr.dtype == np.int32:
            out = _pass_float(out, axis, size, "i32")
        elif arr.dtype == np.float32:
            out = _pass_float(out, axis, size, "f32")
        else:
            raise TypeError(f"unsupported dtype {arr.dtype}")
    return out


def nearest_numpy(arr: np.ndarray, out_w: int, out_h: int) -> np.ndarray:
    """Pillow's NEAREST resize of an (H, W[, C]) array (positions without a source are 0)."""
    h, w = arr.shape[:2]
    yi = nearest_index(h, out_h)
    xi = nearest_index(w, out_w)
    out = arr[np.maximum(yi, 0)][:, np.maximum(xi, 0)]
    valid = (yi >= 0)[:, None] & (xi >= 0)[None, :]
    out = np.where(valid.reshape(valid.shape + (1,) * (arr.ndim - 2)), out, 0).astype(arr.dtype)
    return out


def premultiply_numpy(arr: np.ndarray) -> np.ndarray:
    """RGBA -> RGBa (or LA -> La) with Pillow's MULDIV255: colour bands × alpha."""
    a = arr[..., -1:].astype(np.int32)
    t = arr[..., :-1].astype(np.int32) * a + 128
    c = ((t >> 8) + t) >> 8
    return np.concatenate([c.astype(np.uint8), arr[..., -1:]], axis=-1)


def unpremultiply_numpy(arr: np.ndarray) -> np.ndarray:
    """RGBa -> RGBA (or La -> LA): keep where alpha is 0 or 255, else min(255, 255·c // α)."""
    a = arr[..., -1:].astype(np.int32)
    c = arr[..., :-1].astype(np.int32)
    safe = np.where(a == 0, 1, a)
    div = np.minimum(255, (255 * c) // safe)
    keep = (a == 0) | (a == 255)
    out = np.where(keep, c, div).astype(np.uint8)
    return np.concatenate([out, arr[..., -1:]], axis=-1)
