"""Planner candidates: specs, accepted plan shapes, the first differing field, rejected sizes,
the grid goldens, the planner fuzz and the engine's self-check.

Expected values come from the spec's worked examples (preprocessing-spec.md §2) and hand
calculations written next to them, never from `core.geometry`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap

import pytest
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.oracle.candidates import as_plan, load_candidate
from kimi_oracle.oracle.judge import evaluate
from kimi_oracle.oracle.planner import Planner, PlannerReport, check_sizes, judge_size, load_planner
from planner_samples import ROUNDING_PLANNER

K3 = PreprocessConfig.profile("k3")
K25 = PreprocessConfig.profile("k25")

def _spec_plan(width, height, config):
    """Spec §2 without the side assert (an engine's planner): a second, independent writing."""
    p, m = config.patch_size, config.merge_kernel_size
    s1 = math.sqrt(config.in_patch_limit / (max(1.0, width // p) * max(1.0, height // p)))
    side = config.patch_limit_on_one_side
    scale = min(1.0, s1, side * p / width, side * p / height)
    new_w = min(max(1, int(width * scale)), side * p)
    new_h = min(max(1, int(height * scale)), side * p)
    f = m * p
    pad_w, pad_h = (f - new_w % f) % f, (f - new_h % f) % f
    tokens = config.fixed_output_tokens or ((new_h + pad_h) // f) * ((new_w + pad_w) // f)
    return {"num_tokens": tokens, "new_width": new_w, "new_height": new_h, "pad_width": pad_w, "pad_height": pad_h}


@pytest.fixture
def rounding_file(tmp_path):
    path = tmp_path / "rounding_planner.py"
    path.write_text(ROUNDING_PLANNER)
    return path


def test_engine_dict_grid_is_derived_and_matches_the_spec_examples():
    # spec §2, K2.5: 640x480 -> pad 4/24, grid (1, 36, 46), 414 tokens; 8000x100 -> 7168x89, grid (1, 8, 512)
    shape = as_plan({"num_tokens": 414, "new_width": 640, "new_height": 480, "pad_width": 4, "pad_height": 24}, K25)
    assert shape.shape == "engine" and shape.plan.grid_thw == (1, 36, 46) and shape.plan.num_tokens == 414
    assert shape.names["new_w"] == "new_width"
    report = PlannerReport("spec")
    planner = Planner("spec", _spec_plan)
    for w, h in ((640, 480), (8000, 100), (1, 1), (29, 29), (3000, 3000)):
        assert judge_size(planner, report, w, h, K25)
    assert report.ok and report.passed == 5 and report.shapes == {"engine": 5}


def test_project_plan_object_and_field_dicts_are_accepted():
    p = ResizePlan(1, 1, 27, 27, (1, 2, 2), 1)  # spec §2: 1x1
    assert as_plan(p, K25).plan == p
    as_dict = as_plan({"new_w": 1, "new_h": 1, "pad_w": 27, "pad_h": 27, "num_tokens": 1}, K25)
    assert as_dict.plan == p and as_dict.shape == "dict"
    given = as_plan({"new_w": 1, "new_h": 1, "pad_w": 27, "pad_h": 27, "num_tokens": 1, "grid_thw": [1, 9, 9]}, K25)
    assert given.plan.grid_thw == (1, 9, 9)  # a given grid is compared as given, not derived


@pytest.mark.parametrize("value, message", [
    (None, "returned None"),
    ({"new_width": 1}, "a dict with keys"),
    ({"num_tokens": 1.0, "new_width": 1, "new_height": 1, "pad_width": 27, "pad_height": 27}, "num_tokens is 1.0"),
    ({"num_tokens": True, "new_width": 1, "new_height": 1, "pad_width": 27, "pad_height": 27}, "num_tokens is True"),
])
def test_malformed_plans_are_harness_errors(value, message):
    with pytest.raises(CandidateError, match=message):
        as_plan(value, K25, "p", (1, 1))


def test_first_differing_field_and_size_are_named():
    def pads_wrong(w, h, config):
        out = _spec_plan(w, h, config)
        out["pad_height"] += 28  # height padding one merge unit too many: grid h and tokens follow
        return out

    report = check_sizes(Planner("pads", pads_wrong), [(640, 480, K25, None)])
    [finding] = report.findings.values()
    # new size agrees; the first field that differs is the height padding: 24 by the spec.
    assert finding.key == "planner_mismatch[pad_h]" and finding.field == "pad_height"
    assert finding.size == (640, 480) and finding.expected == 24 and finding.actual == 52
    assert finding.message.startswith("640x480 (") and "pad_height 52, expected 24" in finding.message


def test_rounding_planner_fails_the_grid_goldens_naming_size_and_field(rounding_file):
    from kimi_oracle.workflows.golden import planner_golden_report

    report = planner_golden_report(f"{rounding_file}:plan", profiles=("k3",))
    assert not report.ok and report.sources == {"golden:k3": report.checked} and report.checked > 4000
    finding = report.findings["planner_mismatch[new_w]"]
    # 2x7169 on K3 (hand calculation): s3 = 512*14/7169 = 0.99986; int(2*0.99986) = 1, round() gives 2.
    assert finding.size == (2, 7169) and finding.field == "new_width"
    assert (finding.expected, finding.actual) == (1, 2)
    assert planner_golden_report("reference", profiles=("k3",)).ok


def test_golden_check_planner_cli(rounding_file, capsys):
    from kimi_oracle.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["golden", "check", "--planner", f"{rounding_file}:plan", "--profile", "k25", "--json"])
    assert exc.value.code == 1
    out = json.loads(capsys.readouterr().out)
    fields = {f["field"] for f in out["findings"]}
    assert out["ok"] is False and fields <= {"new_width", "new_height"} and fields
    assert all(f["size"] and "expected" in f["message"] for f in out["findings"])


def test_rejected_sizes_are_reported_not_failed():
    # Side cap 3 with merge 2: 40x30 pads to a 4x4 patch grid > 3, the checkpoint's side assert fails.
    cfg = dataclasses.replace(K3, patch_limit_on_one_side=3, in_patch_limit=1024)
    planned = check_sizes(Planner("no-assert", _spec_plan), [(40, 30, cfg, None)])
    assert planned.ok and planned.rejected == 1 and planned.rejected_planned == 1
    assert planned.rejected_examples[0]["size"] == [40, 30]
    assert any("rejects 1 size" in line for line in planned.lines())

    def refuses(w, h, config):
        raise AssertionError("side assert")

    raised = check_sizes(Planner("raises", refuses), [(40, 30, cfg, None)])
    assert raised.ok and raised.rejected == 1 and raised.rejected_planned == 0


def test_planner_raising_on_a_valid_size_is_a_finding():
    def divides(w, h, config):
        return _spec_plan(w, h, config) if w > 1 else 1 // 0

    report = check_sizes(Planner("div", divides), [(1, 5, K3, None), (7, 5, K3, None)])
    [finding] = report.findings.values()
    assert finding.key == "planner_crash(ZeroDivisionError)" and finding.size == (1, 5) and report.passed == 1


def test_planner_fuzz_finds_the_rounding_bug_on_varied_configs(rounding_file):
    from kimi_oracle.fuzzers.planner_fuzz import cases, fuzz_planner

    report = fuzz_planner(f"{rounding_file}:plan", K3, sizes=8_000, seed=5)
    assert {"planner_mismatch[new_w]", "planner_mismatch[new_h]"} <= set(report.findings)
    assert report.checked == 8_000 and report.rejected_planned > 0  # caps that are not multiples of 2
    drawn = {(c.patch_size, c.merge_kernel_size) for _, _, c, _ in cases(K3, 8_000, seed=5)}
    assert len(drawn) > 4  # patch and merge sizes vary, not only budgets and caps
    again = fuzz_planner(f"{rounding_file}:plan", K3, sizes=8_000, seed=5)
    assert again.to_dict()["findings"] == report.to_dict()["findings"]  # deterministic from the seed
    assert fuzz_planner(Planner("spec", _spec_plan), K3, sizes=8_000, seed=5).ok


def test_planner_specs(tmp_path, rounding_file):
    assert load_planner("reference").func.__module__ == "kimi_oracle.core.geometry"
    assert load_planner(f"{rounding_file}:plan").spec.endswith(":plan")
    engine = tmp_path / "engine_mod.py"
    engine.write_text("def plan(w, h, config):\n    return None\n\ndef preprocess(images, config):\n    return None\n")
    loaded = load_planner(str(engine))
    assert loaded.preprocess is not None and loaded.func.__name__ == "plan"
    with pytest.raises(CandidateError, match="has no plan function"):
        load_planner("kimi_oracle.core.errors")


ENGINE = '''
from kimi_oracle.pipelines.reference import preprocess as _reference
import torch

def plan(width, height, config):
    {plan_body}

def preprocess(images, config):
    {pre_body}
'''


def _write_engine(tmp_path, name, plan_body, pre_body="return _reference(images, config)"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(ENGINE).format(plan_body=plan_body, pre_body=pre_body)
                    + "\n" + textwrap.dedent(_SPEC_SOURCE))
    return load_candidate(str(path))


_SPEC_SOURCE = '''
import math
def spec_plan(width, height, config):
    p, m = config.patch_size, config.merge_kernel_size
    s1 = math.sqrt(config.in_patch_limit / (max(1.0, width // p) * max(1.0, height // p)))
    side = config.patch_limit_on_one_side
    scale = min(1.0, s1, side * p / width, side * p / height)
    new_w = min(max(1, int(width * scale)), side * p)
    new_h = min(max(1, int(height * scale)), side * p)
    f = m * p
    pad_w, pad_h = (f - new_w % f) % f, (f - new_h % f) % f
    tokens = ((new_h + pad_h) // f) * ((new_w + pad_w) // f)
    return {"num_tokens": tokens, "new_width": new_w, "new_height": new_h, "pad_width": pad_w, "pad_height": pad_h}
'''


def test_engine_self_check_mirrors_its_two_errors(tmp_path):
    img = Image.new("RGB", (40, 30), (10, 20, 30))
    cfg = PreprocessConfig.profile("k3-small")
    good = _write_engine(tmp_path, "good_engine", "return spec_plan(width, height, config)")
    assert good.plan is not None and evaluate(good, [img], cfg).ok

    wide = _write_engine(tmp_path, "wide_engine",
                         "out = spec_plan(width, height, config); out['pad_width'] += 28; return out")
    verdict = evaluate(wide, [img], cfg)
    # 40x30 under k3-small plans to 56x56 padded: grid (1, 4, 4); the planner advertises (1, 4, 6).
    assert verdict.check == "grid_mismatch" and verdict.stats["self_check"] is True
    assert "deferred GPU preprocessing produced wrong grids" in verdict.message
    assert verdict.stats["advertised_grids"] == [[1, 4, 6]] and verdict.stats["produced_grids"] == [[1, 4, 4]]
    # The same through the candidate's own process, as every command runs it.
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    with IsolatedCandidate(str(tmp_path / "wide_engine.py")) as isolated:
        remote = evaluate(isolated, [img], cfg)
    assert remote.check == "grid_mismatch" and remote.stats == verdict.stats and remote.message == verdict.message
    # A finding's report names both grids.
    from kimi_oracle.fuzzers.fuzzing import finding_from
    from kimi_oracle.results.report import finding_lines

    lines = finding_lines(finding_from(verdict, wide.spec, cfg, [img]))
    assert "image 0 (40x30): grid (1, 4, 4), expected (1, 4, 6)" in "\n".join(lines)

    short = _write_engine(tmp_path, "short_engine", "return spec_plan(width, height, config)",
                          "r = _reference(images, config); return r.pixel_values[:-1], r.grid_thws")
    verdict = evaluate(short, [img], cfg)
    assert verdict.check == "feature_length" and "deferred feature length does not match image grids" in verdict.message
    assert verdict.stats["advertised_rows"] == 16 and verdict.stats["produced_rows"] == 15


def test_a_planner_that_kills_its_process_is_an_error_line_not_the_end(tmp_path):
    from kimi_oracle.fuzzers.planner_fuzz import fuzz_planner, run_isolated

    dies = tmp_path / "dies.py"
    dies.write_text("import os\ndef plan(w, h, config):\n    os._exit(3)\n")
    report = run_isolated(fuzz_planner, f"{dies}:plan", K3, planner="dies", sizes=10)
    assert not report.ok and report.errors == ["the planner's process died (exit status 3)"]
    with pytest.raises(CandidateError, match="no such file"):
        run_isolated(fuzz_planner, f"{tmp_path}/absent.py:plan", K3, planner="absent", sizes=10)
