"""The fuzz loop's main-process shortcuts give the results of the definitions they replace.

The draw computes a config's threshold sizes only when it draws that size class
(`draw.LazyThresholds`), `pass_order_sizes` plans its walk on arrays, `make_image` skips work
its image does not use, and `checks.pixel_stats` takes fewer passes. Each is checked against an
independent source: the walk over `geometry.plan` its docstring defines, NumPy's own seeding, a
hand calculation, and pixel digests pinned from the generators before the shortcuts.
"""

from __future__ import annotations

import hashlib
import math
import struct

import numpy as np
import pytest
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import PlanError
from kimi_oracle.core.geometry import plan
from kimi_oracle.inputs import draw as draw_module
from kimi_oracle.inputs.draw import DrawOptions, LazyThresholds, RandomSource, config_thresholds, draw_fuzz_case
from kimi_oracle.inputs.generators import (
    ALPHA_PATTERNS,
    CONTENTS,
    GENERATOR_VERSION,
    MODES,
    MORE_KEY_MODES,
    NORMALIZATIONS,
    CaseParams,
    _rng,
    alpha_patterns_for,
    make_image,
    pass_order_sizes,
    vary_config,
)
from kimi_oracle.oracle.checks import Tolerance, pixel_stats
from kimi_oracle.oracle.checks import pixels as pixels_module

K3 = PreprocessConfig.profile("k3")


# ---------------------------------------------------------------------------------------------
# pass-order sizes: the walk its docstring defines, one plan at a time


