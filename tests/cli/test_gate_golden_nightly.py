"""No candidate behaviour and no interrupt turns into a pass in `gate`, `golden check` and
`nightly`: hostile candidates (exit 0, a segfault, a hang, ...) are findings or failing cases,
SIGINT and SIGTERM end each command with 130 / 143, a complete report that says `interrupted`,
and never a `pass`. Every run is bounded by example counts and a 1 s case timeout; signals are
sent when the candidate has written a file (it is then blocked inside a call), never after a sleep.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cli_run import exit_code_of as run_cli
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import evaluate
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.grouping import finding_key
from kimi_oracle.workflows.gate import Gate, GateOptions
from kimi_oracle.workflows.golden import default_golden_dir

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
REPO = HELPERS.parents[1]
HOSTILE = HELPERS / "hostile_candidates.py"
EVENTS = HELPERS / "event_candidates.py"
# A bound on waiting for an event, so that a broken test ends; never a condition of the test.
PATIENCE_S = 300

# behaviour -> (check, words the finding must carry)
BEHAVIOURS = {
    "exit0": ("crash", "SystemExit"),
    "segfault": ("crash", "ProcessDied[SIGSEGV]"),
    "hang": ("timeout", "CallTimedOut"),
}



def _wait_for(predicate, proc: subprocess.Popen, what: str) -> None:
    """Poll for an event (a file appearing); the patience bound only stops a broken test."""
    limit = time.monotonic() + PATIENCE_S
    while not predicate():
        assert proc.poll() is None, f"the command ended before {what}: {proc.communicate()}"
        assert time.monotonic() < limit, f"no {what} within {PATIENCE_S} s"
        time.sleep(0.02)


def _blocked(events: Path) -> list[Path]:
    return sorted(events.glob("blocked-*"))


def _signal_when_blocked(proc: subprocess.Popen, events: Path, sig: int, *, first=None, before_signal=None):
    """Send `sig` once a candidate call is blocked (the event), return (stdout, stderr); the
    process never outlives the test. `first` runs before the wait, `before_signal` after it."""
    try:
        if first is not None:
            first()
        _wait_for(lambda: _blocked(events), proc, "a blocked call")
        if before_signal is not None:
            before_signal()
        proc.send_signal(sig)
        return proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()


def _spawn(args: list[str], events: Path, cwd: Path) -> subprocess.Popen:
    env = dict(os.environ, KIMI_TEST_EVENTS=str(events), PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "kimi_oracle", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _gone(pid: int) -> bool:
    """The process has ended (a zombie waiting for its reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


# ---------------------------------------------------------------------------------------------
# gate


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "segfault" else n
                                  for n in sorted(BEHAVIOURS)])  # a death: the exit0 case covers the path
def test_gate_fails_a_misbehaving_candidate_with_findings(tmp_path, name):
    check, words = BEHAVIOURS[name]
    # seed 8 draws no palette image in the 3 fuzz examples (fuzzers.fuzzing's seeded draw): the
    # goldens and invariances meet the misbehaviour (each P case of every profile), the fuzzing
    # stage stays short.
    # (1 s bounds the hang; the others get room, so that a busy machine cannot add a timeout)
    options = GateOptions(budget_s=30.0, seed=8, fuzz_examples=3, case_timeout_s=1.0 if name == "hang" else 10.0)
    report = Gate(f"{HOSTILE}:{name}", None, options, tmp_path).run()
    assert report["verdict"] == "fail", report["reasons"][:5]
    assert report["stages"]["goldens"]["status"] == "fail"
    assert report["stages"]["invariance"]["status"] == "fail"
    mine = [f for f in report["findings"] if f["check"] == check]
    assert mine and any(words in f["message"] for f in mine), report["findings"][:3]
    # (after a hang on a mode class, its other golden cases are recorded as not run)
    assert all(words in f["message"] or f["message"].startswith("NotRunAfterTimeout") for f in mine)
    # only palette cases fail: the candidate's process was restarted and the run went on
    assert {f["case"].split("/")[0] for f in mine if f["stage"] == "goldens"} <= {"P", "side_cap"}
    assert json.loads((tmp_path / "gate-report.json").read_text())["verdict"] == "fail"
    if name == "hang":
        # each hang costs one case timeout: the mode classes it hung on are not run again
        assert report["candidate_processes"]["new"]["timeouts"] <= 4
        assert report["stages"]["goldens"]["details"]["timed_out_on"]


