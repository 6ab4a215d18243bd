"""Small inputs and hand-inverted outputs for the engine adapters' tests (tests/adapters)."""

from __future__ import annotations

import numpy as np
import torch


def noise(h: int, w: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """uint8 (h, w, channels) noise, the same on every machine."""
    return np.random.default_rng(seed).integers(0, 256, (h, w, channels), dtype=np.uint8)


def patch_levels(pixels: torch.Tensor, grid: tuple[int, int], p: int = 14) -> np.ndarray:
    """(gh*gw, 3, p, p) patches back to an (H, W, 3) image of levels, for mean = std = 0.5 by
    hand: v = (x - 127.5) / 127.5, so x = v * 127.5 + 127.5."""
    gh, gw = grid
    img = pixels.reshape(gh, gw, 3, p, p).permute(0, 3, 1, 4, 2).reshape(gh * p, gw * p, 3)
    return torch.round(img.double() * 127.5 + 127.5).numpy()
