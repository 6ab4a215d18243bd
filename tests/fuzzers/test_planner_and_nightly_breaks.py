"""A planner check obeys --case-timeout per size and --budget overall; a planner's own objects
never cross into our process; nightly's summary and JUnit carry the planner's results and the
real exit code, a misspelt --planner fails before the campaign; a spec naming a path is a path."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest


from cli_run import run_cli
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.planner_fuzz import fuzz_planner, run_isolated

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
BREAKING = HELPERS / "breaking_candidates.py"


def _planner_file(tmp_path: Path, name: str) -> str:
    """A planner loaded from a file (its module is named after the file's path, unknown here)."""
    shutil.copy(BREAKING, tmp_path / "planners.py")
    return f"{tmp_path / 'planners.py'}:{name}"


def test_a_hanging_planner_is_stopped_after_the_case_timeout_naming_the_size(tmp_path, capsys):
    # (the budget bounds a broken check; the case timeout is what must end it)
    code, out, err = run_cli(capsys, "fuzz", "--planner", _planner_file(tmp_path, "sleeper_plan"), "--profile", "k3-small",
                             "--case-timeout", "1s", "--budget", "60s")
    assert code == 1, out + err
    assert "got no answer from the planner within 1 s on " in out


def test_a_slow_planner_stops_at_the_budget_with_what_it_judged(tmp_path):
    report = run_isolated(fuzz_planner, _planner_file(tmp_path, "slow_plan"), PreprocessConfig.profile("k3-small"),
                          planner="slow", sizes=1_000_000, case_timeout_s=30.0, budget_s=1.0)
    assert report.stopped == "budget" and not report.errors
    assert 0 < report.checked < 1_000_000 and report.passed == report.checked - report.rejected


def test_a_plan_of_the_planners_own_ints_is_a_finding_not_an_internal_error(tmp_path, capsys):
    code, out, err = run_cli(capsys, "fuzz", "--planner", _planner_file(tmp_path, "own_class_plan"),
                             "--profile", "k3-small", "--planner-sizes", "64", "--case-timeout", "10s")
    assert code == 1, out + err
    assert "planner_mismatch[grid_thw]" in out and "internal error" not in err


def test_nightly_carries_the_planners_result_and_exit_code(tmp_path, capsys):
    out_dir = tmp_path / "n"
    code, out, err = run_cli(capsys, "nightly", "--candidate", "reference", "--profile", "k3-small", "--engines",
                             "hypothesis", "--max-examples", "3", "--budget", "10m", "--case-timeout", "10s",
                             "--planner", _planner_file(tmp_path, "own_class_plan"), "--planner-sizes", "64",
                             "--out", out_dir)
    assert code == 1, out + err
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["exit_code"] == 1 and summary["planner"]["ok"] is False
    suite = ET.parse(out_dir / "junit.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert int(suite.get("failures")) >= 1
    assert any(c.get("name") == "planner_mismatch" and c.find("failure") is not None for c in suite.iter("testcase"))


def test_a_misspelt_nightly_planner_fails_before_the_campaign(tmp_path, capsys):
    out_dir = tmp_path / "n"
    code, out, err = run_cli(capsys, "nightly", "--candidate", "reference", "--profile", "k3-small", "--engines",
                             "hypothesis", "--max-examples", "3", "--budget", "10m",
                             "--planner", "no_such_planner_module", "--out", out_dir)
    assert code == 2, out + err
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["exit_code"] == 2 and any("no_such_planner_module" in e for e in summary["errors"])
    assert summary["engines"]["hypothesis"]["status"] == "not run"


def test_a_spec_naming_a_path_is_never_an_entry_point(tmp_path, monkeypatch):
    from kimi_oracle.oracle import candidates

    class Broken:
        name, value = "c/broken_plain.py", "no_such_module:fn"

        def load(self):
            raise ImportError("the entry point was used")

    monkeypatch.setattr(candidates, "entry_points", lambda: {"c/broken_plain.py": Broken()})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "broken_plain.py").write_text("def preprocess(images, config):\n    return None\n")
    monkeypatch.chdir(tmp_path)
    assert candidates.load_candidate("c/broken_plain.py").spec == "c/broken_plain.py"


def test_a_write_known_path_that_cannot_be_written_fails_before_the_run(tmp_path, capsys):
    code, out, err = run_cli(capsys, "gate", "--candidate", "reference", "--profile", "k3-small",
                             "--write-known", tmp_path / "missing" / "k.toml", "--out", tmp_path / "g")
    assert code == 2 and "--write-known" in err
    assert not (tmp_path / "g" / "gate-report.json").exists()


def test_a_candidate_restarts_after_a_hang_under_a_relative_temporary_directory(tmp_path, monkeypatch):
    # (nightly's workers set tempfile.tempdir to a path relative to their --out: the executor,
    # which works in a directory of its own, must still find its files after a restart)
    import tempfile

    from PIL import Image

    from kimi_oracle.fuzzers.sandbox import CandidateTimeout, IsolatedCandidate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tmp").mkdir()
    candidate = IsolatedCandidate(f"{HELPERS / 'hostile_candidates.py'}:hang", timeout_s=1.0)
    candidate.start()  # (its fork server's socket in the default temporary directory)
    monkeypatch.setattr(tempfile, "tempdir", "tmp")
    config = PreprocessConfig.profile("k3-small")
    try:
        with pytest.raises(CandidateTimeout):
            candidate([Image.new("P", (20, 20))], config)
        assert candidate([Image.new("RGB", (20, 20))], config).grid_thws.tolist() == [[1, 2, 2]]
    finally:
        candidate.close()
