"""A model of SGLang 0.5.23's Kimi-K3 deferred GPU preprocessing (docs/spec.md, "Engine model:
sglang-0.5.23"): bit-identical to that path on CPU tensors, a candidate known to differ from the
checkpoint.

What the engine does, step by step (each step below is a function of this module):

plan      the checkpoint's NaViT arithmetic without its side assert (`plan(..., side_assert=False)`)
stage     alpha kept iff the mode is not "RGB" and the image has an "A" band or a `transparency`
          entry: converted to "RGBA", otherwise to "RGB"; uint8, channels first (a view of the
          HWC array, as the engine's `permute`); a 1-channel tensor repeated to 3
resize     only when the size changes: float32 `F.interpolate(bicubic, align_corners=False,
          antialias=True)`, `round_()`, `clamp_(0, 255)`; images with the same target size and the
          same source shape are resized as one batch
composite after the resize, 4-channel images only: `a = (A / 255).clamp(0, 1)`,
          `(a·rgb + (1 − a)·background).clamp(0, 255).floor_()`; no background config: alpha dropped;
          `transparent_bg_fill_stage` is never read
normalize `scale = 1 / (255·std)`, `bias = −mean / std` computed in float64, stored as float32;
          pad 0.0 at the bottom and right, then `torch.addcmul(bias, x, scale)` (one rounding on
          CPU); on CUDA, contiguous batches go through the engine's Triton kernel x·scale + bias
patchify  (gh·gw, C, p, p), patch gy·gw + gx

The engine's constants (its background levels, its chessboard) are written here as the engine
writes them, not imported from the reference: this module models the engine, and must not follow
a change of the reference.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.images import ImageSource, convert, has_alpha, load_images
from kimi_oracle.core.result import PreprocessResult

ENGINE = "sglang-0.5.23"
# The engine's solid backgrounds (its `fill_transparent_bg`), as float32 levels.
SOLID_LEVELS = {"white": 255.0, "black": 0.0, "gray": 128.0}

__all__ = ["ENGINE", "SOLID_LEVELS", "background", "composite", "engine_plan", "from_tensors", "host_tensors",
           "keeps_alpha", "normalization_tensors", "normalize_and_patchify", "preprocess", "resize", "stage"]


def engine_plan(width: int, height: int, config: PreprocessConfig) -> ResizePlan:
    """The engine's `navit_resize_config`: the checkpoint's formula, without the side assert."""
    return plan(width, height, config, side_assert=False)


def keeps_alpha(img: Image.Image) -> bool:
    """The engine's staging rule: alpha kept iff the mode is not "RGB" and the checkpoint's alpha
    rule holds (an "A" band or a `transparency` entry). RGB images with a key are staged opaque."""
    return img.mode != "RGB" and has_alpha(img)


def stage(img: Image.Image) -> torch.Tensor:
    """The engine's host staging: a uint8 (C, H, W) tensor, C = 4 when `keeps_alpha`, else 3."""
    arr = np.array(convert(img, "RGBA" if keeps_alpha(img) else "RGB"), copy=True)
    t = torch.from_numpy(arr)
    t = t.unsqueeze(0) if t.dim() == 2 else t.permute(2, 0, 1)
    if t.shape[0] == 1:
        t = t.repeat(3, 1, 1)
    return t


def resize(batch: torch.Tensor, new_h: int, new_w: int) -> torch.Tensor:
    """float32 copy of a uint8 (B, C, H, W) batch, resized (antialiased bicubic, rounded half to
    even, clamped) only when its size is not already (new_h, new_w)."""
    x = batch.float()
    if tuple(x.shape[-2:]) == (new_h, new_w):
        return x
    return F.interpolate(x, size=(new_h, new_w), mode="bicubic", align_corners=False,
                         antialias=True).round_().clamp_(0.0, 255.0)


def background(bg: TransparentBgConfig, height: int, width: int, device: torch.device) -> torch.Tensor:
    """The engine's float32 (3, H, W) background; an unknown pattern raises ValueError."""
    if bg.pattern == "chessboard":
        ys = torch.arange(height, device=device) // bg.chessboard_square_size
        xs = torch.arange(width, device=device) // bg.chessboard_square_size
        parity = (ys.unsqueeze(1) + xs.unsqueeze(0)) % 2
        grey_parity = 1 if bg.chessboard_square_on_top_left else 0
        board = torch.where(parity == grey_parity, float(bg.chessboard_gray_value), float(bg.chessboard_white_value))
        return board.unsqueeze(0).expand(3, height, width)
    if bg.pattern in SOLID_LEVELS:
        return torch.full((3, height, width), SOLID_LEVELS[bg.pattern], device=device)
    raise ValueError(f"Invalid background pattern: {bg.pattern}")


def composite(x: torch.Tensor, bg: TransparentBgConfig | None) -> torch.Tensor:
    """The engine's post-resize fill of a float (B, C, H, W) batch: 3 channels pass through; 4 are
    composited on the background (floored), or lose their alpha when there is no background."""
    if x.shape[1] == 3:
        return x
    rgb = x[:, :3]
    if bg is None:
        return rgb
    _, _, height, width = x.shape
    back = background(bg, height, width, x.device)
    alpha = (x[:, 3:4] / 255.0).clamp(0.0, 1.0)
    return (alpha * rgb + (1.0 - alpha) * back).clamp(0.0, 255.0).floor_()


