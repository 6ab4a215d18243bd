"""The nightly runner's bookkeeping, without running a campaign: judged counts per harness
(libFuzzer's executions are not examples), a harness that did not run, capped logs, the --out
lock, and the one line a full disk ends with."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimi_oracle.workflows import nightly
from kimi_oracle.workflows.nightly import CampaignOptions, CappedLog, OutInUseError, OutLock


def _harness_status(hdir: Path, **counters) -> None:
    hdir.mkdir(parents=True, exist_ok=True)
    (hdir / "harness-status.json").write_text(json.dumps({"counters": counters, "finding_ids": []}))


def test_examples_are_the_inputs_judged_not_libfuzzer_executions(tmp_path):
    data: dict = {"findings": []}
    spec = {"out": str(tmp_path)}
    # The case: the harness judged 751 inputs, then skipped 870,272 past the deadline
    # (it writes its count at the first skip); libFuzzer executed 871,023.
    _harness_status(tmp_path / "decoder", examples=751, skipped=870_272, rejected=3)
    nightly._collect_harness(spec, "decoder", tmp_path / "decoder", data, 871_023, {}, set())
    h = data["per_harness"]["decoder"]
    assert (h["examples"], h["execs"], h["skipped_past_deadline"]) == (751, 871_023, 870_272)
    # No skip: every execution was judged; the harness' own count may lag (it writes at most
    # once a second and libFuzzer exits without a last write), libFuzzer's final count does not.
    _harness_status(tmp_path / "structured", examples=184, skipped=0)
    nightly._collect_harness(spec, "structured", tmp_path / "structured", data, 200, {}, set())
    assert data["per_harness"]["structured"]["examples"] == 200
    assert data["examples"] == 751 + 200 and data["execs"] == 871_023 + 200


def _worker(tmp_path: Path, index: int, engine: str, status: dict) -> nightly._Worker:
    wdir = tmp_path / "work" / f"w{index}-{engine}"
    wdir.mkdir(parents=True)
    (wdir / "status.json").write_text(json.dumps(status))
    w = nightly._Worker(index, engine, 10.0, wdir / "spec.json", wdir / "status.json", wdir / "worker.log")
    w.returncode = 0
    return w


def test_a_harness_that_did_not_run_says_so(tmp_path):
    opts = CampaignOptions(out=tmp_path, engines=("atheris",))
    status = {"examples": 40, "execs": 40, "findings": [], "stopped": "budget", "per_harness": {
        "structured": {"status": "ran", "note": "", "examples": 40, "execs": 40},
        "decoder": {"status": "not run", "note": "no time left in its share of the budget", "examples": 0,
                    "execs": 0}}}
    (tmp_path / "findings").mkdir()
    summary = nightly._summarize(opts, config=None, engines=["atheris"],
                                 workers=[_worker(tmp_path, 0, "atheris", status)], engine_info={}, errors=[],
                                 stopped="budget", seed=1, started_wall="start", started=time.monotonic(),
                                 existing=set(), corpus_before={}, db_before=0)
    info = summary["engines"]["atheris"]
    assert info["examples"] == 40
    assert info["harnesses"]["decoder"]["status"] == "not run"
    assert info["harnesses"]["structured"] == {"status": "ran", "examples": 40, "execs": 40,
                                               "skipped_past_deadline": 0, "rejected": 0, "duplicates": 0}
    assert any("decoder harness did not run: no time left" in n for n in info["notes"])
    md = nightly.summary_markdown({**summary, "exit_code": 0})
    assert "atheris/decoder: not run (no time left in its share of the budget), 0 inputs judged" in md


def test_a_worker_that_exits_non_zero_is_an_error_naming_its_last_line(tmp_path):
    opts = CampaignOptions(out=tmp_path, engines=("hypothesis",))
    (tmp_path / "findings").mkdir()
    w = _worker(tmp_path, 0, "hypothesis", {"examples": 3, "findings": [], "stopped": None})
    w.returncode = 2
    w.log_path.write_text("starting\nerror: disk full: No space left on device (ENOSPC); already written: 0\n")
    errors: list = []
    nightly._summarize(opts, config=None, engines=["hypothesis"], workers=[w], engine_info={}, errors=errors,
                       stopped="budget", seed=1, started_wall="start", started=time.monotonic(), existing=set(),
                       corpus_before={}, db_before=0)
    assert len(errors) == 1 and "exited with 2" in errors[0] and "disk full" in errors[0]


def test_capped_log_keeps_the_tail_and_sees_every_line(tmp_path):
    seen: list[str] = []
    log = CappedLog(tmp_path / "w.log", 2**20, on_line=seen.append)
    lines = [f"line {i:07d} " + "x" * 90 + "\n" for i in range(40_000)]  # about 4 MiB
    for start in range(0, len(lines), 333):
        log.write("".join(lines[start:start + 333]).encode())
    log.close()
    text = (tmp_path / "w.log").read_text()
    assert len(text.encode()) <= 2**20
    assert text.endswith(lines[-1]) and lines[-2] in text  # the newest lines are kept, whole
    first = text.splitlines()[0]
    assert first.startswith("[kimi-oracle: ") and "earlier bytes of this log were dropped" in first
    assert int(first.split()[1]) == log.dropped == sum(map(len, lines)) - len(text.encode()) + len(first) + 1
    assert seen == [ln[:-1] for ln in lines]


def test_the_out_lock(tmp_path):
    first = OutLock(tmp_path).acquire()
    assert json.loads((tmp_path / ".nightly.lock").read_text())["pid"] == os.getpid()
    with pytest.raises(OutInUseError, match=f"in use by another nightly run \\(pid {os.getpid()} "):
        OutLock(tmp_path).acquire()  # flock: a second holder, even in this process, is refused
    first.release()
    assert not (tmp_path / ".nightly.lock").exists()
    again = OutLock(tmp_path).acquire()
    assert again.taken_over is None
    again.release()
    # A lock file whose run died (no process holds its flock) is taken over, saying whose.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".nightly.lock").write_text(json.dumps({"pid": dead.pid, "host": "h", "started": "t"}))
    stale = OutLock(tmp_path).acquire()
    assert stale.taken_over and f"pid {dead.pid}" in stale.taken_over
    stale.release()


def test_a_full_disk_names_what_was_written(tmp_path):
    summary = {"findings": [{"id": f"crash-{i}"} for i in range(7)]}
    exc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    exc.kimi_written = ["summary.json"]
    line = nightly._not_written(tmp_path, exc, summary)
    assert "\n" not in line and "No space left on device (ENOSPC)" in line
    assert "7 finding folder(s)" in line and "crash-0, crash-1, crash-2, crash-3, crash-4 and 2 more" in line
    assert str(tmp_path / "summary.json") in line
