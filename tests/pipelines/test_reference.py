import dataclasses

import numpy as np
import pytest
import torch
from checkpoint_model import spec_background, spec_preprocess
from images_by_mode import MODES, make

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.pipelines import reference

BACKGROUNDS = [
    None,
    TransparentBgConfig("white"),
    TransparentBgConfig("black"),
    TransparentBgConfig("gray"),
    TransparentBgConfig("chessboard", 8, True, 255, 180),
    TransparentBgConfig("chessboard", 3, False, 250, 40),
]


def check_bit_identical(images, cfg):
    got = reference.preprocess(images, cfg)
    want_pixels, want_grids = spec_preprocess(images, cfg.to_hf_json())
    assert got.pixel_values.dtype == torch.float32
    assert got.grid_thws.dtype == torch.int64
    assert torch.equal(got.grid_thws, torch.from_numpy(want_grids))
    assert got.pixel_values.shape == want_pixels.shape
    # Bit-exact: compare the raw bytes, not values with a tolerance.
    assert got.pixel_values.numpy().tobytes() == want_pixels.tobytes()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stage", ["before_resize", "after_resize"])
@pytest.mark.parametrize("bg", BACKGROUNDS, ids=lambda b: "none" if b is None else f"{b.pattern}{b.chessboard_square_size}")
def test_reference_matches_plain_recomputation(mode, stage, bg):
    # in_patch_limit 6 forces real resampling: 61x45 -> floored 4x3 = 12 patches > 6.
    cfg = dataclasses.replace(PreprocessConfig.k3(), in_patch_limit=6, transparent_bg_config=bg,
                              transparent_bg_fill_stage=stage)
    images = [make(mode, 61, 45, seed=1), make(mode, 30, 90, seed=2), make(mode, 5, 3, seed=3)]
    check_bit_identical(images, cfg)


@pytest.mark.parametrize("profile", ["k3", "k25", "k3-small"])
def test_profiles_on_mixed_batch(profile):
    images = [make(m, 40 + 7 * i, 33 + 5 * i, seed=i) for i, m in enumerate(MODES)]
    check_bit_identical(images, PreprocessConfig.profile(profile))


def test_resampling_really_happens_under_small_limit():
    img = make("RGB", 61, 45, seed=1)
    cfg = dataclasses.replace(PreprocessConfig.k3(), in_patch_limit=6)
    out = reference.preprocess([img], cfg)
    assert out.grid_thws.tolist() == [[1, 4, 4]]  # 61x45 -> 43x31 -> padded 56x56


def test_normalization_lut_equals_numpy_formula_for_all_values():
    for mean, std in [((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
                      ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))]:
        cfg = dataclasses.replace(PreprocessConfig.k3(), image_mean=mean, image_std=std)
        lut = reference.normalization_lut(cfg)
        assert lut.shape == (3, 256) and lut.dtype == np.float32
        # The checkpoint's code on an image that holds every value in every channel.
        img = np.stack([np.arange(256, dtype=np.uint8)] * 3, axis=-1)[None]  # (1, 256, 3)
        x = (img / 255.0).astype(np.float32)
        x -= np.array(mean)
        x *= 1.0 / np.array(std)
        assert lut.T.tobytes() == x[0].tobytes()


def test_lut_is_not_the_naive_float32_formula():
    # Guard that the test above can fail: a float32-only formula differs for some values.
    cfg = dataclasses.replace(PreprocessConfig.k3(), image_mean=(0.48145466, 0.4578275, 0.40821073),
                              image_std=(0.26862954, 0.26130258, 0.27577711))
    lut = reference.normalization_lut(cfg)
    v = np.arange(256, dtype=np.float32)
    naive = (v / np.float32(255) - np.float32(0.48145466)) / np.float32(0.26862954)
    assert (naive != lut[0]).any()


@pytest.mark.parametrize("pattern, value", [("white", 255), ("black", 0), ("gray", 128)])
def test_flat_backgrounds(pattern, value):
    bg = reference.background(TransparentBgConfig(pattern), 5, 7)
    assert bg.shape == (5, 7, 3) and (bg == value).all()


def test_chessboard_by_hand():
    bg = TransparentBgConfig("chessboard", 2, True, 255, 180)
    got = reference.background(bg, 4, 4)[..., 0]
    # (y//2 + x//2) % 2 == 1 is gray when on_top_left is true.
    expected = np.array([[255, 255, 180, 180], [255, 255, 180, 180],
                         [180, 180, 255, 255], [180, 180, 255, 255]], np.uint8)
    assert (got == expected).all()
    flipped = reference.background(dataclasses.replace(bg, chessboard_square_on_top_left=False), 4, 4)[..., 0]
    assert (flipped == np.where(expected == 255, 180, 255)).all()
    assert (reference.background(bg, 9, 11) == spec_background(bg.to_dict(), 9, 11)).all()


def test_composite_by_hand():
    bg = TransparentBgConfig("white")
    rgba = np.array([[[100, 0, 200, 0], [100, 0, 200, 255], [100, 0, 200, 128]]], np.uint8)
    out = reference.composite(rgba, bg)
    # alpha 0 -> background; 255 -> colour; 128/255 -> truncated float32 mix.
    a = np.float32(128) / np.float32(255)
    mix = [int(a * np.float32(c) + (np.float32(1) - a) * np.float32(255)) for c in (100, 0, 200)]
    assert out.tolist() == [[[255, 255, 255], [100, 0, 200], mix]]
    # By hand: 127/255 * 255 is 127 exactly, but in float32 (1 - 128/255) * 255 = 126.99999,
    # which the checkpoint's astype(uint8) truncates to 126.
    assert mix == [177, 126, 227]


def test_k25_drops_alpha_and_resizes_in_rgb():
    img = make("RGBA", 61, 45, seed=4)
    cfg = dataclasses.replace(PreprocessConfig.k25(), in_patch_limit=6)
    got = reference.preprocess([img], cfg)
    same = reference.preprocess([img.convert("RGB")], cfg)
    assert torch.equal(got.pixel_values, same.pixel_values)


def test_inputs_of_every_kind_agree(tmp_path):
    import base64
    import io

    img = make("RGBA", 33, 20, seed=5)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    path = tmp_path / "x.png"
    path.write_bytes(buf.getvalue())
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    arr = np.asarray(img)
    cfg = PreprocessConfig.k3_small()
    outs = [reference.preprocess([src], cfg) for src in
            (img, path, str(path), buf.getvalue(), url, arr, torch.from_numpy(arr.copy()))]
    for o in outs[1:]:
        assert torch.equal(o.pixel_values, outs[0].pixel_values)
    grey = np.asarray(make("L", 9, 7, seed=6))
    assert reference.preprocess([grey], cfg).grid_thws.tolist() == [[1, 2, 2]]
