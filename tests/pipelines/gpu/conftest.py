"""GPU-pipeline tests run on CPU tensors under the Triton interpreter unless CUDA is present.

TRITON_INTERPRET must be set before `kimi_oracle.pipelines.gpu.kernels` is imported (Triton decides
at decoration time whether a kernel is interpreted), hence at the top of this conftest. The
helpers live in gpu_testlib.py.
"""

from __future__ import annotations

import os

if os.environ.get("KIMI_GPU_TESTS_ON_CUDA") != "1":
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
from gpu_testlib import DEVICE  # noqa: E402


@pytest.fixture(scope="session")
def gpu_kwargs() -> dict:
    """Keywords of `preprocess` for this machine: CUDA, or CPU tensors under the interpreter
    (default tiles)."""
    return {"device": DEVICE}
