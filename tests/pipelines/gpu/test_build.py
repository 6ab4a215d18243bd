"""Ahead-of-time builds for real GPUs, without one: every specialization compiles for sm_90,
none spills, none needs more than 64 registers per thread at the default tiles.

The default suite builds the `covering` sample for sm_90 (39 of the 82 specializations, every
(code path, field value) pair of each kernel; one child process, about 17 s here); the full
sm_90 + sm_80 build through the CLI is `slow`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gpu_testlib import k3, k25, zoo

from kimi_oracle.pipelines.gpu import build
from kimi_oracle.pipelines.gpu.pipeline import launch_plan

FIELDS = {"kernel", "specialization", "arch", "registers", "spilled_bytes", "shared_bytes", "ptx_bytes"}


def _hot(records: list[dict]) -> list[dict]:
    """The records whose reads issue 44 stages by vector loads: every pass, every tail but NEAREST."""
    return [r for r in records if r["kernel"] == "resample_pass_kernel"
            or (r["kernel"] == "tail_kernel" and "FETCH=nearest" not in r["specialization"])]


@pytest.fixture(scope="module")
def sm90(tmp_path_factory) -> tuple[list[dict], list[str], Path]:
    out = tmp_path_factory.mktemp("build")
    records, bad = build.build(["sm_90"], out, timeout=900, sample=True)
    return records, bad, out


def test_every_specialization_compiles_for_sm_90_without_spills(sm90):
    records, bad, out = sm90
    assert bad == [], "\n".join(bad)
    assert all(FIELDS <= set(r) and r["arch"] == "sm_90" and r["error"] is None for r in records)
    assert all(r["spilled_bytes"] == 0 and r["registers"] <= build.MAX_REGISTERS for r in records)
    assert all(r["ptx_target"] == "sm_90a" and r["ptx_bytes"] > 0 for r in records)
    # The sample holds, by hand: the tail's FETCH direct / h / v with each storage type (u8,
    # u16, i32, f32) and each band count (1-4), and NEAREST; the pass's two axes with each
    # type, each band count and both PREMULTIPLY; every fill conversion; both output types.
    spec = [(r["kernel"], build._fields(r["specialization"])) for r in records]
    tail = [f for k, f in spec if k == "tail_kernel"]
    for fetch in ("direct", "h", "v"):
        assert {f["DT"] for f in tail if f["FETCH"] == fetch} == {"u8", "u16", "i32", "f32"}, fetch
        assert {f["NCH"] for f in tail if f["FETCH"] == fetch} == {"1", "2", "3", "4"}, fetch
    assert {f["OUT"] for f in tail} == {"fp32", "bf16"} and any(f["FETCH"] == "nearest" for f in tail)
    passes = [f for k, f in spec if k == "resample_pass_kernel"]
    for axis in ("h", "v"):
        assert {(f["DT"], f["NCH"]) for f in passes if f["AXIS"] == axis} >= {
            ("u8", "2"), ("u8", "3"), ("u8", "4"), ("u16", "1"), ("i32", "1"), ("f32", "1")}, axis
        assert {f["PREMULTIPLY"] for f in passes if f["AXIS"] == axis} == {"0", "1"}, axis
    assert {f["CONV"] for k, f in spec if k == "convert_kernel"} == {"table", "rgb", "cmyk", "i32", "f32"}
    assert len(records) < 82 and len({(r["kernel"], r["specialization"]) for r in records}) == len(records)
    on_disk = json.loads((out / "build.json").read_text())
    assert on_disk == records
    md = (out / "build.md").read_text()
    assert "## sm_90" in md and "PASS" in md and md.count("| tail_kernel |") == len(tail)
    assert all(r["occupancy"] >= 0.5 for r in records)
    # every kernel loads from global memory: the census of its PTX loads is recorded and shown
    assert all(r["loads"]["vector"] + r["loads"]["scalar"] > 0 and r["loads"]["widest_bits"] >= 8 for r in records)
    assert "global loads vector / scalar (widest)" in md
    # Issue 44: the hot reads are staged by vector loads (`.v2` / `.v4`): the tail's direct
    # read and both its bicubic passes, and both axes of the first pass. A regression to the
    # byte-by-byte loads has no vector load left.
    hot = _hot(records)
    assert len(hot) == len(passes) + len(tail) - sum(f["FETCH"] == "nearest" for f in tail)
    assert [r["specialization"] for r in hot if r["loads"]["vector"] < 1] == []
    assert all(r["loads"]["widest_bits"] >= 64 for r in hot)


def test_the_load_census_counts_vector_and_scalar_loads_by_form():
    ptx = """
        ld.global.u8 %rs1, [%rd1];
        ld.global.nc.u8 %rs2, [%rd2+1];
        @%p1 ld.global.b32 { %r1 }, [ %rd3 + 0 ];
        ld.global.v4.b32 { %r2, %r3, %r4, %r5 }, [ %rd4 + 0 ];
        ld.global.L1::evict_last.v2.b32 { %r6, %r7 }, [ %rd5 ];
        ld.shared.u8 %rs3, [%r8];
        st.global.v4.b32 [%rd6], { %r2, %r3, %r4, %r5 };
    """
    got = build.load_census(ptx)
    # by hand: 2 byte loads and a 32-bit one are scalar; v4.b32 (128 bits) and v2.b32 are vector;
    # the shared load and the store are no global loads
    assert got == {"vector": 2, "scalar": 3, "widest_bits": 128,
                   "forms": {"b32": 1, "u8": 2, "v2.b32": 1, "v4.b32": 1}}


def test_the_build_covers_every_launch_of_the_test_zoo():
    # The specializations the pipeline launches for the CPU tests' images (every mode, both
    # stages, both output types, K2.5 without a background) are all in the full build's plan.
    built = {(launch.kernel_name, launch.specialization) for launch in build.planned_launches()}
    images = [im for _, im in zoo()]
    launched = set()
    for cfg in (k3(2), k3(2, stage="before_resize"), k25(2)):
        for dtype in (torch.float32, torch.bfloat16):
            launches, stats = launch_plan(images, cfg, out_dtype=dtype)
            launched |= {(launch.kernel_name, launch.specialization) for launch in launches}
            assert stats["moved_bytes"] == sum(launch.read_bytes + launch.write_bytes for launch in launches)
    assert launched <= built, sorted(launched - built)
    assert len(launched) > 40


def test_occupancy_by_hand():
    # 64 registers x 32 threads = 2048 per warp; 8 warps = 16384 per block: 4 blocks, 32 of
    # 64 warps. 40 registers round to 1280 per warp: 10240 per block, 6 blocks, 48 warps.
    assert build.occupancy("sm_90", 64, 8, 0) == {"blocks_per_sm": 4, "limited_by": "registers", "occupancy": 0.5}
    assert build.occupancy("sm_80", 40, 8, 32)["occupancy"] == 0.75
    assert build.occupancy("sm_90", 16, 4, 0) == {"blocks_per_sm": 16, "limited_by": "threads", "occupancy": 1.0}
    assert build.occupancy("sm_80", 32, 4, 100_000)["limited_by"] == "shared"


def test_failures_name_compile_errors_spills_and_register_pressure():
    base = {"kernel": "tail_kernel", "specialization": "DT=u8", "arch": "sm_80", "error": None,
            "registers": 40, "spilled_bytes": 0}
    assert build.failures([base]) == []
    assert build.failures([dict(base, registers=65)]) == [
        "sm_80 tail_kernel [DT=u8]: 65 registers per thread (> 64)"]
    assert build.failures([dict(base, spilled_bytes=8)]) == ["sm_80 tail_kernel [DT=u8]: spills 8 bytes"]
    assert build.failures([dict(base, error="CompilationError: at 3:4\nmore")]) == [
        "sm_80 tail_kernel [DT=u8]: CompilationError: at 3:4"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kimi_oracle", "gpu", "build", *args], capture_output=True,
                          text=True, timeout=1200)


def test_cli_usage_errors_exit_2(tmp_path):
    proc = _cli("--arch", "sm_75", "--out", str(tmp_path))
    assert proc.returncode == 2 and "unknown architecture sm_75" in proc.stderr, proc.stderr
    proc = _cli("--arch", "sm_90")
    assert proc.returncode == 2 and "--out" in proc.stderr, proc.stderr
    assert not (tmp_path / "build.json").exists()


@pytest.mark.slow
def test_cli_builds_sm_90_and_sm_80(tmp_path):
    proc = _cli("--arch", "sm_90,sm_80", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads((tmp_path / "build.json").read_text())
    assert {r["arch"] for r in records} == {"sm_90", "sm_80"}
    assert sum(r["arch"] == "sm_80" for r in records) == sum(r["arch"] == "sm_90" for r in records) == 82
    # The specialization space, counted by hand: the tail's (DT, NCH, FETCH, CONV) are
    # u8: 1-band table x {direct, h, v, nearest}, 2-band table, 3-band table, RGB (3 bands),
    # RGB(A/X) (4 bands), CMYK x {direct, h, v}; u16 / i32 / f32 x {direct, h, v}: 28, times
    # two output types. The pass: u8 x 1..4 bands x 2 axes + premultiplied 2 and 4 bands x 2
    # axes + 3 wide kinds x 2 axes = 18. The fill at source size: 8 conversions.
    sm90 = [r for r in records if r["arch"] == "sm_90"]
    counts = {k: sum(r["kernel"] == k for r in sm90) for k in ("tail_kernel", "resample_pass_kernel", "convert_kernel")}
    assert counts == {"tail_kernel": 56, "resample_pass_kernel": 18, "convert_kernel": 8}
    # every hot kernel (all but the 2 NEAREST tails) of both architectures reads by vector loads
    hot = _hot(records)
    assert len(hot) == 2 * (18 + 54) and [r["specialization"] for r in hot if r["loads"]["vector"] < 1] == []
    assert build.failures(records) == []
    assert {r["ptx_target"] for r in records if r["arch"] == "sm_80"} == {"sm_80"}
    assert "## sm_80" in (tmp_path / "build.md").read_text()
