"""What the host and the kernels agree on: metadata row layouts, tile tables, mode codes.

Defined once, here. The kernels read these names as `tl.constexpr` globals (Triton lets a
kernel read a global only when it is a constexpr); the host fills rows and picks
specializations with the same names (a constexpr is an index and compares like an int).

Storage kinds (`DT`): what one channel value is stored as on the device.
- `U8`: uint8, Pillow's 8-bit path (int32 fixed point, 22 fractional bits).
- `U16`: uint16, the I;16 family (double accumulation, round half away from zero, clip).
- `I32`: int32, mode "I" (double accumulation, round half away from zero).
- `F32`: float32, mode "F" (double accumulation, stored as float).
"""

from __future__ import annotations

try:
    from triton.language import constexpr
except ImportError:  # pragma: no cover - host-side use without triton (nothing can launch then)
    constexpr = int  # type: ignore[assignment,misc]

# Pillow's 8-bit resampling: int32 weights with 22 fractional bits (32 - 8 - 2); the sums
# start at half a unit so that the final shift rounds.
_PRECISION = 22
PRECISION_BITS = constexpr(_PRECISION)
PRECISION_HALF = constexpr(1 << (_PRECISION - 1))

# -- storage kinds (the DT specialization) ----------------------------------------------------
U8 = constexpr(0)
U16 = constexpr(1)
I32 = constexpr(2)
F32 = constexpr(3)
STORAGE_NAMES = {0: "u8", 1: "u16", 2: "i32", 3: "f32"}

# -- how the tail reads a pixel (the FETCH specialization) -------------------------------------
FETCH_DIRECT = constexpr(0)  # the source itself (no resize, or the one pass already done)
FETCH_H = constexpr(1)  # the second bicubic pass, horizontal, over the intermediate image
FETCH_V = constexpr(2)  # the second bicubic pass, vertical
FETCH_NEAREST = constexpr(3)  # Pillow's NEAREST ("1", "P") through per-axis index tables
FETCH_NAMES = {0: "direct", 1: "h", 2: "v", 3: "nearest"}

# -- how fetched channels become RGBA (the CONV specialization) --------------------------------
CONV_RGB = constexpr(0)  # channels 0..2 are R, G, B; alpha is channel 3 when the row says so
CONV_TABLE = constexpr(1)  # the channel values index a packed-RGBA table made by Pillow
CONV_CMYK = constexpr(2)  # Pillow's cmyk2rgb: CLIP8(nk - MULDIV255(c, nk)), nk = 255 - k
CONV_I32 = constexpr(3)  # "I": clip to 0..255; a transparency key gives alpha 0
CONV_F32 = constexpr(4)  # "F": through "L": NaN -> 0, clip to 0..255, truncate
CONV_NAMES = {0: "rgb", 1: "table", 2: "cmyk", 3: "i32", 4: "f32"}

# -- the axis of a bicubic pass in `resample_pass_kernel` (the AXIS specialization) ------------
AXIS_H = constexpr(0)
AXIS_V = constexpr(1)
AXIS_NAMES = {0: "h", 1: "v"}

# -- tile tables: one int32 row per program -----------------------------------------------------
# 2-D kernels (the resampling pass) read (image slot, tile row, tile column); flat kernels
# (convert, tail) read (image slot, 0, block index).
TILE_SLOT = constexpr(0)
TILE_ROW = constexpr(1)
TILE_COL = constexpr(2)
TILE_LEN = constexpr(3)

# -- metadata row of a resampling pass (int64, one row per image) -------------------------------
PASS_SRC = constexpr(0)  # offset of the source image in the arena (elements)
PASS_DST = constexpr(1)  # offset of the output image in the arena
PASS_SRC_W = constexpr(2)  # source row length in pixels
PASS_OUT_H = constexpr(3)  # output height
PASS_OUT_W = constexpr(4)  # output width
PASS_COEF = constexpr(5)  # offset of the (out, ksize) weights of the resized axis
PASS_BOUND = constexpr(6)  # offset of the (out, 2) (first tap, tap count) pairs
PASS_KSIZE = constexpr(7)  # taps per output index
PASS_LEN = constexpr(8)

