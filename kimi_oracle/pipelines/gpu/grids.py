"""Grids from what the tails wrote: `grid_thws` read back from the kernels' records, checked."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from kimi_oracle.core.errors import BackendError
from kimi_oracle.pipelines.gpu import layout as L
from kimi_oracle.pipelines.gpu.jobs import _Job
from kimi_oracle.pipelines.gpu.launches import _Extent


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
