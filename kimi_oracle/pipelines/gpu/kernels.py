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
    I32,
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
    PRECISION_BITS,
    PRECISION_HALF,
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
    U8,
    U16,
)

# --------------------------------------------------------------------------------------------
# Pillow's integer arithmetic
# --------------------------------------------------------------------------------------------


@triton.jit
def _muldiv255(a, b):
    """Pillow's MULDIV255(a, b): a * b / 255 rounded, without a division."""
    t = a * b + 128
    return ((t >> 8) + t) >> 8


@triton.jit
def _unpremultiply(c, alpha):
    """RGBa -> RGBA for one colour band: kept where alpha is 0 or 255, else min(255, 255 c // alpha)."""
    safe = tl.where(alpha == 0, 1, alpha)
    scaled = tl.minimum((255 * c) // safe, 255)
    return tl.where((alpha == 0) | (alpha == 255), c, scaled)


@triton.jit
def _clip8(v):
    return tl.minimum(tl.maximum(v, 0), 255)


@triton.jit
def _round_half_away(acc):
    """float64 -> int32, rounding half away from zero (Pillow's `(int)(x ± 0.5)`)."""
    return tl.where(acc >= 0.0, acc + 0.5, acc - 0.5).to(tl.int32)


# --------------------------------------------------------------------------------------------
# Pixels: load, bicubic sums, store
# --------------------------------------------------------------------------------------------


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
def _as_term(v, DT: tl.constexpr):
    """A stored value as the bicubic sum reads it: int32 on the 8-bit path, else float64."""
    if DT == U8:
        return v.to(tl.int32)
    elif DT == U16:
        return v.to(tl.int32).to(tl.float64)
    else:
        return v.to(tl.float64)


@triton.jit
def _accumulate(acc, v, w, tap, DT: tl.constexpr):
    if DT == U8:
        return acc + v * w  # masked taps load weight 0
    else:
        # Pillow adds only the first `count` terms; adding 0.0 would turn -0.0 into +0.0.
        return tl.where(tap, acc + v * w, acc)


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


@triton.jit
def _bicubic(img, line, stride, index, index_ok, ok, coef, bounds, ksize,
             NCH: tl.constexpr, DT: tl.constexpr, PREMULTIPLY: tl.constexpr):
    """One bicubic output sample per pixel, all NCH channels from the same taps.

    `index` is the position along the resized axis (it selects the weights and the first
    tap; `index_ok` masks it, with its own shape, so that a row or column of a 2-D tile loads
    its weights once); tap k of a pixel is at `img + line + (first + k) * stride`.
    PREMULTIPLY: colour bands are multiplied by the last band (alpha) on load.
    """
    first = tl.load(bounds + index * BOUND_LEN + BOUND_FIRST, mask=index_ok, other=0)
    count = tl.load(bounds + index * BOUND_LEN + BOUND_COUNT, mask=index_ok, other=0)
    weights = coef + index * ksize
    if DT == U8:
        start = tl.full(ok.shape, PRECISION_HALF, tl.int32)
    else:
        start = tl.zeros(ok.shape, tl.float64)
    acc0 = start
    acc1 = start
    acc2 = start
    acc3 = start
    for k in range(ksize):
        tap = ok & (k < count)
        w = tl.load(weights + k, mask=index_ok & (k < count), other=0)
        c0, c1, c2, c3 = _load_pixel(img + line + (first + k) * stride, tap, NCH)
        v0 = _as_term(c0, DT)
        v1 = _as_term(c1, DT)
        v2 = _as_term(c2, DT)
        v3 = _as_term(c3, DT)
        if PREMULTIPLY:
            # RGBA -> RGBa, LA -> La (8-bit only): colour bands times alpha, alpha kept.
            if NCH == 4:
                v0 = _muldiv255(v0, v3)
                v1 = _muldiv255(v1, v3)
                v2 = _muldiv255(v2, v3)
            else:
                v0 = _muldiv255(v0, v1)
        acc0 = _accumulate(acc0, v0, w, tap, DT)
        if NCH > 1:
            acc1 = _accumulate(acc1, v1, w, tap, DT)
        if NCH > 2:
            acc2 = _accumulate(acc2, v2, w, tap, DT)
        if NCH > 3:
            acc3 = _accumulate(acc3, v3, w, tap, DT)
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
def resample_pass_kernel(src_ptr, dst_ptr, rows_ptr, tiles_ptr, coef_ptr, bound_ptr,
                         DT: tl.constexpr, NCH: tl.constexpr, AXIS: tl.constexpr,
                         PREMULTIPLY: tl.constexpr, BLOCK_Y: tl.constexpr,
                         BLOCK_X: tl.constexpr):
    """One Pillow bicubic pass (AXIS) over a BLOCK_Y x BLOCK_X tile of one image's output."""
    tile = tiles_ptr + tl.program_id(0) * TILE_LEN
    row = rows_ptr + tl.load(tile + TILE_SLOT).to(tl.int64) * PASS_LEN
    src = src_ptr + tl.load(row + PASS_SRC)
    dst = dst_ptr + tl.load(row + PASS_DST)
    src_w = tl.load(row + PASS_SRC_W).to(tl.int32)
    out_h = tl.load(row + PASS_OUT_H).to(tl.int32)
    out_w = tl.load(row + PASS_OUT_W).to(tl.int32)
    coef = coef_ptr + tl.load(row + PASS_COEF)
    bounds = bound_ptr + tl.load(row + PASS_BOUND)
    ksize = tl.load(row + PASS_KSIZE).to(tl.int32)

    y = tl.load(tile + TILE_ROW) * BLOCK_Y + tl.arange(0, BLOCK_Y)[:, None]
    x = tl.load(tile + TILE_COL) * BLOCK_X + tl.arange(0, BLOCK_X)[None, :]
    y_ok = y < out_h
    x_ok = x < out_w
    ok = y_ok & x_ok
    if AXIS == AXIS_H:
        # output (y, x) sums source row y around column x
        c0, c1, c2, c3 = _bicubic(src, y * (src_w * NCH), NCH, x, x_ok, ok, coef, bounds, ksize,
                                  NCH, DT, PREMULTIPLY)
    else:
        # output (y, x) sums source column x around row y
        c0, c1, c2, c3 = _bicubic(src, x * NCH, src_w * NCH, y, y_ok, ok, coef, bounds, ksize,
                                  NCH, DT, PREMULTIPLY)
    _store_pixel(dst + (y * out_w + x) * NCH, c0, c1, c2, c3, ok, NCH)


# --------------------------------------------------------------------------------------------
# Pixel -> RGB: fetch (tail), then the fill: un-premultiply, convert, composite
# --------------------------------------------------------------------------------------------


@triton.jit
def _fetch(src_ptr, coef_ptr, bound_ptr, nearest_ptr, row, y, x, ok,
           DT: tl.constexpr, NCH: tl.constexpr, FETCH: tl.constexpr):
    """The NCH channels of pixel (y, x) of the image being produced: read directly, through
    NEAREST index tables, or as the second bicubic pass over the intermediate image."""
    img = src_ptr + tl.load(row + ROW_SRC)
    src_w = tl.load(row + ROW_SRC_W).to(tl.int32)
    if FETCH == FETCH_DIRECT:
        c0, c1, c2, c3 = _load_pixel(img + (y * src_w + x) * NCH, ok, NCH)
    elif FETCH == FETCH_NEAREST:
        sy = tl.load(nearest_ptr + tl.load(row + ROW_NEAREST_Y) + y, mask=ok, other=-1)
        sx = tl.load(nearest_ptr + tl.load(row + ROW_NEAREST_X) + x, mask=ok, other=-1)
        hit = ok & (sy >= 0) & (sx >= 0)  # Pillow leaves positions without a source at 0
        c0, c1, c2, c3 = _load_pixel(img + (sy * src_w + sx) * NCH, hit, NCH)
    else:
        coef = coef_ptr + tl.load(row + ROW_COEF)
        bounds = bound_ptr + tl.load(row + ROW_BOUND)
        ksize = tl.load(row + ROW_KSIZE).to(tl.int32)
        if FETCH == FETCH_H:
            c0, c1, c2, c3 = _bicubic(img, y * (src_w * NCH), NCH, x, ok, ok, coef, bounds,
                                      ksize, NCH, DT, False)
        else:
            c0, c1, c2, c3 = _bicubic(img, x * NCH, src_w * NCH, y, ok, ok, coef, bounds,
                                      ksize, NCH, DT, False)
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
def tail_kernel(src_ptr, out_ptr, rows_ptr, tiles_ptr, coef_ptr, bound_ptr, nearest_ptr,
                table_ptr, composite_ptr, lut_ptr, extent_ptr,
                DT: tl.constexpr, NCH: tl.constexpr, FETCH: tl.constexpr, CONV: tl.constexpr,
                P: tl.constexpr, BLOCK: tl.constexpr):
    """A block of output elements in patch order -> padded, normalized (LUT) patch values.

    Each program also stores, at `extent_ptr + EXT_LEN * pid`, the extent of what it wrote
    (EXT_*): the host builds `grid_thws` from these records, not from its plan.
    """
    pid = tl.program_id(0)
    tile = tiles_ptr + pid * TILE_LEN
    row = rows_ptr + tl.load(tile + TILE_SLOT).to(tl.int64) * ROW_LEN
    height = tl.load(row + ROW_H).to(tl.int32)
    width = tl.load(row + ROW_W).to(tl.int32)
    grid_w = tl.load(row + ROW_GRID_W).to(tl.int32)
    elements = tl.load(row + ROW_ELEMS).to(tl.int32)
    e = tl.load(tile + TILE_COL) * BLOCK + tl.arange(0, BLOCK)
    inside = e < elements
    patch = e // (P * P)
    within = e % (P * P)
    patch_y = patch // grid_w
    patch_x = patch % grid_w
    y = patch_y * P + within // P
    x = patch_x * P + within % P
    ok = inside & (y < height) & (x < width)
    c0, c1, c2, c3 = _fetch(src_ptr, coef_ptr, bound_ptr, nearest_ptr, row, y, x, ok, DT, NCH,
                            FETCH)
    r, g, b = _fill(c0, c1, c2, c3, row, table_ptr, composite_ptr, y, x, ok, NCH, CONV)
    # Padding is level 0, normalized like any other pixel.
    r = tl.where(ok, r, 0)
    g = tl.where(ok, g, 0)
    b = tl.where(ok, b, 0)
    image_out = out_ptr + tl.load(row + ROW_PATCH0) * (3 * P * P)
    out = image_out + (patch * (3 * P * P) + within)
    tl.store(out, tl.load(lut_ptr + r, mask=inside, other=0.0), mask=inside)
    tl.store(out + P * P, tl.load(lut_ptr + LEVELS + g, mask=inside, other=0.0), mask=inside)
    tl.store(out + 2 * P * P, tl.load(lut_ptr + 2 * LEVELS + b, mask=inside, other=0.0), mask=inside)
    # The extent of the stores above, from the same masks that bound them.
    extent = extent_ptr + pid * EXT_LEN
    tl.store(extent + EXT_WRITTEN, tl.sum(inside.to(tl.int32), axis=0))
    tl.store(extent + EXT_PATCH_ROWS, tl.max(tl.where(inside, patch_y + 1, 0), axis=0))
    tl.store(extent + EXT_PATCH_COLS, tl.max(tl.where(inside, patch_x + 1, 0), axis=0))
    tl.store(extent + EXT_ROWS, tl.max(tl.where(ok, y + 1, 0), axis=0))
    tl.store(extent + EXT_COLS, tl.max(tl.where(ok, x + 1, 0), axis=0))
