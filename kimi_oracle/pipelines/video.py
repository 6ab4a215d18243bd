"""The reference pipeline for K2.5 video chunks (docs/video.md): each frame of a chunk converted by
Pillow's own `convert("RGB")` (the checkpoint's `_to_pil(frame).convert("RGB")`: an alpha is
dropped, not composited), resized by Pillow bicubic to the size the chunk's first frame plans
(`core.video.plan_chunk`), zero-padded right and bottom and normalized as an image is, the frames'
patches concatenated frame-major: `grid_thw = (t, gh, gw)`.

A chunk is a list of PIL images (its frames); a media list mixes images and chunks
(`preprocess_media`), as the engines batch them, one grid row per item.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Iterable, Sequence

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.images import load_images
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.core.video import plan_chunk, require_video
from kimi_oracle.pipelines.reference import CHECKPOINT, Steps, preprocess_image
from kimi_oracle.pipelines.variants.chunk_rules import CHECKPOINT_RULE, ChunkRule, layout_frame, plan_for

Chunk = Sequence[Image.Image]


def is_chunk(item: object) -> bool:
    """Whether a media item is a video chunk (a list or tuple of frames), not an image."""
    return isinstance(item, (list, tuple))


def chunk_frames(chunk: object, index: int = 0) -> list[Image.Image]:
    """The decoded frames of a chunk (a non-empty list of images); InputError otherwise."""
    if not is_chunk(chunk) or not chunk:
        raise InputError(f"video chunk {index} must be a non-empty list of frames, got {type(chunk).__name__}"
                         + (" (empty)" if is_chunk(chunk) else ""))
    return load_images(list(chunk))  # type: ignore[arg-type]


def rgb_frame(frame: Image.Image) -> Image.Image:
    """A frame as the checkpoint takes it: Pillow's `convert("RGB")` (no EXIF transpose, no
    background: a video frame carries neither)."""
    if frame.mode == "RGB":
        return frame
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (a palette's transparency, dropped)
        return frame.convert("RGB")


def chunk_plan(frames: Sequence[Image.Image], config: PreprocessConfig, *, rule: ChunkRule = CHECKPOINT_RULE,
               video_frames: int = 0) -> ResizePlan:
    """The plan of a chunk: its first frame's size, its frame count (or as `rule` plans it, the
    video having `video_frames` sampled frames in all)."""
    if rule == CHECKPOINT_RULE:
        first = frames[0]
        return plan_chunk(first.width, first.height, len(frames), config)
    return plan_for(rule, [f.size for f in frames], video_frames, config)


def preprocess_chunk(frames: Sequence[Image.Image], config: PreprocessConfig, *,
                     steps: Steps = CHECKPOINT, rule: ChunkRule = CHECKPOINT_RULE,
                     video_frames: int = 0) -> tuple[torch.Tensor, ResizePlan]:
    """One chunk's patches (t·gh·gw, 3, p, p) and plan; every frame at the first frame's planned
    size, whatever its own (`rule`, `video_frames`: a chunk rule of `variants.chunk_rules`)."""
    require_video(config)
    if rule.layout != CHECKPOINT_RULE.layout:  # (the frames read otherwise, then planned as they are)
        frames = [layout_frame(rule, f) for f in frames]
        rule = dataclasses.replace(rule, layout=CHECKPOINT_RULE.layout)
    p = chunk_plan(frames, config, rule=rule, video_frames=video_frames)
    one = dataclasses.replace(p, grid_thw=(1, *p.grid_thw[1:]))
    rows = [steps.image_patches(rgb_frame(frame), config, one) for frame in frames]
    return (rows[0] if len(rows) == 1 else torch.cat(rows, dim=0)), p


def preprocess_chunks(chunks: Iterable[Chunk], config: PreprocessConfig, *,
                      steps: Steps = CHECKPOINT, rule: ChunkRule = CHECKPOINT_RULE) -> PreprocessResult:
    """The reference on a batch of chunks: concatenated patches, one `(t, h, w)` row per chunk."""
    return preprocess_media([list(c) if is_chunk(c) else c for c in chunks], config, steps=steps, video_only=True,
                            rule=rule)


def video_frame_count(items: Sequence[object]) -> int:
    """The frames of all chunks of a media list (one video's sampled frames, as the oracle draws
    a batch: the divisor of `budget-divisor/video`)."""
    return sum(len(item) for item in items if is_chunk(item))  # type: ignore[arg-type]


def preprocess_media(items: Iterable[object], config: PreprocessConfig, *, steps: Steps = CHECKPOINT,
                     video_only: bool = False, rule: ChunkRule = CHECKPOINT_RULE) -> PreprocessResult:
    """The reference on a mixed batch, in order: an image as `reference.preprocess` does it, a
    chunk (a list of frames) as `preprocess_chunk` (each planned by `rule`)."""
    items = list(items)
    if not items:
        raise InputError("a media batch needs at least one image or chunk")
    total = video_frame_count(items)
    patches, grids = [], []
    for i, item in enumerate(items):
        if is_chunk(item) or video_only:
            values, p = preprocess_chunk(chunk_frames(item, i), config, steps=steps, rule=rule, video_frames=total)
        else:
            (img,) = load_images([item])  # type: ignore[list-item]
            values, p = preprocess_image(img, config, steps=steps)
        patches.append(values)
        grids.append(p.grid_thw)
    pixel_values = patches[0] if len(patches) == 1 else torch.cat(patches, dim=0)
    return PreprocessResult(pixel_values, torch.tensor(grids, dtype=torch.int64))
