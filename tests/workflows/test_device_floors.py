"""The device's own floor and the targets of issue 44, without a device: the copy kernel under
Triton's interpreter, the nominal peak picked by name, shares and targets from given times
(values worked by hand below)."""

from __future__ import annotations

import pytest
import torch

from kimi_oracle.workflows import device_floors as F


def test_the_copy_kernel_copies_every_byte_and_a_tail():
    src = torch.randint(0, 256, (1000,), dtype=torch.uint8)
    dst = torch.zeros_like(src)
    F.triton_copy(src, dst, block=256)  # 4 programs, the last one masked at 1000
    assert torch.equal(src, dst)


def test_the_copy_floor_is_the_faster_copy_and_checks_its_work():
    times = iter([2e-6, 1e-6])  # torch copy, then the Triton copy (the timer runs each)

    def timer(fn):
        fn()
        return next(times)

    got = F.copy_floors(2000, timer, device="cpu")
    assert got == {"bytes": 2000, "torch_copy_s": 2e-6, "triton_copy_s": 1e-6, "floor_s": 1e-6}


def test_the_nominal_peak_says_which_entry_it_matched():
    assert F.nominal_peak("NVIDIA H200") == ("H200", 4.8e12)
    assert F.nominal_peak("NVIDIA H100 80GB HBM3") == ("H100", 3.35e12)  # SXM5
    assert F.nominal_peak("NVIDIA H100 PCIe") == ("H100 PCIe", 2.0e12)
    assert F.nominal_peak("NVIDIA A100-SXM4-80GB") == ("A100-SXM4-80GB", 2.039e12)
    assert F.nominal_peak("Some GPU") == (None, None)


def test_shares_and_targets():
    floor = {"torch_copy_s": 2e-6, "triton_copy_s": 1e-6, "floor_s": 1e-6}
    # 4.8 MB in 4 µs on a 4.8 TB/s device: 1 µs of peak / 4 µs = 25 %; the copy floor 1 µs: 25 %
    sh = F.shares(4_800_000, 4e-6, 4.8e12, floor)
    assert sh == {"of_peak": 0.25, "of_torch_copy": 0.5, "of_triton_copy": 0.25, "of_copy_floor": 0.25}
    tail = {"kernel": "tail_kernel", "specialization": "DT=u8 NCH=3 FETCH=direct P=14 OUT=fp32",
            "shares": {"of_copy_floor": 0.75}}
    taps = {"kernel": "tail_kernel", "specialization": "DT=u8 NCH=3 FETCH=h P=14 OUT=fp32",
            "shares": {"of_copy_floor": 0.1}}
    rows = [{"input": "a", "out_dtype": "bf16", "resampled": False, "per_launch": [tail]},
            {"input": "b", "out_dtype": "fp32", "resampled": True, "shares": {"of_copy_floor": 0.4}, "per_launch": [taps]}]
    found = F.targets(rows)
    assert [(t["input"], t["met"]) for t in found] == [("a [bf16]", True), ("b [fp32]", False)]
    lines = F.target_lines(found)
    assert lines[0].startswith("- met: no-resample tail >= 70% of the copy floor: a [bf16], tail_kernel [") and \
        lines[0].endswith(": 75.0 %")
    assert lines[1] == "- NOT MET: resampled input >= 50% of the copy floor: b [fp32], all: 40.0 %"


def test_the_dry_run_plans_everything_but_the_launches(tmp_path, monkeypatch):
    from PIL import Image

    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.pipelines.gpu import build
    from kimi_oracle.workflows import device_check, device_dry_run

    k3 = PreprocessConfig.profile("k3")
    small = PreprocessConfig.profile("k3-small")
    inputs = {"tiny (no resampling)": ([Image.new("RGB", (28, 28))], k3),
              "tiny (resampled)": ([Image.new("RGB", (300, 200))], small)}
    monkeypatch.setattr(device_check, "benchmark_cases", lambda: inputs)
    monkeypatch.setattr(device_check, "_cases", lambda: [None] * 7)
    compiled = []
    monkeypatch.setattr(build, "build", lambda archs, out: (compiled.append(archs) or [{"kernel": "x"}], []))
    assert device_dry_run.dry_run(tmp_path) == 0
    doc = __import__("json").loads((tmp_path / "dry_run.json").read_text())
    rows = {(r["input"], r["out_dtype"]): r for r in doc["benchmarks"]}
    assert set(rows) == {(k, d) for k in inputs for d in ("fp32", "bf16")}
    assert rows[("tiny (no resampling)", "fp32")]["resampled"] is False
    assert rows[("tiny (no resampling)", "fp32")]["tail_targets"] == 1  # the tail reads its source directly
    assert rows[("tiny (resampled)", "bf16")]["resampled"] is True
    # bf16 output halves the written bytes: 28x28 RGB is 4 patches x 588 values
    assert rows[("tiny (no resampling)", "fp32")]["roofline_bytes"] - rows[("tiny (no resampling)", "bf16")]["roofline_bytes"] \
        == 4 * 588 * 2
    assert compiled == [["sm_90"]] and doc["exactness_images"] == 7 and len(doc["tile_sweep"]) == 3
    assert "verdict: ready" in (tmp_path / "dry_run.md").read_text()


def test_the_dry_run_says_what_is_missing_and_exits_3(tmp_path, monkeypatch):
    from kimi_oracle.workflows import device_check, device_dry_run

    monkeypatch.setattr(device_check, "versions", lambda: {"missing": ["Pillow 13.0.x (found 12.0.0)",
                                                                       "a CUDA device visible to torch"]})
    assert device_dry_run.dry_run(tmp_path) == 3
    assert "Pillow 13.0.x" in (tmp_path / "dry_run.md").read_text()  # (the missing CUDA is no reason here)


@pytest.mark.slow  # (the script end to end: the 220 images, every launch planned, the sm_90 build: ~30 s)
def test_the_device_check_script_dry_runs_here(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(["bash", str(root / "scripts" / "device_check.sh"), "--dry-run", str(tmp_path)],
                         capture_output=True, text=True, env={**__import__("os").environ, "PYTHON": sys.executable},
                         timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = __import__("json").loads((tmp_path / "dry_run.json").read_text())
    assert doc["ok"] and doc["exactness_images"] == 220 and doc["build"]["specializations"] == 82
