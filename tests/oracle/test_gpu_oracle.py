"""`--oracle gpu` (issue 45) without a device: the GPU pipeline runs under Triton's interpreter on
tiny inputs; a sample and every failure are recomputed by the reference; a planted fault in the
GPU side is a finding against the project, and the run falls back to the reference."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from cli_run import run_cli
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.gpu_oracle import ORACLE_DISAGREEMENT, PROJECT, GpuOracle, differences
from kimi_oracle.pipelines import reference
from kimi_oracle.pipelines.gpu import preprocess as gpu_preprocess

CONFIG = PreprocessConfig.profile("k3")


def _images() -> list[Image.Image]:
    rng = np.random.default_rng(11)
    return [Image.fromarray(rng.integers(0, 256, (9, 13, 3), dtype=np.uint8)),
            Image.fromarray(rng.integers(0, 256, (5, 7, 4), dtype=np.uint8), "RGBA")]


def _faulty(images, config, **kwargs):
    """The GPU pipeline with one value one level off (a planted fault on the project's side)."""
    out = gpu_preprocess(images, config, **kwargs)
    values = out.pixel_values.clone()
    values.view(-1)[5] += 1.0 / 255 / config.image_std[0]
    return dataclasses.replace(out, pixel_values=values)


def test_an_agreeing_pipeline_serves_every_example_and_the_sample_is_checked():
    oracle = GpuOracle(check_share=1.0, device="cpu")
    images = _images()
    got = oracle.expected(images, CONFIG)
    ref = reference.preprocess(images, CONFIG)
    assert differences(got, ref) is None and torch.equal(got.pixel_values, ref.pixel_values)
    assert (oracle.served, oracle.checked, oracle.disagreements, oracle.fallen_back) == (1, 1, [], False)
    assert oracle.confirm(images, CONFIG, got) is None  # (already checked: not recomputed again)
    assert oracle.checked == 1


def test_a_failure_is_confirmed_by_the_reference_and_a_fault_falls_back():
    oracle = GpuOracle(check_share=0.0, device="cpu", pipeline=_faulty)
    images = _images()
    served = oracle.expected(images, CONFIG)
    assert oracle.checked == 0  # (no sample at share 0)
    ref = oracle.confirm(images, CONFIG, served)  # a failure judged against it: the reference decides
    assert torch.equal(ref.pixel_values, reference.preprocess(images, CONFIG).pixel_values)
    [d] = oracle.disagreements
    assert d.why == "finding" and d.message.startswith("1 of ") and oracle.fallen_back
    assert oracle.expected(images, CONFIG) is None  # fallen back: the reference computes the rest


def test_a_raising_gpu_pipeline_is_a_disagreement_too():
    def broken(images, config, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access")

    oracle = GpuOracle(device="cpu", pipeline=broken)
    assert oracle.expected(_images(), CONFIG) is None and oracle.fallen_back
    assert "raised RuntimeError: CUDA error" in oracle.disagreements[0].message


def test_fuzz_with_a_faulty_gpu_oracle_reports_only_the_disagreement(tmp_path):
    # The candidate is the reference itself: every failure the faulty oracle makes is confirmed
    # away by the reference; what is left is one finding against the project.
    oracle = GpuOracle(check_share=0.0, device="cpu", pipeline=_faulty)
    candidate = Candidate("reference", lambda images, config: reference.preprocess(images, config))
    options = FuzzOptions(examples=3, seed=5, max_side=12, max_images=2, invariance=False, shrink=False,
                          vary_config=False, oracle=oracle)
    run = fuzz(candidate, CONFIG, options, out_dir=tmp_path)
    assert [f.check for f in run.findings] == [ORACLE_DISAGREEMENT]
    finding = run.findings[0]
    assert finding.candidate == PROJECT and (finding.path / "case.json").is_file()
    summary = run.summary()["oracle"]
    assert summary["fell_back"] and summary["disagreements"] == 1 and summary["served"] >= 1


def test_oracle_gpu_without_cuda_is_exit_2_in_one_line(capsys, tmp_path):
    if torch.cuda.is_available():  # pragma: no cover - the device check runs it there
        pytest.skip("a CUDA device is visible: --oracle gpu runs")
    code, out, err = run_cli(capsys, "fuzz", "--candidate", "reference", "--examples", "2", "--oracle", "gpu",
                             "--out", tmp_path / "out")
    assert code == 2 and out == "" and err.strip().count("\n") == 0
    assert "--oracle gpu needs a CUDA device" in err


def test_gate_and_nightly_hand_the_oracle_to_their_fuzzing(tmp_path):
    from kimi_oracle.workflows.gate.fuzz import _fuzz_options
    from kimi_oracle.workflows.gate.options import GateOptions
    from kimi_oracle.workflows.nightly import worker
    from kimi_oracle.workflows.nightly.spec import WorkerSpec

    oracle = GpuOracle(device="cpu")

    class _Ctx:  # what _fuzz_options reads of a gate's context
        options, seed, old, out_dir = GateOptions(oracle=oracle), 3, None, tmp_path

    assert _fuzz_options(_Ctx(), 10, None).oracle is oracle
    spec = WorkerSpec(oracle="gpu", oracle_check_share=0.25, seed=9)
    spec.write(tmp_path / "spec.json")
    again = WorkerSpec.read(tmp_path / "spec.json")  # (the worker's process reads it back)
    made = worker._oracle(again)
    assert isinstance(made, GpuOracle) and made.check_share == 0.25 and made.device == "cuda"
    assert worker._oracle(WorkerSpec()) is None  # the reference by default
