"""K2.5 video chunk rules (issue 42): frame sampling, chunk timestamps and prompts, a chunk's plan.

Expected values are hand calculations from the rules in preprocessing-spec section 7 (the
checkpoint's `split_video_chunks`, `timestamp_as_str`, `navit_resize_video`), worked in the
comments; none is read from the code under test.
"""

from __future__ import annotations

import dataclasses

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import ConfigError, InputError
from kimi_oracle.core.video import (CHUNK_PROMPT, VideoUnsupported, frame_limit, plan_chunk, sample_frames,
                                    split_chunks, timestamp_text)

K25 = PreprocessConfig.k25()


@pytest.mark.parametrize("num_frames,fps,expected", [
    (30, 30.0, [0, 29]),               # n = round(30 * 2 / 30) = 2; linspace(0, 29, 2)
    (10, 1.0, list(range(10))),        # sample_fps = min(2, 1) = 1: every frame
    (25, 10.0, [0, 6, 12, 18, 24]),    # n = round(5.0) = 5; steps of 24 / 4 = 6
    (5, 4.0, [0, 4]),                  # n = round(2.5) = 2 (Python rounds halves to even)
    (7, 4.0, [0, 2, 4, 6]),            # n = round(3.5) = 4
    (6, 4.0, [0, 2, 5]),               # n = 3; linspace(0, 5, 3) = 0, 2.5, 5; 2.5 -> 2 (NumPy: half to even)
    (1, 29.97, [0]),                   # n = max(round(0.067), 1) = 1
    (3, 0.5, [0, 1, 2]),               # fps below sample_fps: every frame
])
def test_frames_are_sampled_as_the_checkpoint_does(num_frames, fps, expected):
    assert sample_frames(num_frames, fps, K25) == expected


def test_chunks_of_four_the_last_shorter_stamped_by_their_first_frame():
    chunks = split_chunks(25, 10.0, K25)  # sampled 0, 6, 12, 18, 24
    assert [c.frame_indices for c in chunks] == [(0, 6, 12, 18), (24,)]
    # 24 / 10 = 2.4 s; (2.4 % 1) * 1000 = 399.99999999999994 in doubles, truncated: 399
    assert [c.timestamp for c in chunks] == [0.0, 2.4]
    assert chunks[1].prompt == "00:00:02.399<|media_begin|>video<|media_content|><|media_pad|><|media_end|>"
    assert chunks[0].to_dict() == {"frame_indices": [0, 6, 12, 18], "timestamp": 0.0,
                                   "prompt": "00:00:00.000" + CHUNK_PROMPT.format(timestamp="")}


@pytest.mark.parametrize("t,mode,text", [
    (3725.5, "hh:mm:ss.fff", "01:02:05.500"),
    (3725.5, "mm:ss.fff", "02:05.500"),      # the minutes of the clock: 62 min wraps to 02
    (3725.5, "mm:ss", "02:05"),
    (90061.0, "hh:mm:ss.fff", "01:01:01.000"),  # one day and 1 h 1 min 1 s: hours wrap at 24
    (14.2, "mm:ss.fff", "00:14.199"),        # 14.2 % 1 = 0.19999999999999929
    (0.29, "hh:mm:ss.fff", "00:00:00.290"),
])
def test_timestamps_truncate_the_float_milliseconds(t, mode, text):
    assert timestamp_text(t, mode) == text


def test_a_chunk_plans_its_first_frame_under_the_frame_budget():
    # 1920x1080 under K2.5's 4096 patches a frame: 137 x 77 = 10549 patches, scale
    # sqrt(4096 / 10549) = 0.6231, 1196 x 672, padded to 1204 x 672: grid 48 x 86, tokens 24 x 43.
    p = plan_chunk(1920, 1080, 4, K25)
    assert (p.new_w, p.new_h, p.pad_w, p.pad_h, p.grid_thw, p.num_tokens) == (1196, 672, 8, 0, (4, 48, 86), 1032)
    assert plan_chunk(1920, 1080, 1, K25).grid_thw == (1, 48, 86)  # the budget is per frame
    # a total budget of 1000 over 4 frames: round(250.0) = 250 a frame; 640x480 (45 x 34 = 1530
    # patches), scale 0.4042, 258 x 194, padded 280 x 196: grid 14 x 20, tokens 7 x 10
    total = dataclasses.replace(K25, in_patch_limit_video=1000)
    assert frame_limit(4, total) == 250 and frame_limit(3, total) == 333  # round(333.3)
    p = plan_chunk(640, 480, 4, total)
    assert (p.new_w, p.new_h, p.grid_thw, p.num_tokens) == (258, 194, (4, 14, 20), 70)
    # a fixed count is the image key's (the checkpoint passes fixed_output_tokens and never reads
    # fixed_output_tokens_each_frame); in_patch_limit stands in for a null per-frame budget
    fixed = dataclasses.replace(K25, fixed_output_tokens=64, in_patch_limit_each_frame=None)
    assert plan_chunk(640, 480, 2, fixed).num_tokens == 64 and frame_limit(2, fixed) == K25.in_patch_limit
    unread = dataclasses.replace(K25, fixed_output_tokens_each_frame=64)
    # 640x480: 45 x 34 = 1530 patches, within 4096: padded to 644 x 504, 23 x 18 = 414 tokens
    assert plan_chunk(640, 480, 2, unread).num_tokens == plan_chunk(640, 480, 2, K25).num_tokens == 414


def test_the_worked_example_of_a_300_frame_video():
    # 300 frames at 30 fps: n = round(300 * 2 / 30) = 20, linspace(0, 299, 20) in steps of 299 / 19 =
    # 15.737: 0, 16, 31, 47, ...; chunks start at frames 0, 63, 126, 189 (63 = round(4 * 15.737)):
    # 0, 2.1, 4.2, 6.3 s; 189 / 30 = 6.3 = 6.29999999999999982236431605997495353221893310546875:
    # its milliseconds truncate to 299.
    chunks = split_chunks(300, 30.0, K25)
    assert [c.frame_indices[:2] for c in chunks] == [(0, 16), (63, 79), (126, 142), (189, 205), (252, 268)]
    assert [c.prompt[:12] for c in chunks][:4] == ["00:00:00.000", "00:00:02.100", "00:00:04.200", "00:00:06.299"]


def test_k3_has_no_video_rules_until_asked():
    k3 = PreprocessConfig.k3()
    with pytest.raises(VideoUnsupported, match="--video-rules k25"):
        split_chunks(8, 2.0, k3)
    assert isinstance(VideoUnsupported(k3), ConfigError)
    assert [c.frame_indices for c in split_chunks(8, 2.0, k3.with_video_rules("k25"))] == [(0, 1, 2, 3), (4, 5, 6, 7)]


@pytest.mark.parametrize("num_frames,fps", [(0, 2.0), (-1, 2.0), (2.5, 2.0), (True, 2.0), (4, 0), (4, float("nan")),
                                            (4, float("inf")), (4, "30")])
def test_a_bad_frame_count_or_fps_is_an_input_error(num_frames, fps):
    with pytest.raises(InputError):
        split_chunks(num_frames, fps, K25)
