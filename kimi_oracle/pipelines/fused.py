"""The checkpoint's composite, pad, normalize and patchify as table lookups over bands of rows.

Each step of the checkpoint after the resize is a function of a few uint8 levels: the
normalization of one level (a 3 x 256 table), the composite of one level on one background
level at one alpha (a 65,536-entry table per background level). So the whole tail is exact as
table lookups, done here band by band (a few patch rows at a time, so that the temporaries stay
in the cache) and written straight into the output:

- the uint8 levels of a band are rearranged into patch order (N, C, p, p), zero-padded;
- two neighbouring levels of one channel, read as one uint16, index a table of float32 pairs:
  one `np.take` writes two output values (half the lookups of a 256-entry table);
- the composite writes channel planes (3, h, w), which rearrange into patch order more cheaply
  than interleaved pixels.

`kimi_oracle.pipelines.reference` calls these on the checkpoint's own steps only; a variant of
the diagnosis that replaces a step takes the step-by-step path there.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

import numpy as np

# The composite's packed index (`composite_planes`) reads bytes as a little-endian uint32.
LITTLE_ENDIAN = sys.byteorder == "little"

__all__ = ["LITTLE_ENDIAN", "blend_table", "composite_planes", "pair_table", "patches_from_hwc", "patches_from_planes"]

# Bytes of uint8 levels handled per band (a band is whole patch rows; at least one).
_BAND_BYTES = 1 << 18
# Rows of the source composited per band.
_COMPOSITE_ROWS = 64


@functools.lru_cache(maxsize=16)
def _pairs(lut_bytes: bytes) -> np.ndarray:
    lut = np.frombuffer(lut_bytes, dtype=np.float32).reshape(3, 256)
    # Entry i of a channel's table holds the values of the two levels whose bytes, in memory
    # order, form the uint16 i: the same on either byte order.
    levels = np.arange(65536, dtype=np.uint16).view(np.uint8).reshape(65536, 2)
    pairs = np.empty((3, 65536, 2), dtype=np.float32)
    for c in range(3):
        pairs[c, :, 0] = lut[c][levels[:, 0]]
        pairs[c, :, 1] = lut[c][levels[:, 1]]
    table = pairs.view(np.uint64).reshape(3, 65536)
    table.setflags(write=False)
    return table


def pair_table(lut: np.ndarray) -> np.ndarray:
    """uint64 (3, 65536): entry [c, i] is the two float32 values of the two levels forming i."""
    return _pairs(np.ascontiguousarray(lut, dtype=np.float32).tobytes())


def _lookup(tiles: np.ndarray, out: np.ndarray, lut: np.ndarray, table: np.ndarray | None, same: bool) -> None:
    # tiles: uint8 (m, 3, q), out: float32 (m, 3, q), both C-contiguous; table: `pair_table(lut)`
    # (None: q is odd); same: the three rows of lut are equal.
    if table is not None:
        idx, dst = tiles.view(np.uint16), out.view(np.uint64)
        if same:
            np.take(table[0], idx.reshape(-1), out=dst.reshape(-1), mode="clip")
        else:
            for c in range(3):
                np.take(table[c], idx[:, c], out=dst[:, c], mode="clip")
        return
    for c in range(3):
        np.take(lut[c], tiles[:, c], out=out[:, c], mode="clip")


def _patch_bands(height: int, width: int, ps: int, lut: np.ndarray,
                 fill: Callable[[np.ndarray, int], None]) -> np.ndarray:
    # The padded grid in bands of whole patch rows; `fill(tiles, y0)` writes the uint8 levels
    # of the band from padded row y0 into tiles (k, gw, 3, p, p), zeros past the image.
    gh, gw = -(-height // ps), -(-width // ps)
    out = np.empty((gh * gw, 3, ps * ps), dtype=np.float32)
    rows = max(1, _BAND_BYTES // (ps * gw * ps * 3))
    tiles = np.empty((rows * gw, 3, ps * ps), dtype=np.uint8)
    table = pair_table(lut) if ps * ps % 2 == 0 else None
    same = bool((lut[1:] == lut[0]).all())
    for gy in range(0, gh, rows):
        k = min(rows, gh - gy)
        band = tiles[: k * gw]
        fill(band.reshape(k, gw, 3, ps, ps), gy * ps)
        _lookup(band, out[gy * gw: (gy + k) * gw], lut, table, same)
    return out.reshape(gh * gw, 3, ps, ps)


def patches_from_hwc(rgb: np.ndarray, padded_h: int, padded_w: int, ps: int, lut: np.ndarray) -> np.ndarray:
    """float32 (N, 3, p, p) patches of a uint8 (h, w, 3) array zero-padded to (padded_h, padded_w),
    each level looked up in `lut` (3, 256)."""
    h, w = rgb.shape[:2]
    gw = padded_w // ps
    pad_buf: list[np.ndarray] = []

    def fill(tiles: np.ndarray, y0: int) -> None:
        k = tiles.shape[0]
        y1 = max(y0, min(h, y0 + k * ps))
        src = rgb[y0:y1]
        if y1 - y0 != k * ps or w != padded_w:
            if not pad_buf:
                pad_buf.append(np.zeros((k * ps, padded_w, 3), dtype=np.uint8))
            band = pad_buf[0][: k * ps]
            band[: y1 - y0, :w] = src
            band[y1 - y0:] = 0
            src = band
        np.copyto(tiles, src.reshape(k, ps, gw, ps, 3).transpose(0, 2, 4, 1, 3))

    return _patch_bands(padded_h, padded_w, ps, lut, fill)


def patches_from_planes(planes: np.ndarray, padded_h: int, padded_w: int, ps: int, lut: np.ndarray) -> np.ndarray:
    """As `patches_from_hwc` for uint8 channel planes (3, h, w) (each row contiguous)."""
    _, h, w = planes.shape
    gw = padded_w // ps
    pad_buf: list[np.ndarray] = []

    def fill(tiles: np.ndarray, y0: int) -> None:
        k = tiles.shape[0]
        y1 = max(y0, min(h, y0 + k * ps))
        src = planes[:, y0:y1]
        if y1 - y0 != k * ps or w != padded_w:
            if not pad_buf:
                pad_buf.append(np.zeros((3, k * ps, padded_w), dtype=np.uint8))
            band = pad_buf[0][:, : k * ps]
            band[:, : y1 - y0, :w] = src
            band[:, y1 - y0:] = 0
            src = band
        if src.strides[2] == 1 and src.shape[2] == padded_w:
            # Runs of p levels moved as one p-byte item each (half the time of byte by byte).
            item = np.dtype(f"V{ps}")
            np.copyto(tiles.reshape(k, gw, 3, ps * ps).view(item),
                      src.view(item).reshape(3, k, ps, gw).transpose(1, 3, 0, 2))
        else:
            np.copyto(tiles, src.reshape(3, k, ps, gw, ps).transpose(1, 3, 0, 2, 4))

    return _patch_bands(padded_h, padded_w, ps, lut, fill)


@functools.lru_cache(maxsize=16)
def _blend_tables(levels: tuple[int, ...], blend: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    a = np.repeat(np.arange(256, dtype=np.uint8), 256)
    v = np.tile(np.arange(256, dtype=np.uint8), 256)
    rgba = np.empty((len(levels) * 65536, 1, 4), dtype=np.uint8)
    back = np.empty((len(levels) * 65536, 1, 3), dtype=np.uint8)
    for i, level in enumerate(levels):
        part = slice(i * 65536, (i + 1) * 65536)
        rgba[part, 0, 3] = a
        rgba[part, 0, :3] = v[:, None]
        back[part] = level
    table = np.ascontiguousarray(blend(rgba, back)[:, 0, 0], dtype=np.uint8)
    table.setflags(write=False)
    return table


def blend_table(levels: tuple[int, ...], blend: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """uint8 (len(levels) · 65536,): entry b·65536 + a·256 + v is `blend` of level v at alpha a
    on background level levels[b] (computed by `blend` itself, element by element)."""
    return _blend_tables(tuple(int(x) for x in levels), blend)


def composite_planes(rgba: np.ndarray, levels: tuple[int, ...], which: Callable[[int, int], np.ndarray | None],
                     blend: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """uint8 channel planes (3, h, w) of `blend` of a uint8 (h, w, 4) array on a background whose
    level at each pixel is levels[which(y0, y1)[y - y0, x]] (uint8; None: levels[0] everywhere)."""
    h, w = rgba.shape[:2]
    table = blend_table(levels, blend)
    planes = np.empty((3, h, w), dtype=np.uint8)
    # Each pixel's index b·65536 + a·256 + v as the bytes (v, a, b, 0) of a little-endian uint32.
    packed = np.zeros((min(h, _COMPOSITE_ROWS), w, 4), dtype=np.uint8)
    for y0 in range(0, h, _COMPOSITE_ROWS):
        y1 = min(h, y0 + _COMPOSITE_ROWS)
        band = packed[: y1 - y0]
        band[..., 1] = rgba[y0:y1, :, 3]
        choice = which(y0, y1)
        if choice is not None:
            band[..., 2] = choice
        index = band.view(np.uint32)[..., 0]
        for c in range(3):
            band[..., 0] = rgba[y0:y1, :, c]
            np.take(table, index, out=planes[c, y0:y1], mode="clip")
    return planes
