"""The engine model `sglang-0.5.23` (alias `eager`): runs, right grids, batches like one image at a
time, known divergences from the reference. Bit-identity to the engine's facts: tests/pipelines/test_engine_model.py."""

from __future__ import annotations

import pytest
import torch
from gpu_testlib import gen, k3, rgba_hidden

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.pipelines import eager, reference
from kimi_oracle.pipelines.gpu import eager_preprocess


def _diff_levels(a, b) -> float:
    return float((a.pixel_values - b.pixel_values).abs().max()) * 127.5  # std 0.5: 1 level = 1/127.5


def test_grids_match_reference_and_batch_groups():
    cfg = k3(16)
    images = [gen(90, 60, "RGB", seed=1), gen(90, 60, "RGB", seed=2), gen(40, 100, "RGBA", "random"), gen(5, 7, "L")]
    exp = reference.preprocess(images, cfg)
    got = eager.preprocess(images, cfg, device="cpu")
    assert torch.equal(got.grid_thws, exp.grid_thws)
    assert got.pixel_values.shape == exp.pixel_values.shape
    assert got.pixel_values.dtype == torch.float32
    # The engine's own invariant: a batch (here two images share a source shape and one resize
    # call) equals each image run alone, bit for bit.
    for i, img in enumerate(images):
        one = eager_preprocess([img], cfg, device="cpu")
        assert torch.equal(got.image(i).pixel_values, one.pixel_values), i


def test_normalization_is_within_an_ulp_without_resize():
    cfg = PreprocessConfig.k3()
    img = gen(60, 45, "RGB", content="gradient")
    exp = reference.preprocess([img], cfg).pixel_values
    got = eager.preprocess([img], cfg, device="cpu").pixel_values
    ulp = torch.finfo(torch.float32).eps * exp.abs().clamp(min=1.0)
    assert bool(((got - exp).abs() <= ulp).all())


def test_resampling_differs_by_at_most_a_few_levels_on_rgb():
    cfg = k3(16)
    img = gen(300, 200, "RGB", content="gradient")
    d = _diff_levels(eager.preprocess([img], cfg, device="cpu"), reference.preprocess([img], cfg))
    assert d <= 5.01  # spec §5: max 1-5 levels after the engine's antialias fix


def test_known_divergences_are_visible():
    cfg = k3(16)
    # Straight-alpha resize lets hidden colours bleed; P is resized bicubic, not NEAREST.
    for img in (rgba_hidden(120, 90), gen(120, 90, "P")):
        d = _diff_levels(eager.preprocess([img], cfg, device="cpu"), reference.preprocess([img], cfg))
        assert d > 5, img.mode


def test_bf16_output():
    got = eager.preprocess([gen(30, 30, "RGB")], k3(), device="cpu", out_dtype=torch.bfloat16)
    assert got.pixel_values.dtype == torch.bfloat16


@pytest.mark.slow  # a child process importing triton: about 8 s on the shared 2-core machine
def test_cuda_kernel_layout_under_the_interpreter():
    # The engine's Triton normalize-and-patchify kernel (the model's CUDA path), run by the Triton
    # interpreter on CPU tensors in a child process (TRITON_INTERPRET must precede the import).
    # Scales 0.5/0.25/2 and integer biases make x·scale + bias exact, fused or not: the check is
    # the layout and the padding, against a NumPy patchify of the zero-padded batch.
    import os
    import subprocess
    import sys

    script = (
        "import numpy as np, torch\n"
        "from kimi_oracle.pipelines.engines import sglang_0_5_23_cuda as k\n"
        "x = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (2, 3, 19, 23)).astype(np.float32))\n"
        "scale = torch.tensor([0.5, 0.25, 2.0]).view(1, 3, 1, 1)\n"
        "bias = torch.tensor([-1.0, 3.0, -7.0]).view(1, 3, 1, 1)\n"
        "got = k.normalize_and_patchify(x, scale, bias, 7, 21, 28).numpy()\n"
        "pad = np.zeros((2, 3, 21, 28), np.float32); pad[:, :, :19, :23] = x.numpy()\n"
        "want = pad * scale.numpy() + bias.numpy()\n"
        "want = want.reshape(2, 3, 3, 7, 4, 7).transpose(0, 2, 4, 1, 3, 5).reshape(2, 12, 3, 7, 7)\n"
        "print('SAME', got.shape == want.shape and bool((got == want).all()))\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
    assert "SAME True" in proc.stdout, proc.stdout + proc.stderr[-2000:]
