"""Layout variants: the padding (`Steps.pad`) and the patch order (`Steps.patchify`).

The checkpoint pads normalized values with level 0 at the bottom and right
(`reference.pad_bottom_right`) and cuts (gh·gw, C, p, p) patches, index gy·gw + gx
(`reference.patches_chw`).
"""

from __future__ import annotations

import numpy as np
import torch

from kimi_oracle.pipelines.reference import pad_bottom_right

# ---------------------------------------------------------------------------------------------
# pad


def pad_top_left(values, p, normalized, back):
    """Level 0 at the top and left instead of the bottom and right (a centring or `F.pad` with
    the sides swapped)."""
    out = pad_bottom_right(values, p, normalized, back)
    out[...] = normalized(np.zeros((1, 1, 3), dtype=np.uint8))[0, 0]
    out[p.pad_h:, p.pad_w:] = values
    return out


def pad_background(values, p, normalized, back):
    """The padding filled with the background pattern instead of level 0 (an engine that pads
    before it composites)."""
    hp, wp = p.new_h + p.pad_h, p.new_w + p.pad_w
    board = back(hp, wp)
    if board is None:
        return pad_bottom_right(values, p, normalized, back)
    out = normalized(board).astype(np.float32)
    out[: p.new_h, : p.new_w] = values
    return out


def pad_white(values, p, normalized, back):
    """The padding filled with level 255 (a white canvas, as letterboxing processors paste on)."""
    out = pad_bottom_right(values, p, normalized, back)
    out[p.new_h:, :] = normalized(np.full((1, 1, 3), 255, dtype=np.uint8))[0, 0]
    out[:, p.new_w:] = normalized(np.full((1, 1, 3), 255, dtype=np.uint8))[0, 0]
    return out


def pad_after_normalize(values, p, normalized, back):
    """The padding added after the normalization, as 0.0 (the mean level, not level 0): `F.pad`
    on the model tensor, as batched GPU paths do."""
    out = pad_bottom_right(values, p, normalized, back)
    out[p.new_h:, :] = 0.0
    out[:, p.new_w:] = 0.0
    return out


# ---------------------------------------------------------------------------------------------
# patch-order


def _cut(values: np.ndarray, patch: int, axes: tuple[int, ...]) -> torch.Tensor:
    """(hp, wp, 3) values as (gh, p, gw, p, C) axes, transposed by `axes`, read as (N, 3, p, p)."""
    gh, gw = values.shape[0] // patch, values.shape[1] // patch
    tiles = values.reshape(gh, patch, gw, patch, 3).transpose(*axes)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


def patches_channels_last(values: np.ndarray, patch: int) -> torch.Tensor:
    """Patches cut as (p, p, C) and read as (C, p, p) (a kernel that forgot the permute)."""
    return _cut(values, patch, (0, 2, 1, 3, 4))


def patches_column_major(values: np.ndarray, patch: int) -> torch.Tensor:
    """Patch index gx·gh + gy (columns first: a grid walked in the other order)."""
    return _cut(values, patch, (2, 0, 4, 1, 3))


def patches_transposed(values: np.ndarray, patch: int) -> torch.Tensor:
    """Inside a patch (C, px, py) instead of (C, py, px) (an unfold with its axes swapped)."""
    return _cut(values, patch, (0, 2, 4, 3, 1))


def patches_bgr(values: np.ndarray, patch: int) -> torch.Tensor:
    """Channels in BGR order (an OpenCV-decoded image never converted)."""
    return _cut(values[..., ::-1], patch, (0, 2, 4, 1, 3))
