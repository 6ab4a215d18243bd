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


def test_an_unadapted_path_is_refused(sglang_tree):
    with pytest.raises(CandidateError, match="not adapted yet"):
        engine_candidate("sglang-cpu@0.5.23")
