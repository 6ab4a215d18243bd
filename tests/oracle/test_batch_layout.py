"""A batch's values in another axis order (issue 43): PaddleFormers 1.2's patchify swaps two axes
of the batch tensor, so each row mixes images. The order is measured from the data and named; the
expected names are derived by hand below, not read off the code under test."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.oracle.diagnosis.attribution import attribute
from kimi_oracle.oracle.diagnosis.batch_layout import describe
from kimi_oracle.pipelines.reference import preprocess

CONFIG = PreprocessConfig.profile("k25")


def _swapped_batch(images: list[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference's rows rebuilt as a (B, C, H, W) tensor, cut as [B, C, gh, p, gw, p], axes 0 and
    2 swapped (what `Tensor.transpose(0, 2, 4, 1, 3, 5)` does in paddle 3.3: a two-axis swap), read
    as (N, C, p, p): the axes become (gh, C, B, py, gw, px), i.e. (gy, c, image, py, gx, px)."""
    ref = preprocess(images, CONFIG)
    p = CONFIG.patch_size
    t, gh, gw = (int(v) for v in ref.grid_thws[0])
    chw = ref.pixel_values.reshape(len(images), gh, gw, 3, p, p).permute(0, 3, 1, 4, 2, 5)  # B, C, gh, p, gw, p
    swapped = chw.transpose(0, 2).contiguous().reshape(-1, 3, p, p)
    return swapped, torch.as_tensor(ref.grid_thws)


def _images(n: int) -> list[Image.Image]:
    rng = np.random.default_rng(7)
    return [Image.fromarray(rng.integers(0, 256, (30, 44, 3), dtype=np.uint8)) for _ in range(n)]


def test_a_batch_with_two_axes_swapped_is_named_by_its_measured_order():
    images = _images(3)
    out = _swapped_batch(images)
    for k in range(3):
        att = attribute(images, CONFIG, out, image=k).to_dict()
        assert att["variants"] == ["patch-order/batch-axes-gy,c,image,py,gx,px"], att
        assert att["explanation"] == "explained"
    text = describe("batch-axes-gy,c,image,py,gx,px")
    assert "(gy, c, image, py, gx, px)" in text and "(image, gy, gx, c, py, px)" in text and "mixes images" in text


def test_one_image_so_swapped_is_a_per_image_axis_order():
    # B = 1: (gh, C, 1, py, gw, px) is (gy, c, py, gx, px), i.e. axes 0,4,1,2,3 of (gy, py, gx, px, c).
    images = _images(1)
    att = attribute(images, CONFIG, _swapped_batch(images)).to_dict()
    assert att["variants"] == ["patch-order/axes-0,4,1,2,3"] and att["explanation"] == "explained"
    assert "(gy, c, py, gx, px)" in describe("axes-0,4,1,2,3")


def test_the_checkpoints_own_batch_is_not_a_layout_finding():
    images = _images(2)
    ref = preprocess(images, CONFIG)
    att = attribute(images, CONFIG, (ref.pixel_values, torch.as_tensor(ref.grid_thws))).to_dict()
    assert not att.get("variants")


def _per_image_swapped(images: list[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image's rows in axis order (gy, c, py, gx, px): the batch-free defect, image by image."""
    ref = preprocess(images, CONFIG)
    p = CONFIG.patch_size
    _, gh, gw = (int(v) for v in ref.grid_thws[0])
    rows = ref.pixel_values.reshape(len(images), gh, gw, 3, p, p)  # image, gy, gx, c, py, px
    return rows.permute(0, 1, 3, 4, 2, 5).contiguous().reshape(-1, 3, p, p), torch.as_tensor(ref.grid_thws)


def test_a_per_image_order_in_a_batch_is_not_called_a_batch_order():
    images = _images(3)
    for k in range(3):
        att = attribute(images, CONFIG, _per_image_swapped(images), image=k).to_dict()
        assert att["variants"] == ["patch-order/axes-0,4,1,2,3"], att


def test_flat_images_with_another_defect_get_no_batch_order():
    # Flat gray images a few levels off (a pad/normalization-like change, not an order): many
    # orders match a flat image, none mends what the shift leaves apart.
    images = [Image.new("RGB", (44, 30), (v, v, v)) for v in (100, 101, 102)]
    ref = preprocess(images, CONFIG)
    shifted = ref.pixel_values + 3.0 / 255 / CONFIG.image_std[0]
    att = attribute(images, CONFIG, (shifted, torch.as_tensor(ref.grid_thws)), image=1).to_dict()
    assert not any(v.startswith("patch-order/batch-axes") for v in att.get("variants") or []), att
