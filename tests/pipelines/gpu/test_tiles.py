"""Tile boundaries under test: small tiles, so that small images cross them in both axes.

The interpreter's default tiles hold a whole test image, so no boundary would ever be
crossed. Here the tiles are shrunk instead of the images grown (the interpreter's cost is
per program): every storage kind, both pass orders, both fill stages, and NEAREST run with
tiles whose last row and column of tiles is partial, and still equal the reference byte for
byte. The crossing itself is asserted from the geometry, independently of the pipeline.
"""

from __future__ import annotations

import dataclasses

import pytest
from gpu_testlib import assert_same, full_range, gen, i_keyed, k3, rgba_hidden

from kimi_oracle.core.geometry import plan
from kimi_oracle.pipelines import reference
from kimi_oracle.pipelines.gpu import preprocess
from kimi_oracle.pipelines.gpu import resample as rs
from kimi_oracle.pipelines.gpu.pipeline import Tiles, drawn_tiles

P = 14
# pass tiles 8 x 16 pixels, tail programs of one patch each (128 pixels ask for less than one
# 14 x 14 patch: `tail_block` gives one), convert blocks of 64 pixels.
SMALL = Tiles(pass_rows=8, pass_cols=16, tail=128, convert=64, num_warps=4)
LIMIT = 2


def _wide(mode_image):
    return mode_image(45, 37)  # resized to 25 x 21 (h, then v): intermediate 37 x 25, grid 2 x 2


def _tall(mode_image):
    return mode_image(24, 70)  # resized to 15 x 44 (v, then h): intermediate 44 x 24, grid 4 x 2


KINDS = {
    "u8 RGBA": lambda w, h: rgba_hidden(w, h, seed=w),
    "u16 I;16": lambda w, h: full_range(w, h, "I;16", seed=w),
    "i32 I key": lambda w, h: i_keyed(w, h, key=261, seed=w),
    "f32 F": lambda w, h: full_range(w, h, "F", seed=w),
}


