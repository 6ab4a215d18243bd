"""The GPU pipeline on K2.5 video chunks (issue 42): bit-identical (`torch.equal`) to the reference
on a mixed batch of chunks and an image (frames resized under a video budget, a palette frame, a
one-frame tail), all frames in one batch; tiles shrunk so the tiny frames cross them."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.pipelines.gpu.tiles import Tiles
from kimi_oracle.pipelines.gpu.video import preprocess_media as gpu_media
from kimi_oracle.pipelines.video import chunk_plan, preprocess_media

SMALL = Tiles(pass_rows=8, pass_cols=16, tail=128, convert=64, num_warps=4)
# round(3 / 3) = 1 patch a frame: the 30x20 frames (2 x 1 floored patches) resized to 21x14.
K25 = dataclasses.replace(PreprocessConfig.k25(), in_patch_limit_video=3)


def _frame(w, h, seed, mode="RGB"):
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    return img.convert(mode, palette=Image.Palette.ADAPTIVE) if mode == "P" else img.convert(mode)


def test_a_mixed_batch_of_chunks_is_bit_identical(gpu_kwargs):
    three = [_frame(30, 20, s) for s in range(3)]
    palette = [_frame(17, 9, 9, "P")]
    image = _frame(12, 10, 11, "RGBA")
    media = [three, image, palette]
    p = chunk_plan(three, K25)  # sqrt(1 / 2) = 0.7071: 21x14, padded 28x28
    assert (p.new_w, p.new_h, p.pad_w, p.pad_h) == (21, 14, 7, 14)
    want = preprocess_media(media, K25)
    got = gpu_media(media, K25, tiles=SMALL, **gpu_kwargs)
    assert got.grid_thws.tolist() == want.grid_thws.tolist() == [[3, 2, 2], [1, 2, 2], [1, 2, 2]]
    assert got.pixel_values.dtype == want.pixel_values.dtype
    assert torch.equal(got.pixel_values.cpu(), want.pixel_values)
