"""Planted video candidates (issue 42, item 4): each plans or processes a K2.5 chunk otherwise in
one step. The chunk budget is written here from the rules of preprocessing-spec section 7 (not
from kimi_oracle's video code); the pixels of a frame are `planted.Pipeline`'s image steps.

    kimi-oracle fuzz --profile k25 --media video --candidate tests/mutants/video_candidates.py:video_divisor
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult


def _neighbour(name: str):
    # Loaded by path (`file.py:function`), this module has no package: its neighbour by its file.
    if f"mutants.{name}" in sys.modules:
        return sys.modules[f"mutants.{name}"]
    spec = importlib.util.spec_from_file_location(f"kimi_mutants_{name}", Path(__file__).resolve().parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


Pipeline = _neighbour("planted").Pipeline

kimi_oracle_media = ("image", "video")


class ChunkPipeline(Pipeline):
    """One chunk: every frame converted to RGB, planned from the first frame's size under
    `round(in_patch_limit_video / frames in the chunk)` capped by the frame limit."""

    divisor = "chunk"
    size_from = 0  # the frame whose size plans the chunk

    def frame_limit(self, frames: int, video_frames: int) -> int:
        c = self.config
        limit = c.in_patch_limit_each_frame or c.in_patch_limit
        by = {"chunk": frames, "video": video_frames, "none": None}[self.divisor]
        if c.in_patch_limit_video is not None and by:
            limit = min(limit, round(c.in_patch_limit_video / by))
        return limit

    def chunk(self, frames: list[Image.Image], video_frames: int) -> tuple[torch.Tensor, tuple[int, int, int]]:
        rgb = [f.convert("RGB") for f in frames]
        size = rgb[self.size_from]
        p = plan(size.width, size.height, self.config, limit=self.frame_limit(len(rgb), video_frames))
        rows = [self.patchify(self.normalize(self.pad(np.asarray(self.resize(f, p)), p))) for f in rgb]
        _, gh, gw = p.grid_thw
        return torch.cat(rows, dim=0), (len(rgb), gh, gw)

    def media(self, items: list) -> PreprocessResult:
        total = sum(len(i) for i in items if isinstance(i, list))
        return self.combine([self.chunk(list(i), total) if isinstance(i, list) else self.one(i) for i in items])


def _run(cls: type, items: list, config) -> PreprocessResult:
    return cls(config).media(list(items))


def faithful(items, config):
    """The rules as the spec writes them (must fuzz clean)."""
    return _run(ChunkPipeline, items, config)


class _VideoDivisor(ChunkPipeline):
    divisor = "video"


class _NoDivisor(ChunkPipeline):
    divisor = "none"


class _LastFrame(ChunkPipeline):
    size_from = -1


class _PadOne(ChunkPipeline):
    def pad(self, rgb, p):
        out = np.ones((p.new_h + p.pad_h, p.new_w + p.pad_w, 3), dtype=np.uint8)
        out[: p.new_h, : p.new_w] = rgb
        return out


def video_divisor(items, config):
    """The total video budget divided by all the video's sampled frames."""
    return _run(_VideoDivisor, items, config)


def no_divisor(items, config):
    """No total video budget: the frame limit alone."""
    return _run(_NoDivisor, items, config)


def last_frame(items, config):
    """The chunk planned from its last frame's size."""
    return _run(_LastFrame, items, config)


def pad_one(items, config):
    """The pad one level brighter (1, not 0)."""
    return _run(_PadOne, items, config)


def unequal_refused(items, config):
    """Refuses a chunk of frames of unequal sizes (as an engine that stacks frames does)."""
    for item in items:
        if isinstance(item, list) and len({f.size for f in item}) > 1:
            raise ValueError("cannot stack frames of unequal sizes")
    return faithful(items, config)


def exits(items, config):
    """Kills its process."""
    os._exit(3)


def images_only(items, config):
    """An image candidate that takes no chunk (declares image only)."""
    return faithful(items, config)


images_only.kimi_oracle_media = ("image",)
