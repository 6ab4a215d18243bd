"""The oracle's checks on video chunks (issue 42, item 1): a chunk's grid is `(t, h, w)` and its rows
`t*h*w`; a chunk alone must equal its rows in a batch with images and other chunks; a candidate
the checkpoint's refusal does not excuse crashes. Expected grids are hand calculations."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.inputs.params import CaseParams
from kimi_oracle.inputs.video_media import MediaCase
from kimi_oracle.oracle.video_judge import explain_case, judge_case, rule_grids
from kimi_oracle.pipelines.variants.chunk_rules import ChunkRule
from kimi_oracle.pipelines.video import preprocess_media

K25 = dataclasses.replace(PreprocessConfig.k25(), in_patch_limit_video=24)
FRAME = CaseParams(70, 42, "RGB", seed=1)  # 5 x 3 = 15 patches a frame
CASE = MediaCase(((FRAME,) * 4, CaseParams(30, 20, seed=2), (FRAME,) * 2), K25)


def test_the_reference_grids_by_hand():
    # 4 frames: round(24 / 4) = 6 patches a frame, sqrt(6/15) = 0.632: 44x26 -> padded 56x28: (4, 2, 4).
    # 2 frames: 12 patches, sqrt(12/15) = 0.894: 62x37 -> 84x56: (2, 4, 6). The image 30x20: (1, 2, 4).
    assert rule_grids(CASE, ChunkRule()) == [(4, 2, 4), (1, 2, 4), (2, 4, 6)]
    out = preprocess_media(CASE.media(), K25)
    assert out.grid_thws.tolist() == [[4, 2, 4], [1, 2, 4], [2, 4, 6]]
    assert out.pixel_values.shape[0] == 32 + 8 + 48


def test_rows_that_do_not_match_the_grids_are_a_feature_length_finding():
    def short(items, config):
        out = preprocess_media(items, config)
        return PreprocessResult(out.pixel_values[:-4], out.grid_thws)
    assert judge_case(short, CASE).check == "feature_length"


def test_one_frame_per_chunk_grid_is_a_grid_finding_named_by_nothing():
    def per_frame(items, config):  # t = 1 for every chunk: the rows right, the grid not
        out = preprocess_media(items, config)
        grids = out.grid_thws.clone()
        grids[:, 1] = grids[:, 1] * grids[:, 0]
        grids[:, 0] = 1
        return PreprocessResult(out.pixel_values, grids)
    verdict = judge_case(per_frame, CASE)
    assert verdict.check == "grid_mismatch"
    assert explain_case(CASE, verdict).explanation == "unexplained"


def test_a_chunk_alone_differs_from_its_rows_in_the_batch():
    def batch_dependent(items, config):
        out = preprocess_media(items, config)
        if len(items) > 1:  # a batch: every value one ulp up
            return PreprocessResult(torch.nextafter(out.pixel_values, torch.tensor(9.0)), out.grid_thws)
        return out
    assert judge_case(batch_dependent, CASE, tolerance="levels:1").check == "invariance"


def test_a_raise_on_a_valid_chunk_is_a_crash():
    def refuses(items, config):
        raise RuntimeError("no video")
    verdict = judge_case(refuses, CASE)
    assert verdict.check == "crash" and "RuntimeError: no video" in verdict.stats["exception"]
    assert explain_case(CASE, verdict).key() == "crash{RuntimeError: no video}"


def test_frames_of_a_chunk_are_taken_at_the_first_frames_plan():
    small = CaseParams(28, 28, "RGB", seed=3)
    case = MediaCase(((FRAME, small),), K25)
    frames = case.media()[0]
    out = preprocess_media([frames], K25)
    # round(24 / 2) = 12 for the 70x42 first frame: 62x37, padded 84x56; the 28x28 frame is resized to 62x37.
    assert out.grid_thws.tolist() == [[2, 4, 6]]
    second = out.pixel_values[24:]  # frame 1's rows
    resized = np.asarray(frames[1].convert("RGB").resize((62, 37), Image.Resampling.BICUBIC))
    level = ((second[0, :, 0, 0] * 0.5 + 0.5) * 255).round().to(torch.int64).tolist()  # (x-0.5)/0.5 inverted
    assert level == resized[0, 0].tolist()
