"""The checkpoint's composite, pad, normalize and patchify, band by band: lookups, checked passes.

Each step of the checkpoint after the resize is a function of a few uint8 levels: the
normalization of one level (a 3 x 256 table), the composite of one level on one background
level at one alpha (a 65,536-entry table per background level). So the whole tail is exact as
table lookups, done here band by band (a few patch rows at a time, so that the temporaries stay
in the cache) and written straight into the output:

- the uint8 levels of a band are rearranged into patch order (N, C, p, p), zero-padded;
- the normalization is two vector passes (`level / d - b` in float32) where that form gives
  the table's bytes on all 256 levels (checked level by level, `affine_forms`: the checkpoint's
  mean and std do); otherwise two neighbouring levels of one channel, read as one uint16, index
  a table of float32 pairs: one `np.take` writes two output values;
- the composite writes channel planes (3, h, w), which rearrange into patch order more cheaply
  than interleaved pixels: from `_VECTOR_MIN_PIXELS` source pixels on, by float32 vector passes
  over the R, G, B, A planes where those passes give the blend table's bytes for every
  (background level, alpha, level) (`_vector_exact`: the checkpoint's blend does), else by the
  table;
- the output is one of `outputs`' recycled arrays when large (its pages already touched).

`kimi_oracle.pipelines.reference` calls these on the checkpoint's own steps only; a variant of
the diagnosis that replaces a step takes the step-by-step path there.
"""

from __future__ import annotations

import functools
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np

from kimi_oracle.pipelines import outputs

# The composite's packed index (`composite_planes`) reads bytes as a little-endian uint32.
LITTLE_ENDIAN = sys.byteorder == "little"

__all__ = ["LITTLE_ENDIAN", "affine_forms", "blend_table", "composite_planes", "pair_table", "patches_from_hwc",
           "patches_from_planes", "patches_from_composite", "patches_from_plane_rows", "patches_from_rows"]

# Bytes of uint8 levels handled per band (a band is whole patch rows; at least one): on one
# thread, 512 KiB and 1 MiB bands were fastest (2048x2048 K3, docs/measurements.md round 11);
# on several threads, bands are made smaller until each thread has _BANDS_PER_THREAD of them.
_BAND_BYTES = 1 << 20
_BANDS_PER_THREAD = 4
# Rows of the source composited per band.
_COMPOSITE_ROWS = 64
# Source pixels from which an RGBA image is composited by the vector passes: below, their ~20
# NumPy calls a band cost more than the table's gathers (the crossover lies between 64x64 and
# 128x96; docs/measurements.md, round 8).
_VECTOR_MIN_PIXELS = 1 << 13


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


# Affine forms tried for a channel's table before the lookups: level v -> v / d - b in float32
# (an exact uint8 -> float32 cast, a division, a subtraction; each correctly rounded). A form
# is used only where it gives the table's own bytes for all 256 levels (`_affine`); every
# level is checked, so on the patches it is the table itself, two vector passes in place of
# a gather (the checkpoint's mean 0.5 and std 0.5: v / 127.5 - 1).
def _affine_forms(mean_std: tuple[float, float]) -> list[tuple[np.float32, np.float32]]:
    mean, std = mean_std
    return [(np.float32(255.0 * std), np.float32(mean / std))]


def _affine_apply(src: np.ndarray, out: np.ndarray, form: tuple[np.float32, np.float32]) -> None:
    # out (float32) = src (uint8) / d - b, the same ufunc calls for the check and the patches
    # (IEEE operations in the default rounding mode, which nothing here changes). The levels are
    # cast first (exact: every uint8 is a float32), then divided in place: the values of
    # `np.divide(src, d)` on the same float32 loop, whose mixed-type call casts through a buffer
    # (2058 x 2058 x 3 levels: 6.3 ms for it, 2.2 ms the cast + 1.5 ms the division in place,
    # docs/measurements.md round 11).
    np.copyto(out, src, casting="unsafe")
    np.divide(out, form[0], out=out)
    np.subtract(out, form[1], out=out)


def _affine_for(row: np.ndarray) -> tuple[np.float32, np.float32] | None:
    # A form whose values on all 256 levels are `row`'s bytes, or None. The mean and std are
    # read back from the table's ends where the table is increasing and the form is then checked.
    levels = np.arange(256, dtype=np.uint8)
    lo, hi = float(row[0]), float(row[255])
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        return None
    std = 1.0 / (hi - lo)  # row ≈ (v / 255 - mean) / std
    mean = -lo * std
    values = np.empty(256, dtype=np.float32)
    for form in _affine_forms((mean, std)):
        if not (np.isfinite(form[0]) and np.isfinite(form[1])) or form[0] == 0:
            continue
        _affine_apply(levels, values, form)
        if values.tobytes() == np.ascontiguousarray(row, dtype=np.float32).tobytes():
            return form
    return None


