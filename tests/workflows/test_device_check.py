"""The device check's parts that need no GPU: it refuses to start without one (saying what is
missing), and its report shows each benchmark against the roofline."""

from __future__ import annotations

import json

from kimi_oracle.workflows import device_check


def test_without_cuda_it_reports_what_is_missing_and_exits_3(tmp_path):
    import torch

    if torch.cuda.is_available():  # pragma: no cover - the GPU machine runs the real check
        return
    assert device_check.main([str(tmp_path)]) == 3
    doc = json.loads((tmp_path / "device_check.json").read_text())
    assert any("CUDA device" in m for m in doc["versions"]["missing"])
    assert "## Versions" in (tmp_path / "device_check.md").read_text()


def test_report_reads_benchmarks_against_the_floor(tmp_path):
    launch = {"kernel": "tail_kernel", "specialization": "DT=u8 NCH=3 FETCH=direct CONV=rgb P=14 OUT=fp32",
              "bytes": 4_800_000, "device_s": 2e-6 * 2, "share_of_floor": 0.5,
              "on_device": {"registers": 32, "spills": 0}}
    row = {"input": "one", "launches": 1, "host_prep_and_upload_s": 0.01, "device_s": 2e-6 * 2,
           "roofline_bytes": 4_800_000, "floor_s": {"H200": 1e-6, "A100-SXM4-80GB": 4_800_000 / 2.039e12},
           "share_of_floor": 0.25, "eager_device_s": 1e-4, "speedup_vs_eager": 25.0, "per_launch": [launch],
           "exact": False}
    results = {"versions": {"python": "3"}, "benchmarks": {"device": "NVIDIA H200", "hbm_peak_Bps": 4.8e12, "rows": [row]},
               "build": {"arch": "sm_90", "specializations": 82, "failures": [], "registers": [28, 55],
                         "lowest_occupancy": 0.5}}
    device_check.write(results, tmp_path)
    md = (tmp_path / "device_check.md").read_text()
    assert "| one | fp32 | 1 | 0.0100 | 0.000004 | 4.8 | 1.0 | 2.4 | 25.0 % | n/a | 0.000100 | 25.0x | False |" in md
    assert "| 50.0 % | n/a | n/a | 32 / 0 |" in md
    assert "Ahead-of-time build for sm_90" in md
    assert json.loads((tmp_path / "device_check.json").read_text())["build"]["registers"] == [28, 55]
