"""A whole engine nobody modelled step by step: a K2.5 processor on torchvision-style tensor
transforms. Every input decoded to RGB (`convert("RGB")`), resized by torch's uint8 antialiased
bicubic (`F.interpolate` on uint8 tensors, what torchvision's resize runs) to the checkpoint's
plan, padded with zeros, rescaled (x/255) and normalized ((x − mean)/std) in float32.

Self-contained (a `path.py:function` candidate): `torchvision_like`; `torchvision_white_pad`: the
same with the padding 255 (a third step otherwise: three causes stacked).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult


def _uint8_resize(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    # band by band (torch 2.13's 3-channel uint8 kernel fails an assert on 1x1 outputs; one band at
    # a time gives the same bytes)
    out = [F.interpolate(torch.from_numpy(np.array(rgb[:, :, c]))[None, None], size=(size[1], size[0]),
                         mode="bicubic", antialias=True)[0, 0].numpy() for c in range(3)]
    return np.stack(out, axis=-1)


def torchvision_like(images: list[Image.Image], config: PreprocessConfig) -> PreprocessResult:
    """A K2.5 processor on tensor transforms: decoded to RGB, resized by torch's uint8 antialiased
    bicubic to the checkpoint's plan, padded with zeros, rescaled and normalized in float32."""
    return _tensor_transforms(images, config, 0)


def torchvision_white_pad(images: list[Image.Image], config: PreprocessConfig) -> PreprocessResult:
    """`torchvision_like` padding with 255 (white) instead of zeros."""
    return _tensor_transforms(images, config, 255)


def _tensor_transforms(images: list[Image.Image], config: PreprocessConfig, pad: int) -> PreprocessResult:
    mean = torch.tensor(config.image_mean, dtype=torch.float32)
    std = torch.tensor(config.image_std, dtype=torch.float32)
    ps = config.patch_size
    patches, grids = [], []
    for img in images:
        p = plan(img.width, img.height, config)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            rgb = np.asarray(img.convert("RGB"))
        if img.size != (p.new_w, p.new_h):
            rgb = _uint8_resize(rgb, (p.new_w, p.new_h))
        padded = np.full((p.new_h + p.pad_h, p.new_w + p.pad_w, 3), pad, dtype=np.uint8)
        padded[: p.new_h, : p.new_w] = rgb
        x = (torch.from_numpy(padded).permute(2, 0, 1).float() / 255.0 - mean.view(3, 1, 1)) / std.view(3, 1, 1)
        gh, gw = padded.shape[0] // ps, padded.shape[1] // ps
        patches.append(x.reshape(3, gh, ps, gw, ps).permute(1, 3, 0, 2, 4).reshape(gh * gw, 3, ps, ps))
        grids.append((1, gh, gw))
    return PreprocessResult(torch.cat(patches), torch.tensor(grids, dtype=torch.int64))
