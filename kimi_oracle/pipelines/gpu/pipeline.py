"""The GPU pipeline: host-side planning, upload of native-width planes, and kernel launches.

Per image the host decides a short recipe (spec §3): optional conversion + composite at the
source size (fill before resize), at most one bicubic pass in `resample_pass_kernel`, then the
fused tail (second bicubic pass or NEAREST gather, conversion, composite, pad, LUT, patchify).
All images of a chunk share one arena per storage type, so every step is one launch per
storage type present, whatever the number of images.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import os
import threading
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import BackendError, InputError
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.images import MODES_16BIT, ImageSource, load_images, resample_kind
from kimi_oracle.pipelines.reference import background, composite, fill_conversion, normalization_lut
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.pipelines.gpu import resample as rs

# Storage kinds, as the kernels' DT constant.
U8, U16, I32, F32 = 0, 1, 2, 3
_TORCH_DT = {U8: torch.uint8, U16: torch.uint16, I32: torch.int32, F32: torch.float32}
_NP_DT = {U8: np.uint8, U16: np.uint16, I32: np.int32, F32: np.float32}
_ITEM = {U8: 1, U16: 2, I32: 4, F32: 4}

MODES_8BIT_1 = ("L", "P", "1")
MODES_8BIT_2 = ("LA", "PA")
MODES_8BIT_3_TABLE = ("LAB", "HSV", "YCbCr")
MODES_16 = tuple(sorted(MODES_16BIT))  # one definition of Pillow's 16-bit family, in kimi_oracle.core.images
SUPPORTED_MODES = frozenset(
    MODES_8BIT_1 + MODES_8BIT_2 + MODES_8BIT_3_TABLE + MODES_16
    + ("RGB", "RGBA", "RGBX", "CMYK", "I", "F")
)

DEFAULT_BLOCKS_CUDA = (1024, 1024)
DEFAULT_BLOCKS_INTERPRETER = (1 << 16, 1 << 15)


# ------------------------------------------------------------------------------------------
# Backend
# ------------------------------------------------------------------------------------------

_KERNELS: Any = None
_KERNELS_INTERPRETED: bool | None = None
_LOCK = threading.Lock()


def _kernels() -> Any:
    global _KERNELS, _KERNELS_INTERPRETED
    with _LOCK:
        if _KERNELS is None:
            try:
                _KERNELS = importlib.import_module("kimi_oracle.pipelines.gpu.kernels")
            except ImportError as exc:
                raise BackendError(f"the GPU pipeline needs triton, which cannot be imported: {exc}") from None
            _KERNELS_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
    return _KERNELS


def resolve_device(device: str | torch.device | None) -> torch.device:
    """CUDA when available (or asked for), else CPU tensors under the Triton interpreter."""
    rs.check_pillow()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendError("device 'cuda' requested but torch sees no CUDA device")
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise BackendError("TRITON_INTERPRET=1 is set: kernels would run on the host, not CUDA")
    elif dev.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise BackendError(
                "no CUDA device: the GPU pipeline can run on CPU tensors only under the Triton "
                "interpreter; set TRITON_INTERPRET=1 before anything imports triton"
            )
    else:
        raise BackendError(f"unsupported device type {dev.type!r} (use cuda or cpu)")
    _kernels()
    if dev.type == "cpu" and not _KERNELS_INTERPRETED:
        raise BackendError("triton kernels were compiled before TRITON_INTERPRET=1 was set; set it first")
    return dev


# ------------------------------------------------------------------------------------------
# Host-side tables (cached)
# ------------------------------------------------------------------------------------------


def _pack_rgba(rgba: np.ndarray) -> np.ndarray:
    a = rgba.reshape(-1, 4).astype(np.uint32)
    packed = a[:, 0] | (a[:, 1] << 8) | (a[:, 2] << 16) | (a[:, 3] << 24)
    return packed.view(np.int32)


def _i16_dtype(mode: str) -> str:
    # Pillow's 16-bit resampler reads "I;16N" big-endian and every other I;16 mode
    # little-endian on a little-endian host (Resample.c); the device works on those values.
    import sys

    if sys.byteorder == "little":
        return ">u2" if mode == "I;16N" else "<u2"
    return "<u2" if mode == "I;16B" else ">u2"  # pragma: no cover - big-endian hosts


def _fill_uses_alpha(img: Image.Image, bg: TransparentBgConfig | None) -> bool:
    """Whether the reference's fill composites this image (else it only converts to RGB)."""
    return fill_conversion(img, bg) == "RGBA"