def test_gate_with_a_failing_baseline_is_an_error(tmp_path):
    # OLD raises on every timed input (all are over 300 px): an error of the gate, not a pass or a fail.
    options = GateOptions(budget_s=30.0, seed=3, fuzz_examples=3, case_timeout_s=5.0, perf_rounds=3)
    report = Gate("reference", f"{HELPERS / 'gate_candidates.py'}:crashes_on_large", options, tmp_path).run()
    assert report["verdict"] == "error"
    perf = report["stages"]["performance"]
    assert perf["status"] == "error" and "the baseline failed" in perf["summary"]
    assert "planted: cannot handle large images" in perf["summary"]
    assert [report["stages"][s]["status"] for s in ("goldens", "fuzz", "invariance")] == ["pass"] * 3


@pytest.mark.parametrize("sig,code,stage", [(signal.SIGINT, 130, "goldens"), (signal.SIGTERM, 143, "fuzz")])
def test_an_interrupted_gate_is_an_error_with_a_report(tmp_path, sig, code, stage):
    events = tmp_path / "events"
    events.mkdir()
    if stage == "goldens":
        (events / "block").touch()  # the very first call blocks
    proc = _spawn(["gate", "--candidate", f"{EVENTS}:blocking", "--budget", "10m", "--seed", "3",
                   "--fuzz-examples", "100000", "--out", tmp_path / "out"], events, tmp_path)

    def block_in_fuzz():
        if stage == "fuzz":
            # The event: the gate announces its fuzzing stage; then the next call blocks.
            for line in proc.stderr:
                if line.startswith("gate: fuzz ..."):
                    break
            (events / "block").touch()

    out, err = _signal_when_blocked(proc, events, sig, first=block_in_fuzz)
    assert proc.returncode == code, out[-2000:] + err[-2000:]
    report = json.loads((tmp_path / "out" / "gate-report.json").read_text())
    assert report["verdict"] == "error" and report["stopped"] == "interrupted"
    stages = report["stages"]
    assert stages[stage]["status"] == "error"
    later = ["fuzz", "invariance", "performance"] if stage == "goldens" else ["invariance", "performance"]
    assert all(stages[s]["status"] == "skipped" for s in later)
    if stage == "fuzz":
        assert stages["goldens"]["status"] == "pass"
    assert "kimi-oracle gate: ERROR" in (tmp_path / "out" / "gate-report.md").read_text()
    assert "PASS" not in out.split("verdict:")[-1]
    # the executor blocked in the call was ended with the gate
    pid = int(_blocked(events)[0].name.split("-")[1])
    _wait_for_gone(pid)


def _wait_for_gone(pid: int) -> None:
    limit = time.monotonic() + 30
    while not _gone(pid):
        assert time.monotonic() < limit, f"process {pid} outlived its command"
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# golden check


def _palette_ids(profile: str) -> set[str]:
    lines = (default_golden_dir() / "pixels" / f"{profile}.jsonl").read_text().splitlines()[1:]
    return {e["id"] for e in map(json.loads, lines) if e["params"]["mode"] == "P"}


