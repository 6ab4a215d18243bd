"""Every pixel finding names its root causes (oracle.diagnosis), sub-level noise is a finding of
its own, reports lead with the root causes, magnitudes are readable, pictures are large enough."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from mutants.planted import MUTANTS
from PIL import Image

from kimi_oracle.cli import main
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.oracle.candidates import Candidate

PIXEL_MUTANTS = [m for m in MUTANTS if m.check == "pixel_mismatch" and m.root_causes]
# Three mutants of different steps in the default run, every one under -m slow (each fuzz run costs
# a second or two; tests/oracle/test_diagnosis.py attributes every mutant directly in the default run).
DEFAULT_MUTANTS = ("palette_bicubic", "channels_last", "fill_before_resize")


# Modes whose resize Pillow does in 8 bits: on the others (16-bit, I, F, CMYK, YCbCr, LAB, PA) a
# mutant that converts to RGB first also plants convert-before-resize, which the diagnosis then
# rightly names (see docs/diagnosis.md).
EIGHT_BIT_MODES = ("RGB", "RGBA", "LA", "L", "P", "1")


@pytest.mark.parametrize("mutant", [m if m.name in DEFAULT_MUTANTS else pytest.param(m, marks=pytest.mark.slow)
                                    for m in PIXEL_MUTANTS], ids=lambda m: m.name)
def test_every_pixel_finding_of_a_planted_mutant_names_its_planted_causes(mutant):
    modes = ("CMYK", "I;16", "YCbCr") if "convert-before-resize" in mutant.root_causes else EIGHT_BIT_MODES
    run = fuzz(Candidate(mutant.name, mutant), PreprocessConfig.k3_small(),
               FuzzOptions(examples=40, seed=7, invariance=False, max_side=40, max_images=1, modes=modes))
    pixel = [f for f in run.findings if f.check == "pixel_mismatch"]
    assert pixel, f"{mutant.name} was not found in 40 examples"
    planted = set(mutant.root_causes)
    for f in pixel:
        # Each finding carries at least one of the mutant's own ids (or names it as an exact tie:
        # a fill stage moved before the resize of an opaque 1-bit image is a bicubic palette),
        # and nothing unexplained.
        ties = {c for e in f.attribution["explained"] for c in e["equivalent"]}
        assert planted & (set(f.root_causes) | ties), (f.key, f.root_causes, ties, planted)
        assert "unexplained" not in f.root_causes, (f.key, f.root_causes)
    # Over the run, every id the mutant was planted with shows up.
    assert planted <= {c for f in pixel for c in f.root_causes}, (planted, [f.root_causes for f in pixel])


def test_sub_level_noise_and_a_real_bug_of_one_mode_class_are_two_findings():
    straight_float = next(m for m in MUTANTS if m.name == "straight_alpha_float_normalization")
    run = fuzz(Candidate(straight_float.name, straight_float), PreprocessConfig.k3_small(),
               FuzzOptions(examples=80, seed=3, invariance=False, modes=("RGBA",), max_images=1, max_side=40))
    keys = {f.key for f in run.findings}
    assert "pixel_mismatch[RGBA+alpha]<levels>" in keys and "pixel_mismatch[RGBA+alpha]<sub-level>" in keys
    noise = next(f for f in run.findings if f.key == "pixel_mismatch[RGBA+alpha]<sub-level>")
    assert noise.root_causes == ["normalize-float"] and noise.max_levels < 1
    real = next(f for f in run.findings if f.key == "pixel_mismatch[RGBA+alpha]<levels>")
    assert "alpha-straight" in real.root_causes and real.max_levels >= 1
    assert real.max_levels_seen >= real.max_levels and real.hits >= 1


def _run_cli(*args) -> int:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    return int(exc.value.code)


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory):
    """The issue's scenario: default options on the serving engine's eager path (a subset of modes
    and examples, to stay quick)."""
    out = tmp_path_factory.mktemp("eager")
    code = _run_cli("fuzz", "--candidate", "eager", "--examples", "150", "--seed", "1", "--modes", "P,LA,CMYK,RGB",
                    "--out", out, "--json", out / "run.json", "--junit", out / "junit.xml")
    assert code == 1
    return out, json.loads((out / "run.json").read_text())


def test_eager_findings_name_the_engines_deviations(eager_run):
    _, summary = eager_run
    findings = summary["findings"]
    for f in findings:  # the fields every finding carries in the --json summary
        assert {"root_causes", "max_levels", "mean_levels", "residual_max_levels"} <= set(f)
    causes = {c for f in findings for c in f["root_causes"]}
    assert {"palette-bicubic", "alpha-straight", "convert-before-resize", "normalize-float"} <= causes
    assert any("palette-bicubic" in f["root_causes"] and f["max_levels_seen"] >= 100 for f in findings)
    assert any(f["root_causes"] == ["normalize-float"] and f["max_levels"] < 1 for f in findings)
    # The report leads with root causes: a row per root cause and mode class, worst first.
    rows = summary["root_causes"]
    assert rows and rows[0]["float_rounding_only"] is False
    assert [r for r in rows if r["float_rounding_only"]], "float rounding is listed apart"


def test_case_json_junit_and_markdown_lead_with_root_causes(eager_run):
    out, summary = eager_run
    f = summary["findings"][0]
    case = json.loads((Path(f["path"]) / "case.json").read_text())
    assert case["root_causes"] == f["root_causes"] and "residual_max_levels" in case
    assert case["attribution"]["root_causes"] or case["root_causes"] == ["unexplained"]
    first = ET.parse(out / "junit.xml").getroot().find("testsuite").find("testcase")
    assert first.get("name").startswith("root-cause ")
    from kimi_oracle.results.report import summary_markdown

    md = summary_markdown(summary)
    assert md.index("## Root causes") < md.index("| id | check |")
    assert "## Float rounding only" in md and "![diff](" in md


def test_sub_level_difference_prints_floats_and_ulps():
    float_norm = next(m for m in MUTANTS if m.name == "float_normalization")
    run = fuzz(Candidate(float_norm.name, float_norm), PreprocessConfig.k3_small(),
               FuzzOptions(examples=20, seed=1, invariance=False, max_images=1, max_side=24))
    from kimi_oracle.results.report import finding_lines

    f = run.findings[0]
    assert f.root_causes == ["normalize-float"] and f.max_levels < 1
    worst = next(line for line in finding_lines(f) if line.startswith("worst:"))
    assert "ulp apart" in worst and "both" in worst, worst


def test_invariance_findings_carry_levels_and_ulps():
    batch_float = next(m for m in MUTANTS if m.name == "batch_path_float")
    run = fuzz(Candidate(batch_float.name, batch_float), PreprocessConfig.k3_small(),
               FuzzOptions(examples=40, seed=2, tolerance="levels:1", max_side=24))
    inv = [f for f in run.findings if f.check == "invariance"]
    assert inv
    stats = inv[0].stats
    assert 0 < stats["max_level_diff"] < 1 and stats["max_ulp"] >= 1
    assert inv[0].max_levels == stats["max_level_diff"] and "ulp)" in inv[0].message


def test_diff_pictures_are_upscaled_to_a_readable_size(eager_run):
    _, summary = eager_run
    for f in summary["findings"][:5]:
        with Image.open(Path(f["path"]) / "diff.png") as pic:
            panel_height = pic.height - 30  # minus the label row and gaps
            assert min(pic.width // 3, panel_height) >= 200, (f["key"], pic.size)


def test_an_attribution_is_made_once_per_input_and_result(monkeypatch):
    # The gate diagnoses NEW's and OLD's findings; where both returned the same bytes on the same
    # input the second diagnosis is the first one's (memoized), and any other result is attributed.
    import torch

    from kimi_oracle.oracle.checks import compare
    from kimi_oracle.oracle.diagnosis import findings as diagnosis
    from kimi_oracle.pipelines import reference

    config = PreprocessConfig.k3()
    img = Image.new("RGB", (40, 30))
    img.putdata([((x * 37) % 256, (x * 11) % 256, 90) for x in range(40 * 30)])
    expected = reference.preprocess([img], config)
    swapped = type(expected)(expected.pixel_values.flip(1).contiguous(), expected.grid_thws.clone())
    calls = []
    real = diagnosis.attribute
    monkeypatch.setattr(diagnosis, "attribute", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(diagnosis, "_ATTRIBUTIONS", {})
    verdict = compare(expected, swapped, config)
    first = diagnosis.finding_diagnosis("pixel_mismatch", verdict.stats, [img], config, expected, swapped)
    again = diagnosis.finding_diagnosis("pixel_mismatch", verdict.stats, [img.copy()], config, expected,
                                        type(swapped)(swapped.pixel_values.clone(), swapped.grid_thws.clone()))
    assert len(calls) == 1 and again == first and first["root_causes"]
    again["root_causes"].append("edited")  # a caller's edit does not reach the memo
    other = swapped.pixel_values.clone()
    other[0, 0, 0, 0] += 0.5
    diagnosis.finding_diagnosis("pixel_mismatch", verdict.stats, [img], config, expected,
                                type(swapped)(other, swapped.grid_thws.clone()))
    assert len(calls) == 2
    assert diagnosis.finding_diagnosis("pixel_mismatch", verdict.stats, [img], config, expected, swapped) == first
    assert len(calls) == 2 and torch.equal(swapped.pixel_values, expected.pixel_values.flip(1))


def test_shared_reference_runs_tell_palettes_apart(monkeypatch):
    # Two palette images with the same indices and different palettes are different inputs: an
    # attribution of the second may not reuse the first one's reference runs (found by review:
    # a spurious normalize-float at 114 levels appeared).
    from kimi_oracle.oracle import diagnosis
    from kimi_oracle.oracle.diagnosis import findings, search
    from kimi_oracle.pipelines import reference

    monkeypatch.setattr(search, "VARIANT_RUNS", {})
    monkeypatch.setattr(search, "VARIANT_BYTES", [0])
    monkeypatch.setattr(findings, "_ATTRIBUTIONS", {})
    config = PreprocessConfig.k3()
    first, second = Image.new("P", (3, 2), 1), Image.new("P", (3, 2), 1)
    first.putpalette([0, 0, 0, 250, 10, 10] * 128)
    second.putpalette([0, 0, 0, 10, 250, 10] * 128)
    alone = diagnosis.attribute([second], config, reference.preprocess([second], config))
    monkeypatch.setattr(search, "VARIANT_RUNS", {})
    monkeypatch.setattr(search, "VARIANT_BYTES", [0])
    shifted = reference.preprocess([first], config)
    shifted = type(shifted)(shifted.pixel_values + 0.25, shifted.grid_thws)
    diagnosis.attribute([first], config, shifted)  # fills the shared runs with the first image's
    after = diagnosis.attribute([second], config, reference.preprocess([second], config))
    assert alone.root_causes == after.root_causes == () and after.max_levels == 0
