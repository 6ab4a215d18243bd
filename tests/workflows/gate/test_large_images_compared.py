"""Issue 34 item 3: large images are compared. The gate's timing stage compares the outputs it
computes (a candidate wrong only over 4.3 Mpx fails it), and the fuzzers' real-photo examples
come at the stated rate: `photo_examples` of them, one generated example in PHOTO_EVERY, at
12 Mpx and 4K, the mode classes in turn."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import gate_candidates
import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.cases import generated_case
from kimi_oracle.fuzzers.options import FuzzOptions
from kimi_oracle.oracle.grouping import mode_class
from kimi_oracle.pipelines import reference
from kimi_oracle.workflows.gate import timing


class _InProcess:
    """A candidate called in this process, with a constant `time_call` (the timing's figures do
    not matter here; only the outputs it computes do)."""

    def __init__(self, func):
        self.func = func
        self.calls = 0

    def __call__(self, images, config):
        self.calls += 1
        return self.func(images, config)

    def time_call(self, images, config):
        return 0.01


def _ctx(new, old):
    options = SimpleNamespace(perf_threshold_pct=10.0, perf_rounds=1, tolerance="exact")
    return SimpleNamespace(new=_InProcess(new), old=_InProcess(old), options=options, findings=[])


def test_timing_stage_compares_its_outputs(monkeypatch):
    # One 4032x3024 input (12.2 Mpx): the planted candidate adds 0.25 there and only there.
    monkeypatch.setattr(timing, "PERF_INPUTS", ("rgb-4032x3024-k25",))
    ctx = _ctx(gate_candidates.wrong_on_photos, reference.preprocess)
    stage = timing.timed(ctx, 60.0)
    assert stage.status == "fail"
    assert stage.details["outputs_compared"] == ["rgb-4032x3024-k25"]
    assert [f["input"] for f in ctx.findings] == ["rgb-4032x3024-k25"]
    assert ctx.findings[0]["check"] == "pixel_mismatch" and ctx.findings[0]["stage"] == "performance"
    assert any("outputs on rgb-4032x3024-k25" in r for r in stage.reasons)


def test_timing_stage_passes_when_both_sides_are_right(monkeypatch):
    monkeypatch.setattr(timing, "PERF_INPUTS", ("rgb-640x480",))
    ctx = _ctx(reference.preprocess, reference.preprocess)
    stage = timing.timed(ctx, 60.0)
    assert stage.status == "pass" and ctx.findings == []
    assert stage.details["outputs_compared"] == ["rgb-640x480"]


def test_planted_candidate_is_exact_below_the_threshold():
    from PIL import Image

    config = PreprocessConfig.profile("k3")
    small = [Image.new("RGB", (2560, 1600), (10, 20, 30))]  # 4.1 Mpx: exact
    assert gate_candidates.wrong_on_photos(small, config).pixel_values.equal(
        reference.preprocess(small, config).pixel_values)


def test_photo_examples_come_at_the_stated_rate():
    # Stated cost: exactly `photo_examples` real-photo examples, example 8k + 7 for k < N; none
    # without the option (fuzz's default). The kinds come in turn from the seed's: seed 32 is a
    # whole number of rounds of the 16 kinds, so it starts at the first (RGB).
    config = PreprocessConfig.profile("k3")
    options = FuzzOptions(photo_examples=6)
    large = {}
    for i in range(64):
        case = generated_case(config, options, 32, i)
        sides = [(p.width, p.height) for p in case.images]
        if any(w * h > gate_candidates.PHOTO_PIXELS for w, h in sides):
            large[i] = case
    assert sorted(large) == [7, 15, 23, 31, 39, 47]
    sizes = [(c.images[0].width, c.images[0].height) for c in large.values()]
    assert {w * h for w, h in sizes} == {4032 * 3024, 3840 * 2160}  # 12 Mpx and 4K both
    classes = [mode_class(c.make_images()[0]) for c in large.values()]
    assert classes == ["RGB", "L", "P", "RGBA+alpha", "LA+alpha", "PA+alpha"]
    # Another seed, another first kind: the gate's two photos a run meet every kind over seeds.
    assert [mode_class(generated_case(config, FuzzOptions(photo_examples=2), 33 + 16 * 5, i).make_images()[0])
            for i in (7, 15)] == ["L", "P"]
    plain = FuzzOptions()
    assert all(max(max(p.width, p.height) for p in generated_case(config, plain, 11, i).images) < 1000
               for i in range(16))


@pytest.mark.slow  # (a 12 Mpx finding written: ~13 s and 2 GB here)
def test_fuzz_with_photo_sizes_finds_a_candidate_wrong_only_on_photos(tmp_path):
    from cli_run import exit_code_of

    spec = f"{Path(__file__).resolve().parents[2] / 'helpers' / 'gate_candidates.py'}:wrong_on_photos"
    common = ("fuzz", "--candidate", spec, "--examples", "8", "--no-shrink", "--seed", "1")
    assert exit_code_of(*common, "--out", tmp_path / "without") == 0  # the fuzzer's sizes alone miss it
    assert exit_code_of(*common, "--photo-sizes", "1", "--out", tmp_path / "with",
                        "--json", tmp_path / "with.json") == 1
    [finding] = json.loads((tmp_path / "with.json").read_text())["findings"]
    assert finding["check"] == "pixel_mismatch" and finding["max_levels"] == 31.875  # 0.25 at std 0.5 over 2/255


def test_outputs_npz_of_a_large_output_keeps_the_rows_around_the_worst_value(monkeypatch):
    # A finding's outputs.npz is bounded: over OUTPUTS_MAX_VALUES a result, the window of rows
    # around the worst value (its image's offset + its patch), each side's same rows.
    import io

    import numpy as np
    import torch

    from kimi_oracle.core.result import PreprocessResult
    from kimi_oracle.workflows.gate import observations

    monkeypatch.setattr(observations, "OUTPUTS_MAX_VALUES", 1000)
    monkeypatch.setattr(observations, "OUTPUTS_WINDOW_ROWS", 4)
    grids = torch.tensor([[1, 2, 3], [1, 4, 5]])  # 6 + 20 patch rows of 3x14x14 values: 15,288 > 1000
    rows = torch.arange(26 * 3 * 14 * 14, dtype=torch.float32).reshape(26, 3, 14, 14)
    expected = PreprocessResult(rows, grids)
    new = PreprocessResult(rows + 1, grids)
    stats = {"worst": {"image": 1, "patch": 9}}  # row 6 + 9 = 15 of the batch
    window = observations.outputs_window(stats, expected, new, None)
    assert window == (13, 17, 26)
    with np.load(io.BytesIO(observations.outputs_npz(window, expected=expected, new=new, old=None))) as z:
        assert sorted(z.files) == ["expected_grid_thws", "expected_pixel_values", "expected_rows",
                                   "new_grid_thws", "new_pixel_values", "new_rows"]
        assert np.array_equal(z["expected_pixel_values"], rows[13:17].numpy())
        assert np.array_equal(z["new_pixel_values"], rows[13:17].numpy() + 1)
        assert z["new_rows"].tolist() == [13, 17, 26]
    assert "patch rows 13-16 of 26" in observations.outputs_note(window)
    # at the batch's end the window stays inside it; a small output is kept whole
    assert observations.outputs_window({"worst": {"image": 1, "patch": 19}}, expected) == (22, 26, 26)
    monkeypatch.setattr(observations, "OUTPUTS_MAX_VALUES", 26 * 3 * 14 * 14)
    assert observations.outputs_window(stats, expected, new) is None


def _gate(tmp_path, *args):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kimi_oracle", "gate", "--out", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=900,
                          cwd=str(Path(__file__).resolve().parents[3]))
    report = tmp_path / "out" / "gate-report.json"
    return proc, (json.loads(report.read_text()) if report.exists() else None)


WRONG_ON_PHOTOS = f"{Path(__file__).resolve().parents[2] / 'helpers' / 'gate_candidates.py'}:wrong_on_photos"


def test_the_gate_fuzzes_real_photos_by_default(tmp_path):
    # No option: the fuzz stage's example 7 is a real photo, where the planted candidate is wrong
    # (and only there: it is exact on the goldens and on every smaller example).
    proc, report = _gate(tmp_path, "--candidate", WRONG_ON_PHOTOS, "--fuzz-examples", "8", "--budget", "60s",
                         "--seed", "1", "--profile", "k3-small")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert report["stages"]["goldens"]["status"] == "pass"
    [finding] = [f for f in report["findings"] if f["stage"] == "fuzz"]
    assert finding["check"] == "pixel_mismatch"
    case = json.loads((Path(finding["path"]) / "case.json").read_text())
    assert max(w * h for w, h in (i["size"] for i in case["images"])) > gate_candidates.PHOTO_PIXELS


@pytest.mark.slow  # (the README's gate, two minutes)
def test_the_readme_gate_fails_a_candidate_wrong_only_on_photos(tmp_path):
    # Issue 34 item 3 as filed: `gate --baseline eager --budget 2m` passed this candidate.
    proc, report = _gate(tmp_path, "--candidate", WRONG_ON_PHOTOS, "--baseline", "eager", "--budget", "2m",
                         "--seed", "1")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    new_rows = [r for r in report["rows"] if r["verdict"] == "new"]
    assert new_rows and all(r["root_cause"].startswith("pixel_mismatch") for r in new_rows), new_rows
