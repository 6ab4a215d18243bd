"""Candidate `sglang`: SGLang 0.5.23's K3 deferred GPU path from the release, on CPU tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from kimi_oracle.adapters.engines import engine_candidate
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.oracle.candidates import load_candidate


def test_rgb_noise_matches_the_checkpoint_to_one_ulp(sglang_tree):
    # An RGB image that needs no resize: SGLang's path only pads, normalizes (x * scale + bias,
    # one float32 rounding away from the checkpoint's (x / 255 - mean) / std) and patchifies.
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (56, 84, 3), dtype=np.uint8))
    candidate = load_candidate("sglang@0.5.23")
    result = candidate([image], PreprocessConfig.k3())
    assert result.grid_thws.tolist() == [[1, 4, 6]]  # 56 / 14, 84 / 14
    pixels = torch.as_tensor(result.pixel_values).reshape(24, 3, 14, 14)
    # the first patch's red channel, by hand from the image: level / 127.5 - 1
    want = torch.from_numpy(np.asarray(image)[:14, :14, 0].astype(np.float64) / 127.5 - 1)
    assert torch.allclose(pixels[0, 0].double(), want, atol=2.5e-7)
    assert candidate.plan is not None and candidate.plan(84, 56, PreprocessConfig.k3())["num_tokens"] == 6


def test_a_path_sglang_does_not_have_is_refused(sglang_tree):
    with pytest.raises(CandidateError, match="has no path 'sglang-tpu' as a candidate"):
        engine_candidate("sglang-tpu@0.5.23")


def _images():
    rng = np.random.default_rng(1)
    return [Image.fromarray(rng.integers(0, 256, (40, 90, 3), dtype=np.uint8)),
            Image.fromarray(rng.integers(0, 256, (33, 17), dtype=np.uint8), "L")]


def test_the_cpu_backend_is_the_checkpoints_processor_with_sglangs_grids(sglang_tree):
    # SGLang's `cpu` backend runs the checkpoint's own processor (here the reference, which is
    # bit for bit that code) on its items and checks the result against its own grids: exact.
    from kimi_oracle.pipelines import reference

    config = PreprocessConfig.k3()
    preprocess, _, plan = engine_candidate("sglang-cpu@0.5.23")
    pixels, grids = preprocess(_images(), config)
    want = reference.preprocess(_images(), config)
    assert torch.equal(grids, want.grid_thws) and torch.equal(pixels, want.pixel_values)
    assert plan(90, 40, config)["num_tokens"] == want.grid_thws[0].prod().item() // 4


def test_sglangs_grid_check_of_the_cpu_backend_fires_in_a_planted_tree(sglang_tree, tmp_path):
    # A copy of the tree whose grid helper swaps height and width (edited on disk): the items'
    # grids are no longer the processor's, and SGLang's own check raises its production error.
    import shutil

    root = tmp_path / "tree"
    shutil.copytree(sglang_tree.package_dir, root / "sglang")
    k25 = root / "sglang" / "srt" / "multimodal" / "processors" / "kimi_k25.py"
    text = k25.read_text()
    body = "    return 1, height // patch_size, width // patch_size\n"
    assert text.count(body) == 1
    k25.write_text(text.replace(body, "    return 1, width // patch_size, height // patch_size\n"))
    preprocess, _, _ = engine_candidate(f"sglang-cpu@{root}")
    with pytest.raises(ValueError, match="Kimi-K3 deferred CPU preprocessing produced wrong grids"):
        preprocess(_images(), PreprocessConfig.k3())
