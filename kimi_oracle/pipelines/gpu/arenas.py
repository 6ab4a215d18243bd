"""Device memory of a chunk: arenas per storage kind, coefficient banks, cached tables."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Sequence

import numpy as np
import torch

from kimi_oracle.core.config import TransparentBgConfig
from kimi_oracle.pipelines.gpu import layout as L
from kimi_oracle.pipelines.gpu import resample as rs
from kimi_oracle.pipelines.gpu.jobs import _TORCH_DT, _Job
from kimi_oracle.pipelines.gpu.tables import background_params, composite_table


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
class _Tables:
    """Conversion and composite tables of one chunk, on the device."""

    conv: torch.Tensor
    conv_offsets: dict[Any, int]
    composite: torch.Tensor
    bg_square: int
    bg_even: int  # composite table slot of the even chessboard squares
    bg_odd: int


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


def _upload_arenas(chunk: Sequence[_Job], length: dict[int, int], dev: torch.device,
                   pad: int = 0) -> dict[int, torch.Tensor]:
    """One device arena per storage kind present, sources copied in (pinned, asynchronous),
    `pad` elements longer than its contents (read, never used, by the staged loads)."""
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
        arena = torch.empty(n + pad, dtype=_TORCH_DT[dt], device=dev)
        arena[n:].zero_()  # determinate, though no kept value is ever read from it
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


def _tensor(arr: np.ndarray, dev: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(arr)).to(dev)
