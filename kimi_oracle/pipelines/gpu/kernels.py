"""Triton kernels of the GPU pipeline: one separable bicubic pass, a colour conversion at the
source size, and the fused tail (second pass or NEAREST gather, conversion, composite, pad,
normalization LUT, patchify).

Kernels take plain tensors; every per-image value arrives in an int64 metadata row whose
layout is `layout.py` (read here by name), and a launch covers every image of a batch that
shares the kernel's specialization: program `pid` reads its (image slot, tile) from a tile
table. What differs between images of different modes is a compile-time specialization
(`tl.constexpr`): storage kind `DT`, channel count `NCH`, how the tail fetches a pixel
(`FETCH`), how channels become RGBA (`CONV`), the axis of a pass (`AXIS`) and whether it
premultiplies (`PREMULTIPLY`). Only cheap per-pixel choices stay runtime flags of the row
(un-premultiply, composite, alpha present, transparency key), so a kernel holds the
registers of one path, not of all of them.

Float storage kinds must be launched with `enable_fp_fusion=False`: Pillow's C code does not
contract a*b+c into an FMA. Offsets inside one image are int32 (the host refuses images of
`MAX_IMAGE_ELEMENTS` or more); image bases in the arenas and the output are int64.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kimi_oracle.pipelines.gpu.layout import (
    AXIS_H,
    BOUND_COUNT,
    BOUND_FIRST,
    BOUND_LEN,
    CONV_CMYK,
    CONV_F32,
    CONV_I32,
    CONV_RGB,
    CONV_TABLE,
    EXT_COLS,
    EXT_LEN,
    EXT_PATCH_COLS,
    EXT_PATCH_ROWS,
    EXT_ROWS,
    EXT_WRITTEN,
    F32,
    FETCH_DIRECT,
    FETCH_H,
    FETCH_NEAREST,
    LEVELS,
    PASS_BOUND,
    PASS_COEF,
    PASS_DST,
    PASS_KSIZE,
    PASS_LEN,
    PASS_OUT_H,
    PASS_OUT_W,
    PASS_SRC,
    PASS_SRC_W,
    ROW_ALPHA,
    ROW_BG_EVEN,
    ROW_BG_ODD,
    ROW_BG_SQUARE,
    ROW_BOUND,
    ROW_COEF,
    ROW_COMPOSITE,
    ROW_DST,
    ROW_ELEMS,
    ROW_GRID_W,
    ROW_H,
    ROW_KEY,
    ROW_KEY_ON,
    ROW_KSIZE,
    ROW_LEN,
    ROW_NEAREST_X,
    ROW_NEAREST_Y,
    ROW_PATCH0,
    ROW_SRC,
    ROW_SRC_W,
    ROW_TABLE,
    ROW_UNPREMULTIPLY,
    ROW_W,
    TILE_COL,
    TILE_LEN,
    TILE_ROW,
    TILE_SLOT,
)
from kimi_oracle.pipelines.gpu.staging import (_clip8, _muldiv255, _rounded, _sum_setup, _summed,
                                               staged_horizontal, staged_row_pixels, staged_vertical)

# --------------------------------------------------------------------------------------------
# Pillow's integer arithmetic
# --------------------------------------------------------------------------------------------


@triton.jit
def _unpremultiply(c, alpha):
    """RGBa -> RGBA for one colour band: kept where alpha is 0 or 255, else min(255, 255 c // alpha)."""
    safe = tl.where(alpha == 0, 1, alpha)
    scaled = tl.minimum((255 * c) // safe, 255)
    return tl.where((alpha == 0) | (alpha == 255), c, scaled)


@triton.jit
def _load_pixel(at, mask, NCH: tl.constexpr):
    """The NCH channel values of the pixels at `at` (channels past NCH are 0)."""
    c0 = tl.load(at, mask=mask, other=0)
    absent = tl.zeros_like(c0)
    c1 = absent
    c2 = absent
    c3 = absent
    if NCH > 1:
        c1 = tl.load(at + 1, mask=mask, other=0)
    if NCH > 2:
        c2 = tl.load(at + 2, mask=mask, other=0)
    if NCH > 3:
        c3 = tl.load(at + 3, mask=mask, other=0)
    return c0, c1, c2, c3


@triton.jit
def _as_level(v, DT: tl.constexpr):
    """A stored value as the conversions read it: int32, or float32 for "F"."""
    if DT == F32:
        return v.to(tl.float32)
    else:
        return v.to(tl.int32)


@triton.jit
def _bicubic(img, line, stride, index, index_ok, ok, coef, bounds, ksize,
             NCH: tl.constexpr, DT: tl.constexpr, PREMULTIPLY: tl.constexpr):
    """One bicubic output sample per pixel, all NCH channels from the same taps.

    `index` is the position along the resized axis (it selects the weights and the first
    tap; `index_ok` masks it, with its own shape, so that a row or column of a 2-D tile loads
    its weights once); tap k of a pixel is at `img + line + (first + k) * stride`.
    PREMULTIPLY: colour bands are multiplied by the last band (alpha) on load.
    """
    first, count, weights, acc0, acc1, acc2, acc3 = _sum_setup(bounds, coef, index, index_ok, ksize, ok, DT)
    for k in range(ksize):
        tap = ok & (k < count)
        w = tl.load(weights + k, mask=index_ok & (k < count), other=0)
        c0, c1, c2, c3 = _load_pixel(img + line + (first + k) * stride, tap, NCH)
        acc0, acc1, acc2, acc3 = _summed(acc0, acc1, acc2, acc3, c0, c1, c2, c3, w, tap, NCH, DT,
                                         PREMULTIPLY)
    return _rounded(acc0, DT), _rounded(acc1, DT), _rounded(acc2, DT), _rounded(acc3, DT)


@triton.jit
def _store_pixel(at, c0, c1, c2, c3, mask, NCH: tl.constexpr):
    ty = at.dtype.element_ty
    tl.store(at, c0.to(ty), mask=mask)
    if NCH > 1:
        tl.store(at + 1, c1.to(ty), mask=mask)
    if NCH > 2:
        tl.store(at + 2, c2.to(ty), mask=mask)
    if NCH > 3:
        tl.store(at + 3, c3.to(ty), mask=mask)


# --------------------------------------------------------------------------------------------
# Kernel 1: one separable bicubic pass, 2-D tiles of the output
# --------------------------------------------------------------------------------------------


@triton.jit
def _horizontal(arena, img, row_w, y, x0, x, x_ok, ok, last_x, coef, bounds, ksize,
                NCH: tl.constexpr, DT: tl.constexpr, PREMULTIPLY: tl.constexpr,
                ALIGN: tl.constexpr, WIN: tl.constexpr):
    """The horizontal bicubic sums of rows `y` [R] (clamped to the image's rows for their
    addresses), columns `x` [1, C] (the first `x0`, the last valid `last_x`) of the image at
    element offset `img` (rows of `row_w` elements): from a staged block when every tap of the
    tile fits in WIN elements a row (upscales and downscales up to about WIN / (C * NCH)),
    else tap by tap (`_bicubic`)."""
    x_first = tl.load(bounds + x0 * BOUND_LEN + BOUND_FIRST)
    x_end = tl.load(bounds + last_x * BOUND_LEN + BOUND_FIRST) + \
        tl.load(bounds + last_x * BOUND_LEN + BOUND_COUNT)
    line = img + y.to(tl.int64) * row_w
    if (x_end - x_first) * NCH + ALIGN - 1 <= WIN:
        c0, c1, c2, c3 = staged_horizontal(arena, line, x, x_ok, ok, coef, bounds, ksize, x_first,
                                           NCH, DT, PREMULTIPLY, ALIGN, WIN)
    else:
        c0, c1, c2, c3 = _bicubic(arena, line[:, None], NCH, x, x_ok, ok, coef, bounds, ksize,
                                  NCH, DT, PREMULTIPLY)
    return c0, c1, c2, c3


@triton.jit
def resample_pass_kernel(src_ptr, dst_ptr, rows_ptr, tiles_ptr, coef_ptr, bound_ptr,
                         DT: tl.constexpr, NCH: tl.constexpr, AXIS: tl.constexpr,
                         PREMULTIPLY: tl.constexpr, BLOCK_Y: tl.constexpr,
                         BLOCK_X: tl.constexpr, ALIGN: tl.constexpr, SEG: tl.constexpr,
                         WIN: tl.constexpr):
    """One Pillow bicubic pass (AXIS) over a BLOCK_Y x BLOCK_X tile of one image's output.

    `src_ptr` is the arena's base (16-byte aligned): the horizontal pass stages its rows'
    source segments from it (`staging.py`), the vertical pass each tap's rows; ALIGN is 16
    bytes in elements, SEG the staged elements of a row of the vertical pass (BLOCK_X pixels),
    WIN of the horizontal pass."""
    tile = tiles_ptr + tl.program_id(0) * TILE_LEN
    row = rows_ptr + tl.load(tile + TILE_SLOT).to(tl.int64) * PASS_LEN
    src = tl.load(row + PASS_SRC)
    dst = dst_ptr + tl.load(row + PASS_DST)
    src_w = tl.load(row + PASS_SRC_W).to(tl.int32)
    out_h = tl.load(row + PASS_OUT_H).to(tl.int32)
    out_w = tl.load(row + PASS_OUT_W).to(tl.int32)
    coef = coef_ptr + tl.load(row + PASS_COEF)
    bounds = bound_ptr + tl.load(row + PASS_BOUND)
    ksize = tl.load(row + PASS_KSIZE).to(tl.int32)

    y_line = tl.load(tile + TILE_ROW).to(tl.int32) * BLOCK_Y + tl.arange(0, BLOCK_Y)
    x0 = tl.load(tile + TILE_COL).to(tl.int32) * BLOCK_X
    y = y_line[:, None]
    x = x0 + tl.arange(0, BLOCK_X)[None, :]
    y_ok = y < out_h
    x_ok = x < out_w
    ok = y_ok & x_ok
    if AXIS == AXIS_H:
        # output (y, x) sums source row y around column x
        c0, c1, c2, c3 = _horizontal(src_ptr, src, src_w * NCH, tl.minimum(y_line, out_h - 1),
                                     x0, x, x_ok, ok,
                                     tl.minimum(x0 + BLOCK_X, out_w) - 1, coef, bounds, ksize,
                                     NCH, DT, PREMULTIPLY, ALIGN, WIN)
    else:
        # output (y, x) sums source column x around row y, each tap's rows one staged block
        c0, c1, c2, c3 = staged_vertical(src_ptr, src, src_w * NCH, y_line, y_line < out_h, x0,
                                         tl.arange(0, BLOCK_X)[None, :], ok, coef, bounds, ksize,
                                         NCH, DT, PREMULTIPLY, ALIGN, SEG)
    _store_pixel(dst + (y * out_w + x) * NCH, c0, c1, c2, c3, ok, NCH)


# --------------------------------------------------------------------------------------------
# Pixel -> RGB: fetch (tail), then the fill: un-premultiply, convert, composite
# --------------------------------------------------------------------------------------------


@triton.jit
def _fetch(src_ptr, coef_ptr, bound_ptr, nearest_ptr, row, y_line, y, x0, cols, ok,
           DT: tl.constexpr, NCH: tl.constexpr, FETCH: tl.constexpr, ALIGN: tl.constexpr,
           SEG: tl.constexpr, WIN: tl.constexpr):
    """The NCH channels of pixels (y, x0 + cols) of the image being produced (`y_line` [R]:
    the rows, `y` the same as [R, 1]): read directly, through NEAREST index tables, or as the
    second bicubic pass over the intermediate image. The direct read and the vertical pass
    stage each source row segment once (`staging.py`)."""
    img = tl.load(row + ROW_SRC)
    src_w = tl.load(row + ROW_SRC_W).to(tl.int32)
    height = tl.load(row + ROW_H).to(tl.int32)
    width = tl.load(row + ROW_W).to(tl.int32)
    x = x0 + cols
    # A program of padding patches only starts past the image (all its lanes masked): its
    # staged reads and its first tap start at the last column instead, inside the image.
    x_in = tl.minimum(x0, width - 1)
    if FETCH == FETCH_DIRECT:
        line = img + tl.minimum(y_line, height - 1).to(tl.int64) * (src_w * NCH)
        c0, c1, c2, c3 = staged_row_pixels(src_ptr, line, x_in, cols, NCH, ALIGN, SEG)
    elif FETCH == FETCH_NEAREST:
        sy = tl.load(nearest_ptr + tl.load(row + ROW_NEAREST_Y) + y, mask=ok, other=-1)
        sx = tl.load(nearest_ptr + tl.load(row + ROW_NEAREST_X) + x, mask=ok, other=-1)
        hit = ok & (sy >= 0) & (sx >= 0)  # Pillow leaves positions without a source at 0
        c0, c1, c2, c3 = _load_pixel(src_ptr + img + (sy * src_w + sx) * NCH, hit, NCH)
    else:
        coef = coef_ptr + tl.load(row + ROW_COEF)
        bounds = bound_ptr + tl.load(row + ROW_BOUND)
        ksize = tl.load(row + ROW_KSIZE).to(tl.int32)
        if FETCH == FETCH_H:
            c0, c1, c2, c3 = _horizontal(src_ptr, img, src_w * NCH, tl.minimum(y_line, height - 1),
                                         x_in, x, x < width, ok,
                                         tl.minimum(x0 + cols.shape[1], width) - 1, coef, bounds,
                                         ksize, NCH, DT, False, ALIGN, WIN)
        else:
            c0, c1, c2, c3 = staged_vertical(src_ptr, img, src_w * NCH, y_line, y_line < height,
                                             x_in, cols, ok, coef, bounds, ksize, NCH, DT, False,
                                             ALIGN, SEG)
    return _as_level(c0, DT), _as_level(c1, DT), _as_level(c2, DT), _as_level(c3, DT)


@triton.jit
def _unpack(packed):
    return packed & 255, (packed >> 8) & 255, (packed >> 16) & 255, (packed >> 24) & 255


@triton.jit
def _to_rgba(c0, c1, c2, c3, row, table_ptr, ok, NCH: tl.constexpr, CONV: tl.constexpr):
    """Fill's conversion of the fetched channels to RGBA levels (int32 0..255)."""
    opaque = tl.full(ok.shape, 255, tl.int32)
    if CONV == CONV_RGB:
        r = c0
        g = c1
        b = c2
        a = opaque
        if NCH == 4:
            a = tl.where(tl.load(row + ROW_ALPHA) != 0, c3, opaque)
    elif CONV == CONV_TABLE:
        # The table holds Pillow's own conversion of every value (tables.conversion_table).
        if NCH == 1:
            index = c0
        elif NCH == 2:
            index = c0 * LEVELS + c1
        else:
            index = (c0 * LEVELS + c1) * LEVELS + c2
        r, g, b, a = _unpack(tl.load(table_ptr + tl.load(row + ROW_TABLE) + index, mask=ok,
                                     other=0))
    elif CONV == CONV_CMYK:
        # NumPy twin: tables.cmyk_to_rgb
        not_k = 255 - c3
        r = _clip8(not_k - _muldiv255(c0, not_k))
        g = _clip8(not_k - _muldiv255(c1, not_k))
        b = _clip8(not_k - _muldiv255(c2, not_k))
        a = opaque
    elif CONV == CONV_I32:
        # NumPy twin: tables.i32_to_rgba
        level = _clip8(c0)
        keyed = (tl.load(row + ROW_KEY_ON) != 0) & (c0 == tl.load(row + ROW_KEY).to(tl.int32))
        r = level
        g = level
        b = level
        a = tl.where(keyed, 0, opaque)
    else:
        # "F" -> "L" (NumPy twin: tables.f32_to_level): NaN -> 0, clip, truncate.
        finite = tl.where(c0 != c0, 0.0, c0)
        level = tl.where(finite <= 0.0, 0, tl.where(finite >= 255.0, 255, finite.to(tl.int32)))
        r = level
        g = level
        b = level
        a = opaque
    return r, g, b, a


@triton.jit
def _fill(c0, c1, c2, c3, row, table_ptr, composite_ptr, y, x, ok, NCH: tl.constexpr,
          CONV: tl.constexpr):
    """The RGB levels (int32) of pixel (y, x) after the fill: un-premultiply, convert, composite."""
    if NCH == 2 or NCH == 4:
        # Resized RGBA / LA are premultiplied (RGBa, La): alpha is the last band.
        unpremultiply = tl.load(row + ROW_UNPREMULTIPLY) != 0
        if NCH == 4:
            c0 = tl.where(unpremultiply, _unpremultiply(c0, c3), c0)
            c1 = tl.where(unpremultiply, _unpremultiply(c1, c3), c1)
            c2 = tl.where(unpremultiply, _unpremultiply(c2, c3), c2)
        else:
            c0 = tl.where(unpremultiply, _unpremultiply(c0, c1), c0)
    r, g, b, a = _to_rgba(c0, c1, c2, c3, row, table_ptr, ok, NCH, CONV)
    if tl.load(row + ROW_COMPOSITE) != 0:
        # The reference's float32 composite, tabulated per background level (alpha x colour
        # level, tables.composite_table); the chessboard picks the level's table.
        square = tl.load(row + ROW_BG_SQUARE).to(tl.int32)
        even = ((y // square + x // square) % 2) == 0
        level = tl.where(even, tl.load(row + ROW_BG_EVEN).to(tl.int32),
                         tl.load(row + ROW_BG_ODD).to(tl.int32))
        over = composite_ptr + (level * LEVELS + a) * LEVELS
        r = tl.load(over + r, mask=ok, other=0).to(tl.int32)
        g = tl.load(over + g, mask=ok, other=0).to(tl.int32)
        b = tl.load(over + b, mask=ok, other=0).to(tl.int32)
    return r, g, b


# --------------------------------------------------------------------------------------------
# Kernel 2: fill at the source size (before_resize with a resize to do)
# --------------------------------------------------------------------------------------------


@triton.jit
def convert_kernel(src_ptr, dst_ptr, rows_ptr, tiles_ptr, table_ptr, composite_ptr,
                   DT: tl.constexpr, NCH: tl.constexpr, CONV: tl.constexpr,
                   BLOCK: tl.constexpr):
    """Convert + composite a block of pixels to RGB uint8 HWC at the same size."""
    tile = tiles_ptr + tl.program_id(0) * TILE_LEN
    row = rows_ptr + tl.load(tile + TILE_SLOT).to(tl.int64) * ROW_LEN
    width = tl.load(row + ROW_W).to(tl.int32)
    pixels = tl.load(row + ROW_ELEMS).to(tl.int32)
    e = tl.load(tile + TILE_COL) * BLOCK + tl.arange(0, BLOCK)
    ok = e < pixels
    src = src_ptr + tl.load(row + ROW_SRC)
    c0, c1, c2, c3 = _load_pixel(src + e * NCH, ok, NCH)
    r, g, b = _fill(_as_level(c0, DT), _as_level(c1, DT), _as_level(c2, DT), _as_level(c3, DT),
                    row, table_ptr, composite_ptr, e // width, e % width, ok, NCH, CONV)
    _store_pixel(dst_ptr + tl.load(row + ROW_DST) + e * 3, r, g, b, b, ok, 3)


# --------------------------------------------------------------------------------------------
# Kernel 3: the fused tail, written into the output in patch order
# --------------------------------------------------------------------------------------------


@triton.jit
def _any_max(v):
    """The largest value of a 2-D block."""
    return tl.max(tl.max(v, axis=1), axis=0)


@triton.jit
def tail_kernel(src_ptr, out_ptr, rows_ptr, tiles_ptr, coef_ptr, bound_ptr, nearest_ptr,
                table_ptr, composite_ptr, lut_ptr, extent_ptr,
                DT: tl.constexpr, NCH: tl.constexpr, FETCH: tl.constexpr, CONV: tl.constexpr,
                P: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr,
                PATCHES: tl.constexpr, PATCH_ROWS: tl.constexpr, ALIGN: tl.constexpr,
                SEG: tl.constexpr, WIN: tl.constexpr):
    """PATCHES patches of each of PATCH_ROWS patch rows -> padded, normalized (LUT) patch values.

    A program covers ROWS x COLS pixels of each of its patch rows (powers of two, at least
    P x PATCHES * P; ROWS * PATCH_ROWS rows in all), so that each source row segment is read
    once for all three channel planes (`_fetch`), and writes their patch planes, which lie one
    after the other in the output. Each program also stores, at `extent_ptr + EXT_LEN * pid`,
    the extent of what it wrote (EXT_*): the host builds `grid_thws` from these records, not
    from its plan.
    """
    pid = tl.program_id(0)
    tile = tiles_ptr + pid * TILE_LEN
    row = rows_ptr + tl.load(tile + TILE_SLOT).to(tl.int64) * ROW_LEN
    height = tl.load(row + ROW_H).to(tl.int32)
    width = tl.load(row + ROW_W).to(tl.int32)
    grid_w = tl.load(row + ROW_GRID_W).to(tl.int32)
    patches = tl.load(row + ROW_ELEMS).to(tl.int32) // (P * P)
    lane_y = tl.arange(0, ROWS * PATCH_ROWS)
    within_y = lane_y % ROWS
    patch_y = tl.load(tile + TILE_ROW).to(tl.int32) * PATCH_ROWS + lane_y // ROWS
    patch_x0 = tl.load(tile + TILE_COL).to(tl.int32) * PATCHES
    cols = tl.arange(0, COLS)[None, :]
    patch_x = patch_x0 + cols // P
    inside = (within_y < P)[:, None] & (cols < PATCHES * P) & (patch_x < grid_w) & \
        (patch_y[:, None] * grid_w + patch_x < patches)
    y_line = patch_y * P + within_y
    y = y_line[:, None]
    x0 = patch_x0 * P
    x = x0 + cols
    ok = inside & (y < height) & (x < width)
    c0, c1, c2, c3 = _fetch(src_ptr, coef_ptr, bound_ptr, nearest_ptr, row, y_line, y, x0, cols,
                            ok, DT, NCH, FETCH, ALIGN, SEG, WIN)
    r, g, b = _fill(c0, c1, c2, c3, row, table_ptr, composite_ptr, y, x, ok, NCH, CONV)
    # Padding is level 0, normalized like any other pixel.
    r = tl.where(ok, r, 0)
    g = tl.where(ok, g, 0)
    b = tl.where(ok, b, 0)
    image_out = out_ptr + tl.load(row + ROW_PATCH0) * (3 * P * P)
    out = image_out + ((patch_y[:, None] * grid_w + patch_x) * (3 * P * P) + within_y[:, None] * P
                       + cols % P)
    tl.store(out, tl.load(lut_ptr + r, mask=inside, other=0.0), mask=inside)
    tl.store(out + P * P, tl.load(lut_ptr + LEVELS + g, mask=inside, other=0.0), mask=inside)
    tl.store(out + 2 * P * P, tl.load(lut_ptr + 2 * LEVELS + b, mask=inside, other=0.0), mask=inside)
    # The extent of the stores above, from the same masks that bound them.
    extent = extent_ptr + pid * EXT_LEN
    tl.store(extent + EXT_WRITTEN, tl.sum(tl.sum(inside.to(tl.int32), axis=1), axis=0))
    tl.store(extent + EXT_PATCH_ROWS, _any_max(tl.where(inside, patch_y[:, None] + 1, 0)))
    tl.store(extent + EXT_PATCH_COLS, _any_max(tl.where(inside, patch_x + 1, 0)))
    tl.store(extent + EXT_ROWS, _any_max(tl.where(ok, y + 1, 0)))
    tl.store(extent + EXT_COLS, _any_max(tl.where(ok, x + 1, 0)))
