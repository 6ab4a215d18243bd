"""Tile sizes of the launches: the CUDA and interpreter defaults, drawn tiles, tile tables."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Sequence

import numpy as np
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.geometry import plan
from kimi_oracle.pipelines.gpu import layout as L


@dataclasses.dataclass(frozen=True)
class Tiles:
    """Tile sizes of the launches (powers of two) and warps per program.

    `pass_rows` x `pass_cols`: output pixels of one `resample_pass_kernel` program;
    `pass_window`: source bytes a row the horizontal pass stages for its tile (a tile
    whose taps span more reads them tap by tap); `tail`: pixels of one `tail_kernel` program,
    whole patches of a patch row, and more patch rows where they are narrow (`tail_block`: at
    least one patch); `convert`: pixels of
    one `convert_kernel` program (flat, row-major). `num_warps` applies to every kernel on CUDA.
    """

    pass_rows: int = 4
    pass_cols: int = 64
    tail: int = 256
    convert: int = 256
    num_warps: int = 4
    pass_window: int = 512

    def checked(self) -> "Tiles":
        """Itself, or InputError naming the field that is not a power of two."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or value <= 0 or value & (value - 1):
                raise InputError(f"tile size {field.name}={value!r} must be a positive power of two")
        if self.pass_window < 16:
            raise InputError(f"pass_window={self.pass_window} must be at least 16 bytes (one vector load)")
        if self.num_warps > 32:
            raise InputError(f"num_warps={self.num_warps} is more than a program can have (32)")
        return self


# The defaults whose registers and occupancy `kimi-oracle gpu build` certifies: 2 output
# pixels per thread in every kernel (4 warps x 32 threads for 256 pixels). Chosen on an H200 by
# `python -m kimi_oracle.workflows.tile_sweep` among 14 candidates (docs/gpu.md, "Tiles"): the
# fastest pass tile and tail block within 64 registers; 8 x 64 pixels at 8 warps before.
CUDA_TILES = Tiles()
# The interpreter's cost is per program instance and per element of a block: tiles that hold
# a test image (on the k3-small goldens tail blocks of 2^13 to 2^14 elements beat 2^15, which
# computes mostly masked lanes: docs/measurements.md).
INTERPRETER_TILES = Tiles(pass_rows=64, pass_cols=128, tail=1 << 13, convert=1 << 14, num_warps=4,
                          pass_window=2048)


def _pow2(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << max(0, int(n - 1).bit_length())


def tail_block(tail: int, patch_size: int, widest: int | None = None,
               tallest: int | None = None) -> tuple[int, int, int, int]:
    """(ROWS, COLS, PATCHES, PATCH_ROWS) of a tail program for `tail` pixels: ROWS the power
    of two >= patch_size, PATCHES = max(1, (tail // ROWS) // patch_size) whole patches of a
    patch row (at most `widest`, the patch columns of the launch's widest image), COLS the
    power of two >= PATCHES * patch_size, and PATCH_ROWS patch rows (a power of two) with what
    is left of `tail` (at most the power of two >= `tallest`, the launch's most patch rows)."""
    rows = _pow2(patch_size)
    patches = max(1, min((tail // rows) // patch_size, widest or tail))
    cols = _pow2(patches * patch_size)
    patch_rows = 1
    while rows * cols * patch_rows * 2 <= tail and patch_rows < (tallest or 1):
        patch_rows *= 2
    return rows, cols, patches, patch_rows


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
    # the tail: the widest patch row (its pixels, P rows high) in 1, 2 or 4 programs
    elements = max((int(plan(im.width, im.height, config).grid_thw[2]) * ps * _pow2(ps)
                    for im in images), default=1)

    def cut(extent: int) -> int:
        return max(1, _pow2(extent) >> int(rng.integers(0, 3)))

    # the first pass's staged horizontal window: the interpreter's, or one so small that most
    # tiles read tap by tap (both paths of `kernels._horizontal`)
    window = INTERPRETER_TILES.pass_window >> int(rng.choice([0, 7]))
    return Tiles(pass_rows=cut(rows), pass_cols=cut(cols), tail=cut(elements), convert=cut(pixels),
                 num_warps=INTERPRETER_TILES.num_warps, pass_window=window)


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