# -- metadata row of an image for `convert_kernel` and `tail_kernel` (int64) ---------------------
ROW_SRC = constexpr(0)  # offset of what the kernel reads (source or intermediate) in its arena
ROW_SRC_W = constexpr(1)  # its row length in pixels
ROW_H = constexpr(2)  # height of the image the kernel produces (before padding)
ROW_W = constexpr(3)  # width
ROW_GRID_W = constexpr(4)  # tail: patch columns
ROW_ELEMS = constexpr(5)  # elements the kernel covers (tail: gh * gw * P * P; convert: h * w)
ROW_PATCH0 = constexpr(6)  # tail: first patch row of the image in the output
ROW_DST = constexpr(7)  # convert: offset of the RGB output in the uint8 arena
ROW_COEF = constexpr(8)  # FETCH_H / FETCH_V: weights of the second pass
ROW_BOUND = constexpr(9)  # FETCH_H / FETCH_V: (first tap, tap count) pairs
ROW_KSIZE = constexpr(10)  # FETCH_H / FETCH_V: taps per output index
ROW_NEAREST_Y = constexpr(11)  # FETCH_NEAREST: offset of the row index table
ROW_NEAREST_X = constexpr(12)  # FETCH_NEAREST: offset of the column index table
ROW_TABLE = constexpr(13)  # CONV_TABLE: offset of the packed RGBA table
ROW_ALPHA = constexpr(14)  # CONV_RGB: 1 when channel 3 is alpha (RGBA), 0 for RGB / RGBX
ROW_KEY_ON = constexpr(15)  # CONV_I32: 1 when a transparency key is set
ROW_KEY = constexpr(16)  # CONV_I32: the key
ROW_UNPREMULTIPLY = constexpr(17)  # 1: the source is premultiplied (RGBa, La): undo it
ROW_COMPOSITE = constexpr(18)  # 1: composite on the background (the fill converts to RGBA)
ROW_BG_SQUARE = constexpr(19)  # chessboard square size (1 for a uniform background)
ROW_BG_EVEN = constexpr(20)  # composite table slot where (y // square + x // square) is even
ROW_BG_ODD = constexpr(21)  # composite table slot where it is odd
ROW_LEN = constexpr(22)

# -- the (first tap, tap count) pairs of a bicubic axis (int32, one pair per output index) ------
BOUND_FIRST = constexpr(0)
BOUND_COUNT = constexpr(1)
BOUND_LEN = constexpr(2)

# -- 8-bit tables: the normalization LUT is (3 channels x LEVELS) float, the composite table
# (background slots x LEVELS alpha x LEVELS colour) uint8, a packed RGBA table entry holds
# R | G << 8 | B << 16 | A << 24 (tables._pack_rgba), and table indices of 2 and 3 bands are
# (c0 * LEVELS + c1) [* LEVELS + c2].
LEVELS = constexpr(256)

# -- what each tail program records (int32, one row per program) ---------------------------------
# Output elements it wrote (pixels of the patch planes), patch rows and patch columns it
# reached (max index + 1), image rows and columns it filled from the source (max y + 1,
# max x + 1 of non-padding pixels). The host builds `grid_thws` from these.
EXT_WRITTEN = constexpr(0)
EXT_PATCH_ROWS = constexpr(1)
EXT_PATCH_COLS = constexpr(2)
EXT_ROWS = constexpr(3)
EXT_COLS = constexpr(4)
EXT_LEN = constexpr(5)

# Offsets inside one image are int32 in the kernels (bases are int64): the host refuses
# images whose element counts reach this.
MAX_IMAGE_ELEMENTS = 1 << 31
