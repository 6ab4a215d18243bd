"""Fitted clamps and pad offsets (issue 41, item 2): a clip of the levels and the image k pixels
into its canvas, measured from the outputs and named `normalize-float/clamp-LO,HI` and
`pad/offset-DX,DY`.

Each candidate is built by hand: the image's own RGB levels (it is not resized) clipped with
NumPy and looked up in the checkpoint's table, or the reference's canvas with its image moved; the
expected names come from that construction.
"""

from __future__ import annotations

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.diagnosis import assumed_steps, attribute
from kimi_oracle.oracle.diagnosis.attribution import reproduces
from kimi_oracle.oracle.diagnosis.catalogue import parse_assumption
from kimi_oracle.pipelines import reference

K3 = PreprocessConfig.k3()
PATCH = K3.patch_size


def _img(seed=3):
    return make_image(CaseParams(40, 30, "RGB", "opaque", "noise", seed))  # not resized under K3


def _cut(laid: np.ndarray, p) -> torch.Tensor:
    _, gh, gw = p.grid_thw
    t = torch.from_numpy(np.ascontiguousarray(laid, dtype=np.float32)).view(gh, PATCH, gw, PATCH, 3)
    return t.permute(0, 2, 4, 1, 3).reshape(gh * gw, 3, PATCH, PATCH).contiguous()


def _from_levels(levels: np.ndarray, p) -> torch.Tensor:
    lut = reference.normalization_lut(K3)
    return _cut(np.stack([lut[c][levels[..., c]] for c in range(3)], axis=-1), p)


def _canvas_levels(img, p, dx=0, dy=0, fill=0) -> np.ndarray:
    levels = np.full((p.new_h + p.pad_h, p.new_w + p.pad_w, 3), fill, dtype=np.uint8)
    levels[dy: dy + p.new_h, dx: dx + p.new_w] = np.asarray(img)
    return levels


def found_grid(img):
    return reference.preprocess([img], K3).grid_thws


def _explained(img, actual):
    expected = reference.preprocess([img], K3)
    assert torch.equal(_from_levels(_canvas_levels(img, plan(40, 30, K3)), plan(40, 30, K3)), expected.pixel_values)
    return attribute([img], K3, PreprocessResult(actual, expected.grid_thws), expected=expected)


def test_a_clip_of_the_levels_is_measured():
    img, p = _img(), plan(40, 30, K3)
    actual = _from_levels(np.clip(_canvas_levels(img, p), 16, 235), p)
    found = _explained(img, actual)
    assert found.explanation == "explained" and found.variants == ("normalize-float/clamp-16,235",)
    # the name parses back and reproduces the candidate; --assume takes it
    assert reproduces(["normalize-float/clamp-16,235"], [img], K3, PreprocessResult(actual, found_grid(img)), 0)
    assert parse_assumption("normalize-float=clamp-16,235") == ("normalize-float", "clamp-16,235")
    steps = assumed_steps(K3, [("normalize-float", "clamp-16,235")])
    assert torch.equal(reference.preprocess([img], K3, steps=steps).pixel_values, actual)
    # one bound only
    found = _explained(img, _from_levels(np.minimum(_canvas_levels(img, p), 250), p))
    assert found.variants == ("normalize-float/clamp-0,250",)


def test_the_image_k_pixels_into_its_canvas_is_measured():
    img, p = _img(), plan(40, 30, K3)
    assert (p.pad_w, p.pad_h) == (16, 26)  # 40x30 on a 56x56 canvas (28-pixel cells), by hand
    actual = _from_levels(_canvas_levels(img, p, dx=2, dy=1), p)
    found = _explained(img, actual)
    assert found.explanation == "explained" and found.variants == ("pad/offset-2,1",)
    steps = assumed_steps(K3, [parse_assumption("pad=offset-2,1")])
    assert torch.equal(reference.preprocess([img], K3, steps=steps).pixel_values, actual)
    # moved and filled with another level: both measured in one name
    actual = _from_levels(_canvas_levels(img, p, dx=3, dy=0, fill=255), p)
    found = _explained(img, actual)
    assert found.variants == ("pad/offset-3,0-level-255",)
    assert reproduces(list(found.variants), [img], K3, PreprocessResult(actual, found_grid(img)), 0)
    # the whole padding on the top and left is the catalogue's own name
    found = _explained(img, _from_levels(_canvas_levels(img, p, dx=16, dy=26), p))
    assert found.variants == ("pad/pad-top-left",)


