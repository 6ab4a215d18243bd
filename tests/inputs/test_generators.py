"""Generators: deterministic images for every mode and alpha pattern, size classes, configs."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.images import has_alpha
from kimi_oracle.inputs.generators import (
    ALPHA_PATTERNS,
    CONTENTS,
    MODES,
    SIZE_CLASSES,
    CaseParams,
    FuzzCase,
    alpha_array,
    alpha_patterns_for,
    config_variants,
    images_equal,
    make_image,
    pass_order_sizes,
    size_catalogue,
    vary_config,
)
from kimi_oracle.pipelines import reference
from kimi_oracle.results.report import encode_input, load_input

ISSUE_MODES = {"RGB", "RGBA", "LA", "L", "P", "1", "CMYK", "I;16", "I;16B", "I", "F", "LAB", "PA"}


def test_modes_cover_the_issue_list():
    assert ISSUE_MODES <= set(MODES)
    # "P with transparency" is P with a non-opaque pattern; it must be expressible.
    assert "checker" in alpha_patterns_for("P") and "key" in alpha_patterns_for("P")


def test_case_params_round_trip_and_validation():
    p = CaseParams(37, 5, "RGBA", "checker_shifted", "edges", 12345, square=3)
    assert CaseParams.from_dict(p.to_dict()) == p
    with pytest.raises(ValueError):
        CaseParams(0, 5)
    with pytest.raises(ValueError):
        CaseParams(5, 5, mode="XYZ")
    with pytest.raises(ValueError):
        CaseParams(5, 5, mode="CMYK", alpha="checker")  # CMYK has no alpha
    with pytest.raises(ValueError):
        CaseParams.from_dict({"width": 3, "height": 3, "colour": "red"})


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_pattern_and_content_builds_deterministically(mode):
    cfg = PreprocessConfig.k3_small()
    for alpha in alpha_patterns_for(mode):
        for content in CONTENTS:
            params = CaseParams(31, 17, mode, alpha, content, seed=7)
            img = make_image(params)
            assert img.mode == mode and img.size == (31, 17)
            again = make_image(params)
            assert images_equal(img, again)
            if alpha != "opaque":
                assert has_alpha(img), (mode, alpha)
            # The reference must accept every generated image.
            reference.preprocess([img], cfg)


def test_seed_changes_noise_but_not_shape():
    a = make_image(CaseParams(20, 10, "RGB", content="noise", seed=1))
    b = make_image(CaseParams(20, 10, "RGB", content="noise", seed=2))
    assert a.size == b.size and a.tobytes() != b.tobytes()


def test_changing_mode_keeps_the_colour_content():
    # Separate random streams: shrinking the mode must not change the content.
    rgb = np.asarray(make_image(CaseParams(9, 7, "RGB", content="noise", seed=5)))
    rgba = np.asarray(make_image(CaseParams(9, 7, "RGBA", "random", content="noise", seed=5)))
    assert np.array_equal(rgb, rgba[..., :3])


def test_checker_alpha_is_aligned_with_the_checkpoint_chessboard():
    bg = TransparentBgConfig(pattern="chessboard", chessboard_square_size=4, chessboard_square_on_top_left=True,
                             chessboard_white_value=255, chessboard_gray_value=10)
    board = reference.background(bg, 12, 16)[..., 0]
    aligned = alpha_array(CaseParams(16, 12, "RGBA", "checker", seed=0, square=4))
    assert np.array_equal(aligned == 255, board == 255)
    shifted = alpha_array(CaseParams(16, 12, "RGBA", "checker_shifted", seed=0, square=4))
    assert not np.array_equal(shifted == 255, board == 255)
    assert set(np.unique(shifted)) == {0, 255}


def test_alpha_patterns_have_their_shapes():
    def a(pattern):
        return alpha_array(CaseParams(10, 6, "RGBA", pattern, seed=3))

    assert (a("opaque") == 255).all()
    assert (a("transparent") == 0).all()
    assert (a("single_pixel") == 255).sum() == 1 and (a("single_pixel") == 0).sum() == 59
    g = a("gradient").astype(int)
    assert g[0, 0] == 0 and g[-1, -1] == 255 and (np.diff(g, axis=1) >= 0).all()
    assert len(np.unique(a("random"))) > 20


def test_palette_transparency_reproduces_binary_alpha_exactly():
    params = CaseParams(16, 16, "P", "checker", "noise", seed=1, square=4)
    img = make_image(params)
    alpha = np.asarray(img.convert("RGBA"))[..., 3]
    assert np.array_equal(alpha, alpha_array(params))


def test_colour_key_transparency():
    img = make_image(CaseParams(8, 8, "L", "key", "noise", seed=4))
    key = img.info["transparency"]
    alpha = np.asarray(img.convert("RGBA"))[..., 3]
    assert np.array_equal(alpha == 0, np.asarray(img) == key)


@pytest.mark.parametrize("mode", MODES)
def test_input_files_round_trip_exactly(mode, tmp_path):
    for alpha in alpha_patterns_for(mode)[:3] + (("key",) if "key" in alpha_patterns_for(mode) else ()):
        img = make_image(CaseParams(13, 9, mode, alpha, "noise", seed=2))
        ext, data = encode_input(img)
        if mode in ("RGB", "RGBA", "LA", "L", "P", "1"):
            assert ext == "png", (mode, alpha)
        path = tmp_path / f"x.{ext}"
        path.write_bytes(data)
        back = load_input(path)
        assert images_equal(img, back), (mode, alpha, ext)
        cfg = PreprocessConfig.k3_small()
        a = reference.preprocess([img], cfg)
        b = reference.preprocess([back], cfg)
        assert np.array_equal(a.pixel_values.numpy().view(np.uint32), b.pixel_values.numpy().view(np.uint32))


def test_size_catalogue_is_deterministic_and_covers_every_class():
    for cfg in (PreprocessConfig.k3(), PreprocessConfig.k25(), PreprocessConfig.k3_small()):
        cat = size_catalogue(cfg)
        assert cat == size_catalogue(cfg)
        assert {c for _, _, c in cat} == set(SIZE_CLASSES)
        sizes = {(w, h) for w, h, _ in cat}
        assert len(sizes) == len(cat) > 2000
        for required in [(1, 1), (3, 2), (640, 480), (1920, 1080), (4032, 3024), (7680, 4320), (100000, 10)]:
            assert required in sizes
        assert any(w >= 100 * h for w, h in sizes) and any(h >= 100 * w for w, h in sizes)
        assert {27, 28, 29, 13, 14, 15, 4095, 4097} <= {w for w, _ in sizes}


@pytest.mark.parametrize("cfg", [PreprocessConfig.k3(), PreprocessConfig.k25(), PreprocessConfig.k3_small()],
                         ids=["k3", "k25", "k3-small"])
def test_pass_order_sizes_sit_on_the_boundary(cfg):
    sizes = pass_order_sizes(cfg)
    deltas = set()
    for w, h in sizes:
        p = plan(w, h, cfg)
        assert h > p.new_h
        d = (h - p.new_h) - 2 * (w - p.new_w)
        assert d in (-1, 0, 1)
        deltas.add(d)
    assert deltas == {-1, 0, 1}


def test_budget_and_side_cap_classes_straddle_the_thresholds():
    cfg = PreprocessConfig.k25()
    cat = size_catalogue(cfg)
    budget = [(w, h) for w, h, c in cat if c == "budget"]
    resized = [plan(w, h, cfg).new_w != w for w, h in budget]
    assert any(resized) and not all(resized)
    cap = cfg.patch_limit_on_one_side * cfg.patch_size
    side = [(w, h) for w, h, c in cat if c == "side_cap"]
    assert (cap, 1) in side and (cap + 1, 1) in side
    assert plan(cap, 1, cfg).new_w == cap and plan(cap + 1, 1, cfg).new_w == cap


def test_config_variations():
    k3 = PreprocessConfig.k3()
    v = vary_config(k3, in_patch_limit=8, background={"pattern": "white"})
    assert v.in_patch_limit == 8 and v.transparent_bg_config.pattern == "white"
    assert v.transparent_bg_config.chessboard_square_size == 8  # untouched fields kept
    assert PreprocessConfig.from_hf_json(v.to_hf_json()) == v
    variants = config_variants(k3)
    assert len(set(variants)) == len(variants)
    assert {c.fill_stage for c in variants} == {"before_resize", "after_resize"}
    assert {c.transparent_bg_config.pattern for c in variants} == {"white", "black", "gray", "chessboard"}
    assert all(c.patch_limit_on_one_side % c.merge_kernel_size == 0 for c in variants)
    assert all(c.transparent_bg_config is None for c in config_variants(PreprocessConfig.k25()))


def test_fuzz_case_round_trip():
    case = FuzzCase(vary_config(PreprocessConfig.k3(), in_patch_limit=4),
                    (CaseParams(5, 6, "P", "random"), CaseParams(40, 2)))
    back = FuzzCase.from_dict(case.to_dict())
    assert back == case
    assert back.config.name == case.config.name
