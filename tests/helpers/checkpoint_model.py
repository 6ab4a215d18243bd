"""A plain, independent re-statement of the spec (§2, §3) used as the expected value in tests.

Written from the spec text with Pillow and NumPy, without importing kimi_oracle's pipeline
code: the normalization uses the float formula (not a lookup table), the background is built
pixel rule by pixel rule, the patchify uses the spec's reshape/transpose.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image


def spec_plan(W, H, p, m, L, S, fixed=None):
    s1 = math.sqrt(L / (max(1.0, W // p) * max(1.0, H // p)))
    s2 = S * p / W
    s3 = S * p / H
    scale = min(1.0, s1, s2, s3)
    new_w = min(max(1, int(W * scale)), S * p)
    new_h = min(max(1, int(H * scale)), S * p)
    f = m * p
    pad_w = (f - new_w % f) % f
    pad_h = (f - new_h % f) % f
    grid = (1, (new_h + pad_h) // p, (new_w + pad_w) // p)
    if fixed is not None:
        tokens = fixed
    else:
        assert ((new_h + pad_h) // f) * m <= S
        assert ((new_w + pad_w) // f) * m <= S
        tokens = ((new_h + pad_h) // f) * ((new_w + pad_w) // f)
    return new_w, new_h, pad_w, pad_h, grid, tokens


def spec_background(bg: dict, h: int, w: int) -> np.ndarray:
    pattern = bg.get("pattern", "black")
    if pattern == "white":
        return np.full((h, w, 3), 255, np.uint8)
    if pattern == "black":
        return np.zeros((h, w, 3), np.uint8)
    if pattern == "gray":
        return np.full((h, w, 3), 128, np.uint8)
    assert pattern == "chessboard"
    size = bg.get("chessboard_square_size", 16)
    on_top_left = bg.get("chessboard_square_on_top_left", True)
    white = bg.get("chessboard_white_value", 255)
    gray = bg.get("chessboard_gray_value", 200)
    out = np.full((h, w, 3), white, np.uint8)
    parity = 1 if on_top_left else 0
    for y in range(h):
        for x in range(w):
            if ((y // size) + (x // size)) % 2 == parity:
                out[y, x] = gray
    return out


def spec_fill(img: Image.Image, bg: dict | None) -> Image.Image:
    if bg is None:
        return img.convert("RGB")
    if img.mode == "RGB":
        return img
    if "A" not in img.getbands() and "transparency" not in img.info:
        return img.convert("RGB")
    a = np.array(img.convert("RGBA"))
    alpha = a[..., 3].astype(np.float32) / 255.0
    alpha = np.stack([alpha] * 3, axis=-1)
    B = spec_background(bg, a.shape[0], a.shape[1])
    out = (alpha * a[..., :3] + (1 - alpha) * B).astype(np.uint8)
    return Image.fromarray(out)


def spec_preprocess(images, cfg: dict):
    """The checkpoint's computation for a list of PIL images and a media_proc_cfg dict."""
    p = cfg["patch_size"]
    m = cfg["merge_kernel_size"]
    bg = cfg.get("transparent_bg_config")
    stage = cfg.get("transparent_bg_fill_stage", "before_resize")
    all_patches = []
    grids = []
    for img in images:
        new_w, new_h, pad_w, pad_h, grid, _ = spec_plan(
            img.size[0], img.size[1], p, m, cfg["in_patch_limit"], cfg["patch_limit_on_one_side"],
            cfg["fixed_output_tokens"],
        )
        if stage == "before_resize":
            img = spec_fill(img, bg)
        img = img.resize((new_w, new_h), Image.BICUBIC)
        if stage == "after_resize":
            img = spec_fill(img, bg)
        arr = np.array(img)
        arr = np.pad(arr, ((0, pad_h), (0, pad_w), (0, 0)), constant_values=0)
        x = (arr / 255.0).astype(np.float32)
        x -= np.array(cfg["image_mean"])
        x *= 1.0 / np.array(cfg["image_std"])
        hp, wp = arr.shape[:2]
        gh, gw = hp // p, wp // p
        x = x[None].reshape(1, gh, p, gw, p, 3).transpose(0, 1, 3, 5, 2, 4).reshape(gh * gw, 3, p, p)
        all_patches.append(x)
        grids.append(grid)
    return np.concatenate(all_patches, axis=0), np.array(grids, dtype=np.int64)