def test_an_exact_tie_goes_to_the_enumerated_variant():
    """A transparent 1x1 image on K3's chessboard (8-pixel squares, grey 180 on odd parity, white
    255 at the top left, spec section "transparent_bg_config"): an engine that flips the phase
    gives 180 there. A clamp at 180 reproduces that case as well; the flipped phase, the
    catalogue's own variant with no measured parameter, is the name."""
    from PIL import Image

    img = Image.new("RGBA", (1, 1), (10, 200, 30, 0))
    p = plan(1, 1, K3)
    levels = np.zeros((p.new_h + p.pad_h, p.new_w + p.pad_w, 3), dtype=np.uint8)
    levels[0, 0] = 255
    assert torch.equal(_from_levels(levels, p), reference.preprocess([img], K3).pixel_values)
    levels[0, 0] = 180
    actual = _from_levels(levels, p)
    assert reproduces(["normalize-float/clamp-0,180"], [img], K3, PreprocessResult(actual, found_grid(img)), 0)
    found = attribute([img], K3, PreprocessResult(actual, found_grid(img)), expected=reference.preprocess([img], K3))
    assert found.explanation == "explained" and found.variants == ("background/chessboard-phase-flipped",)


def _board_levels(p, square, first, other, opaque=None):
    """The canvas by hand: a board of `square`-pixel squares (`first` on the top left and its
    parity), under the opaque pixels their own levels, level 0 in the padding."""
    levels = np.zeros((p.new_h + p.pad_h, p.new_w + p.pad_w, 3), dtype=np.uint8)
    ys, xs = np.mgrid[: p.new_h, : p.new_w]
    levels[: p.new_h, : p.new_w] = np.where((((ys // square) + (xs // square)) % 2 == 0)[..., None], first, other)
    if opaque is not None:
        levels[: opaque.shape[0], : opaque.shape[1]] = opaque
    return levels


def test_the_background_the_candidate_composited_on_is_measured():
    """A 40x30 RGBA image (not resized under K3), its left 12 columns opaque noise, the rest fully
    transparent: K3 composites it after the resize on 8-pixel squares, 255 on the top left and 180
    on the others (spec, transparent_bg_config), which the hand-built canvas matches first."""
    from PIL import Image

    rgb = np.asarray(_img(5))[:, :12]
    rgba = np.zeros((30, 40, 4), dtype=np.uint8)
    rgba[:, :12, :3], rgba[:, :12, 3] = rgb, 255
    img, p = Image.fromarray(rgba, "RGBA"), plan(40, 30, K3)
    assert torch.equal(_from_levels(_board_levels(p, 8, 255, 180, rgb), p), reference.preprocess([img], K3).pixel_values)
    for square, first, other, name in ((4, 250, 100, "background/chessboard-4-250,100"),
                                       (8, 255, 190, "background/chessboard-8-255,190"),
                                       (1, 77, 77, "background/level-77")):
        actual = _from_levels(_board_levels(p, square, first, other, rgb), p)
        found = attribute([img], K3, PreprocessResult(actual, found_grid(img)), expected=reference.preprocess([img], K3))
        assert found.explanation == "explained" and found.variants == (name,), (name, found.variants)
        steps = assumed_steps(K3, [parse_assumption(name.replace("/", "=", 1))])
        assert torch.equal(reference.preprocess([img], K3, steps=steps).pixel_values, actual)
    # the flipped phase is the catalogue's own name (an exact tie with chessboard-8-180,255), as is
    # grey 200 (chessboard-gray-200, the checkpoint class default)
    found = attribute([img], K3, PreprocessResult(_from_levels(_board_levels(p, 8, 180, 255, rgb), p), found_grid(img)),
                      expected=reference.preprocess([img], K3))
    assert found.variants == ("background/chessboard-phase-flipped",)
    found = attribute([img], K3, PreprocessResult(_from_levels(_board_levels(p, 8, 255, 200, rgb), p), found_grid(img)),
                      expected=reference.preprocess([img], K3))
    assert found.variants == ("background/chessboard-gray-200",)