def _walk(config: PreprocessConfig, count: int, max_side: int) -> list[tuple[int, int]]:
    per = max(1, count // 3)
    found = {-1: 0, 0: 0, 1: 0}
    out = []
    start = max(2, int(math.sqrt(config.in_patch_limit)) * config.patch_size)
    widths = sorted({max(1, int(start * f)) for f in (0.5, 0.75, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)})
    for w in widths:
        if w > max_side:
            continue
        for h in range(max(2, w // 2), min(max_side, 3 * w + 64) + 1):
            if min(found.values()) >= per:
                return out
            try:
                p = plan(w, h, config)
            except PlanError:
                continue
            d = (h - p.new_h) - 2 * (w - p.new_w)
            if h > p.new_h and d in found and found[d] < per:
                found[d] += 1
                out.append((w, h))
    return out


@pytest.mark.parametrize("changes", [
    {}, {"in_patch_limit": 1}, {"in_patch_limit": 3}, {"in_patch_limit": 16}, {"in_patch_limit": 37},
    {"in_patch_limit": 8, "patch_size": 8, "merge_kernel_size": 1},
    {"in_patch_limit": 12, "patch_limit_on_one_side": 4},  # the side assert rejects some sizes
    {"in_patch_limit": 24, "patch_size": 16, "fixed_output_tokens": 64, "patch_limit_on_one_side": 2},
])
def test_pass_order_sizes_are_the_walk_over_plan(changes):
    config = vary_config(K3, **changes)
    for count, max_side in ((9, 64), (9, 200), (12, 400), (3, 30), (12, 40)):
        assert pass_order_sizes(config, count, max_side) == _walk(config, count, max_side), (count, max_side)


# ---------------------------------------------------------------------------------------------
# threshold sizes computed only when drawn


def test_lazy_thresholds_know_they_are_not_empty_without_computing(monkeypatch):
    calls = []
    monkeypatch.setattr(draw_module, "threshold_sizes", lambda c, m: calls.append((c, m)) or ((5, 5),))
    monkeypatch.setattr(draw_module, "_THRESHOLDS", {})
    config = vary_config(K3, in_patch_limit=7)
    lazy = LazyThresholds(config, 64)
    assert bool(lazy) and calls == []
    assert list(lazy) == [(5, 5)] and len(lazy) == 1 and lazy[0] == (5, 5) and len(calls) == 1
    # Equal (and hashed) by what the sizes depend on, not by the config object.
    same = LazyThresholds(vary_config(K3, in_patch_limit=7, background={"pattern": "white"}), 64)
    assert same == lazy and hash(same) == hash(lazy)
    assert LazyThresholds(config, 65) != lazy


def test_the_draw_takes_the_same_choices_as_with_the_sizes_computed_first(monkeypatch):
    options = DrawOptions(max_side=64)
    lazy = []
    for seed in range(300):
        source = RandomSource(seed)
        lazy.append((draw_fuzz_case(source, K3, options), source.choices))
    # The definition before the shortcut: every case computed its thresholds before drawing.
    monkeypatch.setattr(draw_module, "LazyThresholds", config_thresholds)
    for seed in range(300):
        source = RandomSource(seed)
        assert (draw_fuzz_case(source, K3, options), source.choices) == lazy[seed], seed


# ---------------------------------------------------------------------------------------------
# images


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31, 2**32 - 1, 2**32, 2**40 + 5])
def test_random_streams_are_numpys_list_seeding(seed):
    for stream in (0, 1, 2):
        want = np.random.default_rng([seed, stream])
        assert _rng(seed, stream).bit_generator.state == want.bit_generator.state


def _params(CaseParams):  # noqa: N803 - the class of the generators under test
    out = []
    for mode in MODES:
        alphas = set(alpha_patterns_for(mode)) | ({"key"} if mode in MORE_KEY_MODES else set())
        for alpha in sorted(alphas, key=ALPHA_PATTERNS.index):
            for content in CONTENTS:
                for w, h, seed in ((1, 1, 3), (29, 17, 7)):
                    out.append(CaseParams(w, h, mode, alpha, content, seed, square=3))
    # Lossless files, animations (smaller odd frames) and EXIF / DPI: decoded pixels only.
    out += [
        CaseParams(20, 9, "RGBA", "gradient", "edges", 11, container="png", orientation=6, dpi=7),
        CaseParams(13, 21, "LA", "checker", "gradient", 12, square=2, container="tiff"),
        CaseParams(16, 16, "P", "key", "noise", 13, container="gif", frames=3, disposal=2),
        CaseParams(17, 11, "RGB", "opaque", "flat", 14, container="png", frames=2, disposal=1),
        CaseParams(9, 14, "1", "opaque", "edges", 15, container="bmp"),
        CaseParams(12, 12, "RGBA", "transparent", "noise", 16, container="webp-lossless", frames=2),
    ]
    return out


def _images_digest(make_image, CaseParams) -> str:  # noqa: N803
    digest = hashlib.sha256()
    for params in _params(CaseParams):
        img = make_image(params)
        info = sorted((k, repr(v)) for k, v in img.info.items() if k not in ("icc_profile", "exif"))
        palette = img.getpalette() if img.mode in ("P", "PA") else None
        digest.update(repr((params, img.mode, img.size, info, palette, getattr(img, "n_frames", 1))).encode())
        digest.update(img.tobytes())
    return digest.hexdigest()


# The digest of `_params`' images as the generators built them before the shortcuts (commit
# 5d43a50, GENERATOR_VERSION 1): a change of any pixel, palette or info entry must bump the version.
PINNED = {1: "83439c221febc12c9f6a12994b00651a1602207a1b11754313a3fb6b9a81c79f"}


def test_images_are_the_pinned_ones():
    assert _images_digest(make_image, CaseParams) == PINNED[GENERATOR_VERSION]


# ---------------------------------------------------------------------------------------------
# pixel statistics by hand


def _ulps(a: float, b: float) -> int:
    ia, ib = (struct.unpack("<i", struct.pack("<f", v))[0] for v in (a, b))
    return abs(ia - ib)


# 0: the whole output one block; 1764 (3 rows) and 1 (a row each): blocks that cross the images
# and leave the NaN, the largest ulps and the worst value in later blocks.
@pytest.mark.parametrize("block_values", [0, 3 * 588, 1])
def test_pixel_stats_by_hand(monkeypatch, block_values):
    if block_values:
        monkeypatch.setattr(pixels_module, "_BLOCK_VALUES", block_values)
    # K3 normalizes level v to (v / 255 - 0.5) / 0.5: one level is 2/255 in every channel.
    step = 2.0 / 255.0
    grids = [(1, 2, 2), (1, 2, 4)]  # 4 + 8 patch rows
    exp = torch.zeros(12, 3, 14, 14)
    act = exp.clone()
    changes = {  # (row, channel, y, x): levels added (image 0: rows 0-3, image 1: rows 4-11)
        (0, 0, 0, 0): 0.25, (1, 1, 2, 3): 1.0, (2, 2, 13, 13): 3.0,  # image 0
        (5, 0, 1, 1): 30.0, (7, 1, 0, 5): 2.0,  # image 1
    }
    for (r, c, y, x), levels in changes.items():
        act[r, c, y, x] = levels * step
    act[9, 2, 4, 4] = float("nan")  # image 1
    act[10, 0, 0, 0] = -0.0  # a bitwise difference of 0 levels
    stats = pixel_stats(exp, act, grids, K3, Tolerance.parse("exact"))
    values = 12 * 3 * 14 * 14
    assert stats["values"] == values and stats["differing"] == 7 == stats["failing"]
    assert stats["share_differing"] == 7 / values and stats["non_finite"] == 1
    assert stats["histogram"] == {"equal": values - 7, "<1": 2, "1": 1, "2": 1, "3-5": 1, "6-20": 0, ">20": 2}
    assert stats["max_level_diff"] == math.inf
    assert stats["mean_level_diff"] == pytest.approx((0.25 + 1 + 3 + 30 + 2) / (values - 1), rel=1e-5)
    # The NaN's bits against +0.0 are the most ulps apart (-0.0 has the other sign: not counted).
    assert stats["max_ulp"] == _ulps(float("nan"), 0.0)
    first, second = stats["per_image"]
    assert (first["differing"], first["max_level_diff"]) == (3, pytest.approx(3.0, rel=1e-5))
    assert first["mean_level_diff"] == pytest.approx(4.25 / (4 * 588), rel=1e-5)
    assert (second["differing"], second["max_level_diff"]) == (4, math.inf)
    assert second["mean_level_diff"] == pytest.approx(32 / (8 * 588 - 1), rel=1e-5)
    worst = stats["worst"]
    assert (worst["image"], worst["patch"], worst["channel"], worst["pixel_in_patch"]) == (1, 5, "B", [4, 4])

    levels = pixel_stats(exp, act, grids, K3, Tolerance.parse("levels:2"))
    assert levels["failing"] == 3 and levels["differing"] == 7  # 3 and 30 levels, the NaN
    assert [r["failing"] for r in levels["per_image"]] == [1, 2]
    levels = pixel_stats(exp, act, grids, K3, Tolerance.parse("levels:3"))
    assert levels["failing"] == 2 and [r["failing"] for r in levels["per_image"]] == [0, 2]
    assert levels["worst"]["patch"] == 5 and levels["worst"]["channel"] == "B"  # the NaN again

    act[9, 2, 4, 4] = 0.0  # every difference finite: the histogram counts below each bound
    finite = pixel_stats(exp, act, grids, K3, Tolerance.parse("exact"))
    assert finite["histogram"] == {"equal": values - 6, "<1": 2, "1": 1, "2": 1, "3-5": 1, "6-20": 0, ">20": 1}
    assert finite["max_level_diff"] == pytest.approx(30.0, rel=1e-5) and finite["non_finite"] == 0
    assert finite["max_ulp"] == _ulps(float(act[5, 0, 1, 1]), 0.0)  # the 30 levels, in row 5
    assert finite["worst"]["patch"] == 5 - 4 and finite["worst"]["image"] == 1


def test_pixel_stats_per_channel_steps_by_hand():
    # CLIP's std differs per channel: one level in channel c is 1 / (255 * std_c).
    mean, std = NORMALIZATIONS[1]
    config = vary_config(K3, image_mean=mean, image_std=std)
    exp = torch.zeros(1, 3, 14, 14)
    act = exp.clone()
    for c in range(3):
        act[0, c, c, 0] = 2.0 / (255.0 * std[c])  # two levels in each channel
    stats = pixel_stats(exp, act, [(1, 1, 1)], config, Tolerance.parse("levels:1"))
    assert stats["differing"] == 3 == stats["failing"] and stats["histogram"]["2"] == 3
    assert stats["max_level_diff"] == pytest.approx(2.0, rel=1e-5)
    assert stats["worst"]["channel"] in "RGB" and stats["worst"]["level_diff"] == stats["max_level_diff"]
    assert stats["mean_level_diff"] == pytest.approx(6.0 / 588, rel=1e-5)
    assert "max_ulp" in stats and stats["non_finite"] == 0


@pytest.mark.parametrize("share", [0.01, 0.3, 0.9])
def test_levels_at_is_levels_of_under_the_mask(share):
    # The attribution's shortcut: levels of the masked values only (when few), else all of them;
    # either way the values of levels_of(values)[mask], bit for bit and in the same order.
    import torch

    from kimi_oracle.oracle.checks import levels_at, levels_of

    config = PreprocessConfig.k3()
    g = torch.Generator().manual_seed(3)
    values = torch.randn(20, 3, 14, 14, generator=g)
    mask = (torch.rand(20, 3, 14, 14, generator=g) < share).numpy()
    want = levels_of(values, config)[mask]
    got = levels_at(values, mask, config)
    assert got.dtype == np.float64 and np.array_equal(got.view(np.int64), want.view(np.int64))
