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
    """Level 0 at the top and left instead of the bottom and right."""
    out = pad_bottom_right(values, p, normalized, back)
    out[...] = normalized(np.zeros((1, 1, 3), dtype=np.uint8))[0, 0]
    out[p.pad_h:, p.pad_w:] = values
    return out


def pad_background(values, p, normalized, back):
    """The padding filled with the background pattern instead of level 0."""
    hp, wp = p.new_h + p.pad_h, p.new_w + p.pad_w
    board = back(hp, wp)
    if board is None:
        return pad_bottom_right(values, p, normalized, back)
    out = normalized(board).astype(np.float32)
    out[: p.new_h, : p.new_w] = values
    return out


def pad_white(values, p, normalized, back):
    """The padding filled with level 255."""
    out = pad_bottom_right(values, p, normalized, back)
    out[p.new_h:, :] = normalized(np.full((1, 1, 3), 255, dtype=np.uint8))[0, 0]
    out[:, p.new_w:] = normalized(np.full((1, 1, 3), 255, dtype=np.uint8))[0, 0]
    return out


def pad_after_normalize(values, p, normalized, back):
    """The padding added after the normalization, as 0.0 (the mean level, not level 0)."""
    out = pad_bottom_right(values, p, normalized, back)
    out[p.new_h:, :] = 0.0
    out[:, p.new_w:] = 0.0
    return out


# ---------------------------------------------------------------------------------------------
# patch-order


def _grid(values: np.ndarray, patch: int) -> tuple[int, int]:
    return values.shape[0] // patch, values.shape[1] // patch


def patches_channels_last(values: np.ndarray, patch: int) -> torch.Tensor:
    """Patches cut as (p, p, C) and read as (C, p, p)."""
    gh, gw = _grid(values, patch)
    tiles = values.reshape(gh, patch, gw, patch, 3).transpose(0, 2, 1, 3, 4)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


def patches_column_major(values: np.ndarray, patch: int) -> torch.Tensor:
    """Patch index gx·gh + gy (columns first)."""
    gh, gw = _grid(values, patch)
    tiles = values.reshape(gh, patch, gw, patch, 3).transpose(2, 0, 4, 1, 3)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


def patches_transposed(values: np.ndarray, patch: int) -> torch.Tensor:
    """Inside a patch (C, px, py) instead of (C, py, px)."""
    gh, gw = _grid(values, patch)
    tiles = values.reshape(gh, patch, gw, patch, 3).transpose(0, 2, 4, 3, 1)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


def patches_bgr(values: np.ndarray, patch: int) -> torch.Tensor:
    """Channels in BGR order."""
    gh, gw = _grid(values, patch)
    tiles = values[..., ::-1].reshape(gh, patch, gw, patch, 3).transpose(0, 2, 4, 1, 3)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))

