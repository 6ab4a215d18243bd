"""GPU-pipeline tests run on CPU tensors under the Triton interpreter unless CUDA is present.

TRITON_INTERPRET must be set before `kimi_oracle.pipelines.gpu.kernels` is imported (Triton decides
at decoration time whether a kernel is interpreted), hence at the top of this conftest.
"""

from __future__ import annotations

import os

if os.environ.get("KIMI_GPU_TESTS_ON_CUDA") != "1":
    os.environ["TRITON_INTERPRET"] = "1"

import dataclasses  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from kimi_oracle.core.config import PreprocessConfig, TransparentBgConfig  # noqa: E402
from kimi_oracle.inputs.generators import CaseParams, make_image  # noqa: E402

DEVICE = "cuda" if os.environ.get("KIMI_GPU_TESTS_ON_CUDA") == "1" else "cpu"
# Few, large programs: the interpreter's cost is per program instance.
BLOCKS = None if DEVICE == "cuda" else (1 << 16, 1 << 15)

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


@pytest.fixture(scope="session")
def gpu_kwargs() -> dict:
    return {"device": DEVICE, "blocks": BLOCKS}
