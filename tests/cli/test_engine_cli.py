"""`kimi-oracle fuzz --engine` and `repro` of scenario folders, end to end (engines isolated)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kimi_oracle.cli import main
from cli_run import exit_code_of as run_cli
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.oracle.engines import ENGINE_ENTRY_POINT_GROUP, load_engine

HELPERS = Path(__file__).resolve().parents[1] / "helpers"



def test_held_out_adapter_passes_through_the_cli(tmp_path, capsys):
    code = run_cli("fuzz", "--engine", f"{HELPERS / 'held_out_adapter.py'}:engine", "--examples", "60", "--seed", "1",
                   "--out", tmp_path, "--json", tmp_path / "run.json", "--junit", tmp_path / "junit.xml")
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["examples"] == 60 and summary["findings"] == [] and summary["seed"] == 1
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "10" and suite.get("failures") == "0"


def test_mixed_configs_finding_is_saved_reported_and_replayed(tmp_path, capsys):
    code = run_cli("fuzz", "--engine", "sglang-0.5.23", "--mixed-configs", "--examples", "30", "--seed", "2",
                   "--out", tmp_path, "--junit", tmp_path / "junit.xml", "--markdown", tmp_path / "run.md")
    out = capsys.readouterr().out
    assert code == 1, out
    assert "rows_invariance" in out and "first item's mean/std/background" in out
    assert "request 0:" in out and "image 0:" in out  # the scenario, per request and image
    [folder] = (tmp_path / "findings").iterdir()
    doc = json.loads((folder / "scenario.json").read_text())
    assert doc["engine"] == "sglang-0.5.23" and doc["check"] == "rows_invariance"
    assert all((folder / e["file"]).is_file() for e in doc["image_files"])
    assert "first item's mean/std/background" in (folder / "report.md").read_text()
    assert "rows_invariance" in (tmp_path / "run.md").read_text()
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite.get("failures") == "1"
    assert run_cli("repro", folder, "--json", tmp_path / "repro.json") == 1
    assert json.loads((tmp_path / "repro.json").read_text())["findings"][0]["check"] == "rows_invariance"
    # The same scenario on an engine that applies each item's own config: fixed.
    assert run_cli("repro", folder, "--engine", f"{HELPERS / 'held_out_adapter.py'}:engine") == 0


def test_an_engine_that_dies_or_hangs_is_a_finding(tmp_path, capsys):
    spec = f"{HELPERS / 'crashing_engines.py'}"
    assert run_cli("fuzz", "--engine", f"{spec}:dies", "--examples", "20", "--seed", "1", "--out", tmp_path,
                   "--no-shrink") == 1
    assert "ProcessDied[exit status 3]" in capsys.readouterr().out
    assert run_cli("fuzz", "--engine", f"{spec}:hangs", "--examples", "3", "--seed", "1", "--out", tmp_path / "h",
                   "--no-shrink", "--case-timeout", "1s") == 1
    assert "timeout" in capsys.readouterr().out


def test_bad_engine_specs_and_options_are_usage_errors(tmp_path, capsys):
    assert run_cli("fuzz", "--engine", "no_such_module_xyz:engine", "--examples", "1", "--out", tmp_path) == 2
    assert run_cli("fuzz", "--engine", f"{HELPERS / 'crashing_engines.py'}:broken", "--examples", "1",
                   "--out", tmp_path) == 2
    assert "no device" in capsys.readouterr().err
    assert run_cli("fuzz", "--candidate", "reference", "--mixed-configs", "--examples", "1", "--out", tmp_path) == 2
    assert run_cli("fuzz", "--engine", "sglang-0.5.23", "--candidate", "reference", "--out", tmp_path) == 2


def test_engines_resolve_from_their_entry_point_group(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "kimi_demo_requests").mkdir(parents=True)
    (site / "kimi_demo_requests" / "__init__.py").write_text(textwrap.dedent('''
        def engine(config, tokenizer):
            """demo request layer"""
            return None
    '''))
    info = site / "kimi_demo_requests-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kimi-demo-requests\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENGINE_ENTRY_POINT_GROUP}]\ndemo-requests = kimi_demo_requests:engine\n")
    monkeypatch.syspath_prepend(str(site))
    factory = load_engine("demo-requests")
    assert factory.description == "demo request layer"
    assert load_engine("sglang-0.5.23").spec == "sglang-0.5.23"
    with pytest.raises(CandidateError, match="bad engine spec"):
        load_engine("not a spec!")


def test_gate_and_nightly_run_a_scenario_stage(tmp_path, capsys):
    assert run_cli("gate", "--engine", "sglang-0.5.23", "--engine-scenarios", "30", "--seed", "1", "--out",
                   tmp_path / "g", "--mixed-configs") == 1
    stage = json.loads((tmp_path / "g" / "engine" / "summary.json").read_text())
    assert stage["verdict"] == "fail" and stage["findings"][0]["check"] == "rows_invariance"
    assert "engine sglang-0.5.23: 30 scenarios" in capsys.readouterr().out
    assert run_cli("gate", "--out", tmp_path / "none") == 2  # neither --candidate nor --engine
    with pytest.raises(SystemExit) as exc:
        main(["nightly", "--out", str(tmp_path / "n"), "--engines", "hypothesis", "--max-examples", "5",
              "--budget", "120s", "--engine", "sglang-0.5.23", "--seed", "3"])
    assert exc.value.code == 0
    stage = json.loads((tmp_path / "n" / "engine" / "summary.json").read_text())
    assert stage["verdict"] == "pass" and stage["examples"] == 5


def test_a_tampered_scenario_folder_is_an_input_error(tmp_path, capsys):
    assert run_cli("fuzz", "--engine", "sglang-0.5.23", "--mixed-configs", "--examples", "30", "--seed", "2",
                   "--out", tmp_path) == 1
    [folder] = (tmp_path / "findings").iterdir()
    doc = json.loads((folder / "scenario.json").read_text())
    image = folder / doc["image_files"][0]["file"]
    image.write_bytes(image.read_bytes() + b"x")
    capsys.readouterr()
    assert run_cli("repro", folder) == 2
    assert "SHA-256 is not the recorded one" in capsys.readouterr().err
    doc["image_files"][0]["file"] = "../escape.png"
    (folder / "scenario.json").write_text(json.dumps(doc))
    assert run_cli("repro", folder) == 2
    (folder / "scenario.json").write_text("{not json")
    assert run_cli("repro", folder) == 2
    assert "not a scenario finding" in capsys.readouterr().err


def test_an_interrupted_engine_fuzz_writes_its_summary(tmp_path):
    # SIGTERM (SIGINT takes the same path through core.interrupts: exit 130 instead of 143).
    sig, code = signal.SIGTERM, 143
    marker = tmp_path / "marker"
    env = {**os.environ, "KIMI_TEST_MARKER": str(marker), "PYTHONPATH": str(HELPERS.parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle", "fuzz", "--engine",
                             f"{HELPERS / 'crashing_engines.py'}:announces", "--examples", "100000", "--seed", "1",
                             "--out", str(tmp_path), "--json", str(tmp_path / "run.json")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while not marker.exists() and proc.poll() is None:
            time.sleep(0.02)  # polling for the event, not a timing assumption
        proc.send_signal(sig)
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["stopped"] == "interrupted" and 0 < summary["examples"] < 100000
