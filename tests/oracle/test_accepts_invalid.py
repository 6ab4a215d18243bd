"""Inputs the checkpoint rejects: the candidate still runs; a result is an `accepts_invalid`
finding (reported, failing only under --strict), a raise agrees with the checkpoint."""

from __future__ import annotations

import dataclasses
import json

import pytest
from PIL import Image

from kimi_oracle.cli import main
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.oracle.checks import ACCEPTS_INVALID, FINDING_KINDS, failing
from kimi_oracle.oracle.judge import Rejected, evaluate
from kimi_oracle.pipelines import reference

# Side cap 3 with merge 2 (spec §2): a 40x30 image pads to a 4x4 patch grid, more than 3 on a
# side, and the checkpoint's side assert fails; with the default cap nothing is rejected.
CFG = dataclasses.replace(PreprocessConfig.profile("k3"), patch_limit_on_one_side=3, in_patch_limit=1024)
IMG = Image.new("RGB", (40, 30), (200, 100, 50))


def _lenient(images, config):
    """Plans without the side assert: pads 40x30 to 56x56, a (1, 4, 4) grid."""
    wide = dataclasses.replace(config, patch_limit_on_one_side=512)
    return reference.preprocess(images, wide)


def test_a_result_for_a_rejected_input_is_an_accepts_invalid_finding():
    verdict = evaluate(_lenient, [IMG], CFG)
    assert verdict.check == ACCEPTS_INVALID and ACCEPTS_INVALID in FINDING_KINDS
    assert verdict.stats["actual_grids"] == [[1, 4, 4]] and verdict.stats["sizes"] == [[40, 30]]
    assert "side assert" in verdict.stats["reference_error"] and verdict.actual is not None


def test_a_raise_agrees_with_the_checkpoint():
    calls = []

    def refuses(images, config):
        calls.append(len(images))
        raise ValueError("too large for this engine")

    with pytest.raises(Rejected, match="the candidate raised too: ValueError"):
        evaluate(refuses, [IMG], CFG)
    assert calls == [1]  # the candidate did run


def test_failing_kinds_leave_accepts_invalid_to_strict():
    assert failing([ACCEPTS_INVALID]) == [] and failing([ACCEPTS_INVALID], strict=True) == [ACCEPTS_INVALID]
    assert failing(["crash", ACCEPTS_INVALID]) == ["crash"]


def test_check_reports_accepts_invalid_and_exits_0_unless_strict(tmp_path, capsys):
    image = tmp_path / "small.png"
    IMG.save(image)
    config = tmp_path / "preprocessor_config.json"
    config.write_text(json.dumps(CFG.to_hf_json()))
    candidate = f"{__file__}:_lenient"
    args = ["check", str(image), "--candidate", candidate, "--config", str(config), "--no-invariance",
            "--out", str(tmp_path / "out")]
    for strict, code in ((False, 0), (True, 1)):
        with pytest.raises(SystemExit) as exc:
            main(args + ["--json", str(tmp_path / f"run{strict}.json")] + (["--strict"] if strict else []))
        out = capsys.readouterr().out
        assert exc.value.code == code, out
        summary = json.loads((tmp_path / f"run{strict}.json").read_text())
        assert [f["check"] for f in summary["findings"]] == [ACCEPTS_INVALID] and summary["strict"] is strict
        assert summary["images"][0]["result"] == ACCEPTS_INVALID
        # The table row of the kind: "reported" unless strict, then "FAIL".
        [row] = [line for line in out.splitlines() if line.lstrip("│| ").startswith(ACCEPTS_INVALID)
                 and any(word in line for word in ("FAIL", "reported", "pass"))]
        assert ("FAIL" in row) is strict and ("reported" in row) is not strict
