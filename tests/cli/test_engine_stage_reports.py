"""`gate --engine` and `nightly --engine`: the engine stage is in the verdict, the summary, JUnit and
the exit code (they always agree), within the budget, and a SIGTERM during it is exit 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cli_run import exit_code_of, run_cli
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.engine_sandbox import LocalEngine
from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions, fuzz_engine
from kimi_oracle.oracle.engines import load_engine
from kimi_oracle.workflows import nightly_engine

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
LIES = f"{HELPERS / 'hostile_engines.py'}:short_rows"


def test_gate_with_a_failing_engine_says_fail_everywhere(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "gate", "--candidate", "reference", "--engine", LIES, "--engine-scenarios", "4",
                           "--fuzz-examples", "4", "--budget", "60s", "--seed", "1", "--out", tmp_path)
    report = json.loads((tmp_path / "gate-report.json").read_text())
    assert code == 1 and report["verdict"] == "fail" and "verdict: FAIL" in out
    assert report["stages"]["engine"]["status"] == "fail"
    assert any("grid_mismatch" in r for r in report["reasons"])
    assert "| engine | " in (tmp_path / "gate-report.md").read_text()


def test_nightly_with_a_failing_engine_agrees_with_its_exit_code(tmp_path, capsys):
    code = exit_code_of("nightly", "--out", tmp_path, "--engines", "hypothesis", "--max-examples", "3", "--budget",
                        "120s", "--engine", LIES, "--seed", "3")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == 1 == summary["exit_code"]
    assert [f["kind"] for f in summary["findings"]] == ["grid_mismatch"]
    assert summary["request_engine"]["verdict"] == "fail"
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failed == ["grid_mismatch"]
    assert "## Request layer" in (tmp_path / "summary.md").read_text()


def test_the_engine_stage_keeps_its_budget():
    # A spent budget runs no scenario and says so; the workers leave the engine stage its share.
    factory = load_engine("sglang-0.5.23")
    base = PreprocessConfig.profile("k3")
    with LocalEngine(factory, base) as runner:
        run = fuzz_engine(runner, base, ScenarioFuzzOptions(examples=50, seed=1, budget_s=0.0))
    assert run.examples == 0 and run.stopped == "budget"
    assert nightly_engine.worker_budget(100.0, "x") == 75.0 and nightly_engine.worker_budget(100.0, None) == 100.0


@pytest.mark.slow  # (a nightly in its own process: ~9 s)
def test_sigterm_during_nightlys_engine_stage_is_143(tmp_path):
    marker = tmp_path / "marker"
    env = {**os.environ, "KIMI_TEST_MARKER": str(marker), "PYTHONPATH": str(HELPERS.parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle", "nightly", "--out", str(tmp_path / "n"), "--engines",
                             "hypothesis", "--max-examples", "3", "--engine-scenarios", "100000", "--budget", "1h", "--seed", "1",
                             "--engine",
                             f"{HELPERS / 'crashing_engines.py'}:announces"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while not marker.exists() and proc.poll() is None:
            time.sleep(0.02)  # polling for the event, not a timing assumption
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143
    summary = json.loads((tmp_path / "n" / "summary.json").read_text())
    assert summary["stopped"] == "interrupted" and summary["exit_code"] == 143
