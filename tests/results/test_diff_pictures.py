"""Diff pictures of outputs larger than the picture (issue 34 item 3: a real photo's finding is
written in bounded time): drawn at the picture's size, yet the same expected/actual panels as
Pillow's nearest downscale of the whole output, and a single differing value still shows."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.results import diffs

CONFIG = PreprocessConfig.k3()
# The picture's scale of `_wide_pair`'s 2114 x 42 outputs (below 1: drawn downscaled).
WIDE = diffs.panel_scale(151 * 14, 3 * 14)


def _result(values: torch.Tensor, gh: int, gw: int) -> PreprocessResult:
    return PreprocessResult(values, torch.tensor([[1, gh, gw]]))


def _wide_pair(gh: int = 3, gw: int = 151) -> tuple[PreprocessResult, PreprocessResult]:
    # 151 patches of 14 pixels: 2114 pixels wide, over the picture's 2048: drawn downscaled.
    p = CONFIG.patch_size
    values = torch.rand(gh * gw, 3, p, p, generator=torch.Generator().manual_seed(0)) * 2 - 1
    changed = values.clone()
    changed[200, 1, 5, 6] += 1e-6  # one value, a fraction of a level
    return _result(values, gh, gw), _result(changed, gh, gw)


def test_large_panels_are_pillows_nearest_downscale_of_the_whole_output():
    expected, actual = _wide_pair()
    full = diffs.unpatchify(expected, 0, CONFIG)  # (42, 2114, 3) levels
    factor = diffs.panel_scale(full.shape[1], full.shape[0])
    assert factor < 1
    want = Image.fromarray(np.clip(np.rint(full), 0, 255).astype(np.uint8), "RGB").resize(
        (round(full.shape[1] * factor), round(full.shape[0] * factor)), Image.Resampling.NEAREST)
    rows = [diffs._patch_rows(r, 0, CONFIG) for r in (expected, actual)]
    panels = diffs._sampled_panels(rows, CONFIG, factor)
    assert [label for label, _ in panels][:2] == ["expected", "actual"]
    assert panels[0][1].size == want.size
    assert np.array_equal(np.asarray(panels[0][1]), np.asarray(want))


def test_one_differing_value_shows_in_a_downscaled_difference_panel():
    expected, actual = _wide_pair()
    label, heat = diffs._sampled_panels([diffs._patch_rows(r, 0, CONFIG) for r in (expected, actual)], CONFIG, WIDE)[2]
    red = np.asarray(heat)[..., 0]
    assert np.count_nonzero(red) == 1 and red.max() == 255
    assert label.startswith("|diff|")
    # ... and in the whole picture, as the same canvas the small outputs get.
    picture = diffs.diff_image(expected, actual, CONFIG)
    assert picture is not None and picture.width == 3 * heat.width + 4 * 12


def test_equal_large_outputs_draw_a_black_difference():
    expected, _ = _wide_pair()
    _, heat = diffs._sampled_panels([diffs._patch_rows(expected, 0, CONFIG)] * 2, CONFIG, WIDE)[2]
    assert not np.asarray(heat).any()


def test_a_huge_finite_value_still_shows_at_full_intensity():
    # (a - e) past float32's range is no NaN: it counts as 1e9 levels, the peak, drawn at 255.
    expected, _ = _wide_pair()
    values = expected.pixel_values.clone()
    values[300, 0, 2, 2] = 1e37
    label, heat = diffs._sampled_panels([diffs._patch_rows(r, 0, CONFIG) for r in (expected, _result(values, 3, 151))],
                                        CONFIG, WIDE)[2]
    red = np.asarray(heat)[..., 0]
    assert red.max() == 255 and np.count_nonzero(red) == 1 and "max 1e+09" in label