@pytest.mark.parametrize("name", sorted(BEHAVIOURS))
def test_golden_check_records_each_misbehaviour_as_the_cases_error(tmp_path, capsys, name):
    check, words = BEHAVIOURS[name]
    code = run_cli("golden", "check", "--kind", "pixels", "--profile", "k3", "--candidate", f"{HOSTILE}:{name}",
                   "--case-timeout", "1s" if name == "hang" else "10s", "--out", tmp_path, "--json")
    out = capsys.readouterr().out
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and report["stopped"] == "done"
    changes = report["files"][0]["changes"]
    # exactly the palette cases differ (the golden file says which are palette images): every
    # other case ran, in a restarted process, and matched
    assert {c["key"] for c in changes} == _palette_ids("k3")
    errors = [c["new"]["error"] for c in changes]
    assert all("error" not in c["old"] for c in changes)
    if name == "hang":
        assert sum(words in e for e in errors) >= 1
        assert all(words in e or e.startswith("NotRunAfterTimeout") for e in errors)
    else:
        assert all(words in e for e in errors), errors
    saved = json.loads((tmp_path / "golden-report.json").read_text())
    assert saved["ok"] is False and saved["num_changes"] == len(changes)


@pytest.mark.parametrize("sig,code", [pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow), (signal.SIGTERM, 143)])
def test_an_interrupted_golden_check_never_passes(tmp_path, sig, code):
    events = tmp_path / "events"
    events.mkdir()
    (events / "block").touch()
    proc = _spawn(["golden", "check", "--kind", "pixels", "--candidate", f"{EVENTS}:blocking",
                   "--out", tmp_path / "out"], events, tmp_path)
    out, err = _signal_when_blocked(proc, events, sig)
    assert proc.returncode == code, out[-2000:] + err[-2000:]
    assert "INTERRUPTED" in out and "all 4 files match" not in out
    report = json.loads((tmp_path / "out" / "golden-report.json").read_text())
    assert report["stopped"] == "interrupted" and report["ok"] is False
    assert len(report["files"]) < report["files_planned"] == 4
    _wait_for_gone(int(_blocked(events)[0].name.split("-")[1]))


# ---------------------------------------------------------------------------------------------
# nightly


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


NIGHTLY = ["--engines", "hypothesis", "--profile", "k3-small", "--case-timeout", "1s", "--no-shrink"]


def test_nightly_exit0_is_a_crash_and_a_full_disk_names_what_was_written(tmp_path, capsys, monkeypatch):
    from kimi_oracle.core import files

    real = files._stage

    def disk_full_for_summaries(path, data):  # the runner's summary files meet a full disk
        if Path(path).name.startswith("summary"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data)

    monkeypatch.setattr(files, "_stage", disk_full_for_summaries)
    out = tmp_path / "run"
    code = run_cli("nightly", *NIGHTLY, "--max-examples", "12", "--seed", "2", "--candidate", f"{HOSTILE}:exit0",
                   "--out", out)
    err = capsys.readouterr().err
    assert code == 2
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], err
    crashes = [p for p in (out / "findings").iterdir() if p.name.startswith("crash-")]
    assert crashes and all(p.name in errors[0] for p in crashes)
    assert "1 finding folder(s)" in errors[0] or f"{len(crashes)} finding folder(s)" in errors[0]
    case = json.loads((crashes[0] / "case.json").read_text())
    assert case["check"] == "crash" and "SystemExit" in case["message"]
    assert not (out / "summary.json").exists()
    assert not (out / ".nightly.lock").exists()


