"""Kernel launches per stage: fill (convert), first bicubic pass and fused tail, per chunk.

All images of a chunk share one arena per storage kind, and each step is one launch per
kernel specialization present (storage kind, channels, fetch and conversion mode), whatever
the number of images. Metadata rows and tile tables follow `layout.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.pipelines.gpu import layout as L
from kimi_oracle.pipelines.gpu import resample as rs
from kimi_oracle.pipelines.gpu.arenas import (_CoefBank, _device_tables, _layout_arenas, _Tables, _tensor,
                                              _upload_arenas)
from kimi_oracle.pipelines.gpu.jobs import _ITEM, _RGB, _Conversion, _Job
from kimi_oracle.pipelines.gpu.tables import i32_key_level
from kimi_oracle.pipelines.gpu.staging import STAGE_BYTES, stage_segment, tail_window
from kimi_oracle.pipelines.gpu.tiles import Tiles, _flat_tiles, _grid_tiles, tail_block


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
class _Extent:
    """What one tail launch recorded: `ext` (programs, EXT_LEN) int32 on the device, filled by
    the kernel, and `owner` (programs,), the image index each program worked for."""

    ext: torch.Tensor
    owner: np.ndarray


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
             "BLOCK_Y": t.pass_rows, "BLOCK_X": t.pass_cols, "ALIGN": STAGE_BYTES // _ITEM[dt],
             "SEG": stage_segment(t.pass_cols, nch, _ITEM[dt], t.pass_rows, 32 * t.num_warps),
             "WIN": t.pass_window // _ITEM[dt]},
            batch.options,
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
        grid_h = rows[:, L.ROW_ELEMS] // (ps * ps * rows[:, L.ROW_GRID_W])
        # no more patches a program than the launch's largest patch grid holds
        block_rows, cols, patches, patch_rows = tail_block(
            batch.tiles.tail, ps, int(rows[:, L.ROW_GRID_W].max()), int(grid_h.max()))
        # (slot, group of `patch_rows` patch rows, group of `patches` patch columns)
        tiles = _grid_tiles([(i, int(grid_h[i]), int(r[L.ROW_GRID_W])) for i, r in enumerate(rows)],
                            patch_rows, patches)
        ext = torch.zeros((len(tiles), int(L.EXT_LEN)), dtype=torch.int32, device=batch.device)
        extents.append(_Extent(ext, np.array([items[s][0].index for s in tiles[:, L.TILE_SLOT]], np.int64)))
        launches.append(Launch(
            batch.kern.tail_kernel, len(tiles),
            (arenas[dt], target, _tensor(rows, batch.device), _tensor(tiles, batch.device),
             coefs["c8"] if dt == L.U8 else coefs["c64"], coefs["bounds"], coefs["nearest"],
             tables.conv, tables.composite, batch.lut, ext),
            {"DT": dt, "NCH": nch, "FETCH": fetch, "CONV": conv, "P": ps, "ROWS": block_rows,
             "COLS": cols, "PATCHES": patches, "PATCH_ROWS": patch_rows, "ALIGN": STAGE_BYTES // _ITEM[dt],
             "SEG": stage_segment(cols, nch, _ITEM[dt], block_rows * patch_rows, 32 * batch.tiles.num_warps),
             "WIN": tail_window(cols, nch, _ITEM[dt])},
            batch.options,
            read_bytes=sum(read for _, _, read in items),
            write_bytes=sum(int(r[L.ROW_ELEMS]) * 3 * out_item for r in rows),
            out_dtype="bf16" if target.dtype == torch.bfloat16 else "fp32",
        ))
    return launches, extents


def stage_pad(tiles: Tiles, patch_size: int) -> int:
    """Elements every arena holds past its contents, so that a staged block (`staging.py`)
    that starts inside an image never reads past the allocation: the largest block row of
    any launch (4 channels of 8-bit elements, the most elements a row)."""
    rows, cols, _, _ = tail_block(tiles.tail, patch_size)
    threads = 32 * tiles.num_warps
    blocks = ((tiles.pass_cols, tiles.pass_rows), (cols, rows))
    return max(tiles.pass_window, tail_window(cols, 4, 1),
               *(stage_segment(c, n, 1, r, threads) for c, r in blocks for n in (1, 4)))


@dataclasses.dataclass
class _ChunkLaunches:
    launches: list[Launch]
    extents: list[_Extent]
    copy_out: Callable[[], Any] | None  # the chunk's output to a host output, after the tails


def _writes_in_place(out: torch.Tensor, dev: torch.device) -> bool:
    """Whether the tails write straight into `out`: it lies on the launches' device. A CUDA
    device without an index is the current one (a tensor made on `cuda` reports `cuda:0`, and
    `torch.device("cuda:0") != torch.device("cuda")`); elsewhere (a pinned host output) a chunk
    is written on the device and copied to `out` after its tails."""
    where = out.device
    if where.type != dev.type:
        return False
    if where.type != "cuda":
        return True
    current = torch.cuda.current_device
    return (current() if where.index is None else where.index) == (current() if dev.index is None else dev.index)


def _chunk_launches(batch: _Batch, chunk: Sequence[_Job]) -> _ChunkLaunches:
    """Host work and uploads for one chunk: its launches in order, and the tails' extent
    records (filled when the launches run)."""
    dev = batch.device
    arenas = _upload_arenas(chunk, _layout_arenas(chunk), dev,
                            stage_pad(batch.tiles, batch.config.patch_size))
    tables = _device_tables(chunk, batch.config.transparent_bg_config, dev)
    ps = batch.config.patch_size
    if _writes_in_place(batch.out, dev):
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
