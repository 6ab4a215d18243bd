"""The reference's fused tail (pipelines/fused.py) and its batch threads, against the spec model.

Expected values come from tests/helpers/checkpoint_model.py (the spec's float formula, pixel-rule
background and reshape/transpose patchify), never from kimi_oracle's own code.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from checkpoint_model import spec_preprocess
from images_by_mode import make
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.pipelines import fused, reference

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _same_bytes(images, cfg, **kwargs):
    got = reference.preprocess(images, cfg, **kwargs)
    want_pixels, want_grids = spec_preprocess(images, cfg.to_hf_json())
    assert got.grid_thws.tolist() == want_grids.tolist()
    assert got.pixel_values.shape == want_pixels.shape
    assert got.pixel_values.numpy().tobytes() == want_pixels.tobytes()


@pytest.fixture
def tiny_bands(monkeypatch):
    # One patch row per band and 3 source rows per composite band: every band edge is crossed.
    monkeypatch.setattr(fused, "_BAND_BYTES", 1)
    monkeypatch.setattr(fused, "_COMPOSITE_ROWS", 3)


@pytest.mark.parametrize("patch", [14, 15, 16])  # 15: an odd number of levels per patch channel
@pytest.mark.parametrize("norm", ["same", "per-channel"])
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA", "P+transparency"])
def test_band_edges_patch_sizes_and_tables(tiny_bands, patch, norm, mode):
    mean, std = ((0.5,) * 3, (0.5,) * 3) if norm == "same" else (CLIP_MEAN, CLIP_STD)
    cfg = dataclasses.replace(PreprocessConfig.k3(), patch_size=patch, image_mean=mean, image_std=std)
    _same_bytes([make(mode, 71, 47, seed=4), make(mode, 2 * patch, 4 * patch, seed=5)], cfg)


@pytest.mark.parametrize("bg", [TransparentBgConfig("chessboard", 5, False, 250, 40), TransparentBgConfig("gray")],
                         ids=["chessboard5", "gray"])
@pytest.mark.parametrize("stage", ["before_resize", "after_resize"])
def test_composite_over_many_default_bands(bg, stage):
    # 90 x 700: several bands of the default size, the last one short.
    cfg = dataclasses.replace(PreprocessConfig.k3(), transparent_bg_config=bg, transparent_bg_fill_stage=stage,
                              image_mean=CLIP_MEAN, image_std=CLIP_STD)
    _same_bytes([make("RGBA", 90, 700, seed=6)], cfg)


def test_blend_table_is_the_blend_of_every_level_alpha_and_background():
    table = fused.blend_table((255, 180), reference.blend)
    a, v = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    for b, level in enumerate((255, 180)):
        # The checkpoint's float32 arithmetic, written out: α·v + (1 − α)·back, truncated.
        alpha = a.astype(np.float32) / 255.0
        want = (alpha * v.astype(np.uint8) + (1 - alpha) * np.full_like(v, level, dtype=np.uint8)).astype(np.uint8)
        assert table[b * 65536: (b + 1) * 65536].reshape(256, 256).tobytes() == want.tobytes()


def test_threads_give_the_same_bytes_and_bad_counts_are_refused():
    cfg = PreprocessConfig.k3()
    images = [make("RGBA", 64, 40, seed=1), make("RGB", 33, 90, seed=2), make("P", 50, 50, seed=3)]
    one = reference.preprocess(images, cfg, threads=1)
    three = reference.preprocess(images, cfg, threads=3)
    assert one.pixel_values.numpy().tobytes() == three.pixel_values.numpy().tobytes()
    assert one.grid_thws.tolist() == three.grid_thws.tolist()
    _same_bytes(images, cfg, threads=2)
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(InputError, match="threads"):
            reference.preprocess(images, cfg, threads=bad)


def test_a_lazily_opened_image_is_read_once_before_the_threads(tmp_path):
    path = tmp_path / "a.png"
    make("RGB", 40, 30, seed=7).save(path)
    with Image.open(path) as lazy, Image.open(path) as again:
        cfg = PreprocessConfig.k3()
        _same_bytes([lazy, again], cfg, threads=2)
