"""The GPU pipeline on K2.5 video chunks (issue 42): every frame of every chunk is one job of one
batch (the frames of a chunk, and the images beside them, go through the same launches), each
frame converted by Pillow's `convert("RGB")` as the reference does (`pipelines.video.rgb_frame`)
and planned by its chunk's plan (`pipelines.video.chunk_plan`: the first frame's size under the
frame budget); the frames' rows are the chunk's rows, frame-major, and its grid `(t, h, w)`.
Bit-identical to `pipelines.video.preprocess_media` (tests/pipelines/gpu/test_gpu_video.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.images import load_images
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.core.video import require_video

kimi_oracle_media = ("image", "video")


def preprocess_media(items: Iterable[Any], config: PreprocessConfig, **kwargs: Any) -> PreprocessResult:
    """Images and chunks (lists of frames) through the Triton pipeline in one batch; keywords as
    `pipelines.gpu.pipeline.preprocess` (`plans` excepted)."""
    from kimi_oracle.pipelines.gpu.pipeline import preprocess
    from kimi_oracle.pipelines.video import chunk_frames, chunk_plan, is_chunk, rgb_frame

    items = list(items)
    if not items:
        raise InputError("a media batch needs at least one image or chunk")
    flat: list[Any] = []
    plans: list[Any] = []
    spans: list[int] = []  # jobs per item
    for i, item in enumerate(items):
        if is_chunk(item):
            require_video(config)
            frames = [rgb_frame(f) for f in chunk_frames(item, i)]
            p = chunk_plan(frames, config)
            one = dataclasses.replace(p, grid_thw=(1, *p.grid_thw[1:]))
            flat += frames
            plans += [one] * len(frames)
            spans.append(len(frames))
        else:
            flat += load_images([item])
            plans.append(None)
            spans.append(0)
    out = preprocess(flat, config, plans=plans, **kwargs)
    return PreprocessResult(out.pixel_values, _merged_grids(out.grid_thws, spans))


def _merged_grids(grids: torch.Tensor, spans: list[int]) -> torch.Tensor:
    """One row per item: a chunk's t frame rows (1, h, w) become (t, h, w); frames whose produced
    grids differ keep the first frame's (h, w) with t the frame count (the rows tell the rest)."""
    rows, j = [], 0
    table = grids.tolist()
    for span in spans:
        if span == 0:
            rows.append(table[j])
            j += 1
            continue
        _, h, w = table[j]
        rows.append([span, h, w])
        j += span
    return torch.tensor(rows, dtype=torch.int64)


__all__ = ["kimi_oracle_media", "preprocess_media"]
