"""`kimi-oracle nightly --ray`: without Ray, exit 2 and one line saying how to install it (by
default); with Ray, a real local cluster (started by the run itself, `slow`; Ray binds the machine's
address, not loopback: docs/nightly.md): two
workers whose findings and database entries come back to the one writer, the database replayed
by the next run, a worker killed mid-run named in the summary with nothing it sent lost, and
Ctrl-C leaving a complete summary. Driven by files the candidate writes (events), never by time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nightly_helpers import HERE, REPO, planted, run_nightly

EVENTS = "KIMI_TEST_EVENTS"
BLOCKING = f"{HERE / 'event_candidates.py'}:dropping_blocking"
PATIENCE_S = 600


def test_without_ray_it_is_exit_2_saying_how_to_install(tmp_path):
    # `import ray` fails as when Ray is not installed (a None entry in sys.modules).
    code = ("import sys; sys.modules['ray'] = None; from kimi_oracle.cli import main; "
            f"main(['nightly', '--ray', 'auto', '--max-examples', '1', '--out', {str(tmp_path / 'out')!r}])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'kimi-oracle[ray]'" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _db_files(db: Path) -> set[str]:
    return {str(p.relative_to(db)) for p in db.rglob("*") if p.is_file() and not p.name.startswith(".")}


@pytest.mark.slow  # two Ray campaigns on a local cluster (~30 s each)
def test_two_workers_on_ray_send_everything_back_and_the_database_is_replayed(tmp_path):
    pytest.importorskip("ray")
    db = tmp_path / "db"
    args = ("--ray", "auto", "--jobs", "2", "--budget", "500", "--engines", "hypothesis", "--profile", "k3-small",
            "--case-timeout", "20s", "--candidate", planted("aborting"), "--db", str(db))
    proc = run_nightly(*args, "--max-examples", "30", "--seed", "4", "--out", str(tmp_path / "r1"), timeout=PATIENCE_S)
    assert proc.returncode == 1, proc.stderr[-3000:]
    s = _summary(tmp_path / "r1")
    assert [w["ended"] for w in s["ray"]["workers"]] == ["ran", "ran"] and s["errors"] == []
    assert s["engines"]["hypothesis"]["examples"] == 60 and s["stopped"] == "examples"
    crashes = [f for f in s["findings"] if f["kind"] == "crash"]
    assert crashes and len({f["key"] for f in s["findings"]}) == len(s["findings"])  # one per key
    for f in s["findings"]:  # written by the driver under --out, naming the candidate as given
        case = json.loads((Path(f["path"]) / "case.json").read_text())
        assert Path(f["path"]).parent == tmp_path / "r1" / "findings" and case["candidate"] == planted("aborting")
    assert _db_files(db) and s["engines"]["hypothesis"]["database"]["entries_after"] == len(_db_files(db))
    assert s["ray"]["received"]["finding"] >= len(s["findings"])
    # The next night: every worker replays the shared database first.
    proc = run_nightly(*args, "--max-examples", "5", "--seed", "5", "--out", str(tmp_path / "r2"), timeout=PATIENCE_S)
    assert proc.returncode == 1, proc.stderr[-3000:]
    again = [f for f in _summary(tmp_path / "r2")["findings"] if f["kind"] == "crash"]
    assert again and min(json.loads((Path(f["path"]) / "case.json").read_text())["example"] for f in again) == 1


def _start(tmp_path: Path, events: Path) -> tuple[subprocess.Popen, list[str]]:
    env = {**os.environ, EVENTS: str(events), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kimi_oracle", "nightly", "--ray", "auto", "--jobs", "2", "--budget", "500",
         "--engines", "hypothesis", "--profile", "k3-small", "--case-timeout", "300s", "--max-examples", "20",
         "--candidate", BLOCKING, "--out", str(tmp_path / "out"), "--seed", "8"],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return proc, lines


def _wait_for(predicate, proc: subprocess.Popen) -> None:
    """Until `predicate()` holds (the run still going); the events come from the candidate."""
    import time

    while not predicate():
        assert proc.poll() is None, "the run ended early"
        time.sleep(0.05)


def _block_both(events: Path, proc: subprocess.Popen) -> None:
    _wait_for(lambda: (events / "called").exists(), proc)
    (events / "block").touch()
    _wait_for(lambda: len(list(events.glob("blocked-*"))) >= 2, proc)


@pytest.mark.slow  # a Ray campaign on a local cluster (~40 s)
def test_an_atheris_worker_on_ray_sends_its_corpus_back(tmp_path):
    # The atheris worker placed by Ray: its new corpus inputs come back to the driver, the one
    # writer of --corpus, and the summary's counts are the folder's own.
    pytest.importorskip("ray")
    pytest.importorskip("atheris")
    corpus = tmp_path / "corpus"
    proc = run_nightly("--ray", "auto", "--jobs", "1", "--engines", "atheris", "--max-examples", "20", "--budget",
                       "500", "--profile", "k3-small", "--candidate", "reference", "--seed", "3", "--corpus",
                       str(corpus), "--out", str(tmp_path / "out"), timeout=PATIENCE_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = _summary(tmp_path / "out")
    assert s["errors"] == [] and [w["ended"] for w in s["ray"]["workers"]] == ["ran"]
    counts = s["engines"]["atheris"]["corpus"]
    for harness in ("structured", "decoder"):
        files = [p for p in (corpus / harness).iterdir() if p.is_file()]
        assert counts[harness]["after"] == len(files) and counts[harness]["added"] >= 1, counts
        assert counts[harness]["after"] == counts[harness]["before"] + counts[harness]["added"]


@pytest.mark.slow  # a Ray campaign on a local cluster (~30 s)
def test_a_worker_killed_mid_run_is_named_and_nothing_it_sent_is_lost(tmp_path):
    pytest.importorskip("ray")
    events = tmp_path / "events"
    events.mkdir()
    proc, lines = _start(tmp_path, events)
    _block_both(events, proc)
    pid = next(int(line.rsplit("pid ", 1)[1].strip().rstrip(")")) for line in list(lines) if "worker 0: hypothesis" in line)
    db = tmp_path / "out" / "hypothesis-db"
    sent_before = _db_files(db)
    os.kill(pid, signal.SIGKILL)  # the Ray actor of worker 0, mid-run (its candidate call blocked)
    (events / "block").unlink()
    proc.wait(PATIENCE_S)
    assert proc.returncode == 2, "".join(lines)[-3000:]
    s = _summary(tmp_path / "out")
    dead = [e for e in s["errors"] if "worker 0" in e]
    assert dead and "died" in dead[0] and s["ray"]["workers"][0]["node"] in dead[0]
    assert [w["ended"] for w in s["ray"]["workers"]] == ["died", "ran"]
    assert sent_before <= _db_files(db)
    assert s["findings"] and all(Path(f["path"]).is_dir() for f in s["findings"])


@pytest.mark.slow  # a Ray campaign on a local cluster (~20 s)
def test_ctrl_c_of_the_driver_leaves_a_complete_summary(tmp_path):
    pytest.importorskip("ray")
    events = tmp_path / "events"
    events.mkdir()
    proc, lines = _start(tmp_path, events)
    _block_both(events, proc)
    proc.send_signal(signal.SIGINT)
    proc.wait(PATIENCE_S)
    assert proc.returncode == 130, "".join(lines)[-3000:]
    s = _summary(tmp_path / "out")
    assert s["stopped"] == "interrupted" and s["exit_code"] == 130
    assert (tmp_path / "out" / "junit.xml").is_file() and (tmp_path / "out" / "summary.md").is_file()
    assert not (tmp_path / "out" / ".nightly.lock").exists()