def _probe(img: Image.Image, values: np.ndarray, shape: tuple[int, int]) -> Image.Image:
    """An image of `img`'s mode, palette and transparency whose pixels enumerate `values`."""
    mode = img.mode
    mask = rs.domain_xor(mode)
    if mask is not None:
        values = values.astype(np.uint8) ^ mask  # table index is in the resampling domain
    if mode == "1":
        probe = Image.fromarray(values.reshape(shape) == 255)
    elif mode in MODES_16:
        raw = values.astype(np.uint16).astype(_i16_dtype(mode)).tobytes()
        probe = Image.frombytes(mode, shape[::-1], raw)
    else:
        probe = Image.frombytes(mode, shape[::-1], values.astype(np.uint8).tobytes())
    if mode in ("P", "PA") and img.palette is not None:
        probe.putpalette(img.palette)
    if "transparency" in img.info:
        probe.info["transparency"] = img.info["transparency"]
    return probe


def _table_key(img: Image.Image, use_alpha: bool, resized: bool) -> tuple:
    pal = None
    if img.mode in ("P", "PA") and img.palette is not None:
        pal = (img.palette.mode, bytes(img.palette.tobytes()))
    trns = img.info.get("transparency")
    return (img.mode, use_alpha, resized, pal, repr(trns))


_TABLES: dict[tuple, np.ndarray] = {}
_TABLES_LOCK = threading.Lock()


def conversion_table(img: Image.Image, use_alpha: bool, resized: bool = False) -> np.ndarray:
    """int32 packed RGBA per pixel value of `img`'s mode, made by Pillow's own conversion.

    `resized`: the reference converts the output of `Image.resize`, whose state can differ
    from the source's (a resized "PA" image loses its palette in Pillow 13.0). The probe then
    goes through a value-preserving resize first (one row -> two rows: a single tap of weight
    1, or NEAREST), so that it carries exactly the state a resized image has.
    """
    key = _table_key(img, use_alpha, resized)
    with _TABLES_LOCK:
        hit = _TABLES.get(key)
    if hit is not None:
        return hit
    mode = img.mode
    if mode in MODES_8BIT_1:
        values = np.arange(256)
    elif mode in MODES_16:
        values = np.arange(65536)
    elif mode in MODES_8BIT_2:
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


@functools.lru_cache(maxsize=256)
def composite_table(b: int) -> np.ndarray:
    """uint8 (256 alpha, 256 level): the reference's float32 composite over background level b."""
    uniform = TransparentBgConfig(
        pattern="chessboard", chessboard_square_size=1, chessboard_square_on_top_left=True,
        chessboard_white_value=int(b), chessboard_gray_value=int(b),
    )
    a, c = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    rgba = np.stack([c, c, c, a], axis=-1).astype(np.uint8)
    out = composite(rgba, uniform)[..., 0].copy()
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=64)
def background_params(bg: TransparentBgConfig) -> tuple[int, int, int]:
    """(square, level where (y//square + x//square) is even, level where odd), from the reference."""
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


# ------------------------------------------------------------------------------------------
# Per-image recipe
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Job:
    index: int
    src: np.ndarray  # (H, W, C) native-width values
    dt: int
    nch: int
    src_w: int
    src_h: int
    out_w: int  # resized size
    out_h: int
    pre_convert: bool  # fill at source size (-> RGB uint8) before resizing
    resample: str  # "none" | "bicubic" | "premultiplied" | "nearest"
    passes: tuple[str, ...]
    conv: int
    table_key: Any
    table: np.ndarray | None
    alpha_ch: int
    bg_on: bool
    trns: int | None
    plan_grid: tuple[int, int, int] = (1, 0, 0)  # geometry.plan's grid: sizes the output, checks
    # filled in by the planner
    src_off: int = 0
    conv_off: int = 0
    mid_off: int = 0

    @property
    def cur_dt(self) -> int:
        return U8 if self.pre_convert else self.dt


