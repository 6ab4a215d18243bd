"""PaddleFormers 1.2.0, mlx-vlm 0.7.10 and LMDeploy 0.18.0 as built-in engines (issue 43), on their
pinned releases and runtimes (paddlepaddle ~195 MB, mlx; fetched once into the engine cache):
all `slow`. Expected values come from the reference or from the engines' documented behaviour."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from PIL import Image

from cli_run import run_cli
from kimi_oracle.adapters.engines import engine_candidate, engine_of, is_engine_spec
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.pipelines.reference import preprocess

K25, K3 = PreprocessConfig.profile("k25"), PreprocessConfig.profile("k3")


def test_hyphenated_engine_names_resolve_to_their_engine():
    assert engine_of("mlx-vlm") == engine_of("mlx-vlm-k3") == "mlx-vlm"
    assert engine_of("paddleformers") == "paddleformers" and engine_of("mlx") is None
    assert is_engine_spec("mlx-vlm-k3@0.7.10") and is_engine_spec("lmdeploy") and not is_engine_spec("mlx@1")


def _rgb(n: int = 2, size: tuple[int, int] = (44, 30)) -> list[Image.Image]:
    rng = np.random.default_rng(3)
    return [Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)) for _ in range(n)]


@pytest.mark.slow
def test_lmdeploy_is_the_checkpoint_cast_to_bf16_and_refuses_each_size_on_its_own():
    func, _, _ = engine_candidate("lmdeploy@0.18.0")
    images = _rgb()
    pixels, grids = func(images, K25)
    ref = preprocess(images, K25)
    assert pixels.dtype == torch.bfloat16 and torch.equal(pixels, ref.pixel_values.to(torch.bfloat16))
    assert torch.equal(grids, torch.as_tensor(ref.grid_thws))
    with pytest.raises(ValueError, match="Unsupported Kimi vision patch size 16; expected 14"):
        func(images, PreprocessConfig.profile("k3-p16m1"))
    merge1 = dataclasses.replace(K25, merge_kernel_size=1)
    with pytest.raises(ValueError, match=r"Unsupported Kimi merge kernel \(1, 1\)"):
        func(images, merge1)


@pytest.mark.slow
def test_mlx_vlm_k25_is_sub_level_and_k3_resizes_a_palette_its_own_way():
    k25, _, _ = engine_candidate("mlx-vlm@0.7.10")
    images = _rgb()
    pixels, grids = k25(images, K25)
    ref = preprocess(images, K25)
    assert torch.equal(grids, torch.as_tensor(ref.grid_thws))
    assert (pixels - ref.pixel_values).abs().max().item() < 0.5 / 255 / max(K25.image_std)  # under one level
    k3, _, _ = engine_candidate("mlx-vlm-k3@0.7.10")
    pal = Image.fromarray(np.random.default_rng(5).integers(0, 256, (29, 45, 3), dtype=np.uint8)).quantize(16)
    shrunk = dataclasses.replace(K3, in_patch_limit=4)  # (resized; K3's fill stage: after the resize)
    pixels, _ = k3([pal], shrunk)
    levels = ((pixels - preprocess([pal], shrunk).pixel_values).abs() * 255 * min(K3.image_std)).max().item()
    assert levels >= 1.0  # mlx-vlm K3 converts P to RGBA before the resize, not as the checkpoint does
    assert torch.equal(k3([pal], K3)[0], preprocess([pal], K3).pixel_values)  # (not resized: exact)


@pytest.mark.slow
def test_paddleformers_patch_order_and_one_stack_crash(tmp_path, capsys):
    out = tmp_path / "pf"
    code, _, err = run_cli(capsys, "fuzz", "--candidate", "paddleformers@1.2.0", "--profile", "k25", "--examples",
                           "150", "--seed", "1", "--out", out, "--json", tmp_path / "pf.json")
    assert code == 1, err[-2000:]
    data = json.loads((tmp_path / "pf.json").read_text())
    pixel = [f for f in data["findings"] if f["check"] == "pixel_mismatch" and f["max_levels"] >= 1.0]
    assert pixel and all(f["explanation"] != "unexplained" for f in pixel)
    variants = {v for f in pixel for v in f.get("variants") or []}
    # one image: (gy, c, py, gx, px); a batch: (gy, c, image, py, gx, px) (axes 0 and 2 of the batch swapped)
    assert "patch-order/axes-0,4,1,2,3" in variants and "patch-order/batch-axes-gy,c,image,py,gx,px" in variants
    crashes = [f for f in data["findings"] if f["check"] == "crash"]
    assert len(crashes) == 1 and crashes[0]["key"].startswith("crash(ValueError: InvalidArgument The N-th dimension")
    assert len(crashes[0]["mode_classes"]) >= 5  # one cause, not one finding per mode class


@pytest.mark.slow  # (the three engines' parts: ~2.5 min)
def test_conformance_of_the_three_new_engines(tmp_path, capsys):
    out = tmp_path / "conf"
    code, _, err = run_cli(capsys, "conformance", "--engines", "paddleformers@1.2.0,mlx-vlm@0.7.10,lmdeploy@0.18.0",
                           "--out", out)
    assert code == 1, err[-2000:]
    head = (out / "conformance.md").read_text().splitlines()[:40]
    rows = {line.split(" | ")[0][2:]: line for line in head if line.startswith("| ") and "---" not in line}
    assert "patch-order" in rows and "`paddleformers`" in head[next(i for i, l in enumerate(head) if "root cause" in l)]
    assert "unexplained" not in rows  # none above one level
    assert "refusal: ValueError: Unsupported Kimi vision patch size N; expected N." in rows
    assert "refusal: ValueError: Unsupported Kimi merge kernel N, N; expected N, N." in rows
    assert "palette-bicubic" in rows and "176 lv" in rows["palette-bicubic"]  # mlx-vlm K3's palettes
    # mlx-vlm's normalization (K2.5 float32, K3 float64 statistics): under one level, collapsed
    assert any(l.startswith("- mlx-vlm 0.7.10 `mlx-vlm`: normalize-float") for l in head)
    assert any(l.startswith("- mlx-vlm 0.7.10 `mlx-vlm-k3`:") and "normalize-float" in l for l in head)
    assert any(l.startswith("## Real defects") for l in head)
    assert (out / "conformance.html").read_text().count("data:image/png;base64,") == 2  # its two pixel defects
    with pytest.raises(CandidateError, match="no path 'mlx-vlm-k9'"):
        engine_candidate("mlx-vlm-k9@0.7.10")
