"""The tile sweep's parts that need no GPU: its candidates, its choice among measured results
(exact, within 64 registers, the fastest pass tile and tail block per warp count), its report,
and its usage errors. The sweep itself runs on a CUDA machine (docs/gpu.md, "Tiles")."""

from __future__ import annotations

import json

import pytest

from kimi_oracle.pipelines.gpu.tiles import CUDA_TILES
from kimi_oracle.workflows import tile_sweep


def _launch(kernel: str, us: float, registers: int = 40) -> dict:
    return {"kernel": kernel, "specialization": "x", "device_s": us * 1e-6,
            "on_device": {"registers": registers, "spills": 0}}


def _result(rows: int, cols: int, tail: int, warps: int, pass_us: float, tail_us: float, *,
            exact: bool = True, registers: int = 40) -> dict:
    launches = [_launch("resample_pass_kernel", pass_us, registers), _launch("tail_kernel", tail_us)]
    return {"tiles": {"pass_rows": rows, "pass_cols": cols, "tail": tail, "convert": 256, "num_warps": warps},
            "label": f"{rows}x{cols}/{tail}/{warps}",
            "inputs": {"a": {"launches": launches, "device_s": (pass_us + tail_us) * 1e-6, "exact": exact}}}


def test_candidates_are_valid_tiles_and_include_the_defaults():
    tiles = tile_sweep.candidates()
    assert len(tiles) == len(set(tiles)) == len(tile_sweep.CANDIDATES)
    assert CUDA_TILES in tiles  # (its convert block too: 2 pixels a thread, as every candidate's)
    for t in tiles:
        assert t.checked() is t
        assert t.convert == 2 * 32 * t.num_warps


def test_best_takes_the_fastest_pass_and_tail_per_warp_count_among_exact_results():
    results = [
        _result(8, 64, 512, 8, pass_us=600, tail_us=300),
        _result(4, 128, 512, 8, pass_us=400, tail_us=320),
        _result(2, 256, 256, 8, pass_us=450, tail_us=250),
        _result(4, 64, 256, 4, pass_us=380, tail_us=290),  # 4 warps: 380 + 290 = 670
        _result(1, 256, 256, 8, pass_us=100, tail_us=100, exact=False),  # fastest, but wrong
        _result(16, 64, 512, 8, pass_us=90, tail_us=300, registers=70),  # over 64 registers
        _result(2, 64, 256, 8, pass_us=80, tail_us=80),  # registers unknown: not chosen
    ]
    results[-1]["inputs"]["a"]["launches"][0]["on_device"] = None
    best = tile_sweep._best(results)
    # 8 warps: pass 4x128 (400 µs) + tail 256 (250 µs) = 650 µs beats 4 warps' 670 µs
    assert best["num_warps"] == 8
    assert best["pass"] == (4, 128) and best["tail"] == 256
    assert best["seconds"] == pytest.approx(650e-6)
    assert best["per_warps"][4]["seconds"] == pytest.approx(670e-6)
    assert tile_sweep._best([_result(8, 64, 512, 8, 1, 1, exact=False)]) == {}


def test_report_lists_each_candidate_and_the_choice(tmp_path):
    results = {"versions": {"device": "NVIDIA H200"}, "default": "d",
               "candidates": [_result(8, 64, 512, 8, pass_us=600, tail_us=300)],
               "best": {"num_warps": 8}, "chosen": "c",
               "chosen_exactness": {"images": 220, "bit_identical": 220, "batches_identical": "41/41"}}
    tile_sweep.write(results, tmp_path)
    md = (tmp_path / "tile_sweep.md").read_text()
    assert "| 8x64/512/8 | 900.0 (600.0 + 300.0) | True |" in md
    assert "220 / 220 images, batches 41/41" in md
    assert json.loads((tmp_path / "tile_sweep.json").read_text())["chosen"] == "c"


def test_usage_errors_exit_2(tmp_path, capsys):
    assert tile_sweep.main([]) == 2
    assert tile_sweep.main([str(tmp_path), "--compile", "sm_90"]) == 2
    assert "usage" in capsys.readouterr().err


def _exactness(images_ok: int, batches_ok: int) -> dict:
    return {"images": 220, "bit_identical": images_ok, "batches": 41, "batches_ok": batches_ok,
            "batches_identical": f"{batches_ok}/41"}


def test_the_sweep_passes_only_when_everything_compared_is_exact():
    exact = {"exact": True}
    good = {"best": {"num_warps": 4}, "paths": {"a": {"prepare_launches": exact, "preprocess": exact}},
            "chosen_measured": {"inputs": {"a": exact}}, "chosen_exactness": _exactness(220, 41)}
    assert tile_sweep.sweep_passed(good)
    for broken in ({"paths": {"a": {"prepare_launches": {"exact": False}, "preprocess": exact}}},
                   {"chosen_measured": {"inputs": {"a": {"exact": False}}}},
                   {"chosen_exactness": _exactness(219, 41)},
                   {"chosen_exactness": _exactness(220, 40)},  # one mixed batch differs
                   {"best": {}}):
        assert not tile_sweep.sweep_passed({**good, **broken}), broken


def test_the_device_check_passes_only_when_images_batches_and_timed_outputs_are_exact():
    from kimi_oracle.workflows import device_check

    good = {"exactness": _exactness(220, 41), "benchmarks": {"rows": [{"exact": True}]}, "build": {"failures": []}}
    assert device_check.passed(good)
    assert not device_check.passed({**good, "exactness": _exactness(220, 40)})
    assert not device_check.passed({**good, "benchmarks": {"rows": [{"exact": True}, {"exact": False}]}})
    assert not device_check.passed({**good, "build": {"failures": ["tail_kernel: 70 registers"]}})
