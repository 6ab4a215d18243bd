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


def _tiny(monkeypatch, vector_min: int) -> None:
    # One patch row per band and 3 source rows per composite band: every band edge is crossed.
    monkeypatch.setattr(fused, "_BAND_BYTES", 1)
    monkeypatch.setattr(fused, "_COMPOSITE_ROWS", 3)
    monkeypatch.setattr(fused, "_VECTOR_MIN_PIXELS", vector_min)


@pytest.fixture(params=[1, 1 << 62], ids=["vector", "table"])
def tiny_bands(monkeypatch, request):
    # Each test twice: RGBA composited by the vector passes (on tiny images too) and by the table.
    _tiny(monkeypatch, request.param)


@pytest.fixture
def tiny_vector_bands(monkeypatch):
    _tiny(monkeypatch, 1)


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


def _truncated_blend(rgba, back):
    # The checkpoint's arithmetic written out here (spec §3 step 5), independent of reference.blend.
    alpha = rgba[..., 3:4].astype(np.float32) / 255.0
    return (alpha * rgba[..., :3] + (1 - alpha) * back).astype(np.uint8)


def _rounded_blend(rgba, back):
    # An engine's variant: the same float32 blend rounded to nearest instead of truncated.
    alpha = rgba[..., 3:4].astype(np.float32) / 255.0
    return np.rint(alpha * rgba[..., :3] + (1 - alpha) * back).astype(np.uint8)


def _nudged_blend(rgba, back):
    # The checkpoint's blend except at one (alpha 77, level 200, background 180), in any channel:
    # one level more.
    out = _truncated_blend(rgba, back).copy()
    out[(rgba[..., 3:4] == 77) & (rgba[..., :3] == 200) & (back == 180)] += 1
    return out


def test_the_vector_composite_is_taken_only_where_it_is_the_blend_table_everywhere():
    for levels in [(255, 180), (250, 40), (255,), (0,), (128,), (7, 0, 255)]:
        assert fused._vector_exact(levels, _truncated_blend), levels
    # Any other blend, even one entry of 65,536 x 2 off, keeps the table.
    assert not fused._vector_exact((255, 180), _rounded_blend)
    assert not fused._vector_exact((255, 180), _nudged_blend)
    assert fused._vector_exact((255, 40), _nudged_blend)  # (its one odd entry needs background 180)


def _composite_patches(img, levels, which, blend, planes):
    from kimi_oracle.pipelines import pixels

    lut = reference.normalization_lut(PreprocessConfig.k3())
    w, h = img.size
    ph, pw = -(-h // 28) * 28, -(-w // 28) * 28  # (K3's padding: patch 14 x merge 2)
    reader = pixels.plane_reader(img) if planes else None
    return fused.patches_from_composite(pixels.row_reader(img), h, w, ph, pw, 14, lut, levels, which, blend,
                                        planes=reader)


def _every_alpha_and_level() -> Image.Image:
    # 256 x 256: alpha = the row, red = the column (every (alpha, level) pair once), green and
    # blue other orders of the levels.
    y, x = np.mgrid[0:256, 0:256]
    rgba = np.stack([x, 255 - x, (7 * x + y) % 256, y], axis=-1).astype(np.uint8)
    return Image.fromarray(rgba, "RGBA")


def _spec_patches_of_rgb(rgb: np.ndarray) -> bytes:
    # The spec model's pad, normalization and patchify of an RGB image (K3: nothing to composite).
    return spec_preprocess([Image.fromarray(rgb, "RGB")], PreprocessConfig.k3().to_hf_json())[0].tobytes()


@pytest.mark.parametrize("levels", [(255, 180), (90,), (7, 0, 255)], ids=["two", "one", "three"])
def test_the_vector_composite_and_the_table_give_the_spec_bytes(tiny_vector_bands, levels):
    img = _every_alpha_and_level()
    choices = np.random.default_rng(1).integers(0, len(levels), (256, 256), dtype=np.uint8)

    def which(y0, y1):
        return None if len(levels) == 1 else choices[y0:y1]

    vector = _composite_patches(img, levels, which, _truncated_blend, planes=True)
    table = _composite_patches(img, levels, which, _truncated_blend, planes=False)
    # Each pixel blended on its level by the formula written out above, then the spec's tail.
    back = np.array(levels, dtype=np.uint8)[choices if len(levels) > 1 else np.zeros_like(choices)]
    want = _spec_patches_of_rgb(_truncated_blend(np.asarray(img), np.repeat(back[..., None], 3, axis=-1)))
    assert vector.tobytes() == want
    assert table.tobytes() == want


def test_a_blend_the_vector_passes_do_not_give_is_composited_by_its_table(tiny_vector_bands):
    # Every pixel at alpha 77 with red 200, on background 180: the nudged blend's odd entry.
    arr = np.asarray(make("RGBA", 30, 20, seed=2)).copy()
    arr[..., 3], arr[..., 0] = 77, 200
    img = Image.fromarray(arr, "RGBA")
    gray = np.ones((20, 30), dtype=np.uint8)  # level 1 of (255, 180) everywhere
    got = _composite_patches(img, (255, 180), lambda y0, y1: gray[y0:y1], _nudged_blend, planes=True)
    back = np.full((20, 30, 3), 180, dtype=np.uint8)
    want = _spec_patches_of_rgb(_nudged_blend(arr, back))
    assert want != _spec_patches_of_rgb(_truncated_blend(arr, back))  # (the nudge shows)
    assert got.tobytes() == want


def test_small_images_keep_the_table_and_larger_ones_take_the_vector_passes(monkeypatch):
    taken: list[tuple[int, int]] = []
    real = fused._vector_fill
    monkeypatch.setattr(fused, "_vector_fill", lambda *a, **k: taken.append(a[1:3]) or real(*a, **k))
    cfg = PreprocessConfig.k3()
    assert fused._VECTOR_MIN_PIXELS == 128 * 64
    small, large = make("RGBA", 127, 64, seed=3), make("RGBA", 128, 64, seed=4)  # 8,128 and 8,192 px
    _same_bytes([small], cfg, threads=1)
    assert taken == []
    _same_bytes([large], cfg, threads=1)
    assert taken == [(64, 128)]
