"""Video candidate and planner `transformers@5.23.0`: the release's own `Kimi_K25VideoProcessor`
(issue 42, item 5), in its own process. Expected values are hand arithmetic (the K2.5 statistics
0.5/0.5: a level x is x/127.5 - 1) and the spec's rules, never the adapter's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.fuzzers.isolated import run_forked

K25 = PreprocessConfig.k25()


def _frames(w, h, n, seed=0):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB") for _ in range(n)]


def _run(chunks, config):
    from kimi_oracle.adapters.transformers_k25_video import video_path

    preprocess, plan = video_path("5.23.0")
    pv, grids = preprocess(chunks[:1], config)
    _, tall = preprocess(chunks[1:], config)  # (transformers guesses the layout once a call, from its first video)
    return pv, grids.tolist() + tall.tolist(), plan(1920, 1080, 4, config)


@pytest.fixture(scope="module")
def ready(transformers_tree):
    from kimi_oracle.adapters.transformers_k25 import dependency_site

    try:
        dependency_site()
    except CandidateError as exc:  # no index reachable and nothing cached
        pytest.skip(f"transformers' pinned dependencies cannot be fetched here: {exc}")


def test_a_chunk_without_resize_and_a_three_row_frame(ready):
    frames = _frames(84, 56, 3)
    tall = _frames(63, 3, 1, seed=1)
    budget = dataclasses.replace(K25, in_patch_limit_video=40)  # round(40 / 3) = 13 < 24 patches: the checkpoint shrinks
    kind, (pv, grids, planned) = run_forked("transformers-video", _run, ([frames, tall], budget), {}, 300)
    assert kind == "result"
    # 84x56 = 6 x 4 patches, 3 frames, no resize: transformers divides no video budget.
    # The 63x3 frame is read channels first: 3 wide, 63 tall -> padded 28x84: (1, 6, 2), not (1, 2, 6).
    assert grids == [[3, 4, 6], [1, 6, 2]]
    first = np.asarray(frames[0])[:14, :14, 0].astype(np.float64) / 127.5 - 1
    assert np.allclose(pv[0, 0].double().numpy(), first, atol=2.5e-7)
    second_frame = np.asarray(frames[1])[:14, :14, 0].astype(np.float64) / 127.5 - 1  # frame-major rows
    assert np.allclose(pv[24, 0].double().numpy(), second_frame, atol=2.5e-7)
    # Its planner: the frame limit 4096 alone for 1920x1080 (137 x 77 = 10549 patches):
    # sqrt(4096 / 10549) = 0.6231 -> 1196x672, padded 1204x672, 43 x 24 = 1032 tokens.
    assert planned == {"new_width": 1196, "new_height": 672, "pad_width": 8, "pad_height": 0, "num_tokens": 1032,
                       "grid_thw": [4, 48, 86]}


@pytest.mark.slow
def test_the_fuzz_names_everything_transformers_does_otherwise(ready, tmp_path):
    from kimi_oracle.fuzzers.video_fuzz import run_media_isolated
    from kimi_oracle.fuzzers.isolated import run_forked as forked
    from kimi_oracle.oracle.video_planner import fuzz_video_planner

    report = run_media_isolated("transformers@5.23.0", K25, "video", 300, seed=1)
    assert not report.ok and report.error is None and report.unexplained == 0, report.lines()
    named = {name for g in report.groups for name in g.explained_by}
    assert {"budget-divisor/none", "frame-layout/channels-first-guess"} <= named, report.lines()
    kind, planned = forked("planner", fuzz_video_planner, ("transformers@5.23.0", K25, 1000, 1), {}, 300)
    assert kind == "result" and any(k.startswith("new_width{budget-divisor/none}") for k in planned.counts)
    assert not any("unexplained" in k for k in planned.counts), planned.lines()
