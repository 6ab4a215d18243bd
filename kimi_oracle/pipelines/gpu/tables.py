"""Host-side tables of the GPU pipeline's fill, and NumPy twins of the conversions the kernels do.

Table modes (L, P, 1, LA, PA, I;16*, LAB, YCbCr, HSV) are not re-derived: Pillow itself
converts every possible pixel value once (`conversion_table`). The composite is the
reference's float32 formula, tabulated per background level (`composite_table`). CMYK, "I"
and "F" are converted in the kernel by formula; `cmyk_to_rgb`, `i32_to_rgba` and
`f32_to_level` are the same formulas in NumPy, tested against Pillow over their value ranges
(tests/pipelines/gpu/test_tables.py), so that the kernel's arithmetic has an executable statement.
"""

from __future__ import annotations

import functools
import sys
import threading

import numpy as np
from PIL import Image

from kimi_oracle.core.config import TransparentBgConfig
from kimi_oracle.core.errors import BackendError, InputError
from kimi_oracle.core.images import MODES_16BIT
from kimi_oracle.pipelines.gpu import resample as rs
from kimi_oracle.pipelines.reference import background, composite, fill_conversion

MODES_8BIT_1 = ("L", "P", "1")
MODES_8BIT_2 = ("LA", "PA")
MODES_8BIT_3_TABLE = ("LAB", "HSV", "YCbCr")
MODES_16 = tuple(sorted(MODES_16BIT))  # one definition of Pillow's 16-bit family: core.images
TABLE_MODES = frozenset(MODES_8BIT_1 + MODES_8BIT_2 + MODES_8BIT_3_TABLE + MODES_16)


def i16_dtype(mode: str) -> str:
    """NumPy dtype of the values Pillow's 16-bit resampler reads from `mode`'s bytes."""
    # Pillow reads "I;16N" big-endian and every other I;16 mode little-endian on a
    # little-endian host (Resample.c); the device works on those values.
    if sys.byteorder == "little":
        return ">u2" if mode == "I;16N" else "<u2"
    return "<u2" if mode == "I;16B" else ">u2"  # pragma: no cover - big-endian hosts


def fill_uses_alpha(img: Image.Image, bg: TransparentBgConfig | None) -> bool:
    """Whether the reference's fill composites this image (else it only converts to RGB)."""
    return fill_conversion(img, bg) == "RGBA"


# --------------------------------------------------------------------------------------------
# NumPy twins of the kernel's conversions (kernels._to_rgba)
# --------------------------------------------------------------------------------------------


