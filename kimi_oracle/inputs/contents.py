"""The pixel arrays of a generated image: its colour content, alpha pattern and palette."""

from __future__ import annotations

import numpy as np

from kimi_oracle.inputs.params import CaseParams


def _rng(seed: int, stream: int) -> np.random.Generator:
    # Separate streams, so that shrinking the mode or alpha keeps the colour content unchanged.
    seed, stream = int(seed), int(stream)
    if 0 <= seed < 2**32 and 0 <= stream < 2**32:
        # The entropy of the list [seed, stream] (an int below 2**32 is one uint32 word), given
        # as that uint32 array: NumPy seeds the same state and skips converting each int.
        return np.random.default_rng(np.array([seed, stream], dtype=np.uint32))
    return np.random.default_rng([seed, stream])


def content_array(params: CaseParams) -> np.ndarray:
    """The uint8 (h, w, 3) colour content the image's bands are derived from."""
    w, h = params.width, params.height
    rng = _rng(params.seed, 0)
    if params.content == "flat":
        out = np.empty((h, w, 3), dtype=np.uint8)
        out[...] = rng.integers(0, 256, 3, dtype=np.uint8)
        return out
    if params.content == "noise":
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    xs = np.arange(w, dtype=np.float64)[None, :]
    ys = np.arange(h, dtype=np.float64)[:, None]
    if params.content == "gradient":
        gx = np.rint(255.0 * xs / max(w - 1, 1))  # (1, w): the same ramp on every row
        gy = np.rint(255.0 * ys / max(h - 1, 1))  # (h, 1)
        flip = rng.integers(0, 2, 3)  # channels turned into 255 - value
        out = np.empty((h, w, 3), dtype=np.uint8)  # whole numbers 0..255: cast exactly
        for c, ramp in enumerate((gx, gy, np.floor((gx + gy) / 2.0))):
            out[..., c] = 255.0 - ramp if flip[c] else ramp
        return out
    # edges: stripes of extreme colours with random widths in both directions, which drives
    # bicubic overshoot into both clamps.
    first = rng.integers(0, 2, 3, dtype=np.uint8) * 255  # each channel 0 or 255; the other stripes 255 - first
    col_bounds = np.cumsum(rng.integers(1, 6, w + 1))
    row_bounds = np.cumsum(rng.integers(1, 6, h + 1))
    col_stripe = np.searchsorted(col_bounds, np.arange(w), side="right")
    row_stripe = np.searchsorted(row_bounds, np.arange(h), side="right")
    # 255 where the stripe parity is odd: XOR with 255 turns a 0/255 channel into its opposite.
    odd = (((row_stripe[:, None] ^ col_stripe[None, :]) & 1) * 255).astype(np.uint8)
    return odd[..., None] ^ first


def alpha_array(params: CaseParams) -> np.ndarray:
    """The uint8 (h, w) alpha of the pattern ("key" and "opaque" give all 255)."""
    w, h = params.width, params.height
    pattern = params.alpha
    if pattern in ("opaque", "key"):
        return np.full((h, w), 255, dtype=np.uint8)
    if pattern == "transparent":
        return np.zeros((h, w), dtype=np.uint8)
    ys = np.arange(h)[:, None]
    xs = np.arange(w)[None, :]
    if pattern in ("checker", "checker_shifted"):
        s = params.square
        shift = max(1, s // 2) if pattern == "checker_shifted" else 0
        # Opaque where the checkpoint's chessboard (on_top_left=True) is white.
        parity = (((ys + shift) // s + (xs + shift) // s) % 2) == 0
        return np.where(parity, 255, 0).astype(np.uint8)
    if pattern == "gradient":
        ramp = np.rint(255.0 * (xs + ys) / max(w + h - 2, 1))
        return np.broadcast_to(ramp, (h, w)).astype(np.uint8)
    rng = _rng(params.seed, 1)  # (built only for the patterns that draw from it)
    if pattern == "single_pixel":
        out = np.zeros((h, w), dtype=np.uint8)
        out[int(rng.integers(0, h)), int(rng.integers(0, w))] = 255
        return out
    return rng.integers(0, 256, (h, w), dtype=np.uint8)  # random


def _palette(params: CaseParams) -> bytes:
    return _rng(params.seed, 2).integers(0, 256, 768, dtype=np.uint8).tobytes()