def test_nightly_segfault_with_a_chatty_candidate_and_a_stale_lock(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    # a lock left by a run that died: its process is gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / ".nightly.lock").write_text(json.dumps({"pid": dead.pid, "host": "elsewhere", "started": "yesterday"}))
    code = run_cli("nightly", *NIGHTLY, "--max-examples", "12", "--seed", "2",
                   "--candidate", f"{EVENTS}:chatty_segfault", "--log-limit", "1", "--out", out)
    err = capsys.readouterr().err
    assert code == 1, err
    s = _summary(out)
    assert any("took over the lock" in n and str(dead.pid) in n for n in s["notes"])
    assert "took over the lock" in err
    crashes = [f for f in s["findings"] if f["kind"] == "crash"]
    assert crashes and all("ProcessDied[SIGSEGV]" in f["message"] for f in crashes)
    log = out / "work" / "w0-hypothesis" / "worker.log"
    # The candidate printed far more than 1 MiB: its executor's own capped log kept it
    # (fuzzers.confine), so none of it reached the worker's log, and each crash finding keeps the
    # end of what it printed.
    assert "chatty candidate output" not in log.read_text() and log.stat().st_size <= 2**20
    stats = json.loads((Path(crashes[0]["path"]) / "stats.json").read_text())
    assert "chatty candidate output" in stats["stats"]["output"]


def test_nightly_hang_is_a_timeout(tmp_path, capsys):
    out = tmp_path / "run"
    code = run_cli("nightly", *NIGHTLY, "--max-examples", "6", "--seed", "2", "--candidate", f"{HOSTILE}:hang",
                   "--out", out)
    capsys.readouterr()
    assert code == 1
    s = _summary(out)
    timeouts = [f for f in s["findings"] if f["kind"] == "timeout"]
    assert timeouts and all("CallTimedOut" in f["message"] for f in timeouts)
    assert s["stopped"] == "examples" and s["errors"] == []


def test_deaths_by_different_exit_statuses_are_different_findings():
    config = PreprocessConfig.k3_small()
    keys = {}
    with IsolatedCandidate(f"{EVENTS}:exit_status_by_mode", timeout_s=30) as cand:
        for mode in ("P", "L"):
            images = [make_image(CaseParams(9, 7, mode))]
            verdict = evaluate(cand, images, config)
            assert verdict.check == "crash"
            keys[mode] = finding_key(verdict.check, verdict.stats, images)
    assert "exit status 1" in keys["P"] and "exit status 0" in keys["L"]
    # the mode classes differ too; the exception types alone already tell the two deaths apart
    assert keys["P"].split("(")[1] != keys["L"].split("(")[1]


def _nightly_blocked(tmp_path: Path, events: Path, out: Path) -> subprocess.Popen:
    (events / "block").touch()
    return _spawn(["nightly", *NIGHTLY, "--case-timeout", "5m", "--max-examples", "100000",
                   "--candidate", f"{EVENTS}:blocking", "--out", out], events, tmp_path)


def test_nightly_sigterm_writes_the_summary_and_a_second_run_is_refused(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    out = tmp_path / "run"
    proc = _nightly_blocked(tmp_path, events, out)

    def second_run_is_refused():
        # a second run on the same --out, while the first one holds it
        second = subprocess.run([sys.executable, "-m", "kimi_oracle", "nightly", *NIGHTLY, "--max-examples", "1",
                                 "--out", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE_S)
        assert second.returncode == 2
        assert "in use by another nightly run" in second.stderr and f"pid {proc.pid}" in second.stderr
        errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "worker 0:" not in second.stderr  # refused before starting anything
        assert not (out / "summary.json").exists()

    stdout, stderr = _signal_when_blocked(proc, events, signal.SIGTERM, before_signal=second_run_is_refused)
    assert proc.returncode == 143, stdout + stderr
    s = _summary(out)
    assert s["stopped"] == "interrupted" and s["exit_code"] == 143
    suite = ET.parse(out / "junit.xml").getroot()
    assert any(tc.get("name") == "interrupted" for tc in suite.iter("testcase"))
    # the worker and the candidate's executor ended with the runner; the lock is released
    worker = int(stderr.split("(pid ")[1].split(")")[0])
    _wait_for_gone(worker)
    _wait_for_gone(int(_blocked(events)[0].name.split("-")[1]))
    assert not (out / ".nightly.lock").exists()


@pytest.mark.slow  # tests/workflows/nightly/test_campaign.py's Ctrl-C test runs in the default suite
def test_nightly_sigint_writes_the_summary(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    out = tmp_path / "run"
    proc = _nightly_blocked(tmp_path, events, out)
    stdout, stderr = _signal_when_blocked(proc, events, signal.SIGINT)
    assert proc.returncode == 130, stdout + stderr
    s = _summary(out)
    assert s["stopped"] == "interrupted" and s["exit_code"] == 130 and s["errors"] == []
    assert "stopped: interrupted" in (out / "summary.md").read_text()