def _crossing(img, config, tiles: Tiles) -> dict[str, bool]:
    """Which tile boundaries this image crosses, from the plan and Pillow's pass order."""
    p = plan(img.width, img.height, config)
    order = rs.pass_order(img.width, img.height, p.new_w, p.new_h)
    mid = (img.height, p.new_w) if order[:1] == ("h",) else (p.new_h, img.width)

    def partial(extent, tile):
        return extent > tile and extent % tile != 0

    return {"order": order, "pass rows": partial(mid[0], tiles.pass_rows),
            "pass cols": partial(mid[1], tiles.pass_cols),
            "tail": p.grid_thw[2] > max(1, (tiles.tail // 16) // P),  # programs split a patch row
            "patch rows": p.grid_thw[1] >= 2, "patch cols": p.grid_thw[2] >= 2,
            "convert": partial(img.width * img.height, tiles.convert) and tiles.convert % img.width != 0}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_storage_kind_crosses_tiles_in_both_axes(kind, gpu_kwargs):
    cfg = k3(LIMIT)
    images = [_wide(KINDS[kind]), _tall(KINDS[kind])]
    crossed = [_crossing(img, cfg, SMALL) for img in images]
    assert [c["order"] for c in crossed] == [("h", "v"), ("v", "h")]
    for c in crossed:
        assert all(c[k] for k in ("pass rows", "pass cols", "tail", "patch rows", "patch cols")), c
    got = preprocess(images, cfg, tiles=SMALL, **gpu_kwargs)
    assert_same(got, reference.preprocess(images, cfg), f"{kind} small tiles")


def test_fill_before_resize_and_nearest_cross_tiles(gpu_kwargs):
    # before_resize: the fill at the source size (convert kernel, blocks that end mid-row)
    # then RGB passes; NEAREST ("P"): the tail's gather across its blocks.
    cfg = k3(LIMIT, stage="before_resize")
    images = [_wide(KINDS["u8 RGBA"]), _tall(KINDS["u16 I;16"])]
    assert all(_crossing(img, cfg, SMALL)["convert"] for img in images)
    assert_same(preprocess(images, cfg, tiles=SMALL, **gpu_kwargs), reference.preprocess(images, cfg),
                "before_resize small tiles")
    palette = [gen(45, 37, "P", "key", seed=3)]
    assert plan(45, 37, k3(LIMIT)).new_w != 45
    assert_same(preprocess(palette, k3(LIMIT), tiles=SMALL, **gpu_kwargs),
                reference.preprocess(palette, k3(LIMIT)), "nearest small tiles")


def _staged_tiles(img, config, tiles: Tiles) -> tuple[int, int]:
    """(tiles staged, tiles read tap by tap) of the horizontal pass of an 8-bit RGBA image:
    staged when every tap of the tile's columns (first tap of its first column to the end of
    its last column's, from Pillow's support, `resample.bicubic_coeffs`) fits the window with
    the worst alignment slack (15 bytes)."""
    p = plan(img.width, img.height, config)
    xmin, count, _ = rs.bicubic_coeffs(img.width, p.new_w)
    staged = tapped = 0
    for x0 in range(0, p.new_w, tiles.pass_cols):
        last = min(x0 + tiles.pass_cols, p.new_w) - 1
        span = (int(xmin[last]) + int(count[last]) - int(xmin[x0])) * 4 + 15
        staged += span <= tiles.pass_window
        tapped += span > tiles.pass_window
    return staged, tapped


def test_the_horizontal_pass_stages_its_rows_or_reads_tap_by_tap_exactly(gpu_kwargs):
    # Both paths of `kernels._horizontal` in the first pass: a window that holds every tile's
    # taps, and one that holds none (tap by tap); a 2-patch tail (the tall image's second
    # pass is the tail's horizontal one, staged in its own window).
    cfg = k3(LIMIT)
    images = [_wide(KINDS["u8 RGBA"]), _wide(KINDS["f32 F"]), _tall(KINDS["u8 RGBA"])]
    expected = reference.preprocess(images, cfg)
    wide = dataclasses.replace(SMALL, pass_window=256, tail=512)
    narrow = dataclasses.replace(SMALL, pass_window=16)
    assert _staged_tiles(images[0], cfg, wide) == (2, 0)
    assert _staged_tiles(images[0], cfg, narrow) == (0, 2)
    for tiles in (wide, narrow):
        assert_same(preprocess(images, cfg, tiles=tiles, **gpu_kwargs), expected, f"window {tiles.pass_window}")


def test_tiles_must_be_powers_of_two(gpu_kwargs):
    from kimi_oracle.core.errors import InputError

    with pytest.raises(InputError, match="pass_cols=12"):
        preprocess([gen(8, 8, "RGB")], k3(), tiles=Tiles(pass_cols=12), **gpu_kwargs)
    with pytest.raises(InputError, match="pass_window=8 must be at least 16 bytes"):
        preprocess([gen(8, 8, "RGB")], k3(), tiles=Tiles(pass_window=8), **gpu_kwargs)


def test_drawn_tiles_are_reproducible_and_bounded():
    cfg = k3(16)
    batches = [[gen(w, h, "RGB", seed=w)] for w, h in [(45, 37), (46, 37), (24, 70), (90, 1), (300, 200)]]
    draws = [drawn_tiles(b, cfg) for b in batches]
    assert draws == [drawn_tiles(b, cfg) for b in batches]  # same batch, same tiles
    assert len({(d.pass_rows, d.pass_cols, d.tail) for d in draws}) > 1  # they do vary
    for batch, d in zip(batches, draws):
        (img,) = batch
        # at most 4 tiles per extent: a bounded interpreter cost
        assert -(-img.height // d.pass_rows) <= 4 and -(-img.width // d.pass_cols) <= 4, d
        assert -(-img.width * img.height // d.convert) <= 4, d


def test_the_gpu_fuzz_candidate_runs_with_drawn_tiles(monkeypatch, gpu_kwargs):
    from kimi_oracle.oracle.candidates import load_candidate
    from kimi_oracle.pipelines.gpu import pipeline

    seen = []
    real = pipeline.preprocess
    monkeypatch.setattr(pipeline, "preprocess", lambda images, config, **kw: (seen.append(kw.get("tiles")),
                                                                               real(images, config, **kw))[1])
    images, cfg = [_wide(KINDS["u8 RGBA"])], k3(LIMIT)
    got = load_candidate("gpu")(images, cfg)
    assert_same(got, reference.preprocess(images, cfg), "gpu candidate")
    expected = drawn_tiles(images, cfg) if gpu_kwargs["device"] == "cpu" else None
    assert seen == [expected]
