"""Planted video chunkers (issue 42, item 4): each does one step of the K2.5 checkpoint's
`split_video_chunks` otherwise. Written here from the rules of preprocessing-spec section 7, not
from kimi_oracle's code, so that the fuzzer's diagnosis is checked against an independent build.
"""

from __future__ import annotations

import math
import os

MEDIA = "<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"


def _clock(t, mode, ms):
    s = int(t)
    hh, mm, ss = (s // 3600) % 24, (s // 60) % 60, s % 60
    if mode == "mm:ss":
        return "%02d:%02d" % (mm, ss)
    head = "%02d:%02d:%02d" % (hh, mm, ss) if mode == "hh:mm:ss.fff" else "%02d:%02d" % (mm, ss)
    return head + ".%03d" % ms


def _indices(num_frames, fps, config, floor=False):
    rate = min(config.sample_fps, fps)
    n = max(round(num_frames * rate / fps), 1)
    if n == 1:
        points = [0.0]
    else:
        points = [(num_frames - 1) * i / (n - 1) for i in range(n)]
    # round half to even (Python's round, as NumPy's), or the floor
    return [int(math.floor(p)) if floor else int(round(p)) for p in points]


def _chunks(num_frames, fps, config, *, floor=False, ms_round=False, tail="short", reverse=False):
    k = config.temporal_merge_kernel_size
    idx = _indices(num_frames, fps, config, floor)
    out = []
    for start in range(0, len(idx), k):
        frames = idx[start:start + k]
        if len(frames) < k and tail == "drop" and start:
            break
        if len(frames) < k and tail == "repeat":
            frames = frames + [frames[-1]] * (k - len(frames))
        t = frames[0] / fps
        if ms_round:
            total = round(t * 1000)
            text = _clock(total // 1000, config.timestamp_mode, total % 1000)
        else:
            text = _clock(t, config.timestamp_mode, int((t % 1) * 1000))
        out.append({"frame_indices": frames[::-1] if reverse else frames, "prompt": text + MEDIA})
    return out


def faithful(num_frames, fps, config):
    """The checkpoint's rules, written again."""
    return _chunks(num_frames, fps, config)


def rounded_milliseconds(num_frames, fps, config):
    """Milliseconds rounded instead of truncated."""
    return _chunks(num_frames, fps, config, ms_round=True)


def repeated_tail(num_frames, fps, config):
    """A short last chunk filled up with its last frame."""
    return _chunks(num_frames, fps, config, tail="repeat")


def dropped_tail(num_frames, fps, config):
    """A short last chunk dropped (unless it is the only one)."""
    return _chunks(num_frames, fps, config, tail="drop")


def floored_indices(num_frames, fps, config):
    """The linspace floored instead of rounded."""
    return _chunks(num_frames, fps, config, floor=True)


def reversed_frames(num_frames, fps, config):
    """Each chunk's frames last first (its timestamp still its first sampled frame's)."""
    return _chunks(num_frames, fps, config, reverse=True)


def exits(num_frames, fps, config):
    """Ends the interpreter on its first call."""
    os._exit(3)


def not_a_list(num_frames, fps, config):
    """Returns one dict, not a list."""
    return {"frame_indices": [0], "prompt": ""}
