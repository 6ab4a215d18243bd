import json
import subprocess
import sys

import pytest

from kimi_oracle.workflows.bench import compare_medians, interleaved_ratio


def test_compare_medians_by_hand():
    rows, failed = compare_medians({"a": 1.2, "b": 1.0}, {"a": 1.0, "b": 1.0, "c": 2.0}, 10.0)
    by = {r["name"]: r for r in rows}
    assert abs(by["a"]["change_pct"] - 20.0) < 1e-9 and by["a"]["failed"]
    assert by["b"]["change_pct"] == 0.0 and not by["b"]["failed"]
    assert by["c"]["current_s"] is None and not by["c"]["failed"]
    assert failed
    assert not compare_medians({"a": 1.05}, {"a": 1.0}, 10.0)[1]


def test_interleaved_ratio_detects_a_slower_side():
    # Driven by its injectable timer: NEW advances the clock by 4 ms, OLD by 1 ms, so every pair's
    # ratio is 4 by hand, whatever the machine's speed; the order alternates, NEW first.
    now = [0.0]
    calls: list[str] = []

    def side(name: str, seconds: float):
        def run():
            calls.append(name)
            now[0] += seconds
        return run

    result = interleaved_ratio(side("new", 0.004), side("old", 0.001), rounds=5, warmup=1, timer=lambda: now[0])
    assert len(result["ratios"]) == 5 and all(abs(r - 4.0) < 1e-9 for r in result["ratios"])
    assert abs(result["ratio"] - 4.0) < 1e-9 and result["noise"] < 1e-9
    assert abs(result["new_median_s"] - 0.004) < 1e-12 and abs(result["old_median_s"] - 0.001) < 1e-12
    # warm-up pair, then rounds 0, 2, 4 with NEW first and 1, 3 with OLD first
    assert calls == ["new", "old"] + ["new", "old", "old", "new"] * 2 + ["new", "old"]



def test_interleaved_ratio_stops_once_decided():
    # The gate's timing (issue 33): with `decided`, the rounds end at the first round (from
    # min_rounds on) whose figures it accepts. NEW 4 ms, OLD 1 ms: a ratio of 4 by hand, clear of a
    # 1.1 threshold from the first round; an undecidable rule runs every round.
    now = [0.0]

    def side(seconds: float):
        def run():
            now[0] += seconds
        return run

    seen = []

    def clear(stats):
        seen.append(stats["rounds"])
        return abs(stats["ratio"] - 1.1) > 3 * max(stats["noise"], 0.02)

    result = interleaved_ratio(side(0.004), side(0.001), rounds=7, warmup=0, timer=lambda: now[0], min_rounds=3,
                               decided=clear)
    assert result["rounds"] == 3 and len(result["ratios"]) == 3 and seen == [3]
    assert abs(result["ratio"] - 4.0) < 1e-9
    result = interleaved_ratio(side(0.004), side(0.001), rounds=7, warmup=0, timer=lambda: now[0], min_rounds=3,
                               decided=lambda stats: False)
    assert result["rounds"] == 7
    # The gate's deadline goes through `decided` too: it ends the rounds from min_rounds on, so a
    # ratio rests on min_rounds pairs at least, however early the deadline came
    now[0] = 0.0
    result = interleaved_ratio(side(0.004), side(0.001), rounds=7, warmup=0, timer=lambda: now[0], min_rounds=3,
                               decided=lambda stats: now[0] > 0.009)
    assert result["rounds"] == 3  # 5 ms a round: past 9 ms after the second, min_rounds is 3
    now[0] = 0.0
    result = interleaved_ratio(side(0.004), side(0.001), rounds=7, warmup=0, timer=lambda: now[0], min_rounds=3,
                               decided=lambda stats: now[0] > 0.019)
    assert result["rounds"] == 4  # past 19 ms after the fourth

@pytest.mark.slow  # two pytest-benchmark subprocess runs (~10 s)
def test_bench_cli_save_and_compare(tmp_path):
    base = [sys.executable, "-m", "kimi_oracle", "bench", "--candidate", "reference", "--input", "rgb-640x480",
            "--storage", str(tmp_path)]
    proc = subprocess.run(base + ["--save", "one"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "one.json").read_text())
    assert "machine_info" in doc
    (entry,) = doc["benchmarks"]
    assert entry["extra_info"]["megapixels_per_s"] > 0
    # the roofline of the input, printed without a GPU
    assert "GPU roofline" in proc.stdout and "tail_kernel [DT=u8 NCH=3 FETCH=direct" in proc.stdout
    # A baseline ten times faster than anything real: the comparison must fail with exit 1.
    for b in doc["benchmarks"]:
        b["stats"]["median"] /= 10.0
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps(doc))
    proc = subprocess.run(base + ["--compare", str(fast), "--fail-above", "10"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "SLOWER" in proc.stdout
    proc = subprocess.run(base + ["--compare", "missing-run"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no stored benchmark run" in proc.stderr


def test_one_peak_bandwidth_table_by_device_name():
    from kimi_oracle.workflows import bench, device_check

    assert bench.peak_bandwidth("NVIDIA H200") == 4.8e12
    assert bench.peak_bandwidth("NVIDIA A100-SXM4-80GB") == 2.039e12
    assert bench.peak_bandwidth("NVIDIA A100-SXM4-40GB") == 1.555e12
    assert bench.peak_bandwidth("NVIDIA A100 80GB PCIe") == 1.935e12
    assert bench.peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert bench.peak_bandwidth("NVIDIA H100 PCIe") == 2.0e12
    assert bench.peak_bandwidth("Some Future GPU") is None
    assert not hasattr(device_check, "HBM_PEAK")  # the device check reads bench's table


def test_roofline_of_an_unresized_rgb_image_by_hand():
    from kimi_oracle.workflows.bench import BENCH_INPUTS, roofline

    spec = BENCH_INPUTS["rgb-640x480"]
    roof = roofline(spec.images(), spec.config())
    # K3 keeps 640 x 480 and pads it to 644 x 504 (multiples of 28): one tail launch reads
    # the 3-byte pixels once and writes 3 float32 planes of the padded image.
    (launch,) = roof["launches"]
    assert launch["kernel"] == "tail_kernel"
    assert launch["read_bytes"] == 640 * 480 * 3
    assert launch["write_bytes"] == 644 * 504 * 3 * 4
    assert roof["bytes"] == 640 * 480 * 3 + 644 * 504 * 3 * 4
    assert roof["floor_s"]["H200"] == roof["bytes"] / 4.8e12


def test_bench_leaves_this_tools_own_targets_out_unless_asked(monkeypatch, tmp_path):
    # The reference-floor and fuzz-rate targets measure kimi-oracle itself (minutes, some not met
    # on two cores): a candidate's `bench` does not run them, `--targets` does.
    from kimi_oracle.cli import bench as cli_bench

    commands = []
    monkeypatch.setattr(cli_bench.subprocess, "call", lambda cmd, **kw: commands.append(cmd) or 0)
    cli_bench.run_suite(["reference"], False, tmp_path / "a.json")
    cli_bench.run_suite(["reference"], False, tmp_path / "b.json", targets=True)
    marks = [cmd[cmd.index("-m", 3) + 1] for cmd in commands]
    assert marks == ["bench and not targets", "bench"]
    # and the two target files carry the mark
    import ast
    from pathlib import Path

    here = Path(cli_bench.suite_dir())
    for name in ("test_reference_floor.py", "test_fuzz_rates.py"):
        tree = ast.parse((here / name).read_text())
        assert any(isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "pytestmark"
                   and ast.unparse(n.value) == "pytest.mark.targets" for n in tree.body), name
