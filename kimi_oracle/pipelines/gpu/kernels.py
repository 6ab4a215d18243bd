"""Triton kernels of the GPU pipeline: one separable resampling pass, a colour conversion, and
the fused tail (second pass or NEAREST gather, conversion, composite, pad, LUT, patchify).

Kernels take plain tensors and integers; all policy (which pass, which table, which image goes
where) is decided in `pipeline.py` and arrives as an int64 metadata row per image. A launch
covers every image of a batch: program `pid` reads (image slot, block) from a tile table.

Storage kinds (`DT`, a compile-time constant): 0 uint8 (Pillow's 8-bit path: int32
fixed point with 22 fractional bits), 1 uint16 (I;16 family: double accumulation, round half
away from zero, clip to 16 bits), 2 int32 ("I": double accumulation, round half away from
zero), 3 float32 ("F": double accumulation stored as float). Float paths must be launched
with `enable_fp_fusion=False`: Pillow's C code does not contract a*b+c into an FMA.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Metadata layout of a resampling pass (one int64 row per image).
PASS_SRC, PASS_DST, PASS_NR, PASS_N2, PASS_AIN, PASS_TOTAL, PASS_COEF, PASS_BOUND, PASS_K, \
    PASS_C, PASS_PREMULT = range(11)
PASS_NMETA = 11

# Metadata layout of the tail / convert kernels.
(T_SRC, T_C, T_H, T_W, T_ROWLEN, T_GW, T_NPIX, T_PATCH0, T_FETCH, T_COEF, T_BOUND, T_K,
 T_NY, T_NX, T_CONV, T_CONVOFF, T_ALPHA, T_UNPREM, T_BG, T_SQ, T_BEVEN, T_BODD, T_TRNS,
 T_TRNSVAL, T_DST) = range(25)
T_NMETA = 25

# What each program of the tail records (int32, one row per program): output elements it
# wrote (pixels of the patch planes), patch rows and patch columns it reached (max index + 1),
# image rows and columns it filled from the source (max y + 1, max x + 1 of non-padding pixels).
EXT_WRITTEN, EXT_PATCH_ROWS, EXT_PATCH_COLS, EXT_ROWS, EXT_COLS = range(5)
EXT_N = 5

FETCH_DIRECT, FETCH_H, FETCH_V, FETCH_NEAREST = 0, 1, 2, 3
CONV_DIRECT, CONV_TABLE1, CONV_TABLE2, CONV_TABLE3, CONV_CMYK, CONV_I32, CONV_F32 = range(7)


@triton.jit
def _muldiv255(a, b):
    t = a * b + 128
    return ((t >> 8) + t) >> 8


@triton.jit
def resample_pass_kernel(src_ptr, dst_ptr, meta_ptr, tiles_ptr, coef_ptr, bound_ptr,
                         NMETA: tl.constexpr, DT: tl.constexpr, BLOCK: tl.constexpr):
    """One Pillow bicubic pass for a block of output elements of one image."""
    pid = tl.program_id(0)
    slot = tl.load(tiles_ptr + 2 * pid)
    blk = tl.load(tiles_ptr + 2 * pid + 1)
    m = meta_ptr + slot.to(tl.int64) * NMETA
    src_off = tl.load(m + 0)
    dst_off = tl.load(m + 1)
    n_r = tl.load(m + 2).to(tl.int32)
    n2 = tl.load(m + 3).to(tl.int32)
    a_in = tl.load(m + 4)
    total = tl.load(m + 5).to(tl.int32)
    coef_off = tl.load(m + 6)
    bound_off = tl.load(m + 7)
    ksize = tl.load(m + 8).to(tl.int32)
    nch = tl.load(m + 9).to(tl.int32)
    premult = tl.load(m + 10).to(tl.int32)

    e = blk * BLOCK + tl.arange(0, BLOCK)
    mask = e < total
    per = n_r * n2
    o1 = e // per
    rem = e - o1 * per
    r = rem // n2
    o2 = rem - r * n2
    xmin = tl.load(bound_ptr + bound_off + 2 * r, mask=mask, other=0)
    cnt = tl.load(bound_ptr + bound_off + 2 * r + 1, mask=mask, other=0)
    base = src_off + o1.to(tl.int64) * a_in + o2
    ch = o2 % nch
    # Premultiply (RGBA -> RGBa, LA -> La) on load: colour bands only, never alpha.
    do_pm = mask & ((ch * 0 + premult) != 0) & (ch != nch - 1)
    wrow = coef_off + r.to(tl.int64) * ksize
    if DT == 0:
        acc = tl.full((BLOCK,), 1 << 21, tl.int32)
    else:
        acc = tl.zeros((BLOCK,), tl.float64)
    for k in range(ksize):
        ok = mask & (k < cnt)
        addr = base + (xmin + k).to(tl.int64) * n2
        if DT == 0:
            v = tl.load(src_ptr + addr, mask=ok, other=0).to(tl.int32)
            al = tl.load(src_ptr + addr - ch + (nch - 1), mask=ok & do_pm, other=0).to(tl.int32)
            v = tl.where(do_pm, _muldiv255(v, al), v)
            w = tl.load(coef_ptr + wrow + k, mask=ok, other=0)
            acc += v * w
        else:
            w = tl.load(coef_ptr + wrow + k, mask=ok, other=0.0)
            if DT == 1:
                v = tl.load(src_ptr + addr, mask=ok, other=0).to(tl.int32).to(tl.float64)
            else:
                v = tl.load(src_ptr + addr, mask=ok, other=0).to(tl.float64)
            acc = tl.where(ok, acc + v * w, acc)
    out_ptr = dst_ptr + dst_off + e
    if DT == 0:
        res = tl.minimum(tl.maximum(acc >> 22, 0), 255)
        tl.store(out_ptr, res.to(tl.uint8), mask=mask)
    elif DT == 1:
        rnd = tl.where(acc >= 0.0, acc + 0.5, acc - 0.5).to(tl.int32)
        res = tl.minimum(tl.maximum(rnd, 0), 65535)
        tl.store(out_ptr, res.to(tl.uint16), mask=mask)
    elif DT == 2:
        rnd = tl.where(acc >= 0.0, acc + 0.5, acc - 0.5).to(tl.int32)
        tl.store(out_ptr, rnd, mask=mask)
    else:
        tl.store(out_ptr, acc.to(tl.float32), mask=mask)


@triton.jit
def _fetch(src_ptr, coef_ptr, bound_ptr, nidx_ptr, y, x, ok, ch, src_off, nch, row_len,
           fetch, coef_off, bound_off, ksize, ny_off, nx_off, DT: tl.constexpr):
    """Channel `ch` of pixel (y, x): read directly, through NEAREST tables, or as the fused
    second bicubic pass over an intermediate image (rounded exactly as Pillow rounds)."""
    okc = ok & ((y * 0 + ch) < nch)
    if fetch == 0:
        addr = src_off + (y.to(tl.int64) * row_len + x) * nch + ch
        v = tl.load(src_ptr + addr, mask=okc, other=0)
        if DT == 3:
            res = v.to(tl.float32)
        else:
            res = v.to(tl.int32)
    elif fetch == 3:
        sy = tl.load(nidx_ptr + ny_off + y, mask=okc, other=-1)
        sx = tl.load(nidx_ptr + nx_off + x, mask=okc, other=-1)
        hit = okc & (sy >= 0) & (sx >= 0)
        addr = src_off + (sy.to(tl.int64) * row_len + sx) * nch + ch
        v = tl.load(src_ptr + addr, mask=hit, other=0)
        if DT == 3:
            res = v.to(tl.float32)
        else:
            res = v.to(tl.int32)
    else:
        horiz = fetch == 1
        r = tl.where(horiz, x, y)
        other = tl.where(horiz, y.to(tl.int64) * row_len * nch, x.to(tl.int64) * nch)
        stride = tl.where(horiz, nch, row_len * nch)
        xmin = tl.load(bound_ptr + bound_off + 2 * r, mask=okc, other=0)
        cnt = tl.load(bound_ptr + bound_off + 2 * r + 1, mask=okc, other=0)
        base = src_off + other + ch
        wrow = coef_off + r.to(tl.int64) * ksize
        if DT == 0:
            acc = tl.zeros(y.shape, tl.int32) + (1 << 21)
        else:
            acc = tl.zeros(y.shape, tl.float64)
        for k in range(ksize):
            okk = okc & (k < cnt)
            addr = base + (xmin + k).to(tl.int64) * stride
            if DT == 0:
                v = tl.load(src_ptr + addr, mask=okk, other=0).to(tl.int32)
                w = tl.load(coef_ptr + wrow + k, mask=okk, other=0)
                acc += v * w
            else:
                w = tl.load(coef_ptr + wrow + k, mask=okk, other=0.0)
                if DT == 1:
                    v = tl.load(src_ptr + addr, mask=okk, other=0).to(tl.int32).to(tl.float64)
                else:
                    v = tl.load(src_ptr + addr, mask=okk, other=0).to(tl.float64)
                acc = tl.where(okk, acc + v * w, acc)
        if DT == 0:
            res = tl.minimum(tl.maximum(acc >> 22, 0), 255)
        elif DT == 1:
            rnd = tl.where(acc >= 0.0, acc + 0.5, acc - 0.5).to(tl.int32)
            res = tl.minimum(tl.maximum(rnd, 0), 65535)
        elif DT == 2:
            res = tl.where(acc >= 0.0, acc + 0.5, acc - 0.5).to(tl.int32)
        else:
            res = acc.to(tl.float32)
    return res


@triton.jit
def _unpremultiply(c, a):
    safe = tl.where(a == 0, 1, a)
    div = tl.minimum((255 * c) // safe, 255)
    return tl.where((a == 0) | (a == 255), c, div)


@triton.jit
def _unpack(t):
    return t & 255, (t >> 8) & 255, (t >> 16) & 255, (t >> 24) & 255


@triton.jit
def _pixel_rgb(src_ptr, coef_ptr, bound_ptr, nidx_ptr, conv_ptr, comp_ptr, m, y, x, ok,
               DT: tl.constexpr):
    """The RGB (uint8 levels in int32) of pixel (y, x) after conversion and composite."""
    src_off = tl.load(m + 0)
    nch = tl.load(m + 1).to(tl.int32)
    row_len = tl.load(m + 4)
    fetch = tl.load(m + 8).to(tl.int32)
    coef_off = tl.load(m + 9)
    bound_off = tl.load(m + 10)
    ksize = tl.load(m + 11).to(tl.int32)
    ny_off = tl.load(m + 12)
    nx_off = tl.load(m + 13)
    conv = tl.load(m + 14).to(tl.int32)
    conv_off = tl.load(m + 15)
    alpha_ch = tl.load(m + 16).to(tl.int32)
    unprem = tl.load(m + 17).to(tl.int32)
    bg_on = tl.load(m + 18).to(tl.int32)
    sq = tl.load(m + 19).to(tl.int32)
    b_even = tl.load(m + 20).to(tl.int32)
    b_odd = tl.load(m + 21).to(tl.int32)
    trns_on = tl.load(m + 22).to(tl.int32)
    trns_val = tl.load(m + 23).to(tl.int32)

    v0 = _fetch(src_ptr, coef_ptr, bound_ptr, nidx_ptr, y, x, ok, 0, src_off, nch, row_len,
                fetch, coef_off, bound_off, ksize, ny_off, nx_off, DT)
    if DT == 3:
        # "F" -> RGB goes through "L": clip to 0..255, then truncate (NaN ends as 0).
        f = tl.where(v0 != v0, 0.0, v0)
        lv = tl.where(f <= 0.0, 0, tl.where(f >= 255.0, 255, f.to(tl.int32)))
        r = lv
        g = lv
        b = lv
        a = tl.zeros(y.shape, tl.int32) + 255
    else:
        v1 = _fetch(src_ptr, coef_ptr, bound_ptr, nidx_ptr, y, x, ok, 1, src_off, nch, row_len,
                    fetch, coef_off, bound_off, ksize, ny_off, nx_off, DT)
        v2 = _fetch(src_ptr, coef_ptr, bound_ptr, nidx_ptr, y, x, ok, 2, src_off, nch, row_len,
                    fetch, coef_off, bound_off, ksize, ny_off, nx_off, DT)
        v3 = _fetch(src_ptr, coef_ptr, bound_ptr, nidx_ptr, y, x, ok, 3, src_off, nch, row_len,
                    fetch, coef_off, bound_off, ksize, ny_off, nx_off, DT)
        # Un-premultiply (RGBa -> RGBA, La -> LA): alpha is the last band.
        last = tl.where(nch == 4, v3, tl.where(nch == 2, v1, 255))
        pm = unprem != 0
        v0 = tl.where(pm, _unpremultiply(v0, last), v0)
        v1 = tl.where(pm & (nch == 4), _unpremultiply(v1, last), v1)
        v2 = tl.where(pm & (nch == 4), _unpremultiply(v2, last), v2)
        if conv == 0:
            r = v0
            g = v1
            b = v2
            a = tl.where(alpha_ch == 3, v3, 255)
        elif conv == 4:
            # CMYK -> RGB: CLIP8(nk - MULDIV255(c, nk)) with nk = 255 - k.
            nk = 255 - v3
            r = tl.minimum(tl.maximum(nk - _muldiv255(v0, nk), 0), 255)
            g = tl.minimum(tl.maximum(nk - _muldiv255(v1, nk), 0), 255)
            b = tl.minimum(tl.maximum(nk - _muldiv255(v2, nk), 0), 255)
            a = tl.zeros(y.shape, tl.int32) + 255
        elif conv == 5:
            # "I" -> RGB clips to 0..255; a transparency key gives alpha 0 on equal values.
            lv = tl.minimum(tl.maximum(v0, 0), 255)
            r = lv
            g = lv
            b = lv
            a = tl.where((trns_on != 0) & (v0 == trns_val), 0, 255)
        else:
            idx = tl.where(conv == 1, v0, tl.where(conv == 2, v0 * 256 + v1,
                                                    v0 * 65536 + v1 * 256 + v2))
            t = tl.load(conv_ptr + conv_off + idx, mask=ok, other=0)
            r, g, b, a = _unpack(t)
    if bg_on != 0:
        par = ((y // sq) + (x // sq)) % 2
        bslot = tl.where(par == 0, b_even, b_odd).to(tl.int64)
        cbase = (bslot * 256 + a) * 256
        r = tl.load(comp_ptr + cbase + r, mask=ok, other=0).to(tl.int32)
        g = tl.load(comp_ptr + cbase + g, mask=ok, other=0).to(tl.int32)
        b = tl.load(comp_ptr + cbase + b, mask=ok, other=0).to(tl.int32)
    return r, g, b


@triton.jit
def convert_kernel(src_ptr, dst_ptr, meta_ptr, tiles_ptr, coef_ptr, bound_ptr, nidx_ptr,
                   conv_ptr, comp_ptr, NMETA: tl.constexpr, DT: tl.constexpr,
                   BLOCK: tl.constexpr):
    """Convert + composite to an RGB uint8 HWC image at the same size (fill before resize)."""
    pid = tl.program_id(0)
    slot = tl.load(tiles_ptr + 2 * pid)
    blk = tl.load(tiles_ptr + 2 * pid + 1)
    m = meta_ptr + slot.to(tl.int64) * NMETA
    w = tl.load(m + 3).to(tl.int32)
    npix = tl.load(m + 6).to(tl.int32)
    dst_off = tl.load(m + 24)
    e = blk * BLOCK + tl.arange(0, BLOCK)
    ok = e < npix
    y = e // w
    x = e - y * w
    r, g, b = _pixel_rgb(src_ptr, coef_ptr, bound_ptr, nidx_ptr, conv_ptr, comp_ptr, m, y, x,
                         ok, DT)
    o = dst_ptr + dst_off + e.to(tl.int64) * 3
    tl.store(o, r.to(tl.uint8), mask=ok)
    tl.store(o + 1, g.to(tl.uint8), mask=ok)
    tl.store(o + 2, b.to(tl.uint8), mask=ok)


@triton.jit
def tail_kernel(src_ptr, out_ptr, meta_ptr, tiles_ptr, coef_ptr, bound_ptr, nidx_ptr, conv_ptr,
                comp_ptr, lut_ptr, ext_ptr, NMETA: tl.constexpr, DT: tl.constexpr,
                P: tl.constexpr, BLOCK: tl.constexpr):
    """Pixels in patch order -> padded, normalized (LUT) patches written into the output.

    Each program also stores, at `ext_ptr + EXT_N * pid`, the extent of what it wrote (see
    EXT_*): the host builds `grid_thws` from these, not from its plan.
    """
    pid = tl.program_id(0)
    slot = tl.load(tiles_ptr + 2 * pid)
    blk = tl.load(tiles_ptr + 2 * pid + 1)
    m = meta_ptr + slot.to(tl.int64) * NMETA
    h = tl.load(m + 2).to(tl.int32)
    w = tl.load(m + 3).to(tl.int32)
    gw = tl.load(m + 5).to(tl.int32)
    npix = tl.load(m + 6).to(tl.int32)
    patch0 = tl.load(m + 7)
    e = blk * BLOCK + tl.arange(0, BLOCK)
    inside = e < npix
    patch = e // (P * P)
    rem = e - patch * (P * P)
    py = rem // P
    px = rem - py * P
    gy = patch // gw
    gx = patch - gy * gw
    y = gy * P + py
    x = gx * P + px
    ok = inside & (y < h) & (x < w)
    r, g, b = _pixel_rgb(src_ptr, coef_ptr, bound_ptr, nidx_ptr, conv_ptr, comp_ptr, m, y, x,
                         ok, DT)
    # Padding is level 0, normalized like any other pixel.
    r = tl.where(ok, r, 0)
    g = tl.where(ok, g, 0)
    b = tl.where(ok, b, 0)
    o = out_ptr + (patch0 + patch.to(tl.int64)) * (3 * P * P) + rem
    tl.store(o, tl.load(lut_ptr + r, mask=inside, other=0.0), mask=inside)
    tl.store(o + P * P, tl.load(lut_ptr + 256 + g, mask=inside, other=0.0), mask=inside)
    tl.store(o + 2 * P * P, tl.load(lut_ptr + 512 + b, mask=inside, other=0.0), mask=inside)
    # The extent of the stores above, from the same masks that bound them.
    ext = ext_ptr + pid.to(tl.int64) * 5
    tl.store(ext + 0, tl.sum(inside.to(tl.int32), axis=0))
    tl.store(ext + 1, tl.max(tl.where(inside, gy + 1, 0), axis=0))
    tl.store(ext + 2, tl.max(tl.where(inside, gx + 1, 0), axis=0))
    tl.store(ext + 3, tl.max(tl.where(ok, y + 1, 0), axis=0))
    tl.store(ext + 4, tl.max(tl.where(ok, x + 1, 0), axis=0))