@functools.lru_cache(maxsize=16)
def _affine(lut_bytes: bytes) -> tuple[tuple[np.float32, np.float32], ...] | None:
    lut = np.frombuffer(lut_bytes, dtype=np.float32).reshape(3, 256)
    with np.errstate(all="ignore"):
        forms = tuple(_affine_for(lut[c]) for c in range(3))
    return None if any(form is None for form in forms) else forms  # type: ignore[return-value]


def affine_forms(lut: np.ndarray) -> tuple[tuple[np.float32, np.float32], ...] | None:
    """Per channel (divisor, offset) with `level / divisor - offset` (float32) equal to every entry
    of `lut` (3, 256), checked on all 256 levels; None where a channel has no such form."""
    return _affine(np.ascontiguousarray(lut, dtype=np.float32).tobytes())


class _Levels:
    # How a band of uint8 levels becomes float32 values: by the affine forms where they give the
    # table exactly, else by the pair table (two levels per lookup), else by the table itself.
    def __init__(self, lut: np.ndarray, ps: int) -> None:
        self.lut = lut
        self.forms = affine_forms(lut)
        self.same = bool((lut[1:] == lut[0]).all())
        self.table = pair_table(lut) if self.forms is None and ps * ps % 2 == 0 else None

    def __call__(self, tiles: np.ndarray, out: np.ndarray) -> None:
        # tiles: uint8 (m, 3, q), out: float32 (m, 3, q), both C-contiguous
        if self.forms is not None:
            if self.same or len(set(self.forms)) == 1:
                _affine_apply(tiles, out, self.forms[0])
            else:
                for c in range(3):
                    _affine_apply(tiles[:, c], out[:, c], self.forms[c])
            return
        if self.table is not None:
            idx, dst = tiles.view(np.uint16), out.view(np.uint64)
            if self.same:
                np.take(self.table[0], idx.reshape(-1), out=dst.reshape(-1), mode="clip")
            else:
                for c in range(3):
                    np.take(self.table[c], idx[:, c], out=dst[:, c], mode="clip")
            return
        for c in range(3):
            np.take(self.lut[c], tiles[:, c], out=out[:, c], mode="clip")


def _band_rows(tiles: np.ndarray, y0: int, h: int, ps: int) -> tuple[int, int]:
    """A band of tiles (k, gw, 3, p, p) from padded row y0: its k patch rows, and how many of its
    k·p pixel rows lie in an image of h rows (the rest is padding)."""
    k = tiles.shape[0]
    return k, max(0, min(h, y0 + k * ps) - y0)


# fill(tiles, y0): writes the uint8 levels of the band of padded rows from y0 into tiles
# (k, gw, 3, p, p), zeros past the image. Fill = a maker of such functions, one per thread
# (each keeps its own buffers).
Fill = Callable[[], Callable[[np.ndarray, int], None]]


