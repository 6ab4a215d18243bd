"""The GPU pipeline: per-image recipes on the host, arenas and tables, kernel launches.

Per image the host decides a short recipe (spec §3): optional fill at the source size
(`convert_kernel`, fill before resize), at most one bicubic pass (`resample_pass_kernel`),
then the fused tail (second pass or NEAREST gather, conversion, composite, pad, LUT,
patchify). All images of a chunk share one arena per storage kind, and each step is one
launch per kernel specialization present (storage kind, channels, fetch and conversion mode),
whatever the number of images. Metadata rows and tile tables follow `layout.py`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import os
import threading
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import BackendError, InputError
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.images import ImageSource, load_images, resample_kind
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.pipelines.gpu import layout as L
from kimi_oracle.pipelines.gpu import resample as rs
from kimi_oracle.pipelines.gpu.tables import (
    MODES_16,
    TABLE_MODES,
    background_params,
    composite_table,
    conversion_table,
    fill_uses_alpha,
    i16_dtype,
    i32_key_level,
    table_channels,
    table_key,
)
from kimi_oracle.pipelines.reference import normalization_lut

_TORCH_DT = {int(L.U8): torch.uint8, int(L.U16): torch.uint16, int(L.I32): torch.int32,
             int(L.F32): torch.float32}
_ITEM = {int(L.U8): 1, int(L.U16): 2, int(L.I32): 4, int(L.F32): 4}

SUPPORTED_MODES = TABLE_MODES | frozenset(("RGB", "RGBA", "RGBX", "CMYK", "I", "F"))


@dataclasses.dataclass(frozen=True)
class Tiles:
    """Tile sizes of the launches (powers of two) and warps per program.

    `pass_rows` x `pass_cols`: output pixels of one `resample_pass_kernel` program; `tail`,
    `convert`: output elements of one `tail_kernel` / pixels of one `convert_kernel` program
    (flat, in patch order / row-major order). `num_warps` applies to every kernel on CUDA.
    """

    pass_rows: int = 8
    pass_cols: int = 64
    tail: int = 512
    convert: int = 512
    num_warps: int = 8

    def checked(self) -> "Tiles":
        """Itself, or InputError naming the field that is not a power of two."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or value <= 0 or value & (value - 1):
                raise InputError(f"tile size {field.name}={value!r} must be a positive power of two")
        if self.num_warps > 32:
            raise InputError(f"num_warps={self.num_warps} is more than a program can have (32)")
        return self


# The defaults whose registers and occupancy `kimi-oracle gpu build` certifies: 2 output
# pixels per thread in every kernel (8 warps x 32 threads for 512 pixels).
CUDA_TILES = Tiles()
# The interpreter's cost is per program instance and per element of a block: tiles that hold
# a test image (on the k3-small goldens tail blocks of 2^13 to 2^14 elements beat 2^15, which
# computes mostly masked lanes: docs/measurements.md).
INTERPRETER_TILES = Tiles(pass_rows=64, pass_cols=128, tail=1 << 13, convert=1 << 14, num_warps=4)


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
# Per-image recipe
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Conversion:
    """How the fill turns an image's own channels into RGBA (kernels._to_rgba)."""

    code: int  # layout.CONV_*
    alpha: bool = False  # CONV_RGB: channel 3 is alpha
    key: int | None = None  # CONV_I32: the transparency key
    table_key: tuple | None = None  # CONV_TABLE: the table's identity and contents
    table: np.ndarray | None = None


_RGB = _Conversion(int(L.CONV_RGB))  # what an image already filled to RGB needs


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
    conversion: _Conversion
    composite: bool  # the fill composites on the background
    plan_grid: tuple[int, int, int] = (1, 0, 0)  # geometry.plan's grid: sizes the output, checks
    # arena offsets, set per chunk by _layout_arenas
    src_off: int = 0
    conv_off: int = 0
    mid_off: int = 0

    @property
    def filled_first(self) -> bool:
        """The fill runs at the source size (convert_kernel) and its RGB image is resized."""
        return self.pre_convert and bool(self.passes)

    @property
    def pass_dt(self) -> int:
        """Storage kind of what the passes and the tail read."""
        return int(L.U8) if self.filled_first else self.dt

    @property
    def pass_nch(self) -> int:
        return 3 if self.filled_first else self.nch

    @property
    def mid_shape(self) -> tuple[int, int]:
        """(height, width) of the first pass's output."""
        if self.passes[0] == "h":
            return self.src_h, self.out_w
        return self.out_h, self.src_w


