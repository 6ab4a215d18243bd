"""Helpers of the GPU-pipeline tests: configs, image builders, torch.equal with a diagnosis.

(A module of its own, not conftest.py: several test folders have a conftest, and a run that
names more than one of them would import the wrong one under the name `conftest`.)
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.inputs.generators import CaseParams, make_image

DEVICE = "cuda" if os.environ.get("KIMI_GPU_TESTS_ON_CUDA") == "1" else "cpu"
# Under the interpreter the default tiles are few and large (its cost is per program);
# tests/pipelines/gpu/test_tiles.py shrinks them on purpose.

PATTERNS = ("white", "black", "gray", "chessboard")


def k3(limit: int = 16, pattern: str = "chessboard", stage: str = "after_resize", **bg) -> PreprocessConfig:
    """K3 with a small patch budget (so resampling happens) and the given background."""
    base = PreprocessConfig.k3()
    bgc = dataclasses.replace(base.transparent_bg_config, pattern=pattern, **bg)
    return dataclasses.replace(base, in_patch_limit=limit, transparent_bg_config=bgc,
                               transparent_bg_fill_stage=stage)


def k25(limit: int = 16) -> PreprocessConfig:
    return dataclasses.replace(PreprocessConfig.k25(), in_patch_limit=limit)


def gen(w: int, h: int, mode: str, alpha: str = "opaque", content: str = "noise", seed: int = 0) -> Image.Image:
    return make_image(CaseParams(w, h, mode=mode, alpha=alpha, content=content, seed=seed))


def rgba_hidden(w: int, h: int, seed: int = 0) -> Image.Image:
    """RGBA with many fully transparent pixels of random (hidden) colour and some partial alpha."""
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    a = rng.choice(np.array([0, 0, 0, 255, 255, 1, 128, 254], dtype=np.uint8), size=(h, w))
    return Image.fromarray(np.dstack([rgb, a]), "RGBA")


def full_range(w: int, h: int, mode: str, seed: int = 0) -> Image.Image:
    """Images that use the whole value range of the 16/32-bit modes (rounding and clipping)."""
    rng = np.random.default_rng(seed)
    if mode.startswith("I;16"):
        v = rng.integers(0, 65536, (h, w)).astype(np.uint16)
        v[:, ::3] = rng.integers(0, 300, (h, (w + 2) // 3))
        dt = {"I;16B": ">u2", "I;16N": "=u2"}.get(mode, "<u2")
        return Image.frombytes(mode, (w, h), v.astype(dt).tobytes())
    if mode == "I":
        v = rng.integers(-(1 << 20), 1 << 20, (h, w)).astype(np.int32)
        v[:, ::2] = rng.integers(-20, 280, (h, (w + 1) // 2))
        return Image.frombytes("I", (w, h), v.astype("<i4").tobytes())
    if mode == "F":
        v = (rng.standard_normal((h, w)) * 200 + 100).astype(np.float32)
        return Image.frombytes("F", (w, h), v.astype("<f4").tobytes())
    if mode in ("HSV", "RGBX"):
        return Image.frombytes(mode, (w, h), rng.integers(0, 256, (h, w, 3 if mode == "HSV" else 4), dtype=np.uint8).tobytes())
    raise ValueError(mode)


def i_keyed(w: int, h: int, key: int, seed: int = 0) -> Image.Image:
    """An "I" image with a transparency key, values spread around the key's 8-bit level and
    beyond the clips (Pillow matches the clipped level against the key cut to 8 bits)."""
    rng = np.random.default_rng(seed)
    v = rng.choice(np.array([key, key & 255, (key & 255) + 256, -3, 0, 255, 300, 1 << 20], np.int64), size=(h, w))
    v = np.where(rng.random((h, w)) < 0.5, v, rng.integers(-50, 320, (h, w)))
    img = Image.frombytes("I", (w, h), v.astype("<i4").tobytes())
    img.info["transparency"] = key
    return img


def describe_diff(got: torch.Tensor, exp: torch.Tensor) -> str:
    if got.shape != exp.shape:
        return f"shape {tuple(got.shape)} != {tuple(exp.shape)}"
    if got.dtype != exp.dtype:
        return f"dtype {got.dtype} != {exp.dtype}"
    diff = got.float() != exp.float()
    n = int(diff.sum())
    if not n:
        return "equal"
    first = tuple(int(i) for i in diff.nonzero()[0])
    return f"{n} of {diff.numel()} values differ; first at {first}: {got[first].item()} vs {exp[first].item()}"


def assert_same(got, exp, label: str = "") -> None:
    """torch.equal on pixel_values and grid_thws, with the first differing image named."""
    assert torch.equal(got.grid_thws, exp.grid_thws), f"{label}: grids {got.grid_thws.tolist()} != {exp.grid_thws.tolist()}"
    if torch.equal(got.pixel_values.cpu(), exp.pixel_values.cpu()):
        return
    for i in range(exp.num_images):
        g, e = got.image(i).pixel_values.cpu(), exp.image(i).pixel_values.cpu()
        if not torch.equal(g, e):
            raise AssertionError(f"{label}: image {i} differs: {describe_diff(g, e)}")
    raise AssertionError(f"{label}: pixel_values differ: {describe_diff(got.pixel_values.cpu(), exp.pixel_values.cpu())}")


def zoo() -> list[tuple[str, Image.Image]]:
    """Every supported mode, with sizes that make limit-16 configs resample (both orders)."""
    return [
        ("RGB", gen(47, 31, "RGB", seed=1)),
        ("RGB key", gen(33, 40, "RGB", "key", seed=2)),
        ("RGBA random", gen(41, 29, "RGBA", "random", seed=3)),
        ("RGBA hidden", rgba_hidden(38, 45, seed=4)),
        ("RGBA hidden tall", rgba_hidden(16, 70, seed=40)),
        ("RGBA checker", gen(30, 61, "RGBA", "checker", seed=5)),
        ("LA gradient", gen(44, 35, "LA", "gradient", seed=6)),
        ("LA 1-wide", gen(1, 90, "LA", "random", seed=41)),
        ("L tall", gen(20, 70, "L", seed=7)),
        ("L key", gen(50, 23, "L", "key", seed=8)),
        ("P", gen(36, 36, "P", seed=9)),
        ("P key", gen(45, 27, "P", "key", seed=10)),
        ("P bytes", gen(31, 48, "P", "random", seed=11)),
        ("1", gen(53, 22, "1", content="edges", seed=12)),
        ("CMYK", gen(40, 40, "CMYK", seed=13)),
        ("CMYK 1-high", gen(90, 1, "CMYK", seed=42)),
        ("I;16", gen(37, 30, "I;16", seed=14)),
        ("I;16 full tall", full_range(18, 64, "I;16", seed=15)),
        ("I;16B full", full_range(43, 34, "I;16B", seed=16)),
        ("I;16N full", full_range(28, 57, "I;16N", seed=17)),
        ("I", gen(39, 33, "I", seed=18)),
        ("I full", full_range(26, 49, "I", seed=19)),
        ("I 1-wide", full_range(1, 80, "I", seed=43)),
        ("I key", i_keyed(30, 41, key=261, seed=45)),
        ("F full", full_range(48, 26, "F", seed=20)),
        ("F tall", full_range(20, 66, "F", seed=44)),
        ("PA", gen(35, 38, "PA", "random", seed=21)),
        ("RGBX", full_range(32, 44, "RGBX", seed=22)),
        ("tiny RGBA", rgba_hidden(3, 2, seed=23)),
        ("no-resize L", gen(9, 11, "L", seed=24)),
    ]