def muldiv255(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pillow's MULDIV255 on int arrays."""
    t = a.astype(np.int64) * b + 128
    return ((t >> 8) + t) >> 8


def cmyk_to_rgb(cmyk: np.ndarray) -> np.ndarray:
    """uint8 (..., 4) CMYK -> uint8 (..., 3) RGB: CLIP8(nk - MULDIV255(c, nk)), nk = 255 - k."""
    c = cmyk.astype(np.int64)
    not_k = 255 - c[..., 3:4]
    return np.clip(not_k - muldiv255(c[..., :3], not_k), 0, 255).astype(np.uint8)


def i32_key_level(key: int) -> int:
    """The level an "I" image's transparency key matches: Pillow compares the converted
    (clipped) level with the key cut to 8 bits."""
    return int(key) & 255


def i32_to_rgba(values: np.ndarray, key: int | None = None) -> np.ndarray:
    """int32 "I" values -> uint8 (..., 4): level = clip(v, 0, 255) in R, G, B; alpha 0 where
    the level equals `i32_key_level(key)`, else 255."""
    level = np.clip(values.astype(np.int64), 0, 255)
    alpha = np.full(level.shape, 255, np.int64)
    if key is not None:
        alpha = np.where(level == i32_key_level(key), 0, 255)
    return np.stack([level, level, level, alpha], axis=-1).astype(np.uint8)


def f32_to_level(values: np.ndarray) -> np.ndarray:
    """float32 "F" values -> uint8 "L" levels: <= 0 -> 0, >= 255 -> 255, else truncated;
    NaN -> 0 (what x86 Pillow gives)."""
    v = np.asarray(values, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        inner = np.trunc(np.where((v > 0) & (v < 255), v, 0)).astype(np.int64)
        return np.where(v >= 255, 255, np.where(v > 0, inner, 0)).astype(np.uint8)


# --------------------------------------------------------------------------------------------
# Conversion tables made by Pillow (CONV_TABLE)
# --------------------------------------------------------------------------------------------


def _pack_rgba(rgba: np.ndarray) -> np.ndarray:
    a = rgba.reshape(-1, 4).astype(np.uint32)
    packed = a[:, 0] | (a[:, 1] << 8) | (a[:, 2] << 16) | (a[:, 3] << 24)
    return packed.view(np.int32)


def _probe(img: Image.Image, values: np.ndarray, shape: tuple[int, int]) -> Image.Image:
    """An image of `img`'s mode, palette and transparency whose pixels enumerate `values`."""
    mode = img.mode
    mask = rs.domain_xor(mode)
    if mask is not None:
        values = values.astype(np.uint8) ^ mask  # table index is in the resampling domain
    if mode == "1":
        probe = Image.fromarray(values.reshape(shape) == 255)
    elif mode in MODES_16:
        raw = values.astype(np.uint16).astype(i16_dtype(mode)).tobytes()
        probe = Image.frombytes(mode, shape[::-1], raw)
    else:
        probe = Image.frombytes(mode, shape[::-1], values.astype(np.uint8).tobytes())
    if mode in ("P", "PA") and img.palette is not None:
        probe.putpalette(img.palette)
    if "transparency" in img.info:
        probe.info["transparency"] = img.info["transparency"]
    return probe


def table_key(img: Image.Image, use_alpha: bool, resized: bool) -> tuple:
    """What a conversion table depends on: mode, alpha use, resized state, palette, key."""
    pal = None
    if img.mode in ("P", "PA") and img.palette is not None:
        pal = (img.palette.mode, bytes(img.palette.tobytes()))
    trns = img.info.get("transparency")
    return (img.mode, use_alpha, resized, pal, repr(trns))


def table_channels(mode: str) -> int:
    """How many channel values index `mode`'s table (1, 2 or 3)."""
    if mode in MODES_8BIT_1 or mode in MODES_16:
        return 1
    if mode in MODES_8BIT_2:
        return 2
    return 3


_TABLES: dict[tuple, np.ndarray] = {}
_TABLES_LOCK = threading.Lock()


def conversion_table(img: Image.Image, use_alpha: bool, resized: bool = False) -> np.ndarray:
    """int32 packed RGBA per pixel value of `img`'s mode, made by Pillow's own conversion.

    `resized`: the reference converts the output of `Image.resize`, whose state can differ
    from the source's (a resized "PA" image loses its palette in Pillow 13.0). The probe then
    goes through a value-preserving resize first (one row -> two rows: a single tap of weight
    1, or NEAREST), so that it carries exactly the state a resized image has.
    """
    key = table_key(img, use_alpha, resized)
    with _TABLES_LOCK:
        hit = _TABLES.get(key)
    if hit is not None:
        return hit
    mode = img.mode
    channels = table_channels(mode)
    if mode in MODES_16:
        values = np.arange(65536)
    elif channels == 1:
        values = np.arange(256)
    elif channels == 2:
        i = np.arange(65536)
        values = np.stack([i >> 8, i & 255], axis=-1)
    else:
        i = np.arange(1 << 24)
        values = np.stack([i >> 16, (i >> 8) & 255, i & 255], axis=-1)
    n = values.shape[0]
    probe = _probe(img, values, (1, n))
    try:
        if resized:
            before = probe.tobytes()
            probe = probe.resize((n, 2), Image.Resampling.BICUBIC)
            if probe.tobytes()[: len(before)] != before:
                raise BackendError(f"mode {mode!r}: the state probe's resize changed its values")
            probe = probe.crop((0, 0, n, 1))
        if use_alpha:
            rgba = np.asarray(probe.convert("RGBA"))
        else:
            rgb = np.asarray(probe.convert("RGB"))
            rgba = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=-1)
    except (ValueError, OSError) as exc:
        raise InputError(f"mode {mode!r}: the checkpoint's conversion fails: {exc}") from None
    table = _pack_rgba(rgba)
    table.setflags(write=False)
    with _TABLES_LOCK:
        if len(_TABLES) > 64:
            _TABLES.clear()
        _TABLES[key] = table
    return table


# --------------------------------------------------------------------------------------------
# Composite
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def composite_table(level: int) -> np.ndarray:
    """uint8 (256 alpha, 256 colour level): the reference's float32 composite over `level`."""
    uniform = TransparentBgConfig(
        pattern="chessboard", chessboard_square_size=1, chessboard_square_on_top_left=True,
        chessboard_white_value=int(level), chessboard_gray_value=int(level),
    )
    a, c = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    rgba = np.stack([c, c, c, a], axis=-1).astype(np.uint8)
    out = composite(rgba, uniform)[..., 0].copy()
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=64)
def background_params(bg: TransparentBgConfig) -> tuple[int, int, int]:
    """(square, level where (y//square + x//square) is even, level where odd), read back
    from the reference's background."""
    sq = int(bg.chessboard_square_size)
    row = background(bg, 1, sq + 1)
    col = background(bg, sq + 1, 1)
    even, odd = int(row[0, 0, 0]), int(row[0, sq, 0])
    if int(col[sq, 0, 0]) != odd:
        raise BackendError(f"background {bg} is not a two-level chessboard of square {sq}")
    n = min(3 * sq, 96)
    ys, xs = np.mgrid[0:n, 0:n]
    model = np.where(((ys // sq + xs // sq) % 2) == 0, even, odd)
    if not np.array_equal(background(bg, n, n), np.repeat(model[..., None], 3, -1).astype(np.uint8)):
        raise BackendError(f"background {bg} does not follow the chessboard model")
    return sq, even, odd