def _native_array(img: Image.Image) -> tuple[np.ndarray, int]:
    mode = img.mode
    w, h = img.size
    if mode in MODES_16:
        arr = np.frombuffer(img.tobytes(), dtype=i16_dtype(mode)).reshape(h, w)
        return arr.astype(np.uint16), int(L.U16)
    if mode == "I":
        return np.asarray(img, dtype=np.int32).reshape(h, w), int(L.I32)
    if mode == "F":
        return np.asarray(img, dtype=np.float32).reshape(h, w), int(L.F32)
    if mode == "1":
        return (np.asarray(img).reshape(h, w).astype(np.uint8) * 255), int(L.U8)
    arr = np.asarray(img)
    if arr.dtype != np.uint8:
        raise InputError(f"mode {mode!r}: unexpected array type {arr.dtype}")
    mask = rs.domain_xor(mode)
    if mask is not None:
        arr = arr ^ mask
    return arr, int(L.U8)


def _conversion(img: Image.Image, bg: TransparentBgConfig | None, resized: bool) -> _Conversion:
    """The fill's conversion of `img` (as the reference sees it: resized or not)."""
    mode = img.mode
    use_alpha = fill_uses_alpha(img, bg)
    if mode == "RGB":
        return _RGB
    if mode in ("RGBA", "RGBX"):
        return _Conversion(int(L.CONV_RGB), alpha=use_alpha and mode == "RGBA")
    if mode == "CMYK":
        return _Conversion(int(L.CONV_CMYK))
    if mode == "I":
        trns = img.info.get("transparency") if use_alpha else None
        return _Conversion(int(L.CONV_I32), key=int(trns) if isinstance(trns, int) else None)
    if mode == "F":
        return _Conversion(int(L.CONV_F32))
    return _Conversion(int(L.CONV_TABLE), table_key=table_key(img, use_alpha, resized),
                       table=conversion_table(img, use_alpha, resized))


def _make_job(index: int, img: Image.Image, config: PreprocessConfig) -> _Job:
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
    pre = config.fill_stage == "before_resize" and img.mode != "RGB"
    size = (p.new_w, p.new_h)
    # before_resize: fill(img) -> RGB uint8, then Pillow resizes that RGB image
    kind = resample_kind("RGB" if pre else img.mode, img.size, size)
    passes = () if kind in ("none", "nearest") else rs.pass_order(img.width, img.height, *size)
    # The table must describe the image the reference converts: the resized one, when the
    # resize ran in the image's own mode (premultiplied modes do not use palette tables).
    resized = not pre and kind in ("bicubic", "nearest")
    job = _Job(index, np.ascontiguousarray(arr), dt, arr.shape[2], img.width, img.height,
               p.new_w, p.new_h, pre, kind, passes, _conversion(img, bg, resized),
               fill_uses_alpha(img, bg), plan_grid=tuple(int(v) for v in p.grid_thw))
    _check_offsets(job, config.patch_size)
    return job


def _check_offsets(job: _Job, patch: int) -> None:
    """Offsets inside one image are int32 in the kernels: refuse images that overflow them."""
    sizes = [job.src.size, job.src_h * job.src_w * 3, job.plan_grid[1] * job.plan_grid[2] * 3 * patch * patch]
    if job.passes:
        sizes.append(job.mid_shape[0] * job.mid_shape[1] * job.pass_nch)
    if max(sizes) >= L.MAX_IMAGE_ELEMENTS:
        raise InputError(f"{job.src_w}x{job.src_h}x{job.nch} is too large for the GPU pipeline "
                         f"(int32 offsets inside an image)", source=f"image[{job.index}]")


# ------------------------------------------------------------------------------------------
# Launches
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Launch:
    """One kernel launch: the kernel, its grid, arguments and specialization, and the bytes it
    must move at least (sources read once, outputs written once; small tables not counted)."""

    kernel: Any
    grid: int
    args: tuple
    constexprs: dict[str, int]
    options: dict[str, Any]
    read_bytes: int
    write_bytes: int
    out_dtype: str | None = None  # the tail's output type (a separate compile per type)

    def __call__(self) -> None:
        self.kernel[(self.grid,)](*self.args, **self.constexprs, **self.options)

    @property
    def kernel_name(self) -> str:
        """The Triton function's name."""
        return str(self.kernel.__name__)

    @property
    def specialization(self) -> str:
        """The constexprs that select this kernel's code path, by name (`DT=u8 NCH=4 ...`)."""
        names = {"DT": L.STORAGE_NAMES, "FETCH": L.FETCH_NAMES, "CONV": L.CONV_NAMES,
                 "AXIS": L.AXIS_NAMES}
        parts = []
        for key, value in self.constexprs.items():
            if key in names:
                parts.append(f"{key}={names[key][int(value)]}")
            elif key in ("NCH", "PREMULTIPLY", "P"):
                parts.append(f"{key}={int(value)}")
        if self.out_dtype is not None:
            parts.append(f"OUT={self.out_dtype}")
        return " ".join(parts)

    def describe(self) -> dict[str, Any]:
        """Name, specialization, grid, tile constants and bytes, for reports."""
        return {"kernel": self.kernel_name, "specialization": self.specialization,
                "programs": self.grid, "read_bytes": self.read_bytes,
                "write_bytes": self.write_bytes}


