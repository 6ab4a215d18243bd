"""The pixel goldens of the small-limit profile, run with the GPU pipeline.

Without CUDA the Triton kernels run under the interpreter (TRITON_INTERPRET=1, set here before
anything imports `kimi_oracle.pipelines.gpu`, as tests/pipelines/gpu/conftest.py does); KIMI_GPU_TESTS_ON_CUDA=1
runs them on the device instead. The interpreter costs about 0.15 s per image on a 2-core
machine, so the default test runs a SUBSET of the k3-small pixel cases (about 60 of 328):
every mode x alpha pattern under the profile's own config (after_resize, chessboard), and
RGBA/random, LA/gradient and P/checker under each of the other 7 stage x pattern configs.
The slow test runs all 328. The GPU pipeline and triton are part of the installation: a failure to
import them fails these tests (it is never turned into a skip).
"""

from __future__ import annotations

import functools
import os

import pytest

ON_CUDA = os.environ.get("KIMI_GPU_TESTS_ON_CUDA") == "1"
if not ON_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402,F401 - a dependency: its absence is a failure, not a skip

from kimi_oracle.pipelines.gpu import preprocess as _preprocess  # noqa: E402
from kimi_oracle.workflows import golden  # noqa: E402

SUBSET_ALPHAS = {("RGBA", "random"), ("LA", "gradient"), ("P", "checker")}


def _candidate():
    if ON_CUDA:
        return functools.partial(_preprocess, device="cuda")
    # The interpreter's default tiles: few, large programs (its cost is per program instance).
    return functools.partial(_preprocess, device="cpu")


def in_subset(case: golden.PixelCase) -> bool:
    own = case.overrides == {"transparent_bg_fill_stage": "after_resize", "background": {"pattern": "chessboard"}}
    return own or (case.params.mode, case.params.alpha) in SUBSET_ALPHAS


def test_gpu_pipeline_matches_the_small_limit_pixel_goldens_subset():
    report = golden.check_pixels(_candidate(), profiles=["k3-small"], select=in_subset)
    assert report.ok, report.render(max_lines=20)
    assert len(golden.pixel_catalogue("k3-small")) > sum(in_subset(c) for c in golden.pixel_catalogue("k3-small")) >= 60


@pytest.mark.slow
def test_gpu_pipeline_matches_all_small_limit_pixel_goldens():
    report = golden.check_pixels(_candidate(), profiles=["k3-small"])
    assert report.ok, report.render(max_lines=20)
