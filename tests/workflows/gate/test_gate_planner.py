"""`gate --planner`: the planner stage (oracle.planner through workflows.golden.check_planner)."""

from __future__ import annotations

from pathlib import Path

from planner_samples import ROUNDING_PLANNER  # round() instead of int(): spec §2 with one bug

from kimi_oracle.workflows.gate import Gate, GateOptions


def _stage(tmp_path: Path, spec: str | None):
    gate = Gate("reference", None, GateOptions(planner=spec, planner_sizes=2000, seed=1), tmp_path / "out")
    return gate, gate.planner_stage()


def test_a_rounding_planner_fails_the_stage_naming_size_and_field(tmp_path):
    path = tmp_path / "rounding_planner.py"
    path.write_text(ROUNDING_PLANNER)
    gate, stage = _stage(tmp_path, f"{path}:plan")
    assert stage.status == "fail"
    # 2x7169 on K3 (hand calculation, spec §2): scale = 512*14/7169 = 0.99986; int(2*scale) = 1,
    # round() gives 2: the first differing field is the new width.
    assert any("new_width" in r for r in stage.reasons), stage.reasons
    assert any(f["stage"] == "planner" and f.get("field") == "new_width" for f in gate.findings)


def test_the_reference_planner_passes_and_no_planner_is_skipped(tmp_path):
    _, stage = _stage(tmp_path, "reference")
    assert stage.status == "pass", stage.reasons
    assert stage.details["checked"] > 2000  # the grid goldens and the fuzzed sizes
    _, none = _stage(tmp_path, None)
    assert none.status == "skipped" and none.summary == "no --planner given"
