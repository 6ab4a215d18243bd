"""The gate end to end. Verdicts never depend on the machine's speed: the fuzzing stage runs a
fixed number of examples (--fuzz-examples), the goldens and invariances are fixed case lists, and
the timing stage compares a candidate doing three times the reference's work with the reference
(always at least one input is timed, however little budget is left)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_oracle.workflows.gate import Gate, GateOptions

TESTS = Path(__file__).resolve().parents[2]
FUZZ_EXAMPLES = 10


def run_gate(tmp_path, *args):
    # timeout: a hung gate, not a slow one
    proc = subprocess.run([sys.executable, "-m", "kimi_oracle", "gate", "--out", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=900, cwd=str(TESTS.parent))
    report = tmp_path / "out" / "gate-report.json"
    return proc, (json.loads(report.read_text()) if report.exists() else None)


def test_correct_candidate_passes(tmp_path):
    proc, report = run_gate(tmp_path, "--candidate", "reference", "--budget", "8s", "--seed", "1",
                            "--fuzz-examples", str(FUZZ_EXAMPLES))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["verdict"] == "pass" and report["reasons"] == []
    assert report["schema"] == "kimi-oracle.gate-report" and report["schema_version"] == 2
    stages = report["stages"]
    assert [stages[s]["status"] for s in ("goldens", "invariance", "fuzz")] == ["pass", "pass", "pass"]
    assert stages["performance"]["status"] == "skipped"
    assert stages["fuzz"]["details"]["examples"] >= FUZZ_EXAMPLES and report["fuzz_examples"] == FUZZ_EXAMPLES
    assert {"torch", "Pillow", "numpy"} <= set(report["versions"]) and "machine" in report
    md = (tmp_path / "out" / "gate-report.md").read_text()
    assert "kimi-oracle gate: PASS" in md


def test_wrong_candidate_fails_on_correctness(tmp_path):
    spec = f"{TESTS / 'mutants' / 'planted.py'}:chessboard_flipped"
    proc, report = run_gate(tmp_path, "--candidate", spec, "--budget", "6s", "--seed", "2",
                            "--fuzz-examples", str(FUZZ_EXAMPLES), "--photo-examples", "0")  # (chessboards)
    assert proc.returncode == 1
    assert report["verdict"] == "fail"
    assert report["stages"]["goldens"]["status"] == "fail"
    # The flipped chessboard only shows where transparent pixels meet the background.
    assert any("RGBA" in r or "LA" in r or "P/" in r for r in report["reasons"])
    assert list((tmp_path / "out" / "golden-diffs").glob("*.png"))
    assert "verdict: FAIL" in proc.stdout


def test_slow_candidate_fails_on_performance():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        # A small budget: the timing stage always times its first input, and times more only
        # while the budget lasts; the verdict rests on the first.
        options = GateOptions(profile="k3", budget_s=1.0, perf_threshold_pct=10.0, seed=3, perf_rounds=3,
                              fuzz_examples=FUZZ_EXAMPLES, golden_select=_few_cases)
        gate = Gate("tests/helpers/gate_candidates.py:slow_reference", "reference", options, Path(tmp))
        report = gate.run()
    assert report["verdict"] == "fail"
    assert report["stages"]["goldens"]["status"] == "pass"
    perf = report["stages"]["performance"]
    assert perf["status"] == "fail"
    first = report["timing_ratios"][0]
    # Three times the reference's work: about 3x, far beyond 1.10x and outside the noise.
    assert first["ratio"] > 1.5 and first["slower"]
    assert any(r.startswith("performance on") for r in report["reasons"])


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:run", "no module named"),
    ("tests/does_not_exist.py:f", "no such file"),
    ("badspec", "bad candidate spec"),
])
def test_broken_candidate_spec_exits_2(tmp_path, capsys, monkeypatch, spec, message):
    # In process (the CLI's own entry point): usage errors need no interpreter start-up.
    monkeypatch.chdir(TESTS.parent)
    code = _gate_in_process(tmp_path, "--candidate", spec, "--budget", "5s")
    err = capsys.readouterr().err
    assert code == 2
    assert not (tmp_path / "out" / "gate-report.json").exists()
    assert "Traceback" not in err and message in err.lower()


def _gate_in_process(tmp_path, *args) -> int:
    from kimi_oracle.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["gate", "--out", str(tmp_path / "out"), *args])
    return int(exc.value.code)


def test_bad_options_exit_2(tmp_path, capsys):
    assert _gate_in_process(tmp_path, "--candidate", "reference", "--budget", "soon") == 2
    assert "duration" in capsys.readouterr().err
    assert _gate_in_process(tmp_path, "--candidate", "reference", "--tolerance", "levels:x") == 2


@pytest.mark.slow  # two gate runs over every profile's pixel goldens (~12 s)
def test_tolerance_applies_to_golden_cases():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        # exact: a few cases suffice to fail (every differing case is diagnosed, ~0.5 s each)
        exact = Gate("tests/helpers/gate_candidates.py:nudged_reference", None,
                     GateOptions(budget_s=4.0, seed=4, fuzz_examples=FUZZ_EXAMPLES, golden_select=_few_cases),
                     Path(tmp) / "exact").run()
        # (every case is re-judged within the goldens stage's 40 % of the budget: 48 s is ample;
        # a case not re-judged in time fails as it is, so a budget of 4 s could not pass)
        loose = Gate("tests/helpers/gate_candidates.py:nudged_reference", None,
                     GateOptions(budget_s=120.0, seed=4, tolerance="levels:1", fuzz_examples=FUZZ_EXAMPLES),
                     Path(tmp) / "loose").run()
    assert exact["stages"]["goldens"]["status"] == "fail"
    goldens = loose["stages"]["goldens"]
    assert goldens["status"] == "pass", goldens["reasons"][:3]
    # Every case's digest differs, and every one is within one level.
    assert goldens["details"]["differing_within_tolerance"] >= 300
    assert loose["verdict"] == "pass" and loose["reasons"] == [], loose["reasons"][:3]
    assert loose["stages"]["fuzz"]["status"] == "pass"


def _few_cases(case) -> bool:
    # A few golden cases of each full-size profile (with a baseline both candidates run them):
    # the golden stage's own tests run every case.
    return case.id in ("RGB/opaque", "RGBA/checker", "P/checker")


def test_candidate_crashing_in_the_timing_stage_fails_with_a_report(tmp_path, monkeypatch):
    # In process, on a few golden cases: the CLI's exit codes are tested above and in tests/cli.
    monkeypatch.chdir(TESTS.parent)
    options = GateOptions(budget_s=8.0, seed=5, fuzz_examples=3, fuzz_shrink=False, golden_select=_few_cases)
    report = Gate("tests/helpers/gate_candidates.py:crashes_on_large", "reference", options, tmp_path / "out").run()
    assert report["verdict"] == "fail"
    perf = report["stages"]["performance"]
    assert perf["status"] == "fail" and "planted: cannot handle large images" in perf["summary"]
    assert (tmp_path / "out" / "gate-report.md").exists()
