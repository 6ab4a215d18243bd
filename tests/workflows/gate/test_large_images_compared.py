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
    # without the option (fuzz's default).
    config = PreprocessConfig.profile("k3")
    options = FuzzOptions(photo_examples=6)
    large = {}
    for i in range(64):
        case = generated_case(config, options, 11, i)
        sides = [(p.width, p.height) for p in case.images]
        if any(w * h > gate_candidates.PHOTO_PIXELS for w, h in sides):
            large[i] = case
    assert sorted(large) == [7, 15, 23, 31, 39, 47]
    sizes = [(c.images[0].width, c.images[0].height) for c in large.values()]
    assert {w * h for w, h in sizes} == {4032 * 3024, 3840 * 2160}  # 12 Mpx and 4K both
    classes = [mode_class(c.make_images()[0]) for c in large.values()]
    assert classes == ["RGB", "L", "P", "RGBA+alpha", "LA+alpha", "PA+alpha"]
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