def normalization_tensors(config: PreprocessConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, bias), float32 (1, 3, 1, 1): 1 / (255·std) and −mean / std computed in float64."""
    scale = torch.tensor([1.0 / (255.0 * s) for s in config.image_std], dtype=torch.float32, device=device)
    bias = torch.tensor([-m / s for m, s in zip(config.image_mean, config.image_std)],
                        dtype=torch.float32, device=device)
    return scale.view(1, 3, 1, 1), bias.view(1, 3, 1, 1)


def normalize_and_patchify(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, patch: int,
                           padded_h: int, padded_w: int) -> torch.Tensor:
    """0.0 padding at the bottom/right, normalization, patches (B, gh·gw, C, p, p): on CPU (and
    for non-contiguous CUDA inputs) the engine's torch path, `addcmul(bias, x, scale)`; on CUDA its
    Triton kernel computing x·scale + bias (`sglang_0_5_23_cuda`, imported only there)."""
    if x.is_cuda:
        from kimi_oracle.pipelines.engines import sglang_0_5_23_cuda as cuda

        b, c = x.shape[:2]
        if cuda.applies(x, scale, bias, b * c * (padded_h // patch) * (padded_w // patch) * patch * patch):
            return cuda.normalize_and_patchify(x, scale, bias, patch, padded_h, padded_w)
    pad_h, pad_w = padded_h - x.shape[-2], padded_w - x.shape[-1]
    if pad_h > 0 or pad_w > 0:
        x = F.pad(x, (0, pad_w, 0, pad_h), value=0.0)
    x = torch.addcmul(bias, x, scale)
    b, c, h, w = x.shape
    gh, gw = h // patch, w // patch
    return x.view(b, c, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c, patch, patch)


def host_tensors(images: Iterable[ImageSource], config: PreprocessConfig):
    """Host half of the engine's path: (uint8 CHW tensors, plans, alpha flags)."""
    decoded = load_images(images)
    plans = [engine_plan(im.width, im.height, config) for im in decoded]
    tensors = [stage(im) for im in decoded]
    return tensors, plans, [t.shape[0] == 4 for t in tensors]


def from_tensors(tensors: Sequence[torch.Tensor], plans: Sequence[ResizePlan], alphas: Sequence[bool] | None,
                 config: PreprocessConfig, *, out_dtype: torch.dtype = torch.float32) -> PreprocessResult:
    """Device half of the engine's path, from uint8 CHW tensors already on the device. `alphas` is
    accepted for the callers of the earlier model; the channel count decides, as in the engine."""
    del alphas
    ps = config.patch_size
    if not tensors:
        return PreprocessResult(torch.empty(0, 3, ps, ps, dtype=out_dtype), torch.empty(0, 3, dtype=torch.int64))
    dev = tensors[0].device
    scale, bias = normalization_tensors(config, dev)
    # Groups of the same target and padded size; inside one, a batch per source shape.
    groups: dict[tuple[int, int, int, int], list[int]] = defaultdict(list)
    for i, p in enumerate(plans):
        groups[(p.new_h, p.new_w, p.new_h + p.pad_h, p.new_w + p.pad_w)].append(i)
    bg = config.transparent_bg_config
    patches: list[torch.Tensor | None] = [None] * len(tensors)
    for (new_h, new_w, padded_h, padded_w), members in groups.items():
        if len(members) == 1:  # the engine's one-image path: no concatenation (same strides)
            i = members[0]
            x = composite(resize(tensors[i].unsqueeze(0), new_h, new_w), bg)
            patches[i] = normalize_and_patchify(x, scale, bias, ps, padded_h, padded_w)[0]
            continue
        by_shape: dict[tuple, list[int]] = defaultdict(list)
        for i in members:
            by_shape[(tuple(tensors[i].shape), tensors[i].dtype)].append(i)
        resized: dict[int, torch.Tensor] = {}
        for idx in by_shape.values():
            batch = (tensors[idx[0]].unsqueeze(0) if len(idx) == 1
                     else torch.cat([tensors[i].unsqueeze(0) for i in idx], dim=0))
            out = resize(batch, new_h, new_w)
            for k, i in enumerate(idx):
                resized[i] = out[k:k + 1]
        filled = torch.cat([composite(resized[i], bg) for i in members], dim=0)
        done = normalize_and_patchify(filled, scale, bias, ps, padded_h, padded_w)
        for k, i in enumerate(members):
            patches[i] = done[k]
    grids = [(1, (p.new_h + p.pad_h) // ps, (p.new_w + p.pad_w) // ps) for p in plans]
    pixel_values = torch.cat([t for t in patches if t is not None], 0).to(out_dtype).contiguous()
    return PreprocessResult(pixel_values, torch.tensor(grids, dtype=torch.int64))


def preprocess(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
) -> PreprocessResult:
    """SGLang 0.5.23's K3 deferred GPU preprocessing (CPU or CUDA): patches and grids."""
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    tensors, plans, alphas = host_tensors(images, config)
    return from_tensors([t.to(dev) for t in tensors], plans, alphas, config, out_dtype=out_dtype)
