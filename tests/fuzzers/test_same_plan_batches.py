"""Inputs that reach batch-only code (issue 41, item 8): fuzzed batches often hold several images
with the same target size (different sources, the same plan), a batch's finding says whether
the image at fault alone is right, and another image's rows are named
`patch-order/rows-of-image-J`.

The planted defect (tests/mutants/grouped.py) keeps one buffer per target size: every image of
a call after the first of its size gets that first one's rows; a batch of one is right.
"""

from __future__ import annotations

import dataclasses

from mutants.grouped import stale_group_rows

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.fuzzers.cases import generated_case
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.inputs.sizes import same_plan_sizes
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.diagnosis import attribute
from kimi_oracle.pipelines import reference


def _target(p, config):
    r = plan(p.width, p.height, config)
    return (r.new_w, r.new_h, r.pad_w, r.pad_h)


def test_drawn_batches_often_share_a_plan():
    options = FuzzOptions(max_images=3, max_side=40)
    config = PreprocessConfig.k3()
    batches = shared = resized_apart = 0
    for i in range(300):
        case = generated_case(config, options, 11, i)
        if len(case.images) < 2:
            continue
        batches += 1
        targets = [_target(p, case.config) for p in case.images]
        pairs = [(a, b) for a in range(len(targets)) for b in range(a) if targets[a] == targets[b]]
        # (two images of one plan, from different sources: another mode, content or seed)
        if any(case.images[a] != case.images[b] for a, b in pairs):
            shared += 1
        if any((case.images[a].width, case.images[a].height) != (case.images[b].width, case.images[b].height)
               for a, b in pairs):
            resized_apart += 1  # different source sizes resized to one target
    assert batches >= 100
    assert shared >= 0.4 * batches, (shared, batches)
    assert resized_apart >= 1


def test_same_plan_sizes_share_the_plan():
    # under a budget of one token, 40x30 is resized down: its neighbours resize to the same target
    config = dataclasses.replace(PreprocessConfig.k3(), in_patch_limit=1)
    want = plan(40, 30, config)
    sizes = same_plan_sizes((40, 30), config, 64)
    assert sizes and (40, 30) not in sizes
    for w, h in sizes:
        got = plan(w, h, config)
        assert abs(w - 40) <= 3 and abs(h - 30) <= 3
        assert (got.new_w, got.new_h, got.pad_w, got.pad_h) == (want.new_w, want.new_h, want.pad_w, want.pad_h)
    # not resized: a plan of its own
    assert same_plan_sizes((20, 10), PreprocessConfig.k3(), 64) == [(20, 10)]


def test_another_images_rows_are_named():
    config = PreprocessConfig.k3()
    images = [make_image(CaseParams(20, 10, "RGB", seed=1)), make_image(CaseParams(20, 10, "L", seed=2))]
    expected = reference.preprocess([img.copy() for img in images], config)
    n = plan(20, 10, config).num_patches
    rows = expected.pixel_values.clone()
    rows[n:2 * n] = expected.pixel_values[:n]  # image 1 given image 0's rows
    found = attribute(images, config, PreprocessResult(rows, expected.grid_thws), expected=expected, image=1)
    assert found.explanation == "explained" and list(found.variants) == ["patch-order/rows-of-image-0"]
    # one level off those rows: not another image's rows
    rows[n, 0, 0, 0] += 2 * 0.0039215689 / config.image_std[0]
    found = attribute(images, config, PreprocessResult(rows, expected.grid_thws), expected=expected, image=1)
    assert "patch-order/rows-of-image-0" not in found.variants


def test_a_batch_only_defect_is_found_named_and_told_apart():
    run = fuzz(Candidate("stale_group_rows", stale_group_rows), PreprocessConfig.k3(),
               FuzzOptions(examples=6, seed=1, invariance=False, max_images=3, max_side=24))
    pixel = [f for f in run.findings if f.check == "pixel_mismatch"]
    assert pixel
    for f in pixel:
        at_fault = f.extra["alone"]["image"]
        assert f.attribution["variants"] == ["patch-order/rows-of-image-0"] and at_fault > 0
        # two images of one plan in its batch; the image at fault, alone, is right
        assert _target(f.images[0], f.config) == _target(f.images[at_fault], f.config)
        assert f.extra["alone"]["ok"] is True and "alone is right" in f.message