def _native_array(img: Image.Image) -> tuple[np.ndarray, int]:
    mode = img.mode
    w, h = img.size
    if mode in MODES_16:
        arr = np.frombuffer(img.tobytes(), dtype=_i16_dtype(mode)).reshape(h, w)
        return arr.astype(np.uint16), U16
    if mode == "I":
        return np.asarray(img, dtype=np.int32).reshape(h, w), I32
    if mode == "F":
        return np.asarray(img, dtype=np.float32).reshape(h, w), F32
    if mode == "1":
        return (np.asarray(img).reshape(h, w).astype(np.uint8) * 255), U8
    arr = np.asarray(img)
    if arr.dtype != np.uint8:
        raise InputError(f"mode {mode!r}: unexpected array type {arr.dtype}")
    mask = rs.domain_xor(mode)
    if mask is not None:
        arr = arr ^ mask
    return arr, U8


def _conversion(kern: Any, img: Image.Image, bg: TransparentBgConfig | None, resized: bool):
    """(conv code, table key, table, alpha channel, transparency key) of fill(img, bg)."""
    mode = img.mode
    use_alpha = _fill_uses_alpha(img, bg)
    if mode == "RGB":
        return kern.CONV_DIRECT, None, None, -1, None
    if mode in ("RGBA", "RGBX"):
        return kern.CONV_DIRECT, None, None, (3 if use_alpha and mode == "RGBA" else -1), None
    if mode == "CMYK":
        return kern.CONV_CMYK, None, None, -1, None
    if mode == "I":
        trns = img.info.get("transparency") if use_alpha else None
        return kern.CONV_I32, None, None, -1, (int(trns) if isinstance(trns, int) else None)
    if mode == "F":
        return kern.CONV_F32, None, None, -1, None
    table = conversion_table(img, use_alpha, resized)
    if mode in MODES_8BIT_1 or mode in MODES_16:
        code = kern.CONV_TABLE1
    elif mode in MODES_8BIT_2:
        code = kern.CONV_TABLE2
    else:
        code = kern.CONV_TABLE3
    return code, _table_key(img, use_alpha, resized), table, -1, None


def _make_job(kern: Any, index: int, img: Image.Image, config: PreprocessConfig) -> _Job:
    if img.mode not in SUPPORTED_MODES:
        raise InputError(
            f"mode {img.mode!r} is not supported by the GPU pipeline "
            f"(supported: {', '.join(sorted(SUPPORTED_MODES))})", source=f"image[{index}]",
        )
    p = plan(img.width, img.height, config)
    bg = config.transparent_bg_config
    arr, dt = _native_array(img)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    nch = arr.shape[2]
    pre = config.fill_stage == "before_resize" and img.mode != "RGB"
    size = (p.new_w, p.new_h)
    if pre:
        # fill(img) -> RGB uint8, then Pillow resizes that RGB image
        kind = resample_kind("RGB", img.size, size)
    else:
        kind = resample_kind(img.mode, img.size, size)
    passes = () if kind in ("none", "nearest") else rs.pass_order(img.width, img.height, *size)
    # The table must describe the image the reference converts: the resized one, when the
    # resize ran in the image's own mode (premultiplied modes do not use palette tables).
    resized = not pre and kind in ("bicubic", "nearest")
    conv, key, table, alpha_ch, trns = _conversion(kern, img, bg, resized)
    bg_on = _fill_uses_alpha(img, bg)
    return _Job(index, np.ascontiguousarray(arr), dt, nch, img.width, img.height, p.new_w, p.new_h,
                pre, kind, passes, conv, key, table, alpha_ch, bg_on, trns,
                plan_grid=tuple(int(v) for v in p.grid_thw))


# ------------------------------------------------------------------------------------------
# Launch planning
# ------------------------------------------------------------------------------------------


