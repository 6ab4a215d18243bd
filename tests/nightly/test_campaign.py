"""The nightly runner end to end, with tiny budgets: a clean run, a candidate that aborts its
process on some sizes, one that hangs, a second run on the first one's corpus and database,
Ctrl-C, and a harness error. Each run is a separate `kimi-oracle nightly` process."""

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

import click

from kimi_oracle.workflows.nightly import FINDING_KINDS, plan_jobs
from kimi_oracle.cli.nightly import _duration
from nightly_helpers import REPO, planted, run_nightly

REQUIRED_VERSIONS = {"python", "kimi-oracle", "Pillow", "numpy", "torch", "triton", "atheris"}


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _check_complete(out: Path, s: dict) -> None:
    """The summary is complete and the three reports agree."""
    assert s["schema"] == "kimi-oracle.nightly-summary" and s["schema_version"] == 1
    for key in ("candidate", "profile", "start_time", "end_time", "budget_s", "engines", "findings", "versions"):
        assert key in s, key
    assert REQUIRED_VERSIONS <= set(s["versions"])
    for name, info in s["engines"].items():
        assert "examples" in info and "coverage" in info, name
    for f in s["findings"]:
        assert set(f) >= {"id", "engine", "kind", "check", "path"}
        assert f["kind"] in FINDING_KINDS and f["engine"] in s["engines"]
        assert (Path(f["path"]) / "case.json").is_file()
    suite = ET.parse(out / "junit.xml").getroot()
    failures = sum(int(ts.get("failures")) for ts in suite.iter("testsuite"))
    assert failures == len({f["kind"] for f in s["findings"]})
    md = (out / "summary.md").read_text()
    assert s["candidate"] in md and f"findings: **{len(s['findings'])}**" in md


def test_nightly_durations():
    # --budget and --case-timeout take the CLI's common duration syntax.
    assert _duration(None, None, "90") == 90 and _duration(None, None, "90s") == 90
    assert _duration(None, None, "30m") == 1800 and _duration(None, None, "1.5h") == 5400
    assert _duration(None, None, None) is None
    for bad in ("", "abc", "0s", "-5"):
        with pytest.raises(click.BadParameter):
            _duration(None, None, bad)


def test_plan_jobs_shares_the_budget():
    assert plan_jobs(["hypothesis", "atheris"], 1, 60) == [[("hypothesis", 30)], [("atheris", 30)]]
    assert plan_jobs(["hypothesis", "atheris"], 2, 60) == [[("hypothesis", 60), ("atheris", 60)]]
    assert plan_jobs(["hypothesis", "atheris"], 3, 60) == [[("hypothesis", 60), ("atheris", 60), ("hypothesis", 60)]]
    assert plan_jobs(["atheris"], 1, 10) == [[("atheris", 10)]]


def test_reference_runs_clean(tmp_path):
    out = tmp_path / "run"
    start = time.monotonic()
    proc = run_nightly("--budget", "10s", "--out", str(out), "--profile", "k3-small", "--case-timeout", "5s",
                       "--seed", "3", "--jobs", "2")
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    _check_complete(out, s)
    assert s["findings"] == [] and s["errors"] == [] and s["stopped"] == "budget"
    assert set(s["engines"]) == {"hypothesis", "atheris"}
    assert s["engines"]["hypothesis"]["examples"] > 10
    assert s["engines"]["atheris"]["examples"] > 10
    assert took < 10 + 25  # the budget, plus start-up and the summary


@pytest.fixture(scope="module")
def aborting_run(tmp_path_factory):
    """One campaign against a candidate that calls os.abort() on widths that are multiples of 7."""
    root = tmp_path_factory.mktemp("abort")
    out = root / "run1"
    proc = run_nightly("--budget", "14s", "--out", str(out), "--profile", "k3-small", "--case-timeout", "3s",
                       "--candidate", planted("aborting"), "--corpus", str(root / "corpus"), "--db", str(root / "db"),
                       "--seed", "11", "--jobs", "2")
    return root, out, proc


