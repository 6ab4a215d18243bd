"""The serving engine's eager torch path (spec §5): a realistic, known-imperfect candidate.

Modelled behaviour, on purpose (these are the divergences the oracle should report):
float32 `F.interpolate(bicubic, antialias=True)` instead of Pillow's fixed-point passes;
RGBA resized straight (not premultiplied), so hidden colours bleed; "P" and "1" converted to
RGB(A) and resized bicubic instead of NEAREST; CMYK / I;16 / every other mode converted to
RGB(A) before the resize; `transparent_bg_fill_stage` ignored (always composited after the
resize); normalization as `x * (1 / (255 std)) + (-mean / std)` in float32 (within an ulp of
the checkpoint's table, not bit-identical). It is not a second reference.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch
import torch.nn.functional as F

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.images import ImageSource, has_alpha, load_images
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.pipelines.reference import background


def _to_tensor(img, with_alpha: bool) -> torch.Tensor:
    arr = np.asarray(img.convert("RGBA" if with_alpha else "RGB"))
    # np.array copies (a transposed view of a 1-pixel-high image is already contiguous and would
    # otherwise stay a read-only view of Pillow's buffer).
    return torch.from_numpy(np.array(arr.transpose(2, 0, 1), order="C", copy=True))


def preprocess(
    images: Iterable[ImageSource],
    config: PreprocessConfig,
    *,
    device: str | torch.device | None = None,
    out_dtype: torch.dtype = torch.float32,
) -> PreprocessResult:
    """The engine's torch preprocessing (CPU or CUDA): patches and grids like the reference."""
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    decoded = load_images(images)
    bg = config.transparent_bg_config
    plans = [plan(im.width, im.height, config) for im in decoded]
    alphas = [bg is not None and has_alpha(im) for im in decoded]
    tensors = [_to_tensor(im, a).to(dev) for im, a in zip(decoded, alphas)]
    return from_tensors(tensors, plans, alphas, config, out_dtype=out_dtype)


def host_tensors(images: Iterable[ImageSource], config: PreprocessConfig):
    """Host half of the engine's path: (uint8 CHW tensors, plans, alpha flags)."""
    decoded = load_images(images)
    bg = config.transparent_bg_config
    plans = [plan(im.width, im.height, config) for im in decoded]
    alphas = [bg is not None and has_alpha(im) for im in decoded]
    return [_to_tensor(im, a) for im, a in zip(decoded, alphas)], plans, alphas


def from_tensors(tensors, plans, alphas, config: PreprocessConfig, *,
                 out_dtype: torch.dtype = torch.float32) -> PreprocessResult:
    """Device half of the engine's path, from uint8 CHW tensors already on the device."""
    dev = tensors[0].device
    bg = config.transparent_bg_config
    ps = config.patch_size
    mean = torch.tensor(config.image_mean, dtype=torch.float32, device=dev).view(3, 1, 1)
    std = torch.tensor(config.image_std, dtype=torch.float32, device=dev).view(3, 1, 1)
    scale = 1.0 / (255.0 * std)
    shift = -mean / std

    # Grouped by (source size, target size, channels): one interpolate call per group.
    resized: list[torch.Tensor | None] = [None] * len(tensors)
    groups: dict[tuple, list[int]] = {}
    for i, (t, p) in enumerate(zip(tensors, plans)):
        groups.setdefault((tuple(t.shape), p.new_h, p.new_w), []).append(i)
    for (shape, nh, nw), idx in groups.items():
        batch = torch.stack([tensors[i] for i in idx]).float()
        if (shape[1], shape[2]) != (nh, nw):
            batch = F.interpolate(batch, size=(nh, nw), mode="bicubic", align_corners=False, antialias=True)
            batch = torch.round(batch).clamp_(0, 255)  # round half to even
        for k, i in enumerate(idx):
            resized[i] = batch[k]

    patches = []
    grids = []
    for i, (x, p) in enumerate(zip(resized, plans)):
        assert x is not None
        if alphas[i]:
            a = x[3:4] / 255.0
            back = torch.from_numpy(np.ascontiguousarray(background(bg, p.new_h, p.new_w).transpose(2, 0, 1)))
            back = back.to(dev).float()
            x = torch.floor((a * x[:3] + (1 - a) * back).clamp(0, 255))
        x = x[:3]
        hp, wp = p.new_h + p.pad_h, p.new_w + p.pad_w
        x = F.pad(x, (0, wp - p.new_w, 0, hp - p.new_h), value=0.0)
        x = x * scale + shift
        gh, gw = hp // ps, wp // ps
        x = x.view(3, gh, ps, gw, ps).permute(1, 3, 0, 2, 4).reshape(gh * gw, 3, ps, ps)
        patches.append(x)
        grids.append((1, gh, gw))
    pixel_values = torch.cat(patches, 0).to(out_dtype).contiguous()
    return PreprocessResult(pixel_values, torch.tensor(grids, dtype=torch.int64))