def _patch_bands(height: int, width: int, ps: int, lut: np.ndarray, make_fill: Fill, threads: int = 1) -> np.ndarray:
    # The padded grid in bands of whole patch rows, on `threads` threads (each a run of bands).
    gh, gw = -(-height // ps), -(-width // ps)
    out = outputs.empty((gh * gw, 3, ps * ps), np.float32)  # (every band is written below)
    rows = max(1, _BAND_BYTES // (ps * gw * ps * 3))
    if threads > 1:  # at least _BANDS_PER_THREAD bands a thread, so that the threads stay even
        rows = max(1, min(rows, gh // (_BANDS_PER_THREAD * threads)))
    values = _Levels(lut, ps)
    starts = list(range(0, gh, rows))

    def work(part: Sequence[int]) -> None:
        tiles = np.empty((rows * gw, 3, ps * ps), dtype=np.uint8)
        fill = make_fill()
        for gy in part:
            k = min(rows, gh - gy)
            band = tiles[: k * gw]
            fill(band.reshape(k, gw, 3, ps, ps), gy * ps)
            values(band, out[gy * gw: (gy + k) * gw])

    n = max(1, min(threads, len(starts)))
    if n == 1:
        work(starts)
    else:
        parts = [starts[i * len(starts) // n: (i + 1) * len(starts) // n] for i in range(n)]
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="kimi-bands") as pool:
            list(pool.map(work, parts))
    return out.reshape(gh * gw, 3, ps, ps)


def patches_from_hwc(rgb: np.ndarray, padded_h: int, padded_w: int, ps: int, lut: np.ndarray) -> np.ndarray:
    """float32 (N, 3, p, p) patches of a uint8 (h, w, 3) array zero-padded to (padded_h, padded_w),
    each level looked up in `lut` (3, 256)."""
    h, w = rgb.shape[:2]
    return patches_from_rows(lambda y0, y1: rgb[y0:y1], h, w, padded_h, padded_w, ps, lut)


def patches_from_rows(rows: Callable[[int, int], np.ndarray], h: int, w: int, padded_h: int, padded_w: int,
                      ps: int, lut: np.ndarray, threads: int = 1) -> np.ndarray:
    """As `patches_from_hwc` for an (h, w, 3) image read band by band: `rows(y0, y1)` gives its
    uint8 rows y0 to y1 (y0 < y1 <= h) as an (y1 - y0, w, 3) array."""
    gw = padded_w // ps

    def make_fill() -> Callable[[np.ndarray, int], None]:
        pad_buf: list[np.ndarray] = []

        def fill(tiles: np.ndarray, y0: int) -> None:
            k = tiles.shape[0]
            y1 = max(y0, min(h, y0 + k * ps))
            if y1 - y0 != k * ps or w != padded_w:
                if not pad_buf:
                    pad_buf.append(np.zeros((k * ps, padded_w, 3), dtype=np.uint8))
                band = pad_buf[0][: k * ps]
                if y1 > y0:
                    band[: y1 - y0, :w] = rows(y0, y1)
                band[y1 - y0:] = 0
                src = band
            else:
                src = rows(y0, y1)
            np.copyto(tiles, src.reshape(k, ps, gw, ps, 3).transpose(0, 2, 4, 1, 3))

        return fill

    return _patch_bands(padded_h, padded_w, ps, lut, make_fill, threads)


def patches_from_planes(planes: np.ndarray, padded_h: int, padded_w: int, ps: int, lut: np.ndarray) -> np.ndarray:
    """As `patches_from_hwc` for uint8 channel planes (3, h, w) (each row contiguous)."""
    _, h, w = planes.shape
    return patches_from_plane_rows(lambda y0, y1: planes[:, y0:y1], h, w, padded_h, padded_w, ps, lut)


def _plane_items(tiles: np.ndarray, c: int, plane: np.ndarray, ps: int) -> bool:
    # Plane c of a band, uint8 (k·p, gw·p) with contiguous rows, into tiles (k, gw, 3, p, p)
    # as runs of p levels moved as one p-byte item each (half the time of byte by byte);
    # False (nothing written) where the rows are not contiguous.
    if plane.strides[1] != 1:
        return False
    k, gw = tiles.shape[:2]
    item = np.dtype(f"V{ps}")
    dst = tiles.reshape(k, gw, 3, ps * ps)
    if not np.may_share_memory(dst, tiles):  # (tiles, a run of whole patches: never a copy)
        raise AssertionError("internal: the tiles of a band are not one array")
    np.copyto(dst[:, :, c].view(item), plane.view(item).reshape(k, ps, gw).transpose(0, 2, 1))
    return True


def _planes_into_tiles(tiles: np.ndarray, src: Sequence[np.ndarray], w: int, ps: int, edge: list[np.ndarray]) -> bool:
    # A band of whole patch rows, src its three planes (k·p, w) with contiguous rows, into tiles
    # (k, gw, 3, p, p): the whole patch columns straight from the planes, the others (the one w
    # ends in, and any past it) through a zero-padded buffer of their width. False: nothing
    # written.
    if any(plane.strides[1] != 1 for plane in src):
        return False
    k, gw = tiles.shape[:2]
    full = w // ps
    if full:
        for c in range(3):
            _plane_items(tiles[:, :full], c, src[c][:, : full * ps], ps)
    if full < gw:
        if not edge:
            edge.append(np.zeros((3, k * ps, (gw - full) * ps), dtype=np.uint8))
        part = edge[0][:, : k * ps]
        part[:, :, : w - full * ps] = [plane[:, full * ps: w] for plane in src]
        for c in range(3):
            _plane_items(tiles[:, full:], c, part[c], ps)
    return True


def patches_from_plane_rows(planes: Callable[[int, int], Sequence[np.ndarray]], h: int, w: int,
                            padded_h: int, padded_w: int, ps: int, lut: np.ndarray, threads: int = 1) -> np.ndarray:
    """As `patches_from_hwc` for an image read as channel planes band by band: `planes(y0, y1)`
    gives its three uint8 planes of rows y0 to y1 (y0 < y1 <= h), each (y1 - y0, w).

    `threads` > 1: runs of bands on that many threads (the readers are called from each)."""

    def make_fill() -> Callable[[np.ndarray, int], None]:
        pad_buf: list[np.ndarray] = []
        edge: list[np.ndarray] = []

        def fill(tiles: np.ndarray, y0: int) -> None:
            k, n = _band_rows(tiles, y0, h, ps)
            src = planes(y0, y0 + n) if n else ()
            if n == k * ps and _planes_into_tiles(tiles, src, w, ps, edge):
                return
            if not pad_buf:
                pad_buf.append(np.zeros((3, k * ps, padded_w), dtype=np.uint8))
            band = pad_buf[0][:, : k * ps]
            for c in range(len(src)):
                band[c, :n, :w] = src[c]
            band[:, n:] = 0
            for c in range(3):
                _plane_items(tiles, c, band[c], ps)

        return fill

    return _patch_bands(padded_h, padded_w, ps, lut, make_fill, threads)


def _alphas_and_levels() -> tuple[np.ndarray, np.ndarray]:
    # Every (alpha, level) pair once, in a blend table's entry order a·256 + v: uint8 (65536,) each.
    return np.repeat(np.arange(256, dtype=np.uint8), 256), np.tile(np.arange(256, dtype=np.uint8), 256)


@functools.lru_cache(maxsize=16)
def _blend_tables(levels: tuple[int, ...], blend: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    a, v = _alphas_and_levels()
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


# The composite as float32 vector passes (`_vector_blend`): alpha = A / 255, t = (1 - alpha) * B once
# per pixel, then per channel (alpha * v + t) cast to uint8, each operand of one dtype (an exact
# uint8 -> float32 cast first: NumPy buffers and casts a mixed-dtype pass, several times dearer;
# round 8). Used only where these passes give the blend table's bytes for every (background
# level, alpha, level) (`_vector_exact`), so on the pixels it is the table itself, with no index
# to build per value.


def _vector_blend(alpha: np.ndarray, back: np.ndarray | np.float32, channels: Sequence[np.ndarray],
                  out: Sequence[np.ndarray], tmp: np.ndarray, t: np.ndarray) -> None:
    # alpha, channels: uint8 (n, w); back: float32 (n, w) or a float32 scalar; out: uint8 (n, w)
    # each (written); tmp (2, n, w) and t (n, w): float32 work buffers.
    a, v = tmp[0], tmp[1]
    np.copyto(a, alpha)
    np.divide(a, np.float32(255.0), out=a)
    np.subtract(np.float32(1.0), a, out=t)
    np.multiply(t, back, out=t)
    for src, dst in zip(channels, out):
        np.copyto(v, src)
        np.multiply(a, v, out=v)
        np.add(v, t, out=v)
        np.copyto(dst, v, casting="unsafe")  # truncation, as `astype(np.uint8)`


@functools.lru_cache(maxsize=16)
def _vector_exact_levels(levels: tuple[int, ...], blend: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> bool:
    # (the table path's own table, whose last block is its padding level: the same cache entry)
    table = blend_table((*levels, 0), blend)[: len(levels) * 65536].reshape(len(levels), 65536)
    a, v = (x.reshape(1, 65536) for x in _alphas_and_levels())
    got = np.empty((1, 65536), dtype=np.uint8)
    work = np.empty((4, 1, 65536), dtype=np.float32)
    lv = np.array(levels, dtype=np.float32)
    for b in range(len(levels)):
        # the background as `_vector_fill` takes it (no choice where `which` makes none: one level)
        choice = None if lv.size < 2 else np.full((1, 65536), b, dtype=np.uint8)
        _vector_blend(a, _background(choice, lv, work[3]), [v], [got], work[:2], work[2])
        if got.tobytes() != table[b].tobytes():
            return False
    return True


def _vector_exact(levels: tuple[int, ...], blend: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> bool:
    """Whether `_vector_blend` gives `blend`'s table on every (background level, alpha, level)."""
    return _vector_exact_levels(tuple(int(x) for x in levels), blend)


def _background(choice: np.ndarray | None, lv: np.ndarray, out: np.ndarray) -> np.ndarray | np.float32:
    # The float32 background level of each pixel for `_vector_blend`: lv[0] as a scalar where no
    # choice is made (one level), else lv[choice] for a uint8 choice among the levels lv (float32,
    # small integers) written into out; between two levels lv[0] + choice·(lv[1] − lv[0]), exact
    # in float32 (three vector passes in place of a gather, whose uint8 index NumPy converts to
    # intp first).
    if choice is None:
        return lv[0]
    if len(lv) == 2:
        np.copyto(out, choice)
        np.multiply(out, lv[1] - lv[0], out=out)
        np.add(out, lv[0], out=out)
    else:
        np.take(lv, choice, out=out, mode="clip")
    return out


def _vector_fill(planes: Callable[[int, int], Sequence[np.ndarray]], h: int, w: int, padded_w: int, ps: int,
                 levels: tuple[int, ...], which: Callable[[int, int], np.ndarray | None]) -> Fill:
    # Fill for patches_from_composite by `_vector_blend`: each band's R, G, B, A planes composited
    # into zero-padded uint8 planes, then put in patch order.
    lv = np.array(levels, dtype=np.float32)

    def make_fill() -> Callable[[np.ndarray, int], None]:
        bufs: list[np.ndarray] = []

        def fill(tiles: np.ndarray, y0: int) -> None:
            k, n = _band_rows(tiles, y0, h, ps)
            if not bufs:  # uint8 padded planes; float32 alpha, a channel, t and the background
                bufs.extend((np.zeros((3, k * ps, padded_w), dtype=np.uint8),
                             np.empty((4, k * ps, w), dtype=np.float32)))
            out, work = bufs[0][:, : k * ps], bufs[1][:, :n]
            if n:
                r, g, b, a = planes(y0, y0 + n)
                back = _background(which(y0, y0 + n), lv, work[3])
                _vector_blend(a, back, (r, g, b), [out[c, :n, :w] for c in range(3)], work[:2], work[2])
            out[:, n:] = 0
            for c in range(3):
                _plane_items(tiles, c, out[c], ps)

        return fill

    return make_fill


def patches_from_composite(rows: Callable[[int, int], np.ndarray], h: int, w: int, padded_h: int, padded_w: int,
                           ps: int, lut: np.ndarray, levels: tuple[int, ...],
                           which: Callable[[int, int], np.ndarray | None],
                           blend: Callable[[np.ndarray, np.ndarray], np.ndarray], threads: int = 1,
                           planes: Callable[[int, int], Sequence[np.ndarray]] | None = None) -> np.ndarray:
    """As `patches_from_planes(composite_planes(rgba, ...))` for an (h, w, 4) image read band by band
    (`rows(y0, y1)`: its uint8 rows y0 to y1): each band is composited into padded channel planes
    and put in patch order while in the cache, no whole-image planes.

    `planes(y0, y1)`: the same rows as R, G, B and A planes; with it, from `_VECTOR_MIN_PIXELS`
    on and where `_vector_blend` gives `blend`'s table on every input (`_vector_exact`), the
    composite is those vector passes.
    Otherwise the table: the padding is composited too, its index level 0 at alpha 0 on an
    extra background level 0, whose `blend` is level 0 (entry of the table, as every other)."""
    if planes is not None and h * w >= _VECTOR_MIN_PIXELS and _vector_exact(levels, blend):
        make = _vector_fill(planes, h, w, padded_w, ps, levels, which)
        return _patch_bands(padded_h, padded_w, ps, lut, make, threads)
    pad = len(levels)
    table = blend_table((*levels, 0), blend)
    gw = padded_w // ps

    def make_fill() -> Callable[[np.ndarray, int], None]:
        bufs: list[np.ndarray] = []

        def fill(tiles: np.ndarray, y0: int) -> None:
            k, n = _band_rows(tiles, y0, h, ps)
            if not bufs:
                packed = np.zeros((k * ps, padded_w, 4), dtype=np.uint8)
                packed[:, w:, 2] = pad
                bufs.extend((packed, np.empty((3, k * ps, padded_w), dtype=np.uint8)))
            packed, planes = bufs[0][: k * ps], bufs[1][:, : k * ps]
            packed[n:] = 0
            packed[n:, :, 2] = pad
            if n:
                rgba = rows(y0, y0 + n)
                packed[:n, :w, 1] = rgba[..., 3]
                choice = which(y0, y0 + n)
                if choice is not None:
                    packed[:n, :w, 2] = choice
            index = packed.view(np.uint32)[..., 0]
            for c in range(3):
                if n:
                    packed[:n, :w, 0] = rgba[..., c]
                np.take(table, index, out=planes[c], mode="clip")
            for c in range(3):
                _plane_items(tiles, c, planes[c], ps)

        return fill

    return _patch_bands(padded_h, padded_w, ps, lut, make_fill, threads)
