"""The NumPy twins of the kernel's CMYK, "I" and "F" conversions against Pillow itself, over
their value ranges (the kernels are checked against the reference in test_pipeline.py)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from kimi_oracle.pipelines.gpu import tables


def test_cmyk_every_colour_and_black_level():
    # Row k, column c: C = c, M = 255 - c, Y = 85 ^ c, K = k. R depends on (C, K) only (and G
    # on (M, K), B on (Y, K)), so this covers every pair for every band.
    c, k = np.meshgrid(np.arange(256), np.arange(256))
    cmyk = np.stack([c, 255 - c, c ^ 85, k], -1).astype(np.uint8)
    pillow = np.asarray(Image.fromarray(cmyk, "CMYK").convert("RGB"))
    assert np.array_equal(tables.cmyk_to_rgb(cmyk), pillow)
    # hand-worked values: no ink is white, full black is black, MULDIV255(255, 255) = 255
    assert tables.cmyk_to_rgb(np.array([[0, 0, 0, 0], [0, 0, 0, 255], [255, 0, 0, 0]], np.uint8)).tolist() == \
        [[255, 255, 255], [0, 0, 0], [0, 255, 255]]


def _i_image(values: np.ndarray) -> Image.Image:
    return Image.frombytes("I", (values.size, 1), values.astype("<i4").tobytes())


I_VALUES = np.concatenate([
    np.arange(-600, 900), [-(1 << 31), (1 << 31) - 1, 1 << 20, -(1 << 20), 65535, 65536],
    np.random.default_rng(0).integers(-(1 << 31), (1 << 31) - 1, 20000),
])


@pytest.mark.parametrize("key", [None, 0, 5, 255, 261, -251, 300, 65541, 1 << 30])
def test_i32_levels_and_transparency_key(key):
    img = _i_image(I_VALUES)
    if key is None:
        pillow = np.asarray(img.convert("RGB"))[0]
        assert np.array_equal(tables.i32_to_rgba(I_VALUES)[:, :3], pillow)
        return
    img.info["transparency"] = key
    assert np.array_equal(tables.i32_to_rgba(I_VALUES, key), np.asarray(img.convert("RGBA"))[0])


def test_i32_key_matches_the_clipped_level_cut_to_8_bits():
    # Hand-checked against Pillow 13.0: key 261 (= 256 + 5) makes level 5 transparent, not
    # 261 (which clips to 255); key 255 every value that clips to 255; key 300 (44 after the
    # cut) level 44, not 300.
    v = np.array([5, 261, 300, 255, 1000, 44])
    assert tables.i32_to_rgba(v, 261)[:, 3].tolist() == [0, 255, 255, 255, 255, 255]
    assert tables.i32_to_rgba(v, 255)[:, 3].tolist() == [255, 0, 0, 0, 0, 255]
    assert tables.i32_to_rgba(v, 300)[:, 3].tolist() == [255, 255, 255, 255, 255, 0]


def test_f32_levels_over_the_float_range():
    rng = np.random.default_rng(1)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 0.999999, 1.0, 254.99998,
                        255.0, 255.00002, 3.4e38, -3.4e38, 2.0 ** 31, -2.0 ** 31], np.float32)
    values = np.concatenate([special, np.arange(-4, 260, 1 / 64, dtype=np.float32),
                             (rng.standard_normal(20000) * 300).astype(np.float32),
                             rng.uniform(-1e30, 1e30, 2000).astype(np.float32)]).astype(np.float32)
    img = Image.frombytes("F", (values.size, 1), values.astype("<f4").tobytes())
    level = tables.f32_to_level(values)
    assert np.array_equal(level, np.asarray(img.convert("L"))[0])
    rgb = np.asarray(img.convert("RGB"))[0]
    assert np.array_equal(np.stack([level] * 3, -1), rgb)
    assert tables.f32_to_level(np.array([np.nan, 254.9, 255.1, -3], np.float32)).tolist() == [0, 254, 255, 0]