def _flat_tiles(counts: Sequence[tuple[int, int]], block: int) -> np.ndarray:
    """Tile table of flat kernels: (slot, 0, block index) for `count` elements per slot."""
    rows = [np.zeros((0, int(L.TILE_LEN)), np.int32)]
    for slot, count in counts:
        n = max(1, -(-count // block))
        t = np.zeros((n, int(L.TILE_LEN)), np.int32)
        t[:, L.TILE_SLOT] = slot
        t[:, L.TILE_COL] = np.arange(n)
        rows.append(t)
    return np.concatenate(rows, 0)


def _grid_tiles(shapes: Sequence[tuple[int, int, int]], rows: int, cols: int) -> np.ndarray:
    """Tile table of 2-D kernels: (slot, tile row, tile column) covering (slot, h, w)."""
    out = [np.zeros((0, int(L.TILE_LEN)), np.int32)]
    for slot, h, w in shapes:
        ty, tx = np.meshgrid(np.arange(-(-h // rows)), np.arange(-(-w // cols)), indexing="ij")
        t = np.zeros((ty.size, int(L.TILE_LEN)), np.int32)
        t[:, L.TILE_SLOT] = slot
        t[:, L.TILE_ROW] = ty.reshape(-1)
        t[:, L.TILE_COL] = tx.reshape(-1)
        out.append(t)
    return np.concatenate(out, 0)


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
        if dt == L.U8:
            c = rs.coeffs_8bit(in_size, out_size).reshape(-1)
            off = self.n8
            self.c8.append(c)
            self.n8 += c.size
        else:
            c = kk.reshape(-1)
            off = self.n64
            self.c64.append(c)
            self.n64 += c.size
        b = np.zeros((xmin.size, int(L.BOUND_LEN)), np.int32)
        b[:, L.BOUND_FIRST] = xmin
        b[:, L.BOUND_COUNT] = cnt
        b = b.reshape(-1)
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

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        def cat(parts, dtype):
            arr = np.concatenate(parts) if parts else np.zeros(1, dtype)
            return torch.from_numpy(np.ascontiguousarray(arr, dtype=dtype)).to(device)

        return {"c8": cat(self.c8, np.int32), "c64": cat(self.c64, np.float64),
                "bounds": cat(self.bounds, np.int32), "nearest": cat(self.nidx, np.int32)}


class _DeviceCache:
    """Conversion, composite and LUT tables kept on the device between calls."""

    def __init__(self) -> None:
        self._store: dict[tuple, torch.Tensor] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, make: Callable[[], torch.Tensor]) -> torch.Tensor:
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


@dataclasses.dataclass
class _Batch:
    """One call: its jobs, where they go in the output, and how launches are made."""

    kern: Any
    device: torch.device
    config: PreprocessConfig
    jobs: list[_Job]
    out: torch.Tensor
    starts: np.ndarray  # first output patch row of each image (+ the total at the end)
    lut: torch.Tensor
    tiles: Tiles
    compiled: bool  # CUDA launch options (real or planned), not the interpreter's

    @property
    def options(self) -> dict[str, Any]:
        # Pillow's C code does not contract a*b+c into FMAs; neither may the float kernels.
        return {"num_warps": self.tiles.num_warps, "enable_fp_fusion": False} if self.compiled else {}


@dataclasses.dataclass
class _Tables:
    """Conversion and composite tables of one chunk, on the device."""

    conv: torch.Tensor
    conv_offsets: dict[Any, int]
    composite: torch.Tensor
    bg_square: int
    bg_even: int  # composite table slot of the even chessboard squares
    bg_odd: int


@dataclasses.dataclass
class _Extent:
    """What one tail launch recorded: `ext` (programs, EXT_LEN) int32 on the device, filled by
    the kernel, and `owner` (programs,), the image index each program worked for."""

    ext: torch.Tensor
    owner: np.ndarray


def _layout_arenas(chunk: Sequence[_Job]) -> dict[int, int]:
    """Offsets of every job's planes in its arena: [sources | filled RGB | intermediates]."""
    length = {dt: 0 for dt in _TORCH_DT}
    for j in chunk:
        j.src_off = length[j.dt]
        length[j.dt] += j.src.size
    for j in chunk:
        if j.filled_first:
            j.conv_off = length[int(L.U8)]
            length[int(L.U8)] += j.src_h * j.src_w * 3
    for j in chunk:
        if j.passes:
            mh, mw = j.mid_shape
            j.mid_off = length[j.pass_dt]
            length[j.pass_dt] += mh * mw * j.pass_nch
    return length


def _upload_arenas(chunk: Sequence[_Job], length: dict[int, int], dev: torch.device) -> dict[int, torch.Tensor]:
    """One device arena per storage kind present, sources copied in (pinned, asynchronous)."""
    arenas: dict[int, torch.Tensor] = {}
    for dt, n in length.items():
        if n == 0:
            continue
        members = [j for j in chunk if j.dt == dt]
        nsrc = sum(j.src.size for j in members)
        host = torch.empty(nsrc, dtype=_TORCH_DT[dt], pin_memory=dev.type == "cuda")
        hv = host.numpy() if dt != L.U16 else host.view(torch.int16).numpy().view(np.uint16)
        for j in members:
            hv[j.src_off : j.src_off + j.src.size] = j.src.reshape(-1)
        arena = torch.empty(max(n, 1), dtype=_TORCH_DT[dt], device=dev)
        arena[:nsrc].copy_(host, non_blocking=True)
        arenas[dt] = arena
    return arenas


def _device_tables(chunk: Sequence[_Job], bg: TransparentBgConfig | None, dev: torch.device) -> _Tables:
    tables: list[torch.Tensor] = []
    offsets: dict[Any, int] = {}
    n = 0
    for j in chunk:
        conv = j.conversion
        if conv.table is not None and conv.table_key not in offsets:
            t = _DEVICE_CACHE.get(("conv", conv.table_key, str(dev)),
                                  lambda tab=conv.table: torch.from_numpy(tab.copy()).to(dev))
            offsets[conv.table_key] = n
            tables.append(t)
            n += t.numel()
    conv_t = (tables[0] if len(tables) == 1 else torch.cat(tables)) if tables else \
        torch.zeros(1, dtype=torch.int32, device=dev)
    slots: dict[int, int] = {}
    square, even, odd = 1, 0, 0
    if bg is not None:
        square, even, odd = background_params(bg)
        for level in (even, odd):
            slots.setdefault(level, len(slots))
    parts = [_DEVICE_CACHE.get(("comp", level, str(dev)),
                               lambda v=level: torch.from_numpy(composite_table(v).reshape(-1).copy()).to(dev))
             for level in slots]
    comp_t = torch.cat(parts) if parts else torch.zeros(1, dtype=torch.uint8, device=dev)
    return _Tables(conv_t, offsets, comp_t, square, slots.get(even, 0), slots.get(odd, 0))


def _fill_fields(row: np.ndarray, conv: _Conversion, composite: bool, unpremultiply: bool,
                 tables: _Tables) -> None:
    """The fill's fields of an image row: conversion, un-premultiply, composite."""
    row[L.ROW_TABLE] = tables.conv_offsets.get(conv.table_key, 0)
    row[L.ROW_ALPHA] = int(conv.alpha)
    row[L.ROW_KEY_ON] = int(conv.key is not None)
    row[L.ROW_KEY] = i32_key_level(conv.key) if conv.key is not None else 0
    row[L.ROW_UNPREMULTIPLY] = int(unpremultiply)
    row[L.ROW_COMPOSITE] = int(composite)
    row[L.ROW_BG_SQUARE] = tables.bg_square
    row[L.ROW_BG_EVEN] = tables.bg_even
    row[L.ROW_BG_ODD] = tables.bg_odd


def _group(groups: dict[tuple, list], key: tuple, item: Any) -> None:
    groups.setdefault(key, []).append(item)


def _convert_launches(batch: _Batch, chunk: Sequence[_Job], arenas: dict[int, torch.Tensor],
                      tables: _Tables) -> list[Launch]:
    """1. Fill at the source size (before_resize with a resize to do): one launch per
    (storage kind, channels, conversion)."""
    groups: dict[tuple, list] = {}
    for j in chunk:
        if not j.filled_first:
            continue
        row = np.zeros(int(L.ROW_LEN), np.int64)
        row[L.ROW_SRC] = j.src_off
        row[L.ROW_SRC_W] = j.src_w
        row[L.ROW_H] = j.src_h
        row[L.ROW_W] = j.src_w
        row[L.ROW_ELEMS] = j.src_h * j.src_w
        row[L.ROW_DST] = j.conv_off
        _fill_fields(row, j.conversion, j.composite, False, tables)
        _group(groups, (j.dt, j.nch, j.conversion.code), (j, row))
    launches = []
    for (dt, nch, conv), items in groups.items():
        rows = np.stack([row for _, row in items])
        tiles = _flat_tiles([(i, int(r[L.ROW_ELEMS])) for i, r in enumerate(rows)], batch.tiles.convert)
        launches.append(Launch(
            batch.kern.convert_kernel, len(tiles),
            (arenas[dt], arenas[int(L.U8)], _tensor(rows, batch.device), _tensor(tiles, batch.device),
             tables.conv, tables.composite),
            {"DT": dt, "NCH": nch, "CONV": conv, "BLOCK": batch.tiles.convert}, batch.options,
            read_bytes=sum(j.src.nbytes for j, _ in items),
            write_bytes=sum(j.src_h * j.src_w * 3 for j, _ in items),
        ))
    return launches


def _pass_rows(chunk: Sequence[_Job], bank: _CoefBank) -> dict[tuple, list]:
    """The first (or only) bicubic pass's rows, grouped by specialization (DT, NCH, AXIS,
    PREMULTIPLY); the weights go to `bank`."""
    groups: dict[tuple, list] = {}
    for j in chunk:
        if not j.passes:
            continue
        mh, mw = j.mid_shape
        row = np.zeros(int(L.PASS_LEN), np.int64)
        row[L.PASS_SRC] = j.conv_off if j.filled_first else j.src_off
        row[L.PASS_DST] = j.mid_off
        row[L.PASS_SRC_W] = j.src_w
        row[L.PASS_OUT_H] = mh
        row[L.PASS_OUT_W] = mw
        if j.passes[0] == "h":
            axis = int(L.AXIS_H)
            coef = bank.bicubic(j.src_w, j.out_w, j.pass_dt)
        else:
            axis = int(L.AXIS_V)
            coef = bank.bicubic(j.src_h, j.out_h, j.pass_dt)
        row[L.PASS_COEF], row[L.PASS_BOUND], row[L.PASS_KSIZE] = coef
        premultiply = j.resample == "premultiplied" and not j.filled_first
        _group(groups, (j.pass_dt, j.pass_nch, axis, premultiply), (j, row))
    return groups


def _pass_launches(batch: _Batch, groups: dict[tuple, list], arenas: dict[int, torch.Tensor],
                   coefs: dict[str, torch.Tensor]) -> list[Launch]:
    """2. The first (or only) bicubic pass: one launch per specialization."""
    launches = []
    t = batch.tiles
    for (dt, nch, axis, premultiply), items in groups.items():
        rows = np.stack([row for _, row in items])
        tiles = _grid_tiles([(i, int(r[L.PASS_OUT_H]), int(r[L.PASS_OUT_W])) for i, r in enumerate(rows)],
                            t.pass_rows, t.pass_cols)
        launches.append(Launch(
            batch.kern.resample_pass_kernel, len(tiles),
            (arenas[dt], arenas[dt], _tensor(rows, batch.device), _tensor(tiles, batch.device),
             coefs["c8"] if dt == L.U8 else coefs["c64"], coefs["bounds"]),
            {"DT": dt, "NCH": nch, "AXIS": axis, "PREMULTIPLY": premultiply,
             "BLOCK_Y": t.pass_rows, "BLOCK_X": t.pass_cols}, batch.options,
            read_bytes=sum(j.src_h * j.src_w * nch * _ITEM[dt] for j, _ in items),
            write_bytes=sum(j.mid_shape[0] * j.mid_shape[1] * nch * _ITEM[dt] for j, _ in items),
        ))
    return launches


def _tail_rows(batch: _Batch, chunk: Sequence[_Job], bank: _CoefBank, tables: _Tables,
               base: int) -> dict[tuple, list]:
    """The tail's image rows, grouped by specialization (DT, NCH, FETCH, CONV); each item is
    (job, row, bytes the tail must read for it)."""
    ps = batch.config.patch_size
    groups: dict[tuple, list] = {}
    for j in chunk:
        dt, nch = j.pass_dt, j.pass_nch
        row = np.zeros(int(L.ROW_LEN), np.int64)
        fetch = int(L.FETCH_DIRECT)
        if j.passes:
            h, w = j.mid_shape
            row[L.ROW_SRC] = j.mid_off
            if len(j.passes) == 2:
                if j.passes[1] == "h":
                    fetch, coef, w = int(L.FETCH_H), bank.bicubic(w, j.out_w, dt), j.out_w
                else:
                    fetch, coef, h = int(L.FETCH_V), bank.bicubic(h, j.out_h, dt), j.out_h
                row[L.ROW_COEF], row[L.ROW_BOUND], row[L.ROW_KSIZE] = coef
            src_w = j.mid_shape[1]
            read = j.mid_shape[0] * j.mid_shape[1] * nch * _ITEM[dt]
        elif j.resample == "nearest":
            row[L.ROW_SRC] = j.src_off
            row[L.ROW_NEAREST_Y] = bank.nearest(j.src_h, j.out_h)
            row[L.ROW_NEAREST_X] = bank.nearest(j.src_w, j.out_w)
            fetch, h, w, src_w = int(L.FETCH_NEAREST), j.out_h, j.out_w, j.src_w
            used_y = np.unique(rs.nearest_index(j.src_h, j.out_h))
            used_x = np.unique(rs.nearest_index(j.src_w, j.out_w))
            read = int((used_y >= 0).sum() * (used_x >= 0).sum()) * nch * _ITEM[dt]
        else:
            row[L.ROW_SRC] = j.src_off
            h, w, src_w = j.src_h, j.src_w, j.src_w
            read = j.src.nbytes
        grid = j.plan_grid
        row[L.ROW_SRC_W] = src_w
        row[L.ROW_H] = h
        row[L.ROW_W] = w
        row[L.ROW_GRID_W] = grid[2]
        row[L.ROW_ELEMS] = grid[1] * grid[2] * ps * ps
        row[L.ROW_PATCH0] = int(batch.starts[j.index]) - base
        conv = _RGB if j.filled_first else j.conversion
        unpremultiply = j.resample == "premultiplied" and not j.filled_first
        composite = j.composite and not j.filled_first
        _fill_fields(row, conv, composite, unpremultiply, tables)
        _group(groups, (dt, nch, fetch, conv.code), (j, row, read))
    return groups


def _tail_launches(batch: _Batch, chunk: Sequence[_Job], arenas: dict[int, torch.Tensor],
                   groups: dict[tuple, list], coefs: dict[str, torch.Tensor], tables: _Tables,
                   target: torch.Tensor) -> tuple[list[Launch], list[_Extent]]:
    """3. The fused tail, written into `target`: one launch per specialization."""
    ps = batch.config.patch_size
    out_item = target.element_size()
    launches, extents = [], []
    for (dt, nch, fetch, conv), items in groups.items():
        rows = np.stack([row for _, row, _ in items])
        tiles = _flat_tiles([(i, int(r[L.ROW_ELEMS])) for i, r in enumerate(rows)], batch.tiles.tail)
        ext = torch.zeros((len(tiles), int(L.EXT_LEN)), dtype=torch.int32, device=batch.device)
        extents.append(_Extent(ext, np.array([items[s][0].index for s in tiles[:, L.TILE_SLOT]], np.int64)))
        launches.append(Launch(
            batch.kern.tail_kernel, len(tiles),
            (arenas[dt], target, _tensor(rows, batch.device), _tensor(tiles, batch.device),
             coefs["c8"] if dt == L.U8 else coefs["c64"], coefs["bounds"], coefs["nearest"],
             tables.conv, tables.composite, batch.lut, ext),
            {"DT": dt, "NCH": nch, "FETCH": fetch, "CONV": conv, "P": ps, "BLOCK": batch.tiles.tail},
            batch.options,
            read_bytes=sum(read for _, _, read in items),
            write_bytes=sum(int(r[L.ROW_ELEMS]) * 3 * out_item for r in rows),
            out_dtype="bf16" if target.dtype == torch.bfloat16 else "fp32",
        ))
    return launches, extents


def _tensor(arr: np.ndarray, dev: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(arr)).to(dev)


@dataclasses.dataclass
class _ChunkLaunches:
    launches: list[Launch]
    extents: list[_Extent]
    copy_out: Callable[[], Any] | None  # the chunk's output to a host output, after the tails


def _chunk_launches(batch: _Batch, chunk: Sequence[_Job]) -> _ChunkLaunches:
    """Host work and uploads for one chunk: its launches in order, and the tails' extent
    records (filled when the launches run)."""
    dev = batch.device
    arenas = _upload_arenas(chunk, _layout_arenas(chunk), dev)
    tables = _device_tables(chunk, batch.config.transparent_bg_config, dev)
    ps = batch.config.patch_size
    if batch.out.device == dev:
        target, base = batch.out, 0
    else:
        first = int(batch.starts[chunk[0].index])
        last = int(batch.starts[chunk[-1].index + 1])
        target = torch.empty((last - first, 3, ps, ps), dtype=batch.out.dtype, device=dev)
        base = first
    converts = _convert_launches(batch, chunk, arenas, tables)
    # Rows first: they add their weights and index tables to the bank, which then goes to
    # the device once.
    bank = _CoefBank()
    pass_groups = _pass_rows(chunk, bank)
    tail_groups = _tail_rows(batch, chunk, bank, tables, base)
    coefs = bank.tensors(dev)
    passes = _pass_launches(batch, pass_groups, arenas, coefs)
    tails, extents = _tail_launches(batch, chunk, arenas, tail_groups, coefs, tables, target)
    copy_out = None
    if target is not batch.out:
        def copy_out() -> Any:
            return batch.out[base : base + target.shape[0]].copy_(target, non_blocking=True)
    return _ChunkLaunches(converts + passes + tails, extents, copy_out)


# ------------------------------------------------------------------------------------------
# Grids from what the tails wrote
# ------------------------------------------------------------------------------------------


def _produced_grids(jobs: Sequence[_Job], extents: Sequence[_Extent], total_rows: int,
                    ps: int) -> list[tuple[int, int, int]]:
    """`grid_thws` rows built from what the tail kernels recorded writing (one device read).

    Per image: patches written = elements written / p², grid = (1, patch rows reached, patch
    columns reached). Raises BackendError when the writes do not form a full grid, when the
    produced grid or image size differs from `geometry.plan`'s (both values named), or when
    the grids do not account for every row of `pixel_values`.
    """
    n = len(jobs)
    if extents:
        ext = torch.cat([e.ext for e in extents]).cpu().numpy().astype(np.int64)
        owner = np.concatenate([e.owner for e in extents])
    else:
        ext, owner = np.zeros((0, int(L.EXT_LEN)), np.int64), np.zeros(0, np.int64)
    written = np.zeros(n, np.int64)
    np.add.at(written, owner, ext[:, L.EXT_WRITTEN])
    reach = np.zeros((n, 4), np.int64)
    cols = [int(c) for c in (L.EXT_PATCH_ROWS, L.EXT_PATCH_COLS, L.EXT_ROWS, L.EXT_COLS)]
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


# ------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------


def _job_bytes(job: _Job, factor: int, out_item: int) -> int:
    """Device bytes one image needs (source, filled RGB, intermediate, output)."""
    n = job.src.nbytes
    if job.filled_first:
        n += job.src_h * job.src_w * 3
    if job.passes:
        mh, mw = job.mid_shape
        n += mh * mw * job.pass_nch * _ITEM[job.pass_dt]
    hp, wp = -(-job.out_h // factor) * factor, -(-job.out_w // factor) * factor
    return n + hp * wp * 3 * out_item


def _split_chunks(batch: _Batch, chunk_bytes: int | None) -> list[list[_Job]]:
    """Consecutive images whose device bytes add up to at most `chunk_bytes` (at least one)."""
    if not chunk_bytes:
        return [batch.jobs]
    factor = int(batch.config.factor)
    chunks: list[list[_Job]] = []
    cur: list[_Job] = []
    used = 0
    for job in batch.jobs:
        nbytes = _job_bytes(job, factor, batch.out.element_size())
        if cur and used + nbytes > chunk_bytes:
            chunks.append(cur)
            cur, used = [], 0
        cur.append(job)
        used += nbytes
    if cur:
        chunks.append(cur)
    return chunks


def _check_out_dtype(out_dtype: torch.dtype) -> None:
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise InputError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype}")


def _output(jobs: Sequence[_Job], config: PreprocessConfig, out_dtype: torch.dtype,
            dev: torch.device, pin: bool) -> tuple[torch.Tensor, np.ndarray]:
    """The output tensor, sized by the plan's grids, and each image's first patch row."""
    # The plan sizes the output and the tail's launch; the returned grids are read back from
    # what the tail wrote (`_produced_grids`) and checked against these.
    npatch = [j.plan_grid[1] * j.plan_grid[2] for j in jobs]
    starts = np.concatenate([[0], np.cumsum(npatch)]).astype(np.int64)
    ps = config.patch_size
    out = torch.empty((int(starts[-1]), 3, ps, ps), dtype=out_dtype, device=dev, pin_memory=pin)
    return out, starts


def _lut(config: PreprocessConfig, out_dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    """The reference's normalization table, (3 x 256) flat, in the output dtype, on `dev`."""
    lut = normalization_lut(config)
    return _DEVICE_CACHE.get(
        ("lut", lut.tobytes(), str(out_dtype), str(dev)),
        lambda: torch.from_numpy(np.array(lut, dtype=np.float32)).to(dev).to(out_dtype).contiguous(),
    )


def _batch(images: Iterable[ImageSource], config: PreprocessConfig, dev: torch.device,
           out_dtype: torch.dtype, out_device: str | torch.device | None, tiles: Tiles | None,
           compiled: bool) -> _Batch:
    """Decode, plan every image, allocate the output: everything before the chunks."""
    _check_out_dtype(out_dtype)
    if tiles is None:
        tiles = CUDA_TILES if compiled else INTERPRETER_TILES
    tiles = tiles.checked()
    jobs = [_make_job(i, img, config) for i, img in enumerate(load_images(images))]
    odev = dev if out_device is None else torch.device(out_device)
    out, starts = _output(jobs, config, out_dtype, odev, pin=odev.type == "cpu" and dev.type == "cuda")
    return _Batch(_kernels(), dev, config, jobs, out, starts, _lut(config, out_dtype, dev), tiles,
                  compiled)


def prepare_launches(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
    tiles: Tiles | None = None,
) -> tuple[list[Launch], dict, Callable[[], PreprocessResult]]:
    """Benchmark hook: do all host work and uploads, return (launches, byte counts, finish).

    Calling every launch in order fills the output; launches are idempotent, so they can be
    timed repeatedly from the planes already on the device. `finish()`, after the launches,
    returns the `PreprocessResult` (grids read back from what the tail recorded).
    """
    dev = resolve_device(device)
    batch = _batch(images, config, dev, out_dtype, None, tiles, compiled=dev.type == "cuda")
    chunk = _chunk_launches(batch, batch.jobs)

    def finish() -> PreprocessResult:
        produced = _produced_grids(batch.jobs, chunk.extents, int(batch.out.shape[0]), config.patch_size)
        return PreprocessResult(batch.out, torch.tensor(produced, dtype=torch.int64))

    return chunk.launches, _stats(batch.jobs, chunk.launches), finish


def launch_plan(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    out_dtype: torch.dtype = torch.float32,
    tiles: Tiles = CUDA_TILES,
) -> tuple[list[Launch], dict]:
    """The launches a CUDA run makes for this batch (CUDA options, `tiles`), built on CPU
    tensors and not run: for the ahead-of-time build and the roofline. Needs no GPU."""
    rs.check_pillow()
    batch = _batch(images, config, torch.device("cpu"), out_dtype, None, tiles, compiled=True)
    launches = _chunk_launches(batch, batch.jobs).launches
    return launches, _stats(batch.jobs, launches)


def _stats(jobs: Sequence[_Job], launches: Sequence[Launch]) -> dict:
    return {
        "upload_bytes": sum(int(j.src.nbytes) for j in jobs),
        "source_bytes": sum(int(j.src.nbytes) for j in jobs),
        "output_bytes": sum(launch.write_bytes for launch in launches
                            if launch.kernel_name == "tail_kernel"),
        "launches": len(launches),
        "launch_bytes": [launch.describe() for launch in launches],
        "moved_bytes": sum(launch.read_bytes + launch.write_bytes for launch in launches),
    }


def preprocess(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
    chunk_bytes: int | None = None,
    out_device: str | torch.device | None = None,
    tiles: Tiles | None = None,
) -> PreprocessResult:
    """The checkpoint's preprocessing with Pillow-exact kernels: same bytes as the reference.

    `tiles`: tile sizes and warps (default `CUDA_TILES` on CUDA, `INTERPRETER_TILES` under
    the interpreter); `chunk_bytes`: device bytes per chunk of images (default: one chunk).
    """
    dev = resolve_device(device)
    batch = _batch(images, config, dev, out_dtype, out_device, tiles, compiled=dev.type == "cuda")
    extents: list[_Extent] = []
    for jobs in _split_chunks(batch, chunk_bytes):
        extents += _run_chunk(batch, jobs)
    # One read of the tails' records (it also waits for the kernels, and for the copies to a
    # pinned host output, which were queued before it on the same stream).
    produced = _produced_grids(batch.jobs, extents, int(batch.out.shape[0]), config.patch_size)
    if batch.out.device != dev:
        torch.cuda.current_stream(dev).synchronize()  # pinned host output: wait for the copies
    return PreprocessResult(batch.out, torch.tensor(produced, dtype=torch.int64))


def _run_chunk(batch: _Batch, jobs: Sequence[_Job]) -> list[_Extent]:
    chunk = _chunk_launches(batch, jobs)
    for launch in chunk.launches:
        launch()
    if chunk.copy_out is not None:
        chunk.copy_out()
    return chunk.extents


def drawn_tiles(images: Sequence[Image.Image], config: PreprocessConfig) -> Tiles:
    """Tile sizes drawn from the batch itself (a hash of its modes, sizes and config).

    Each extent (rows and columns of the largest image, its output elements and pixels) is
    cut into 1, 2 or 4 tiles, so that a run crosses tile boundaries in both axes at a bounded
    interpreter cost; the same batch always gets the same tiles, so a finding replays.
    """
    digest = hashlib.sha256(repr(([(im.mode, im.size) for im in images], config)).encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    ps = config.patch_size
    rows = max((im.height for im in images), default=1)
    cols = max((im.width for im in images), default=1)
    pixels = max((im.width * im.height for im in images), default=1)
    elements = max((int(np.prod(plan(im.width, im.height, config).grid_thw)) * ps * ps
                    for im in images), default=1)

    def cut(extent: int) -> int:
        whole = 1 << max(0, int(extent - 1).bit_length())  # the power of two >= extent
        return max(1, whole >> int(rng.integers(0, 3)))

    return Tiles(pass_rows=cut(rows), pass_cols=cut(cols), tail=cut(elements), convert=cut(pixels),
                 num_warps=INTERPRETER_TILES.num_warps)
