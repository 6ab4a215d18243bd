"""The chunk rules engines plan a K2.5 chunk by (issue 42, item 4): each against hand arithmetic
of the spec's budget rule (section 7), and the channels-first reading of a 3-row frame against a
hand-built array."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.video import plan_chunk
from kimi_oracle.pipelines.variants.chunk_rules import (CHECKPOINT_RULE, ChunkRule, all_rules, is_rule_name,
                                                        layout_frame, parse_rule, plan_for, rule_frame_limit)

# K2.5 with a total video budget of 100 patches.
K25 = dataclasses.replace(PreprocessConfig.k25(), in_patch_limit_video=100)


def test_the_divisor_is_the_chunk_the_video_or_none():
    # round(100 / 4) = 25, round(100 / 9) = 11, none: in_patch_limit_each_frame = 4096.
    assert rule_frame_limit(CHECKPOINT_RULE, 4, 9, K25) == 25
    assert rule_frame_limit(ChunkRule(divisor="video"), 4, 9, K25) == 11
    assert rule_frame_limit(ChunkRule(divisor="none"), 4, 9, K25) == 4096
    # 3 frames: round(33.33) = 33; halves go to even: 100 / 8 = 12.5 -> 12.
    assert rule_frame_limit(CHECKPOINT_RULE, 3, 3, K25) == 33
    assert rule_frame_limit(CHECKPOINT_RULE, 8, 8, K25) == 12


def test_the_checkpoints_rule_is_plan_chunk_and_others_differ_by_hand():
    # 280x140 (20 x 10 = 200 patches) under 25 patches a frame: scale sqrt(25/200) = 0.35355,
    # 98x49 -> padded to 112x56: grid (4, 4, 8); under 11: sqrt(11/200) = 0.23452, 65x32 -> 84x56.
    p = plan_for(CHECKPOINT_RULE, [(280, 140)] * 4, 9, K25)
    assert p == plan_chunk(280, 140, 4, K25)
    assert (p.new_w, p.new_h, p.grid_thw) == (98, 49, (4, 4, 8))
    v = plan_for(ChunkRule(divisor="video"), [(280, 140)] * 4, 9, K25)
    assert (v.new_w, v.new_h, v.grid_thw) == (65, 32, (4, 4, 6))
    # chunk-size/last: the last frame's 140x280 -> 49x98, grid (4, 8, 4).
    last = plan_for(ChunkRule(size_from="last"), [(280, 140)] * 3 + [(140, 280)], 4, K25)
    assert (last.new_w, last.new_h, last.grid_thw) == (49, 98, (4, 8, 4))


def test_fixed_counts_by_key():
    fixed = dataclasses.replace(K25, fixed_output_tokens=64, fixed_output_tokens_each_frame=16)
    assert plan_for(CHECKPOINT_RULE, [(280, 140)], 1, fixed).num_tokens == 64
    assert plan_for(ChunkRule(fixed="each-frame"), [(280, 140)], 1, fixed).num_tokens == 16
    # none: the natural count of 280x140 under round(100/1) = 100 patches: sqrt(100/200) -> 197x98,
    # padded 224x112: (8 x 4) merged tokens = 32.
    assert plan_for(ChunkRule(fixed="none"), [(280, 140)], 1, fixed).num_tokens == 32


def test_a_three_row_frame_read_channels_first():
    rows = np.arange(3 * 5 * 3, dtype=np.uint8).reshape(3, 5, 3)
    guessed = layout_frame(ChunkRule(layout="channels-first-guess"), Image.fromarray(rows, "RGB"))
    assert guessed.size == (3, 5)  # 3 wide (the channels), 5 tall (the columns)
    out = np.asarray(guessed)
    for k in range(3):  # channel k of pixel (y=x, x=c) is row k's value at column x, channel c
        assert (out[:, :, k] == rows[k]).all()
    one_row = np.arange(5 * 4, dtype=np.uint8).reshape(1, 5, 4)
    gray = layout_frame(ChunkRule(layout="channels-first-guess"), Image.fromarray(one_row, "RGBA"))
    assert gray.size == (4, 5) and (np.asarray(gray)[:, :, 1] == one_row[0]).all()
    four = Image.new("RGB", (5, 4))
    assert layout_frame(ChunkRule(layout="channels-first-guess"), four) is four


def test_names_parse_and_the_catalogue_is_ordered():
    assert parse_rule(["budget-divisor/none", "chunk-size/last"]) == ChunkRule(divisor="none", size_from="last")
    assert is_rule_name("frame-layout/channels-first-guess") and not is_rule_name("pad/level-1")
    with pytest.raises(ValueError):
        parse_rule(["budget-divisor/half"])
    rules = all_rules()
    assert rules[0] == CHECKPOINT_RULE and len(rules) == 3 * 3 * 3 * 2
    assert [len(r.changes) for r in rules] == sorted(len(r.changes) for r in rules)
