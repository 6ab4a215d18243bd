"""The reference's large output arrays, in memory it used before when that memory is free again.

A float32 output written into fresh memory pays the kernel's zeroing of each of its pages on
the first write: for the 39 MB output of a 4032x3024 image under K2.5, 3.7 ms of a ~9 ms tail
on this project's machine (docs/measurements.md, round 8). Pillow's own images do not pay it
again and again: they are allocated in blocks of at most 16 MB, which the C library keeps and
reuses; one NumPy array over 32 MB is mapped afresh and unmapped on every call.

So an output of at least `MIN_BYTES` is a view of a slab kept here. A slab is handed out again
only when nothing but this module refers to it any more (CPython's reference count: every
array, view or tensor over it holds the slab), so two live results never share memory. Every
byte of a handed-out array is written by its caller (`fused._patch_bands` writes every band);
its previous content is never read. At most `MAX_SLABS` slabs of at most `MAX_SLAB_BYTES`
each and `MAX_POOLED_BYTES` together are kept; elsewhere than on CPython with the GIL (where a
reference count says less) every array is fresh, as `np.empty` gives it.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Sequence

import numpy as np

__all__ = ["MAX_POOLED_BYTES", "MAX_SLAB_BYTES", "MAX_SLABS", "MIN_BYTES", "empty", "pooled_bytes", "release"]

MIN_BYTES = 4 << 20  # smaller arrays come from the C library's heap, reused already
MAX_SLAB_BYTES = 160 << 20
MAX_SLABS = 4
MAX_POOLED_BYTES = 320 << 20


def _counts_references() -> bool:
    gil = getattr(sys, "_is_gil_enabled", None)
    return sys.implementation.name == "cpython" and (gil is None or bool(gil()))


_ENABLED = _counts_references()
_lock = threading.Lock()
_slabs: list[np.ndarray] = []  # uint8 slabs, most recently handed out last


def _free(i: int) -> bool:
    # Referred to by the list and by getrefcount's own argument only: no array, view or tensor
    # over it is alive.
    return sys.getrefcount(_slabs[i]) <= 2


def _take(nbytes: int) -> np.ndarray:
    # A free slab of at least `nbytes` and at most twice that (the smallest such), moved to the
    # end; else a new one, the least recently used free slabs given up to keep the limits.
    with _lock:
        best = -1
        for i in range(len(_slabs)):
            size = _slabs[i].nbytes
            if nbytes <= size <= 2 * nbytes and _free(i) and (best < 0 or size < _slabs[best].nbytes):
                best = i
        if best >= 0:
            slab = _slabs.pop(best)
            _slabs.append(slab)
            return slab
        slab = np.empty(nbytes, dtype=np.uint8)
        if nbytes <= MAX_SLAB_BYTES:
            while _slabs and (len(_slabs) >= MAX_SLABS or pooled_bytes() + nbytes > MAX_POOLED_BYTES):
                i = next((i for i in range(len(_slabs)) if _free(i)), None)
                if i is None:
                    return slab  # every kept slab is in use: this one is not kept
                del _slabs[i]
            _slabs.append(slab)
        return slab


def empty(shape: Sequence[int], dtype: "np.dtype | type" = np.float32) -> np.ndarray:
    """An uninitialized C-contiguous array, as `np.empty(shape, dtype)`; from `MIN_BYTES` on, in a
    kept slab that no live array refers to any more (the caller writes every value)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if not _ENABLED or nbytes < MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    return _take(nbytes)[:nbytes].view(dtype).reshape(shape)


def pooled_bytes() -> int:
    """Bytes of the slabs kept (in use or free)."""
    return sum(slab.nbytes for slab in _slabs)


def release() -> None:
    """Give up every kept slab (those in use stay alive as long as their arrays)."""
    with _lock:
        _slabs.clear()
