"""Fuzzing a video request engine (issue 42, item 6): the contract written again passes; a chunk
expanded per frame, an undivided video budget, a dropped row and rows returned rank by rank over
data-parallel ranks are each found within 200 drawn requests (prompts of several chunks, images
interleaved, the video repeated, 1-4 ranks) and named."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.video_request_fuzz import fuzz_video_requests

MUTANTS = str(Path(__file__).resolve().parents[1] / "mutants" / "video_requests.py")
K25 = PreprocessConfig.k25()


def test_the_contract_written_again_passes():
    report = fuzz_video_requests(f"{MUTANTS}:faithful", K25, 150, seed=3)
    assert report.ok and report.requests == 150, report.lines()


@pytest.mark.parametrize("name,keys", [
    ("per_frame", {"input_ids{expansion/per-frame}"}),
    ("no_divisor", {"input_ids{budget-divisor/none}", "pixel_mismatch{budget-divisor/none}"}),
    ("short_rows", {"feature_length{unexplained}"}),
    ("rank_order", {"pixel_mismatch{dp-ranks/rank-order}"}),
])
def test_each_planted_request_defect_is_found_and_named(name, keys):
    report = fuzz_video_requests(f"{MUTANTS}:{name}", K25, 200, seed=3)
    assert set(report.counts) == keys, report.lines()
