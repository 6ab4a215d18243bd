"""Videos drawn where chunking breaks (issue 42, item 3): (num_frames, fps, timestamp_mode).

- fps: integral rates (1, 24, 25, 30, 60, 240), NTSC rates (23.976, 29.97, 59.94), 0.5, rates
  whose frame times fall near millisecond boundaries (100/3, 1000/7, 12.5), `sample_fps` itself
  and just below and above it, and a log-uniform rate in [0.25, 240];
- frame counts that sample to around multiples of the chunk size (4k - 1 .. 4k + 1 sampled
  frames), to 1..3 frames, or a log-uniform count up to `MAX_DRAWN_FRAMES`;
- every `timestamp_mode`, in turn.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator

import numpy as np

from kimi_oracle.core.config import TIMESTAMP_MODES, PreprocessConfig
from kimi_oracle.core.video import require_video

MAX_DRAWN_FRAMES = 20_000
FIXED_RATES = (1.0, 24.0, 25.0, 30.0, 60.0, 240.0, 23.976, 29.97, 59.94, 0.5, 100 / 3, 1000 / 7, 12.5)


def _fps(rng: np.random.Generator, sample_fps: float) -> float:
    pick = rng.integers(0, 10)
    if pick < 6:
        return float(FIXED_RATES[rng.integers(0, len(FIXED_RATES))])
    if pick < 8:
        return float(sample_fps * (1.0 + float(rng.choice([-1e-9, 0.0, 1e-9, -0.01, 0.01]))))
    return float(math.exp(rng.uniform(math.log(0.25), math.log(240.0))))


def _frames(rng: np.random.Generator, fps: float, sample_fps: float, k: int) -> int:
    pick = rng.integers(0, 4)
    if pick == 0:
        return int(rng.integers(1, 13))
    if pick == 3:
        return int(math.exp(rng.uniform(0.0, math.log(MAX_DRAWN_FRAMES))))
    sampled = k * int(rng.integers(1, 8)) + int(rng.integers(-1, 2)) if pick == 1 else int(rng.integers(1, 4))
    rate = min(sample_fps, fps)
    guess = max(1, round(max(1, sampled) * fps / rate)) + int(rng.integers(-2, 3))
    return int(min(max(guess, 1), MAX_DRAWN_FRAMES))


def video_cases(base: PreprocessConfig, count: int, seed: int) -> Iterator[tuple[int, float, PreprocessConfig]]:
    """`count` (num_frames, fps, config) videos, deterministic from `seed`; the config is `base`
    with each `timestamp_mode` in turn."""
    require_video(base)
    rng = np.random.default_rng([int(seed), 0x71DE0])
    sample_fps = float(base.sample_fps)  # type: ignore[arg-type]
    k = int(base.temporal_merge_kernel_size)  # type: ignore[arg-type]
    configs = [dataclasses.replace(base, timestamp_mode=m) for m in TIMESTAMP_MODES]
    for i in range(int(count)):
        fps = _fps(rng, sample_fps)
        yield _frames(rng, fps, sample_fps, k), fps, configs[i % len(configs)]
