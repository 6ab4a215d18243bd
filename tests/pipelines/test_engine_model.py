"""The `sglang-0.5.23` engine model against the facts of SGLang 0.5.23's K3 deferred GPU path.

The expected values are computed here from the list of facts in issue 12 (item 4), written out
again with NumPy and Pillow wherever the fact does not name a torch operation: the plan from the
checkpoint's formula, the staging rule, the background, the composite, the normalization as one
rounding of the exact x·scale + bias, the padding and the patch layout. Only the resize uses
torch, because the fact is the torch call itself (`F.interpolate(bicubic, antialias=True)`), and
it runs here one image at a time, where the model batches. Nothing of the model's module is
called to build an expected value; bit-exact means `torch.equal`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import PlanError
from kimi_oracle.core.geometry import plan as checkpoint_plan
from kimi_oracle.inputs.generators import (
    CHECKER_SQUARES,
    CHESS_VALUES,
    CONTENTS,
    MODES,
    CaseParams,
    alpha_patterns_for,
    make_image,
    vary_config,
)
from kimi_oracle.oracle.candidates import load_candidate
from kimi_oracle.pipelines import eager, reference
from kimi_oracle.pipelines.engines import sglang_0_5_23 as model

K3 = PreprocessConfig.k3()
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


# ---------------------------------------------------------------------------------------------
# the facts, written out


def fact_plan(w: int, h: int, c: PreprocessConfig) -> dict:
    """The checkpoint's navit_resize_config, without the side assert (the engine's dict shape)."""
    p, m = c.patch_size, c.merge_kernel_size
    s1 = math.sqrt(c.in_patch_limit / (max(1.0, w // p) * max(1.0, h // p)))
    scale = min(1.0, s1, c.patch_limit_on_one_side * p / w, c.patch_limit_on_one_side * p / h)
    new_w = min(max(1, int(w * scale)), c.patch_limit_on_one_side * p)
    new_h = min(max(1, int(h * scale)), c.patch_limit_on_one_side * p)
    f = m * p
    return {"new_width": new_w, "new_height": new_h,
            "pad_width": (f - new_w % f) % f, "pad_height": (f - new_h % f) % f}


def fact_stage(img: Image.Image) -> np.ndarray:
    """uint8 (C, H, W): RGBA iff not "RGB" and ("A" band or a transparency entry), else RGB."""
    alpha = img.mode != "RGB" and ("A" in img.getbands() or "transparency" in img.info)
    hwc = np.asarray(img.convert("RGBA" if alpha else "RGB"))
    return np.ascontiguousarray(hwc.transpose(2, 0, 1))


def fact_resize(chw: np.ndarray, new_h: int, new_w: int) -> np.ndarray:
    """float32: resized (antialiased bicubic, rounded half to even, clamped) only if the size changes."""
    x = chw.astype(np.float32)
    if x.shape[1:] == (new_h, new_w):
        return x
    y = F.interpolate(torch.from_numpy(x)[None], size=(new_h, new_w), mode="bicubic", align_corners=False,
                      antialias=True)[0].numpy()
    return np.clip(np.rint(y), np.float32(0), np.float32(255))


def fact_background(bg: TransparentBgConfig, h: int, w: int) -> np.ndarray:
    """float32 (h, w): the chessboard (grey where parity == 1 if top-left else 0), or 255/0/128."""
    if bg.pattern == "chessboard":
        q = bg.chessboard_square_size
        parity = (np.arange(h)[:, None] // q + np.arange(w)[None, :] // q) % 2
        grey_where = 1 if bg.chessboard_square_on_top_left else 0
        return np.where(parity == grey_where, bg.chessboard_gray_value, bg.chessboard_white_value).astype(np.float32)
    return np.full((h, w), {"white": 255, "black": 0, "gray": 128}[bg.pattern], dtype=np.float32)


def fact_composite(x: np.ndarray, bg: TransparentBgConfig | None) -> np.ndarray:
    """After the resize: 4 channels composited (float32, clamped, floored), or alpha dropped."""
    if x.shape[0] == 3:
        return x
    if bg is None:
        return x[:3]
    a = np.clip(x[3:4] / np.float32(255.0), np.float32(0), np.float32(1))
    back = fact_background(bg, x.shape[1], x.shape[2])[None]
    return np.floor(np.clip(a * x[:3] + (np.float32(1.0) - a) * back, np.float32(0), np.float32(255)))


def fact_patches(x: np.ndarray, c: PreprocessConfig, pl: dict) -> np.ndarray:
    """Pad 0.0 bottom/right, one rounding of x·scale + bias (scale, bias: float64 → float32), patchify."""
    hp, wp = pl["new_height"] + pl["pad_height"], pl["new_width"] + pl["pad_width"]
    padded = np.zeros((3, hp, wp), dtype=np.float32)
    padded[:, : x.shape[1], : x.shape[2]] = x
    scale = np.array([1.0 / (255.0 * s) for s in c.image_std], dtype=np.float32)[:, None, None]
    bias = np.array([-m / s for m, s in zip(c.image_mean, c.image_std)], dtype=np.float32)[:, None, None]
    # x is an integer 0..255 and scale a float32: the product is exact in float64, and so is the
    # sum for these magnitudes, so casting once gives the single rounding of a fused multiply-add.
    values = (padded.astype(np.float64) * scale.astype(np.float64) + bias.astype(np.float64)).astype(np.float32)
    p = c.patch_size
    gh, gw = hp // p, wp // p
    # patch gy·gw + gx; inside a patch (C, py, px)
    return values.reshape(3, gh, p, gw, p).transpose(1, 3, 0, 2, 4).reshape(gh * gw, 3, p, p)


def fact_result(images: list[Image.Image], c: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
    rows, grids = [], []
    for img in images:
        pl = fact_plan(img.width, img.height, c)
        x = fact_composite(fact_resize(fact_stage(img), pl["new_height"], pl["new_width"]), c.transparent_bg_config)
        rows.append(fact_patches(x, c, pl))
        grids.append([1, (pl["new_height"] + pl["pad_height"]) // c.patch_size,
                      (pl["new_width"] + pl["pad_width"]) // c.patch_size])
    return torch.from_numpy(np.concatenate(rows)), torch.tensor(grids, dtype=torch.int64)


# ---------------------------------------------------------------------------------------------
# the fuzzed cases


def _config(rng: np.random.Generator, stage: str | None) -> PreprocessConfig:
    base = K3 if rng.random() < 0.85 else PreprocessConfig.k25()  # k25: no background at all
    changes: dict = {"in_patch_limit": int(rng.choice([1, 2, 4, 6, 12, 16, 64, 1024]))}
    if rng.random() < 0.2:
        changes.update(patch_size=int(rng.choice([7, 8, 16])), merge_kernel_size=int(rng.choice([1, 2, 3])))
    if rng.random() < 0.2:
        changes.update(image_mean=CLIP_MEAN, image_std=CLIP_STD)
    elif rng.random() < 0.1:
        changes.update(image_mean=tuple(float(v) for v in rng.uniform(0.0, 1.0, 3)),
                       image_std=tuple(float(v) for v in rng.uniform(0.05, 1.0, 3)))
    if base.transparent_bg_config is not None:
        white, grey = CHESS_VALUES[int(rng.integers(len(CHESS_VALUES)))]
        changes["transparent_bg_fill_stage"] = stage
        changes["background"] = {"pattern": str(rng.choice(["chessboard", "chessboard", "white", "black", "gray"])),
                                 "chessboard_square_size": int(rng.choice(CHECKER_SQUARES)),
                                 "chessboard_square_on_top_left": bool(rng.integers(2)),
                                 "chessboard_white_value": white, "chessboard_gray_value": grey}
    return vary_config(base, **changes)


def _cases(count: int, seed: int):
    """`count` cases: every mode with each of its alpha patterns, both fill stages, resampled and
    not; one to three images, some sharing the source shape (batched) or the target size only."""
    rng = np.random.default_rng(seed)
    pairs = [(m, a) for m in MODES for a in alpha_patterns_for(m)]
    for n in range(count):
        mode, alpha = pairs[n % len(pairs)]
        stage = ("before_resize", "after_resize")[(n // len(pairs)) % 2]
        config = _config(rng, stage)
        w, h = (int(v) for v in rng.integers(1, 41, 2))
        first = CaseParams(w, h, mode, alpha, str(rng.choice(CONTENTS)), int(rng.integers(1000)),
                           square=int(rng.choice([1, 2, 3, 5, 8])))
        params = [first]
        extra = int(rng.integers(0, 3))
        for _ in range(extra):
            other_mode = str(rng.choice(MODES)) if rng.random() < 0.5 else mode
            other_alpha = str(rng.choice(alpha_patterns_for(other_mode)))
            same = rng.random() < 0.6  # same source shape: one resize batch when the modes stage alike
            ow, oh = (w, h) if same else (int(v) for v in rng.integers(1, 41, 2))
            params.append(CaseParams(ow, oh, other_mode, other_alpha, str(rng.choice(CONTENTS)),
                                     int(rng.integers(1000))))
        yield config, params


def _resampled(img: Image.Image, c: PreprocessConfig) -> bool:
    pl = fact_plan(img.width, img.height, c)
    return (pl["new_width"], pl["new_height"]) != img.size


def test_model_is_bit_identical_to_the_facts_on_fuzzed_cases():
    covered: Counter = Counter()
    checked = 0
    for config, params in _cases(336, seed=12):
        images = [make_image(p) for p in params]
        want_pixels, want_grids = fact_result(images, config)
        got = model.preprocess(images, config, device="cpu")
        label = f"{config} {[p.describe() for p in params]}"
        assert torch.equal(got.grid_thws, want_grids), label
        assert got.pixel_values.dtype == torch.float32
        assert torch.equal(got.pixel_values, want_pixels), label
        checked += 1
        first = images[0]
        covered["mode", first.mode] += 1
        covered["stage", config.transparent_bg_fill_stage] += 1
        covered["resampled", _resampled(first, config)] += 1
        covered["batched", len({(im.size, len(fact_stage(im))) for im in images}) < len(images)] += 1
        covered["bg", config.transparent_bg_config.pattern if config.transparent_bg_config else None] += 1
    assert checked >= 300
    # Every mode, both fill stages, resampled and not, batched and not, every background and none.
    assert {k[1] for k in covered if k[0] == "mode"} == set(MODES)
    assert {k[1] for k in covered if k[0] == "stage"} >= {"before_resize", "after_resize"}
    assert covered["resampled", True] >= 50 and covered["resampled", False] >= 50, covered
    assert covered["batched", True] >= 20, covered
    assert {k[1] for k in covered if k[0] == "bg"} == {"chessboard", "white", "black", "gray", None}


def _first_mismatch(count: int) -> str | None:
    for config, params in _cases(count, seed=12):
        images = [make_image(p) for p in params]
        want_pixels, want_grids = fact_result(images, config)
        got = model.preprocess(images, config, device="cpu")
        if not (torch.equal(got.grid_thws, want_grids) and torch.equal(got.pixel_values, want_pixels)):
            return f"{config} {[p.describe() for p in params]}"
    return None


def _two_roundings(x, scale, bias, patch, padded_h, padded_w):
    x = F.pad(x, (0, padded_w - x.shape[-1], 0, padded_h - x.shape[-2]), value=0.0) * scale + bias
    b, c, h, w = x.shape
    return x.view(b, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c, patch, patch)


@pytest.mark.parametrize("attr, wrong", [
    ("keeps_alpha", lambda img: "A" in img.getbands() or "transparency" in img.info),  # RGB keys composited
    ("normalize_and_patchify", _two_roundings),  # x·scale + bias rounded twice (the earlier model)
], ids=["rgb-key-composited", "two-roundings"])
def test_the_comparison_catches_a_model_off_by_one_fact(monkeypatch, attr, wrong):
    monkeypatch.setattr(model, attr, wrong)
    assert _first_mismatch(60) is not None


# ---------------------------------------------------------------------------------------------
# single facts, each with a case where the checkpoint differs


def test_rgb_with_a_transparency_key_is_not_composited_but_other_modes_are():
    rgb_key = make_image(CaseParams(28, 28, "RGB", "key", "noise", seed=3))
    plain = rgb_key.copy()
    plain.info.pop("transparency")
    out = model.preprocess([rgb_key], K3, device="cpu").pixel_values
    assert torch.equal(out, model.preprocess([plain], K3, device="cpu").pixel_values)
    # An L image with a key is staged RGBA: the keyed level lands on the chessboard (K3: 8-pixel
    # squares, white 255 at parity 0, grey 180 at parity 1 since the square is "on top left").
    l_key = make_image(CaseParams(28, 28, "L", "key", "flat", seed=3))
    assert l_key.getpixel((0, 0)) == l_key.info["transparency"] not in (180, 255)
    out = model.preprocess([l_key], K3, device="cpu").pixel_values
    # level v → v / 127.5 − 1 (mean = std = 0.5), to within the fused rounding
    assert out[0, 0, 0, 0].item() == pytest.approx(255 / 127.5 - 1, abs=1e-6)
    assert out[0, 0, 0, 8].item() == pytest.approx(180 / 127.5 - 1, abs=1e-6)


def test_fill_stage_is_never_read():
    img = make_image(CaseParams(61, 45, "RGBA", "random", "noise", seed=5))
    resizing = dataclasses.replace(K3, in_patch_limit=6)
    before_config = dataclasses.replace(resizing, transparent_bg_fill_stage="before_resize")
    before = model.preprocess([img], before_config, device="cpu")
    after = model.preprocess([img], resizing, device="cpu")
    assert torch.equal(before.pixel_values, after.pixel_values)


def test_without_a_background_alpha_is_dropped():
    img = make_image(CaseParams(30, 20, "RGBA", "transparent", "flat", seed=7))
    out = model.preprocess([img], PreprocessConfig.k25(), device="cpu").pixel_values
    r, g, b = img.getpixel((0, 0))[:3]
    # k25 mean = std = 0.5: level v → v / 127.5 − 1, to within the fused rounding.
    assert out[0, :, 0, 0].tolist() == pytest.approx([v / 127.5 - 1 for v in (r, g, b)], abs=1e-6)


def test_sizes_the_checkpoint_rejects_get_a_grid():
    # Side cap 3 (not a multiple of merge 2): 60x20 plans 42x14, padded to 4 x 2 patches > 3.
    config = vary_config(K3, patch_limit_on_one_side=3, in_patch_limit=1024)
    with pytest.raises(PlanError):
        checkpoint_plan(60, 20, config)
    img = make_image(CaseParams(60, 20, "RGB", "opaque", "noise", seed=1))
    out = model.preprocess([img], config, device="cpu")
    want_pixels, want_grids = fact_result([img], config)
    assert torch.equal(out.grid_thws, want_grids) and int(want_grids[0, 2]) > 3
    assert torch.equal(out.pixel_values, want_pixels)


def test_unknown_pattern_raises():
    bg = TransparentBgConfig()
    object.__setattr__(bg, "pattern", "purple")  # past the config's own validation
    config = dataclasses.replace(K3, transparent_bg_config=bg)
    img = make_image(CaseParams(20, 20, "RGBA", "random", "noise", seed=1))
    with pytest.raises(ValueError, match="purple"):
        model.preprocess([img], config, device="cpu")


def test_normalization_differs_from_the_checkpoint_table_on_205_levels():
    # The measurement: addcmul's single rounding differs from the checkpoint's float32
    # table ((v/255 − mean)·(1/std), float64 steps stored as float32) on 205 of 256 levels.
    levels = np.arange(256, dtype=np.uint8)
    img = Image.fromarray(np.stack([np.resize(levels, (28, 28))] * 3, axis=-1), "RGB")
    got = model.preprocess([img], K3, device="cpu").pixel_values  # 28x28: no resize, no padding
    table = reference.normalization_lut(K3)[0]
    # patch gy·gw + gx, inside it (py, px): the source levels in that order, channel 0
    order = np.resize(levels, (28, 28)).reshape(2, 14, 2, 14).transpose(0, 2, 1, 3).reshape(-1)
    value_of = dict(zip(order.tolist(), got[:, 0].reshape(-1).tolist()))
    assert len(value_of) == 256
    assert sum(np.float32(value_of[v]) != table[v] for v in range(256)) == 205


def test_builtin_names_and_the_eager_alias():
    assert eager.preprocess is model.preprocess
    img = make_image(CaseParams(33, 17, "P", "checker", "noise", seed=2))
    config = dataclasses.replace(K3, in_patch_limit=2)
    want = model.preprocess([img], config, device="cpu")
    for name in ("sglang-0.5.23", "eager"):
        got = load_candidate(name)([img], config)
        assert torch.equal(got.pixel_values, want.pixel_values) and torch.equal(got.grid_thws, want.grid_thws)
