"""Staged reads of the tail and the horizontal pass (issue 44): a tile's source row segments
are read once, by aligned vector loads of a 2-D block, and the pixels' channels (or a bicubic
pass's taps) are then gathered from that block (`tl.gather`) instead of loaded byte by byte.

How a staged block is read: each tile row's first needed element lies at an element offset
`start` from the arena's base (an arena is allocated 16-byte aligned). The block is loaded from
`start` rounded down to `ALIGN` elements (16 bytes: `ALIGN` = 16 / element size), declared
aligned with `tl.multiple_of` and loaded without a mask, `SEG` elements per row (a power of
two): the loads are `ld.global.v4` (16 bytes a thread), as the build's PTX census records. A
row's needed elements then sit at `shift + i` (`shift` = `start` minus the rounded start), and
`SEG` is at least the row's needed elements plus `ALIGN - 1`. Reading without a mask is safe
because every arena is allocated `stage_pad` elements longer than its contents
(`launches.stage_pad`), and each staged row's start lies inside the image it belongs to (rows
beyond an image are clamped to its last row, taps beyond a pass's count to its first, and a
tail program of padding patches only starts at the image's last column).

Exactness is kept by construction: every value is the same stored element the direct load
read, and the sums run over the same taps in the same order.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kimi_oracle.pipelines.gpu.layout import (BOUND_COUNT, BOUND_FIRST, BOUND_LEN, I32, PRECISION_BITS,
                                              PRECISION_HALF, U8, U16)
from kimi_oracle.pipelines.gpu.tiles import _pow2

# Bytes of one vector load; an arena's base is at least this aligned (torch's allocations
# are 256-byte aligned on CUDA).
STAGE_BYTES = 16


@triton.jit
def _staged(arena, start, ALIGN: tl.constexpr, SEG: tl.constexpr):
    """(block [R, SEG], shift [R]): the SEG elements of each row from `start` [R] (element
    offsets from the arena's base, int64) rounded down to ALIGN, by aligned vector loads."""
    base = tl.multiple_of(start - start % ALIGN, ALIGN)
    block = tl.load(arena + base[:, None] + tl.arange(0, SEG)[None, :])
    return block, (start - base).to(tl.int32)


@triton.jit
def staged_row_pixels(arena, line, x0, cols, NCH: tl.constexpr, ALIGN: tl.constexpr,
                      SEG: tl.constexpr):
    """The pixels (row r, x0 + cols[0, c]) of an image whose rows start at element offsets
    `line` [R] from the arena's base: one staged block, the channels then gathered from it
    as one flat block (a flat gather keeps the index's layout: 2 pixels a thread)."""
    R: tl.constexpr = line.shape[0]
    C: tl.constexpr = cols.shape[1]
    block, shift = _staged(arena, line + x0 * NCH, ALIGN, SEG)
    flat = tl.reshape(block, [R * SEG])
    at = tl.reshape(tl.arange(0, R)[:, None] * SEG + shift[:, None] + cols * NCH, [R * C])
    return _picked_flat(flat, at, NCH, R * SEG, R, C)


@triton.jit
def _picked_flat(flat, at, NCH: tl.constexpr, N: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    """The NCH channels of the pixels whose first channel is at `at` [R * C] of `flat` (N
    elements; an index past it, only on masked lanes, reads its last), as [R, C] (channels
    past NCH are 0, as `_load_pixel` gives them)."""
    c0 = tl.gather(flat, tl.minimum(at, N - 1), axis=0)
    absent = tl.zeros_like(c0)
    c1 = absent
    c2 = absent
    c3 = absent
    if NCH > 1:
        c1 = tl.gather(flat, tl.minimum(at + 1, N - 1), axis=0)
    if NCH > 2:
        c2 = tl.gather(flat, tl.minimum(at + 2, N - 1), axis=0)
    if NCH > 3:
        c3 = tl.gather(flat, tl.minimum(at + 3, N - 1), axis=0)
    return (tl.reshape(c0, [R, C]), tl.reshape(c1, [R, C]), tl.reshape(c2, [R, C]),
            tl.reshape(c3, [R, C]))


@triton.jit
def staged_vertical(arena, img, row_w, y, y_ok, x0, cols, ok, coef, bounds, ksize,
                    NCH: tl.constexpr, DT: tl.constexpr, PREMULTIPLY: tl.constexpr,
                    ALIGN: tl.constexpr, SEG: tl.constexpr):
    """The vertical bicubic sums of output rows `y` [R] at columns x0 + cols [1, C] over the
    image at element offset `img` (rows of `row_w` elements): per tap, the tap's source rows
    are one staged block. Same taps, weights and order as `kernels._bicubic`."""
    first, count, weights, acc0, acc1, acc2, acc3 = _sum_setup(bounds, coef, y, y_ok, ksize, ok, DT)
    for k in range(ksize):
        used = y_ok & (k < count)
        w = tl.load(weights + k, mask=used, other=0)[:, None]
        source_row = tl.where(used, first + k, first)  # a row of the image, used or not
        c0, c1, c2, c3 = staged_row_pixels(arena, img + source_row.to(tl.int64) * row_w, x0, cols,
                                           NCH, ALIGN, SEG)
        acc0, acc1, acc2, acc3 = _summed(acc0, acc1, acc2, acc3, c0, c1, c2, c3, w,
                                         ok & used[:, None], NCH, DT, PREMULTIPLY)
    return _rounded(acc0, DT), _rounded(acc1, DT), _rounded(acc2, DT), _rounded(acc3, DT)


@triton.jit
def staged_horizontal(arena, line, x, x_ok, ok, coef, bounds, ksize, x_first,
                      NCH: tl.constexpr, DT: tl.constexpr, PREMULTIPLY: tl.constexpr,
                      ALIGN: tl.constexpr, WIN: tl.constexpr):
    """The horizontal bicubic sums of columns `x` [1, C] of rows starting at element offsets
    `line` [R] from the arena's base, from one staged block of WIN elements a row, which the
    caller has checked holds every tap of the tile (`x_first`: the first tap of its first
    column). Same taps, weights and order as `kernels._bicubic`."""
    first, count, weights, acc0, acc1, acc2, acc3 = _sum_setup(bounds, coef, x, x_ok, ksize, ok, DT)
    R: tl.constexpr = line.shape[0]
    C: tl.constexpr = x.shape[1]
    block, shift = _staged(arena, line + x_first * NCH, ALIGN, WIN)
    flat = tl.reshape(block, [R * WIN])
    # columns past the image start at the tile's first tap: no index below the block
    at = tl.reshape(tl.arange(0, R)[:, None] * WIN + shift[:, None]
                    + (tl.where(x_ok, first, x_first) - x_first) * NCH, [R * C])
    for k in range(ksize):
        tap = ok & (k < count)
        w = tl.load(weights + k, mask=x_ok & (k < count), other=0)
        c0, c1, c2, c3 = _picked_flat(flat, at + k * NCH, NCH, R * WIN, R, C)
        acc0, acc1, acc2, acc3 = _summed(acc0, acc1, acc2, acc3, c0, c1, c2, c3, w, tap, NCH, DT,
                                         PREMULTIPLY)
    return _rounded(acc0, DT), _rounded(acc1, DT), _rounded(acc2, DT), _rounded(acc3, DT)


@triton.jit
def _muldiv255(a, b):
    """Pillow's MULDIV255(a, b): a * b / 255 rounded, without a division."""
    t = a * b + 128
    return ((t >> 8) + t) >> 8


@triton.jit
def _premultiply(v0, v1, v2, v3, NCH: tl.constexpr):
    """RGBA -> RGBa, LA -> La (8-bit only): colour bands times alpha, alpha kept."""
    if NCH == 4:
        v0 = _muldiv255(v0, v3)
        v1 = _muldiv255(v1, v3)
        v2 = _muldiv255(v2, v3)
    else:
        v0 = _muldiv255(v0, v1)
    return v0, v1, v2


@triton.jit
def _summed(acc0, acc1, acc2, acc3, c0, c1, c2, c3, w, tap, NCH: tl.constexpr, DT: tl.constexpr,
            PREMULTIPLY: tl.constexpr):
    """One tap of a bicubic sum over NCH channels of stored values c0..c3, with weight `w`.

    8-bit: int32 terms (a masked tap has weight 0); PREMULTIPLY: colour bands times alpha
    first. Wider kinds: float64 terms (exact for uint16, int32 and float32), added only where
    `tap` holds: Pillow adds only the first `count` terms, and adding 0.0 would turn -0.0
    into +0.0. Written out in one function: the interpreter's cost is per call."""
    if DT == U8:
        v0 = c0.to(tl.int32)
        v1 = c1.to(tl.int32)
        v2 = c2.to(tl.int32)
        if PREMULTIPLY:
            v0, v1, v2 = _premultiply(v0, v1, v2, c3.to(tl.int32), NCH)
        acc0 = acc0 + v0 * w
        if NCH > 1:
            acc1 = acc1 + v1 * w
        if NCH > 2:
            acc2 = acc2 + v2 * w
        if NCH > 3:
            acc3 = acc3 + c3.to(tl.int32) * w
    else:
        acc0 = tl.where(tap, acc0 + c0.to(tl.float64) * w, acc0)
        if NCH > 1:
            acc1 = tl.where(tap, acc1 + c1.to(tl.float64) * w, acc1)
        if NCH > 2:
            acc2 = tl.where(tap, acc2 + c2.to(tl.float64) * w, acc2)
        if NCH > 3:
            acc3 = tl.where(tap, acc3 + c3.to(tl.float64) * w, acc3)
    return acc0, acc1, acc2, acc3


@triton.jit
def _sum_setup(bounds, coef, index, index_ok, ksize, ok, DT: tl.constexpr):
    """(first tap, tap count, weights, and the start of each of the four channel sums) of the
    output indices `index` of a bicubic axis; the sums start at half a unit on the 8-bit path
    (the final shift rounds)."""
    first = tl.load(bounds + index * BOUND_LEN + BOUND_FIRST, mask=index_ok, other=0)
    count = tl.load(bounds + index * BOUND_LEN + BOUND_COUNT, mask=index_ok, other=0)
    if DT == U8:
        start = tl.full(ok.shape, PRECISION_HALF, tl.int32)
    else:
        start = tl.zeros(ok.shape, tl.float64)
    return first, count, coef + index * ksize, start, start, start, start


@triton.jit
def _clip8(v):
    return tl.minimum(tl.maximum(v, 0), 255)


@triton.jit
def _round_half_away(acc):
    """float64 -> int32, rounding half away from zero (Pillow's `(int)(x ± 0.5)`)."""
    return tl.where(acc >= 0.0, acc + 0.5, acc - 0.5).to(tl.int32)


@triton.jit
def _rounded(acc, DT: tl.constexpr):
    """The stored value of a bicubic sum, rounded and clipped the way Pillow does it."""
    if DT == U8:
        return _clip8(acc >> PRECISION_BITS)
    elif DT == U16:
        return tl.minimum(tl.maximum(_round_half_away(acc), 0), 65535)
    elif DT == I32:
        return _round_half_away(acc)
    else:
        return acc.to(tl.float32)


def stage_segment(cols: int, nch: int, item: int, rows: int = 1, threads: int = 0) -> int:
    """SEG: elements of one staged row for `cols` pixels of `nch` channels (`item` bytes each),
    a power of two of at least cols * nch + ALIGN - 1, and of at least 8 bytes a thread over
    the block's `rows` rows (`threads` of a program: 32 * num_warps on CUDA), so that every
    thread's share of the block is one vector load (`.v2` or wider) rather than a 32-bit one
    (1-channel 8-bit blocks: they read up to 2x the row they need, from L2)."""
    return _pow2(max(cols * nch + STAGE_BYTES // item - 1, -(-8 * threads // (rows * item))))


def tail_window(cols: int, nch: int, item: int) -> int:
    """WIN of the tail's horizontal pass: a staged row for `cols` output pixels at up to a 2x
    downscale with a 2x support (tiles whose taps span more read them tap by tap)."""
    return stage_segment(2 * cols + 8, nch, item)
