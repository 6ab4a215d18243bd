"""The reference's fused tail (pipelines/fused.py) and its batch threads, against the spec model.

Expected values come from tests/helpers/checkpoint_model.py (the spec's float formula, pixel-rule
background and reshape/transpose patchify), never from kimi_oracle's own code.
"""

from __future__ import annotations

import concurrent.futures
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


# "same": the checkpoint's 0.5 / 0.5 (one affine form for every channel); "affine-per-channel":
# a form per channel; "per-channel": CLIP's, which no affine form gives (the tables' lookups).
NORMS = {"same": ((0.5,) * 3, (0.5,) * 3), "affine-per-channel": ((0.0, 0.5, 0.5), (1.0, 0.5, 0.25)),
         "per-channel": (CLIP_MEAN, CLIP_STD)}


@pytest.mark.parametrize("patch", [14, 15, 16])  # 15: an odd number of levels per patch channel
@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA", "P+transparency"])
def test_band_edges_patch_sizes_and_tables(tiny_bands, patch, norm, mode):
    mean, std = NORMS[norm]
    cfg = dataclasses.replace(PreprocessConfig.k3(), patch_size=patch, image_mean=mean, image_std=std)
    # 71 wide: one patch column part image, part padding; 57 (p = 14): one such and one all padding
    images = [make(mode, 71, 47, seed=4), make(mode, 57, 30, seed=6), make(mode, 2 * patch, 4 * patch, seed=5)]
    _same_bytes(images, cfg)


@pytest.mark.parametrize("bg", [TransparentBgConfig("chessboard", 5, False, 250, 40), TransparentBgConfig("gray")],
                         ids=["chessboard5", "gray"])
@pytest.mark.parametrize("stage", ["before_resize", "after_resize"])
def test_composite_over_many_default_bands(bg, stage):
    # 90 x 700: several bands of the default size, the last one short.
    cfg = dataclasses.replace(PreprocessConfig.k3(), transparent_bg_config=bg, transparent_bg_fill_stage=stage,
                              image_mean=CLIP_MEAN, image_std=CLIP_STD)
    _same_bytes([make("RGBA", 90, 700, seed=6)], cfg)


def test_the_affine_form_is_taken_only_where_it_is_the_table_on_every_level():
    # The checkpoint's table is level / 127.5 - 1 exactly (hand: round32(v/255)·2 - 1); CLIP's
    # is not affine in float32 on every level; a table changed at one level has no form.
    checkpoint = reference.normalization_lut(PreprocessConfig.k3())
    assert fused.affine_forms(checkpoint) == ((np.float32(127.5), np.float32(1.0)),) * 3
    clip = reference.normalization_lut(dataclasses.replace(PreprocessConfig.k3(), image_mean=CLIP_MEAN,
                                                           image_std=CLIP_STD))
    assert fused.affine_forms(clip) is None
    nudged = checkpoint.copy()
    nudged[1, 77] = np.nextafter(nudged[1, 77], np.float32(2))
    assert fused.affine_forms(nudged) is None


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


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_the_bands_of_one_image_run_on_the_threads_with_the_same_bytes(tiny_bands, monkeypatch, mode):
    # One image of 6 patch rows, one per band: threads=3 gives three runs of two bands to a
    # pool of three threads (which thread runs a run is the pool's affair), and the bytes are
    # the spec's; threads=1 makes no pool.
    runs = []

    class Pool(concurrent.futures.ThreadPoolExecutor):
        def map(self, fn, *iterables, **kwargs):
            parts = [list(part) for part in iterables[0]]
            runs.append((self._max_workers, parts))
            return super().map(fn, parts, **kwargs)

    monkeypatch.setattr(fused, "ThreadPoolExecutor", Pool)
    image = make(mode, 90, 70, seed=8)  # padded to 112 x 84: 6 patch rows
    _same_bytes([image], PreprocessConfig.k3(), threads=3)
    assert runs == []  # (below BAND_THREADS_MIN_PIXELS: one thread)
    monkeypatch.setattr(reference, "BAND_THREADS_MIN_PIXELS", 112 * 84)
    _same_bytes([image], PreprocessConfig.k3(), threads=3)
    assert runs == [(3, [[0, 1], [2, 3], [4, 5]])]
    runs.clear()
    _same_bytes([image], PreprocessConfig.k3(), threads=1)
    assert runs == []


def test_a_lazily_opened_image_is_read_once_before_the_threads(tmp_path):
    path = tmp_path / "a.png"
    make("RGB", 40, 30, seed=7).save(path)
    with Image.open(path) as lazy, Image.open(path) as again:
        cfg = PreprocessConfig.k3()
        _same_bytes([lazy, again], cfg, threads=2)
