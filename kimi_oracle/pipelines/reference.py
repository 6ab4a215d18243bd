"""The CPU reference: what the checkpoint processor computes, with Pillow doing the resize (spec §3)."""

from __future__ import annotations

import functools
import warnings
from typing import Iterable

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.images import ImageSource, has_alpha, load_images
from kimi_oracle.core.result import PreprocessResult

__all__ = [
    "PreprocessResult",
    "background",
    "composite",
    "fill",
    "fill_conversion",
    "normalization_lut",
    "preprocess",
    "preprocess_image",
]

PATTERN_VALUES = {"white": 255, "black": 0, "gray": 128}


@functools.lru_cache(maxsize=64)
def _lut(mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    # The checkpoint's in-place float32 normalization of a uint8 HWC array, applied to every
    # possible uint8 value: each step computes in float64 (mean, 1/std are float64 arrays)
    # and stores float32.
    u8 = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
    x = (u8 / 255.0).astype(np.float32)
    x -= np.array(mean)
    x *= 1.0 / np.array(std)
    lut = np.ascontiguousarray(x.T)
    lut.setflags(write=False)
    return lut


def normalization_lut(config: PreprocessConfig) -> np.ndarray:
    """float32 (3, 256): entry [c, v] is the checkpoint's normalized value of level v in channel c."""
    return _lut(tuple(config.image_mean), tuple(config.image_std))


def background(bg: TransparentBgConfig, height: int, width: int) -> np.ndarray:
    """The uint8 (height, width, 3) background the checkpoint composites transparent pixels on."""
    if bg.pattern in PATTERN_VALUES:
        return np.full((height, width, 3), PATTERN_VALUES[bg.pattern], dtype=np.uint8)
    square = bg.chessboard_square_size
    ys = (np.arange(height) // square)[:, None]
    xs = (np.arange(width) // square)[None, :]
    gray_parity = 1 if bg.chessboard_square_on_top_left else 0
    gray = ((ys + xs) % 2) == gray_parity
    out = np.full((height, width, 3), bg.chessboard_white_value, dtype=np.uint8)
    out[gray] = bg.chessboard_gray_value
    return out


def composite(rgba: np.ndarray, bg: TransparentBgConfig) -> np.ndarray:
    """The checkpoint's float32 alpha composite of a uint8 (h, w, 4) array: uint8 (h, w, 3)."""
    h, w = rgba.shape[:2]
    alpha = rgba[..., 3].astype(np.float32) / 255.0
    alpha = np.stack([alpha, alpha, alpha], axis=-1)
    back = background(bg, h, w)
    return (alpha * rgba[..., :3] + (1 - alpha) * back).astype(np.uint8)


def _convert(img: Image.Image, mode: str) -> Image.Image:
    try:
        with warnings.catch_warnings():
            # Pillow's advice to convert palette images with byte transparency to RGBA: that is
            # what the checkpoint does next anyway; the warning only adds noise to reports.
            warnings.filterwarnings("ignore", message="Palette images with Transparency", category=UserWarning)
            return img.convert(mode)
    except (ValueError, OSError) as exc:
        raise InputError(f"mode {img.mode!r}: the checkpoint's conversion to {mode} fails: {exc}") from None


def fill_conversion(img: Image.Image, bg: TransparentBgConfig | None) -> str | None:
    """What the checkpoint's fill does to this image: None (already RGB, kept), "RGB" (a plain
    conversion) or "RGBA" (conversion to RGBA, then the composite on the background)."""
    # convert("RGB") of an RGB image is an identical copy: the checkpoint's bg=None branch
    # converts, its RGB branch returns the image unchanged; the bytes are the same.
    if img.mode == "RGB":
        return None
    if bg is None or not has_alpha(img):
        return "RGB"
    return "RGBA"


def _fill_array(img: Image.Image, bg: TransparentBgConfig | None) -> np.ndarray:
    kind = fill_conversion(img, bg)
    if kind is None:
        return np.asarray(img)
    if kind == "RGB":
        return np.asarray(_convert(img, "RGB"))
    return composite(np.asarray(_convert(img, "RGBA")), bg)


def fill(img: Image.Image, bg: TransparentBgConfig | None) -> Image.Image:
    """The checkpoint's background fill; the result is always an RGB image."""
    kind = fill_conversion(img, bg)
    if kind is None:
        return img
    if kind == "RGB":
        return _convert(img, "RGB")
    return Image.fromarray(composite(np.asarray(_convert(img, "RGBA")), bg), mode="RGB")


def _resize(img: Image.Image, p: ResizePlan) -> Image.Image:
    try:
        return img.resize((p.new_w, p.new_h), Image.Resampling.BICUBIC)
    except (ValueError, OSError) as exc:
        raise InputError(f"mode {img.mode!r}: Pillow cannot resize it: {exc}") from None


def _resized_rgb(img: Image.Image, config: PreprocessConfig, p: ResizePlan) -> np.ndarray:
    bg = config.transparent_bg_config
    if config.fill_stage == "before_resize":
        rgb = fill(img, bg)
        return np.asarray(_resize(rgb, p))
    return _fill_array(_resize(img, p), bg)


def patchify(rgb: np.ndarray, config: PreprocessConfig, p: ResizePlan) -> torch.Tensor:
    """Pad a uint8 (h, w, 3) array, normalize it through the LUT and cut it into patches."""
    ps = config.patch_size
    hp, wp = p.new_h + p.pad_h, p.new_w + p.pad_w
    if rgb.shape != (p.new_h, p.new_w, 3):
        raise InputError(f"internal: resized array has shape {rgb.shape}, plan expects {(p.new_h, p.new_w, 3)}")
    if p.pad_h or p.pad_w:
        padded = np.zeros((hp, wp, 3), dtype=np.uint8)
        padded[: p.new_h, : p.new_w] = rgb
    else:
        padded = rgb
    gh, gw = hp // ps, wp // ps
    # (gh, p, gw, p, C) -> (gh, gw, C, p, p): patch gy*gw+gx, inside a patch (C, py, px).
    tiles = padded.reshape(gh, ps, gw, ps, 3).transpose(0, 2, 4, 1, 3)
    lut = normalization_lut(config)
    out = np.empty((gh, gw, 3, ps, ps), dtype=np.float32)
    for c in range(3):
        np.take(lut[c], tiles[:, :, c], out=out[:, :, c])
    return torch.from_numpy(out.reshape(gh * gw, 3, ps, ps))


def preprocess_image(img: Image.Image, config: PreprocessConfig) -> tuple[torch.Tensor, ResizePlan]:
    """Patches (N, 3, p, p) float32 and the plan for one decoded image."""
    p = plan(img.width, img.height, config)
    rgb = _resized_rgb(img, config, p)
    return patchify(rgb, config, p), p


def preprocess(images: Iterable[ImageSource], config: PreprocessConfig) -> PreprocessResult:
    """Run the checkpoint's preprocessing on a batch: concatenated patches and grids."""
    decoded = load_images(images)
    patches = []
    grids = []
    for img in decoded:
        values, p = preprocess_image(img, config)
        patches.append(values)
        grids.append(p.grid_thw)
    pixel_values = patches[0] if len(patches) == 1 else torch.cat(patches, dim=0)
    return PreprocessResult(pixel_values, torch.tensor(grids, dtype=torch.int64))
