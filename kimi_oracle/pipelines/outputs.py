"""The reference's large output arrays, in memory it used before when that memory is free again.

A float32 output written into fresh memory pays the kernel's zeroing of each of its pages on
the first write. The C library keeps and reuses freed blocks of up to 32 MiB (its largest
threshold for mapping a block apart), and Pillow's images come in blocks of at most 16 MB, so
both reuse their memory; one NumPy array over 32 MiB (K2.5's 39 MB output of a 4032x3024 image)
is mapped afresh and unmapped on every call (docs/measurements.md, round 8, has the cost).

So an output of at least `MIN_BYTES` is a view of a slab kept here. A slab is handed out again
only when nothing but this module refers to it any more (CPython's reference count: every
array, view, buffer or tensor over it holds the slab), so two live results never share memory.
Every byte of a handed-out array is written by its caller (`fused._patch_bands` writes every
band); its previous content is never read. A slab serves requests of 80 to 100 % of its size;
at most `MAX_SLABS` slabs of at most `MAX_SLAB_BYTES` each and `MAX_POOLED_BYTES` together are
kept. Where a reference count does not say that (another Python, a build without the GIL) and
in a process that called `disable()` (a candidate's executor under a memory limit), every array
is fresh, as `np.empty` gives it; a forked child starts with no slab.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from typing import Sequence

import numpy as np

__all__ = ["MAX_POOLED_BYTES", "MAX_SLAB_BYTES", "MAX_SLABS", "MIN_BYTES", "disable", "empty", "pooled_bytes",
           "release"]

MIN_BYTES = 32 << 20  # smaller arrays come from the C library's heap, reused already
MAX_SLAB_BYTES = 160 << 20
MAX_SLABS = 4
MAX_POOLED_BYTES = 320 << 20

_lock = threading.Lock()
_slabs: list[np.ndarray] = []  # uint8 slabs, most recently handed out last


def _free(i: int) -> bool:
    # Referred to by the list and by getrefcount's own argument only: no array, view, buffer
    # or tensor over it is alive.
    return sys.getrefcount(_slabs[i]) <= 2


def _counts_references() -> bool:
    """Whether `_free` tells a kept slab in use from a free one here: CPython with the GIL, and a
    probe slab reads free alone and in use under a view."""
    gil = getattr(sys, "_is_gil_enabled", None)
    if sys.implementation.name != "cpython" or (gil is not None and not gil()):
        return False
    _slabs.append(np.empty(8, dtype=np.uint8))
    try:
        alone = _free(0)
        view = _slabs[0][2:]
        held = _free(0)
        del view
        return alone and not held and _free(0)
    finally:
        _slabs.clear()


_ENABLED = _counts_references()


def _after_fork() -> None:
    # A lock held by another thread at the fork stays held in the child: a new lock, no slabs.
    global _lock
    _lock = threading.Lock()
    _slabs.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _keep(slab: np.ndarray) -> None:
    # Keep a new slab within the limits, giving up the least recently used free ones; a slab
    # that does not fit beside the ones in use is not kept.
    if slab.nbytes > MAX_SLAB_BYTES:
        return
    while _slabs and (len(_slabs) >= MAX_SLABS or pooled_bytes() + slab.nbytes > MAX_POOLED_BYTES):
        i = next((i for i in range(len(_slabs)) if _free(i)), None)
        if i is None:
            return
        del _slabs[i]
    _slabs.append(slab)


def _take(nbytes: int) -> np.ndarray:
    # The smallest free slab of nbytes to nbytes / 0.8, moved to the end; else a new one.
    with _lock:
        best = -1
        for i in range(len(_slabs)):
            size = _slabs[i].nbytes
            if nbytes <= size <= nbytes * 5 // 4 and _free(i) and (best < 0 or size < _slabs[best].nbytes):
                best = i
        if best >= 0:
            slab = _slabs.pop(best)
            _slabs.append(slab)
            return slab
        slab = np.empty(nbytes, dtype=np.uint8)
        _keep(slab)
        return slab


def empty(shape: Sequence[int], dtype: "np.dtype | type" = np.float32) -> np.ndarray:
    """An uninitialized C-contiguous array as `np.empty(shape, dtype)` gives, from `MIN_BYTES` on a
    view of a kept slab that no live object refers to any more (the caller writes every value)."""
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


def disable() -> None:
    """No slab is kept in this process from now on (those kept are given up): a process whose
    address space is limited (a candidate's executor under `--memory-limit`) holds no memory a
    call of its own did not ask for."""
    global _ENABLED
    _ENABLED = False
    release()
