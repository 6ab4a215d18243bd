"""Fitted variants and localization: constants measured from the outputs, differences located.

Every candidate here is made by hand from the reference's own output (a pad overwritten with
another level, the values re-normalized in NumPy with other statistics, the patches reordered by
a known permutation), so the expected names come from the construction, not from the fit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import AssumptionError
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.diagnosis import attribute, diagnosis_holds, finding_diagnosis, steps_for
from kimi_oracle.oracle.diagnosis.catalogue import parse_assumption
from kimi_oracle.oracle.diagnosis.regions import histogram, locate
from kimi_oracle.oracle.checks import compare
from kimi_oracle.pipelines import reference

K3 = PreprocessConfig.k3()


def _img(w=61, h=45, mode="RGB", alpha="opaque", seed=3):
    return make_image(CaseParams(w, h, mode, alpha, "noise", seed))


def _laid(values: torch.Tensor, p, patch: int) -> np.ndarray:
    # (N, 3, p, p) -> (hp, wp, 3), written out with torch's own view/permute (not regions.canvas)
    _, gh, gw = p.grid_thw
    return values.view(gh, gw, 3, patch, patch).permute(0, 3, 1, 4, 2).reshape(gh * patch, gw * patch, 3).numpy()


def _cut(laid: np.ndarray, p, patch: int) -> torch.Tensor:
    _, gh, gw = p.grid_thw
    t = torch.from_numpy(np.ascontiguousarray(laid)).view(gh, patch, gw, patch, 3)
    return t.permute(0, 2, 4, 1, 3).reshape(gh * gw, 3, patch, patch).contiguous()


def _with_pad(img, config, fill: np.ndarray) -> tuple[PreprocessResult, PreprocessResult]:
    expected = reference.preprocess([img], config)
    p = plan(img.width, img.height, config)
    laid = _laid(expected.pixel_values, p, config.patch_size).copy()
    laid[p.new_h:, :] = fill
    laid[:, p.new_w:] = fill
    return expected, PreprocessResult(_cut(laid, p, config.patch_size), expected.grid_thws)


def test_a_pad_of_any_level_is_measured_and_named():
    img = _img()
    lut = reference.normalization_lut(K3)
    for level in (1, 7, 128):
        expected, actual = _with_pad(img, K3, lut[:, level])
        found = attribute([img], K3, actual, expected=expected)
        assert found.explanation == "explained" and found.variants == (f"pad/level-{level}",)
        assert found.where[0]["confined_to"][0] == "pad"
    expected, actual = _with_pad(img, K3, np.array([lut[0, 3], lut[1, 9], lut[2, 27]]))
    assert attribute([img], K3, actual, expected=expected).variants == ("pad/levels-3,9,27",)


def test_a_pad_that_is_no_level_is_named_by_its_value():
    img = _img()
    expected, actual = _with_pad(img, K3, np.float32([0.25, 0.25, 0.25]))
    found = attribute([img], K3, actual, expected=expected)
    assert found.explanation == "explained" and found.variants == ("pad/normalized-0.25",)


def test_a_fitted_pad_is_applied_again_from_its_name():
    img = _img()
    lut = reference.normalization_lut(K3)
    expected, actual = _with_pad(img, K3, lut[:, 1])
    verdict = compare(expected, actual, K3, sizes=[img.size])
    fields = finding_diagnosis("pixel_mismatch", verdict.stats, [img], K3, expected=expected, actual=actual)
    assert fields["root_causes"] == ["pad"]
    assert diagnosis_holds(fields, [img], K3, actual, expected, 0)
    steps = steps_for(K3, [("pad", "level-1")])
    p = plan(img.width, img.height, K3)
    assert torch.equal(steps.patches(steps.resized_rgb(img, K3, p), K3, p), actual.pixel_values)
    assert parse_assumption("pad=level-7") == ("pad", "level-7")
    with pytest.raises(AssumptionError):
        parse_assumption("pad=level-300")


def _renormalized(img, config, mean, std, divide: bool) -> tuple[PreprocessResult, PreprocessResult]:
    # the reference's resized levels normalized in NumPy with other statistics
    expected = reference.preprocess([img], config)
    p = plan(img.width, img.height, config)
    laid = _laid(expected.pixel_values, p, config.patch_size)
    m0, s0 = np.array(config.image_mean), np.array(config.image_std)
    levels = np.rint((laid.astype(np.float64) * s0 + m0) * 255.0).astype(np.uint8)
    if divide:  # torchvision's order in float32: (x/255 - mean) / std
        x = levels.astype(np.float32) / np.float32(255)
        out = (x - np.float32(mean)) / np.float32(std)
    else:  # the checkpoint's: float32 x/255, then float64 steps stored as float32
        x = (levels / 255.0).astype(np.float32)
        x -= np.array(mean)
        x *= 1.0 / np.array(std)
        out = x
    return expected, PreprocessResult(_cut(out.astype(np.float32), p, config.patch_size), expected.grid_thws)


def test_normalization_constants_are_solved_from_the_outputs():
    img = _img(40, 30)
    mean = (0.48, 0.46, 0.41)
    expected, actual = _renormalized(img, K3, mean, tuple(K3.image_std), divide=False)
    found = attribute([img], K3, actual, expected=expected)
    assert found.explanation == "explained"
    assert found.variants == ("normalize-float/mean-0.48,0.46,0.41",)
    expected, actual = _renormalized(img, K3, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), divide=True)
    found = attribute([img], K3, actual, expected=expected)
    assert found.explanation == "explained"
    assert found.variants == ("normalize-float/mean-0.485,0.456,0.406-std-0.229,0.224,0.225-divide",)


def test_a_permutation_of_the_patches_is_fitted():
    img = _img()
    expected = reference.preprocess([img], K3)
    n = expected.pixel_values.shape[0]
    pi = [(3 * k + 1) % n for k in range(n)] if n % 3 else list(range(1, n)) + [0]
    actual = PreprocessResult(expected.pixel_values[pi].contiguous(), expected.grid_thws)
    found = attribute([img], K3, actual, expected=expected)
    assert found.explanation == "explained"
    assert found.variants == ("patch-order/permuted-" + ",".join(map(str, pi)),)


def test_a_swap_of_the_patchify_axes_is_fitted():
    img = _img()
    config = K3
    expected = reference.preprocess([img], config)
    p = plan(img.width, img.height, config)
    _, gh, gw = p.grid_thw
    ps = config.patch_size
    laid = torch.from_numpy(_laid(expected.pixel_values, p, ps).copy()).view(gh, ps, gw, ps, 3)
    # (gh, gw, C, px, py) but with the grid walked columns first: axes (2, 0, 4, 3, 1)
    actual = laid.permute(2, 0, 4, 3, 1).reshape(gh * gw, 3, ps, ps).contiguous()
    found = attribute([img], config, PreprocessResult(actual, expected.grid_thws), expected=expected)
    assert found.explanation == "explained" and found.variants == ("patch-order/axes-2,0,4,3,1",)


def test_locate_names_the_regions_of_a_difference():
    img = _img()
    p = plan(img.width, img.height, K3)
    lut = reference.normalization_lut(K3)
    expected, actual = _with_pad(img, K3, lut[:, 1])
    w = locate(actual.pixel_values, expected.pixel_values, img, p, K3)
    pad_values = 3 * ((p.new_h + p.pad_h) * (p.new_w + p.pad_w) - p.new_h * p.new_w)
    assert w.differing == pad_values and w.confined_to == ["pad"] and w.channels == [0, 1, 2]
    assert w.histogram == {"1": pad_values} and w.max_levels == pytest.approx(1.0, abs=1e-4)
    # one value in the middle of the image, green only
    laid = _laid(expected.pixel_values, p, K3.patch_size).copy()
    laid[p.new_h // 2, p.new_w // 2, 1] = lut[1, 255]
    inner = locate(_cut(laid, p, K3.patch_size), expected.pixel_values, img, p, K3)
    assert inner.differing == 1 and inner.channels == [1] and inner.patches == 1 and inner.positions == 1
    assert inner.confined_to == ["image", "interior"] and "G only" in inner.summary()
    # the top-left corner: the border band
    laid[p.new_h // 2, p.new_w // 2, 1] = expected.pixel_values.flatten()[0]
    laid = _laid(expected.pixel_values, p, K3.patch_size).copy()
    laid[0, 0, 2] += 1.0
    assert locate(_cut(laid, p, K3.patch_size), expected.pixel_values, img, p, K3).confined_to == ["image", "border"]


def test_alpha_regions_are_located():
    img = make_image(CaseParams(28, 28, "RGBA", "transparent", "noise", 1))
    p = plan(28, 28, PreprocessConfig.k3())
    expected = reference.preprocess([img], K3)
    actual = expected.pixel_values.clone()
    actual[0, 0, 5, 5] += 0.5
    w = locate(actual, expected.pixel_values, img, p, K3)
    assert "transparent" in w.confined_to  # every pixel of a fully transparent image


def test_histogram_bins_by_levels():
    assert histogram(np.array([0.5, -1.0, 3.0, 20.0, 255.0, np.inf])) == {
        "<1": 1, "1": 1, "2-3": 1, "16-63": 1, "64-255": 1, ">=256": 1}


def test_a_fitted_name_with_a_negative_constant_parses_back():
    from kimi_oracle.oracle.diagnosis.fitted import parse_normalize

    name = "mean--0.25,0.5,0.75-std-0.5,0.25,2"
    parsed = parse_normalize(name, K3)
    assert parsed is not None and parsed[0] == name


def test_an_explanation_is_confirmed_on_a_larger_case_only_when_it_reproduces_it():
    # a 1x1 grey image cannot tell two arithmetics apart; a noise image can
    from kimi_oracle.oracle.diagnosis.attribution import reproduces

    big = _img(40, 30)
    expected, actual = _renormalized(big, K3, (0.48, 0.46, 0.41), tuple(K3.image_std), divide=True)
    found = attribute([big], K3, actual, expected=expected)
    assert found.explanation == "explained"
    assert reproduces(list(found.variants), [big], K3, actual, 0) is True
    assert reproduces(["normalize-float/mean-0.48,0.46,0.41"], [big], K3, actual, 0) is False  # the table's arithmetic
    assert reproduces(["decoder/by-elimination"], [big], K3, actual, 0) is None