def test_abort_is_a_crash_finding_and_the_run_completes(aborting_run):
    root, out, proc = aborting_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    s = _summary(out)
    _check_complete(out, s)
    assert s["stopped"] == "budget" and s["errors"] == []
    crashes = [f for f in s["findings"] if f["kind"] == "crash"]
    assert {f["engine"] for f in crashes} == {"hypothesis", "atheris"}
    for f in crashes:
        case = json.loads((Path(f["path"]) / "case.json").read_text())
        assert "SIGABRT" in case["message"]
        # the input that caused it is stored, and it really has a width that is a multiple of 7
        assert any(img["size"][0] % 7 == 0 for img in case["images"])
        assert any(p.name.startswith("input") for p in Path(f["path"]).iterdir())
    atheris_crash = next(f for f in crashes if f["engine"] == "atheris")
    assert (Path(atheris_crash["path"]) / "fuzz-input.bin").is_file()
    # Both engines kept going after the crash.
    assert s["engines"]["hypothesis"]["examples"] > 5 and s["engines"]["atheris"]["examples"] > 5


def test_second_run_reuses_corpus_and_database(aborting_run):
    root, out1, _ = aborting_run
    first = _summary(out1)
    out2 = root / "run2"
    proc = run_nightly("--budget", "8s", "--out", str(out2), "--profile", "k3-small", "--case-timeout", "3s",
                       "--candidate", planted("aborting"), "--corpus", str(root / "corpus"), "--db", str(root / "db"),
                       "--seed", "12", "--jobs", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    second = _summary(out2)
    _check_complete(out2, second)
    db1 = first["engines"]["hypothesis"]["database"]
    db2 = second["engines"]["hypothesis"]["database"]
    assert db1["entries_after"] > 0 and db2["entries_before"] == db1["entries_after"]
    corpus1 = first["engines"]["atheris"]["corpus"]
    corpus2 = second["engines"]["atheris"]["corpus"]
    for name in corpus1:
        assert corpus2[name]["before"] == corpus1[name]["after"]
    assert any(v["added"] > 0 for v in corpus1.values())
    # The database replays the crash first: found at the first example.
    hyp = [f for f in second["findings"] if f["engine"] == "hypothesis" and f["kind"] == "crash"]
    assert hyp
    case = json.loads((Path(hyp[0]["path"]) / "case.json").read_text())
    assert case["example"] == 1


def test_hang_is_a_timeout_finding_and_the_run_completes(tmp_path):
    out = tmp_path / "run"
    start = time.monotonic()
    proc = run_nightly("--budget", "8s", "--out", str(out), "--profile", "k3-small", "--case-timeout", "1s",
                       "--candidate", planted("hanging"), "--seed", "5", "--jobs", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - start < 8 + 30
    s = _summary(out)
    _check_complete(out, s)
    timeouts = [f for f in s["findings"] if f["kind"] == "timeout"]
    assert timeouts and not [f for f in s["findings"] if f["kind"] == "crash"]
    for f in timeouts:
        case = json.loads((Path(f["path"]) / "case.json").read_text())
        assert any(img["size"][0] > 20 for img in case["images"])
        assert "hanging" in (Path(f["path"]) / "report.md").read_text()  # where it hung


def test_ctrl_c_still_writes_a_complete_summary(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle", "nightly", "--budget", "60s", "--out", str(out),
                             "--profile", "k3-small", "--jobs", "2", "--case-timeout", "3s"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(9)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    s = _summary(out)
    _check_complete(out, s)
    assert s["stopped"] == "interrupted" and s["findings"] == []
    assert sum(info["examples"] for info in s["engines"].values()) > 0


def test_bad_candidate_is_a_harness_error(tmp_path):
    out = tmp_path / "run"
    proc = run_nightly("--budget", "5s", "--out", str(out), "--profile", "k3-small", "--engines", "hypothesis",
                       "--candidate", "no_such_module_xyz:fn")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["errors"] and "no_such_module_xyz" in s["errors"][0]
    assert s["findings"] == []
    assert ET.parse(out / "junit.xml").getroot().get("errors") == "1"


def test_usage_errors_exit_2(tmp_path):
    for args in (["--shard", "3/2"], ["--engines", "afl"], ["--budget", "soon"]):
        proc = run_nightly("--out", str(tmp_path / "x"), *args, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