def _tiles(counts: Sequence[tuple[int, int]], block: int) -> np.ndarray:
    rows = []
    for slot, n in counts:
        nb = max(1, -(-n // block))
        rows.append(np.stack([np.full(nb, slot, np.int32), np.arange(nb, dtype=np.int32)], -1))
    return np.concatenate(rows, 0) if rows else np.zeros((0, 2), np.int32)


class _CoefBank:
    """Concatenated coefficient / bound / nearest-index tables of one chunk."""

    def __init__(self) -> None:
        self.c8: list[np.ndarray] = []
        self.c64: list[np.ndarray] = []
        self.bounds: list[np.ndarray] = []
        self.nidx: list[np.ndarray] = []
        self.n8 = self.n64 = self.nb = self.nn = 0

    def bicubic(self, in_size: int, out_size: int, dt: int) -> tuple[int, int, int]:
        """(coef offset, bound offset, ksize) of one axis for storage kind dt."""
        xmin, cnt, kk = rs.bicubic_coeffs(in_size, out_size)
        if dt == U8:
            c = rs.coeffs_8bit(in_size, out_size).reshape(-1)
            off = self.n8
            self.c8.append(c)
            self.n8 += c.size
        else:
            c = kk.reshape(-1)
            off = self.n64
            self.c64.append(c)
            self.n64 += c.size
        b = np.stack([xmin, cnt], -1).reshape(-1).astype(np.int32)
        boff = self.nb
        self.bounds.append(b)
        self.nb += b.size
        return off, boff, kk.shape[1]

    def nearest(self, in_size: int, out_size: int) -> int:
        idx = rs.nearest_index(in_size, out_size)
        off = self.nn
        self.nidx.append(idx)
        self.nn += idx.size
        return off

    def tensors(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        def cat(parts, dtype):
            arr = np.concatenate(parts) if parts else np.zeros(1, dtype)
            return torch.from_numpy(np.ascontiguousarray(arr, dtype=dtype)).to(device)

        return (cat(self.c8, np.int32), cat(self.c64, np.float64), cat(self.bounds, np.int32),
                cat(self.nidx, np.int32))


class _DeviceCache:
    """Conversion, composite and LUT tables kept on the device between calls."""

    def __init__(self) -> None:
        self._store: dict[tuple, torch.Tensor] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, make) -> torch.Tensor:
        with self._lock:
            t = self._store.get(key)
        if t is None:
            t = make()
            with self._lock:
                if len(self._store) > 128:
                    self._store.clear()
                self._store[key] = t
        return t


_DEVICE_CACHE = _DeviceCache()


def _split_chunks(jobs: list[_Job], per_job_bytes: list[int], chunk_bytes: int | None) -> list[list[_Job]]:
    if not chunk_bytes:
        return [jobs]
    chunks: list[list[_Job]] = []
    cur: list[_Job] = []
    used = 0
    for job, nbytes in zip(jobs, per_job_bytes):
        if cur and used + nbytes > chunk_bytes:
            chunks.append(cur)
            cur, used = [], 0
        cur.append(job)
        used += nbytes
    if cur:
        chunks.append(cur)
    return chunks


@dataclasses.dataclass
class _Extent:
    """What one tail launch recorded: `ext` (programs, EXT_N) int32 on the device, filled by
    the kernel, and `owner` (programs,), the image index each program worked for."""

    ext: torch.Tensor
    owner: np.ndarray


def _produced_grids(jobs: Sequence[_Job], extents: Sequence[_Extent], total_rows: int,
                    ps: int) -> list[tuple[int, int, int]]:
    """`grid_thws` rows built from what the tail kernels recorded writing (one device read).

    Per image: patches written = elements written / p², grid = (1, patch rows reached, patch
    columns reached). Raises BackendError when the writes do not form a full grid, when the
    produced grid or image size differs from `geometry.plan`'s (both values named), or when
    the grids do not account for every row of `pixel_values`.
    """
    kern = _kernels()
    n = len(jobs)
    if extents:
        ext = torch.cat([e.ext for e in extents]).cpu().numpy().astype(np.int64)
        owner = np.concatenate([e.owner for e in extents])
    else:
        ext, owner = np.zeros((0, kern.EXT_N), np.int64), np.zeros(0, np.int64)
    written = np.zeros(n, np.int64)
    np.add.at(written, owner, ext[:, kern.EXT_WRITTEN])
    reach = np.zeros((n, 4), np.int64)
    cols = [kern.EXT_PATCH_ROWS, kern.EXT_PATCH_COLS, kern.EXT_ROWS, kern.EXT_COLS]
    np.maximum.at(reach, owner, ext[:, cols])
    grids = []
    for j in jobs:
        i = j.index
        gh, gw, h, w = (int(v) for v in reach[i])
        nel = int(written[i])
        produced = (1, gh, gw)
        if nel != gh * gw * ps * ps:
            raise BackendError(
                f"image {i}: the tail kernel wrote {nel} patch pixels, not a full {gh}x{gw} grid "
                f"of {ps}x{ps} patches ({gh * gw * ps * ps})")
        if produced != tuple(j.plan_grid):
            raise BackendError(
                f"image {i}: the kernels produced grid {list(produced)} ({w}x{h} pixels), "
                f"geometry.plan says {list(j.plan_grid)} ({j.out_w}x{j.out_h})")
        if (h, w) != (j.out_h, j.out_w):
            raise BackendError(
                f"image {i}: the kernels produced a {w}x{h} image, geometry.plan says "
                f"{j.out_w}x{j.out_h}")
        grids.append(produced)
    rows = sum(g[1] * g[2] for g in grids)
    if rows != total_rows:
        raise BackendError(f"the produced grids cover {rows} patches, pixel_values has {total_rows}")
    return grids


def _job_bytes(job: _Job, factor: int, patch: int, out_item: int) -> int:
    n = job.src.nbytes
    if job.pre_convert:
        n += job.src_h * job.src_w * 3
    if job.passes:
        n += max(job.src_w, job.out_w) * max(job.src_h, job.out_h) * job.nch * _ITEM[job.cur_dt]
    h, w = job.out_h, job.out_w
    hp, wp = -(-h // factor) * factor, -(-w // factor) * factor
    return n + hp * wp * 3 * out_item


# ------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------


def _setup(images, config, device, out_dtype, out_device, blocks):
    dev = resolve_device(device)
    kern = _kernels()
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise InputError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype}")
    if blocks is None:
        blocks = DEFAULT_BLOCKS_CUDA if dev.type == "cuda" else DEFAULT_BLOCKS_INTERPRETER
    pass_block, tail_block = (int(b) for b in blocks)
    for b in (pass_block, tail_block):
        if b <= 0 or b & (b - 1):
            raise InputError(f"block sizes must be powers of two, got {blocks}")
    decoded = load_images(images)
    jobs = [_make_job(kern, i, img, config) for i, img in enumerate(decoded)]

    ps = config.patch_size
    factor = int(config.factor)
    # The plan sizes the output and the tail's launch; the returned grids are read back from
    # what the tail wrote (`_produced_grids`) and checked against these.
    grids = [j.plan_grid for j in jobs]
    npatch = [g[1] * g[2] for g in grids]
    starts = np.concatenate([[0], np.cumsum(npatch)]).astype(np.int64)
    total = int(starts[-1])

    odev = dev if out_device is None else torch.device(out_device)
    pin = odev.type == "cpu" and dev.type == "cuda"
    out = torch.empty((total, 3, ps, ps), dtype=out_dtype, device=odev, pin_memory=pin)

    out_item = 2 if out_dtype == torch.bfloat16 else 4
    per_job = [_job_bytes(j, factor, ps, out_item) for j in jobs]
    lut = normalization_lut(config)
    lut_t = _DEVICE_CACHE.get(
        ("lut", lut.tobytes(), str(out_dtype), str(dev)),
        lambda: torch.from_numpy(np.array(lut, dtype=np.float32)).to(dev).to(out_dtype).contiguous(),
    )
    bg = config.transparent_bg_config
    return kern, jobs, dev, out, odev, starts, grids, lut_t, pass_block, tail_block, per_job, bg


def prepare_launches(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
    blocks: tuple[int, int] | None = None,
) -> tuple[list, dict, Any]:
    """Benchmark hook: do all host work and uploads, return (launches, byte counts, finish).

    Calling every launch in order fills the output; launches are idempotent, so they can be
    timed repeatedly from uint8 planes already on the device. `finish()`, after the launches,
    returns the `PreprocessResult` (grids read back from what the tail recorded).
    """
    state = _setup(images, config, device, out_dtype, None, blocks)
    kern, jobs, dev, out, odev, starts, grids, lut_t, pass_block, tail_block, per_job, bg = state
    launches, stats, extents = _prepare_chunk(kern, jobs, config, bg, dev, out, odev, starts,
                                              grids, lut_t, pass_block, tail_block)

    def finish() -> PreprocessResult:
        produced = _produced_grids(jobs, extents, int(out.shape[0]), config.patch_size)
        return PreprocessResult(out, torch.tensor(produced, dtype=torch.int64))

    return launches, stats, finish


def preprocess(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
    chunk_bytes: int | None = None,
    out_device: str | torch.device | None = None,
    blocks: tuple[int, int] | None = None,
) -> PreprocessResult:
    """The checkpoint's preprocessing with Pillow-exact kernels: same bytes as the reference."""
    state = _setup(images, config, device, out_dtype, out_device, blocks)
    kern, jobs, dev, out, odev, starts, grids, lut_t, pass_block, tail_block, per_job, bg = state
    extents: list[_Extent] = []
    for chunk in _split_chunks(jobs, per_job, chunk_bytes):
        extents += _run_chunk(kern, chunk, config, bg, dev, out, odev, starts, grids, lut_t,
                              pass_block, tail_block)
    # One read of the tails' records (it also waits for the kernels, and for the copies to a
    # pinned host output, which were queued before it on the same stream).
    produced = _produced_grids(jobs, extents, int(out.shape[0]), config.patch_size)
    if out.device != dev:
        torch.cuda.current_stream(dev).synchronize()  # pinned host output: wait for the copies
    return PreprocessResult(out, torch.tensor(produced, dtype=torch.int64))


def _run_chunk(kern, chunk, *args) -> list[_Extent]:
    launches, _, extents = _prepare_chunk(kern, chunk, *args)
    for launch in launches:
        launch()
    return extents


def _prepare_chunk(kern, chunk, config, bg, dev, out, odev, starts, grids, lut_t,
                   pass_block, tail_block) -> tuple[list, dict, list[_Extent]]:
    """Host work and uploads for one chunk: the launches (in order), byte counts, and the
    tails' extent records (filled when the launches run)."""
    ps = config.patch_size
    launches: list = []
    bank = _CoefBank()
    # --- arenas: per storage kind, [sources | converted RGB (uint8 only) | intermediates]
    arena_len = {U8: 0, U16: 0, I32: 0, F32: 0}
    for j in chunk:
        j.src_off = arena_len[j.dt]
        arena_len[j.dt] += j.src.size
    for j in chunk:
        if j.pre_convert:
            j.conv_off = arena_len[U8]
            arena_len[U8] += j.src_h * j.src_w * 3
    for j in chunk:
        if j.passes:
            p0 = j.passes[0]
            mh = j.src_h if p0 == "h" else j.out_h
            mw = j.out_w if p0 == "h" else j.src_w
            nch = 3 if j.pre_convert else j.nch
            j.mid_off = arena_len[j.cur_dt]
            arena_len[j.cur_dt] += mh * mw * nch
    arenas: dict[int, torch.Tensor] = {}
    for dt, n in arena_len.items():
        if n == 0:
            continue
        members = [j for j in chunk if j.dt == dt]
        nsrc = sum(j.src.size for j in members)
        host = torch.empty(nsrc, dtype=_TORCH_DT[dt], pin_memory=dev.type == "cuda")
        hv = host.numpy() if dt != U16 else host.view(torch.int16).numpy().view(np.uint16)
        for j in members:
            hv[j.src_off : j.src_off + j.src.size] = j.src.reshape(-1)
        arena = torch.empty(max(n, 1), dtype=_TORCH_DT[dt], device=dev)
        arena[:nsrc].copy_(host, non_blocking=True)
        arenas[dt] = arena

    # --- conversion tables, composite tables
    tables: list[torch.Tensor] = []
    table_off: dict[Any, int] = {}
    ntab = 0
    for j in chunk:
        if j.table is not None and j.table_key not in table_off:
            t = _DEVICE_CACHE.get(("conv", j.table_key, str(dev)),
                                  lambda tab=j.table: torch.from_numpy(tab.copy()).to(dev))
            table_off[j.table_key] = ntab
            tables.append(t)
            ntab += t.numel()
    conv_t = (tables[0] if len(tables) == 1 else torch.cat(tables)) if tables else \
        torch.zeros(1, dtype=torch.int32, device=dev)
    bvals: dict[int, int] = {}
    sq, even, odd = (1, 0, 0)
    if bg is not None:
        sq, even, odd = background_params(bg)
        for v in (even, odd):
            bvals.setdefault(v, len(bvals))
    comp_parts = [_DEVICE_CACHE.get(("comp", v, str(dev)),
                                    lambda v=v: torch.from_numpy(composite_table(v).reshape(-1).copy()).to(dev))
                  for v in bvals]
    comp_t = torch.cat(comp_parts) if comp_parts else torch.zeros(1, dtype=torch.uint8, device=dev)

    def tail_meta(j: _Job, src_off: int, nch: int, row_len: int, fetch: int, coef: tuple,
                  nys: int, nxs: int, h: int, w: int, converted: bool,
                  gw: int, npix: int, dst: int) -> list[int]:
        """One metadata row; `converted`: the source is the RGB image fill already produced."""
        native = not converted
        return [
            src_off, nch, h, w, row_len, gw, npix, 0, fetch, coef[0], coef[1], coef[2],
            nys, nxs,
            j.conv if native else kern.CONV_DIRECT,
            table_off.get(j.table_key, 0) if native else 0,
            j.alpha_ch if native else -1,
            int(native and j.resample == "premultiplied"),
            int(native and j.bg_on), sq, bvals.get(even, 0), bvals.get(odd, 0),
            int(native and j.trns is not None), int(j.trns or 0), dst,
        ]

    # --- 1. fill at source size (before_resize with a resize to do): one launch per kind
    conv_meta: dict[int, list[list[int]]] = {}
    for j in chunk:
        if j.pre_convert and j.passes:
            row = tail_meta(j, j.src_off, j.nch, j.src_w, kern.FETCH_DIRECT, (0, 0, 0), 0, 0,
                            j.src_h, j.src_w, False, 0, j.src_h * j.src_w, j.conv_off)
            conv_meta.setdefault(j.dt, []).append(row)
    coef_dummy = bank.tensors(dev)  # placeholders for kernels that do not read them
    for dt, rows in conv_meta.items():
        meta = torch.tensor(rows, dtype=torch.int64, device=dev)
        tiles = _tiles([(i, r[6]) for i, r in enumerate(rows)], tail_block)
        tiles_t = torch.from_numpy(tiles).to(dev)
        launches.append(functools.partial(
            kern.convert_kernel[(len(tiles),)],
            arenas[dt], arenas[U8], meta, tiles_t, coef_dummy[0], coef_dummy[2], coef_dummy[3],
            conv_t, comp_t, NMETA=kern.T_NMETA, DT=dt, BLOCK=tail_block,
        ))

    # --- 2. first (or only) bicubic pass: one launch per storage kind
    pass_rows: dict[int, list[list[int]]] = {}
    tail_rows: dict[int, list[list[int]]] = {}
    for j in chunk:
        cur_src = j.conv_off if (j.pre_convert and j.passes) else j.src_off
        nch = 3 if (j.pre_convert and j.passes) else j.nch
        converted = j.pre_convert and bool(j.passes)
        dt = j.cur_dt if converted else j.dt
        h, w = j.src_h, j.src_w
        fetch = kern.FETCH_DIRECT
        coef = (0, 0, 0)
        nys = nxs = 0
        src_off, row_len = cur_src, w
        if j.passes:
            p0 = j.passes[0]
            if p0 == "h":
                co, bo, k = bank.bicubic(w, j.out_w, dt)
                mh, mw = h, j.out_w
                row = [cur_src, j.mid_off, mw, nch, w * nch, mh * mw * nch, co, bo, k, nch,
                       int(j.resample == "premultiplied" and not converted)]
            else:
                co, bo, k = bank.bicubic(h, j.out_h, dt)
                mh, mw = j.out_h, w
                row = [cur_src, j.mid_off, mh, mw * nch, 0, mh * mw * nch, co, bo, k, nch,
                       int(j.resample == "premultiplied" and not converted)]
            pass_rows.setdefault(dt, []).append(row)
            src_off, row_len, h, w = j.mid_off, mw, mh, mw
            if len(j.passes) == 2:
                if j.passes[1] == "h":
                    coef = bank.bicubic(w, j.out_w, dt)
                    fetch = kern.FETCH_H
                    w = j.out_w
                else:
                    coef = bank.bicubic(h, j.out_h, dt)
                    fetch = kern.FETCH_V
                    h = j.out_h
        elif j.resample == "nearest":
            nys = bank.nearest(j.src_h, j.out_h)
            nxs = bank.nearest(j.src_w, j.out_w)
            fetch = kern.FETCH_NEAREST
            h, w = j.out_h, j.out_w
        grid = grids[j.index]
        npix = grid[1] * grid[2] * ps * ps
        row = tail_meta(j, src_off, nch, row_len, fetch, coef, nys, nxs, h, w, converted,
                        grid[2], npix, 0)
        tail_rows.setdefault(dt, []).append((j, row))

    c8, c64, bounds, nidx = bank.tensors(dev)
    for dt, rows in pass_rows.items():
        meta = torch.tensor(rows, dtype=torch.int64, device=dev)
        tiles = torch.from_numpy(_tiles([(i, r[5]) for i, r in enumerate(rows)], pass_block)).to(dev)
        launches.append(functools.partial(
            kern.resample_pass_kernel[(tiles.shape[0],)],
            arenas[dt], arenas[dt], meta, tiles, c8 if dt == U8 else c64, bounds,
            NMETA=kern.PASS_NMETA, DT=dt, BLOCK=pass_block, **_launch_opts(dev),
        ))

    # --- 3. fused tail, written into the output: one launch per storage kind
    same_dev = out.device == dev
    if same_dev:
        target, base = out, 0
    else:
        first = int(starts[chunk[0].index])
        last = int(starts[chunk[-1].index + 1])
        target, base = torch.empty((last - first, 3, ps, ps), dtype=out.dtype, device=dev), first
    extents: list[_Extent] = []
    for dt, items in tail_rows.items():
        rows = []
        for j, row in items:
            row[kern.T_PATCH0] = int(starts[j.index]) - base
            rows.append(row)
        meta = torch.tensor(rows, dtype=torch.int64, device=dev)
        tiles_np = _tiles([(i, r[kern.T_NPIX]) for i, r in enumerate(rows)], tail_block)
        tiles = torch.from_numpy(tiles_np).to(dev)
        ext = torch.zeros((tiles_np.shape[0], kern.EXT_N), dtype=torch.int32, device=dev)
        owner = np.array([items[s][0].index for s in tiles_np[:, 0]], dtype=np.int64)
        extents.append(_Extent(ext, owner))
        launches.append(functools.partial(
            kern.tail_kernel[(tiles.shape[0],)],
            arenas[dt], target, meta, tiles, c8 if dt == U8 else c64, bounds, nidx, conv_t,
            comp_t, lut_t, ext, NMETA=kern.T_NMETA, DT=dt, P=ps, BLOCK=tail_block,
            **_launch_opts(dev),
        ))
    if not same_dev:
        launches.append(lambda: out[base : base + target.shape[0]].copy_(target, non_blocking=True))
    stats = {
        "upload_bytes": sum(int(j.src.nbytes) for j in chunk),
        "source_bytes": sum(int(j.src.nbytes) for j in chunk),
        "output_bytes": int(sum(int(starts[j.index + 1] - starts[j.index]) for j in chunk))
        * 3 * ps * ps * out.element_size(),
        "launches": len(launches),
    }
    return launches, stats, extents


def _launch_opts(dev: torch.device) -> dict[str, Any]:
    # Pillow's C code does not contract a*b+c into FMAs; neither may the float kernels.
    return {"enable_fp_fusion": False} if dev.type == "cuda" else {}
