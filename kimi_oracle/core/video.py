"""K2.5 video chunks: frame sampling, chunk timestamps and prompts, and a chunk's geometry, as the
K2.5 checkpoint's processor computes them (docs/video.md; preprocessing spec section 7).

- `sample_frames(num_frames, fps, config)`: the sampled frame indices.
- `split_chunks(num_frames, fps, config)`: consecutive chunks of `temporal_merge_kernel_size`
  sampled frames (the last one shorter), each with its timestamp and prompt text.
- `timestamp_text(t, mode)`: the chunk's timestamp as its prompt writes it.
- `plan_chunk(width, height, frames, config)`: the chunk's resize plan, `grid_thw = (t, h, w)`,
  `num_tokens` = one frame's spatial tokens (the vision tower pools over time). The budget's
  divisor is the chunk's frame count (`get_resize_config` calls `navit_resize_video` with the
  chunk's frames at fps 1 and sample fps infinite), never the video's sampled frames.

K3's processor is image-only: a config without the video keys raises `VideoUnsupported`, whose
message names `--video-rules k25` (`PreprocessConfig.with_video_rules`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import ConfigError, InputError
from kimi_oracle.core.geometry import ResizePlan, plan

MEDIA_BEGIN, MEDIA_CONTENT, MEDIA_PAD, MEDIA_END = "<|media_begin|>", "<|media_content|>", "<|media_pad|>", "<|media_end|>"
# A chunk's prompt before expansion: its timestamp, then one pad (expanded to the chunk's tokens).
CHUNK_PROMPT = "{timestamp}" + MEDIA_BEGIN + "video" + MEDIA_CONTENT + MEDIA_PAD + MEDIA_END
MAX_FRAMES = 1 << 24  # a frame count past this is an input error, not a plan


class VideoUnsupported(ConfigError):
    """A video asked of a config without the video keys (K3's processor is image-only)."""

    def __init__(self, config: PreprocessConfig):
        super().__init__("temporal_merge_kernel_size",
                         f"profile {config.name!r} has no video rules (the K3 checkpoint's processor is "
                         "image-only); pass --video-rules k25 to apply the K2.5 checkpoint's video rules")


@dataclass(frozen=True)
class Chunk:
    """One video chunk: the sampled frames' indices in the video, its timestamp (seconds, the
    first frame's index / fps), and its prompt text before expansion."""

    frame_indices: tuple[int, ...]
    timestamp: float
    prompt: str

    def to_dict(self) -> dict[str, object]:
        """The chunker interface's dict (`frame_indices`, `prompt`), plus `timestamp`."""
        return {"frame_indices": list(self.frame_indices), "prompt": self.prompt, "timestamp": self.timestamp}


def require_video(config: PreprocessConfig) -> PreprocessConfig:
    """`config`, when it has the video rules; else `VideoUnsupported`."""
    if not config.has_video:
        raise VideoUnsupported(config)
    return config


def _check_video(num_frames: object, fps: object) -> tuple[int, float]:
    if isinstance(num_frames, bool) or not isinstance(num_frames, numbers.Integral) or not 0 < num_frames <= MAX_FRAMES:
        raise InputError(f"a video's frame count must be an integer 1..{MAX_FRAMES}, got {num_frames!r}")
    if isinstance(fps, bool) or not isinstance(fps, numbers.Real) or not math.isfinite(fps) or fps <= 0:
        raise InputError(f"a video's fps must be a positive finite number, got {fps!r}")
    return int(num_frames), float(fps)


def sample_frames(num_frames: int, fps: float, config: PreprocessConfig) -> list[int]:
    """The sampled frame indices: `n = max(round(num_frames * min(sample_fps, fps) / fps), 1)`
    (Python's round, halves to even), `linspace(0, num_frames - 1, n)` rounded by NumPy (halves
    to even)."""
    require_video(config)
    num_frames, fps = _check_video(num_frames, fps)
    sample_fps = min(float(config.sample_fps), fps)  # type: ignore[arg-type]
    n = max(round(num_frames * sample_fps / fps), 1)
    return [int(i) for i in np.linspace(0, num_frames - 1, n).round().astype(int)]


def timestamp_text(t: float, mode: str) -> str:
    """`t` seconds as `mode` writes it: the hours, minutes and seconds of the UTC clock at t
    (minutes wrap at 60 in the `mm:ss` modes, hours at 24), and the milliseconds truncated from
    the float `(t % 1) * 1000` (0.29 s is `.289`)."""
    if mode not in ("hh:mm:ss.fff", "mm:ss.fff", "mm:ss"):
        raise ConfigError("timestamp_mode", f"unknown timestamp mode {mode!r}")
    whole = int(t)  # (t >= 0: the floor)
    hh, mm, ss = (whole // 3600) % 24, (whole // 60) % 60, whole % 60
    ms = int((t % 1) * 1000)
    if mode == "hh:mm:ss.fff":
        return f"{hh:02d}:{mm:02d}:{ss:02d}.{ms:03d}"
    if mode == "mm:ss.fff":
        return f"{mm:02d}:{ss:02d}.{ms:03d}"
    return f"{mm:02d}:{ss:02d}"


def split_chunks(num_frames: int, fps: float, config: PreprocessConfig) -> list[Chunk]:
    """The video's chunks: consecutive runs of `temporal_merge_kernel_size` sampled frames, the
    last one possibly shorter (nothing repeated or padded), each stamped with its first frame's
    index / fps."""
    indices = sample_frames(num_frames, fps, config)
    k = int(config.temporal_merge_kernel_size)  # type: ignore[arg-type]
    fps = float(fps)
    out = []
    for start in range(0, len(indices), k):
        frames = tuple(indices[start: start + k])
        t = frames[0] / fps
        out.append(Chunk(frames, t, CHUNK_PROMPT.format(timestamp=timestamp_text(t, str(config.timestamp_mode)))))
    return out


def frame_limit(frames: int, config: PreprocessConfig) -> int:
    """A chunk frame's patch budget: `in_patch_limit_each_frame` (`in_patch_limit` when null),
    capped at `round(in_patch_limit_video / frames)` when a total is set."""
    require_video(config)
    limit = config.in_patch_limit_each_frame or config.in_patch_limit
    if config.in_patch_limit_video is not None:
        limit = min(limit, round(config.in_patch_limit_video / frames))
    return int(limit)


def plan_chunk(width: int, height: int, frames: int, config: PreprocessConfig, *,
               side_assert: bool = True) -> ResizePlan:
    """The plan of a chunk of `frames` frames whose first frame is W x H: the image rule under
    the frame budget (`frame_limit`); grid `(frames, h, w)`, tokens those of one frame. A fixed
    count is the image key's, `fixed_output_tokens`: the checkpoint passes it to
    `navit_resize_video` and never reads `fixed_output_tokens_each_frame` (an engine that does
    is a variant)."""
    if isinstance(frames, bool) or not isinstance(frames, numbers.Integral) or frames <= 0:
        raise InputError(f"a chunk's frame count must be a positive integer, got {frames!r}")
    one = plan(width, height, config, side_assert=side_assert, limit=frame_limit(int(frames), config),
               fixed=config.fixed_output_tokens)
    _, gh, gw = one.grid_thw
    return dataclasses.replace(one, grid_thw=(int(frames), gh, gw))
