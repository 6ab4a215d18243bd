"""No candidate behaviour turns into a pass: exits, signals, hangs, memory hogs, BaseExceptions,
markup and threads left running, against fuzz, check and the pytest plugin. Every run here ends
by example counts and events (files the candidate or the tool writes), never by sleeping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PIL import Image

from cli_run import exit_code_of as run_cli

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
HOSTILE = HELPERS / "hostile_candidates.py"
REPO = HELPERS.parents[1]

# behaviour -> words the finding must carry (told apart by type and status, never folded together)
BEHAVIOURS = {
    "exit0": ("crash", "SystemExit"),
    "os_exit0": ("crash", "exit status 0"),
    "segfault": ("crash", "SIGSEGV"),
    "abort": ("crash", "SIGABRT"),
    "hang": ("timeout", "no answer within"),
    "hog": ("crash", "MemoryError"),
    "markup": ("crash", "[enforce fail at alloc_cpu.cpp:72]"),
    "base_exception": ("crash", "Custom"),
    "thread_left_running": ("crash", "left a thread running"),
}



# Four behaviours run in the default suite; the others (the same paths with another signal or
# exception) under `pytest -m slow`, to keep the default suite within its time.
DEFAULT_BEHAVIOURS = ("exit0", "segfault", "hang", "base_exception", "hog")


@pytest.mark.parametrize("name", [n if n in DEFAULT_BEHAVIOURS else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(BEHAVIOURS)])
def test_fuzz_files_every_misbehaviour_as_a_finding(tmp_path, capsys, name):
    check, words = BEHAVIOURS[name]
    code = run_cli("fuzz", "--candidate", f"{HOSTILE}:{name}", "--examples", "8", "--seed", "3", "--modes", "RGB,P",
                   "--max-images", "1", "--max-side", "24", "--no-shrink", "--no-invariance", "--fixed-config",
                   "--profile", "k3-small", "--case-timeout", "1s", "--memory-limit", "512",
                   "--out", tmp_path, "--json", tmp_path / "run.json")
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    summary = json.loads((tmp_path / "run.json").read_text())
    mine = [f for f in summary["findings"] if f["check"] == check]
    assert mine, summary["findings"]
    assert any(words in f["message"] for f in mine), [f["message"] for f in mine]
    folder = Path(mine[0]["path"])
    assert (folder / "case.json").is_file() and any(p.name.startswith("input") for p in folder.iterdir())


@pytest.mark.parametrize("name", ["exit0", "segfault", "hang"])
def test_check_files_misbehaviour_and_never_exits_0(tmp_path, capsys, name):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (20, 12), (1, 2, 3)).save(folder / "rgb.png")
    Image.new("P", (20, 12), 5).save(folder / "pal.png")
    check, words = BEHAVIOURS[name]
    code = run_cli("check", folder, "--candidate", f"{HOSTILE}:{name}", "--profile", "k3-small",
                   "--case-timeout", "2s", "--out", tmp_path / "o", "--json", tmp_path / "run.json")
    assert code == 1
    summary = json.loads((tmp_path / "run.json").read_text())
    assert any(f["check"] == check and words in f["message"] for f in summary["findings"])


# The plugin's hang costs a dozen case timeouts; the fuzz engine's hang handling is tested above.
@pytest.mark.parametrize("name", ["os_exit0", pytest.param("hang", marks=pytest.mark.slow)])
def test_plugin_files_misbehaviour(tmp_path, name):
    (tmp_path / "test_own.py").write_text("def test_own():\n    assert True\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "kimi_oracle.cli.pytest_plugin", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-q", "--kimi-candidate", f"{HOSTILE}:{name}", "--kimi-examples", "12",
         "--kimi-seed", "3", "--kimi-case-timeout", "2s", "--kimi-profile", "k3-small",
         "--kimi-out", str(tmp_path / "out")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    check = BEHAVIOURS[name][0]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"FAILED ::kimi-oracle::{check}" in proc.stdout


# --------------------------------------------------------------------------------------------
# interrupts never pass

SIGNALLING = textwrap.dedent("""
    import os, time
    from kimi_oracle.pipelines import reference
    CALLS = {calls!r}
    def candidate(images, config):
        # The test waits for this file, then interrupts the run: an event, not a sleep.
        n = len(os.listdir(CALLS))
        open(os.path.join(CALLS, str(os.getpid()) + "-" + str(n)), "w").close()
        return reference.preprocess(images, config)
""")


def _interrupt_after_calls(tmp_path: Path, argv: list[str], sig: int, calls_before: int = 3):
    calls = tmp_path / "calls"
    calls.mkdir()
    cand = tmp_path / "signalling.py"
    cand.write_text(SIGNALLING.format(calls=str(calls)))
    argv = [a.replace("CANDIDATE", f"{cand}:candidate") for a in argv]
    proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle", *argv], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Poll for the event; the bound is generous and only stops a broken test from hanging.
        import time

        deadline = time.monotonic() + 300
        while len(os.listdir(calls)) < calls_before and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_fuzz_run_never_passes(tmp_path, sig, code):
    rc, out, err = _interrupt_after_calls(
        tmp_path, ["fuzz", "--candidate", "CANDIDATE", "--examples", "100000", "--profile", "k3-small",
                   "--out", "o", "--json", "run.json", "--junit", "j.xml"], sig)
    assert rc == code, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["stopped"] == "interrupted"
    import xml.etree.ElementTree as ET

    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite.get("errors") == "1"


def test_an_interrupted_check_never_passes(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(60):
        Image.new("RGB", (30 + i, 20), (i, 2, 3)).save(folder / f"{i:03d}.png")
    rc, out, err = _interrupt_after_calls(
        tmp_path, ["check", str(folder), "--candidate", "CANDIDATE", "--profile", "k3-small", "--out", "o",
                   "--json", "run.json"], signal.SIGINT)
    assert rc == 130, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["stopped"] == "interrupted" and 0 < len(summary["images"]) < 60


def test_an_isolated_call_works_while_this_process_goes_on(tmp_path):
    # start_call returns while the executor works: the candidate waits for a file that this
    # process creates only after start_call returned (a synchronous call would time out), and
    # the answer is the reference's, bit for bit. A second request first receives that answer.
    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
    from kimi_oracle.pipelines import reference as ref

    config = PreprocessConfig.k3()
    img = Image.new("RGB", (30, 20), (200, 10, 40))
    img.info["kimi_test_events"] = str(tmp_path)
    import time

    import torch

    events_file = HELPERS / "event_candidates.py"
    with IsolatedCandidate(f"{events_file}:gated", timeout_s=60) as cand:
        call = cand.start_call([img], config)
        for _ in range(60_000):  # the executor says it started (an event, not a duration)
            if (tmp_path / "started").exists():
                break
            time.sleep(0.001)
        assert (tmp_path / "started").exists() and not call.done
        (tmp_path / "go").touch()
        other = cand([Image.new("L", (9, 9), 7)], config)  # receives the first answer first
        assert call.done
        got = call.result()
        assert torch.equal(got.pixel_values, ref.preprocess([img], config).pixel_values)
        assert other.grid_thws.tolist() == [[1, 2, 2]]
        assert cand.activity.count >= 4  # both calls: this process waiting, the executor working


def test_a_call_in_flight_when_its_process_is_stopped_has_no_result(tmp_path):
    # close() (the end of a run, or an interrupt) with a call in flight: that call reports a
    # harness error when asked, never another call's answer or a candidate result.
    from kimi_oracle.core.config import PreprocessConfig
    import torch

    from kimi_oracle.core.errors import CandidateError
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    config = PreprocessConfig.k3()
    img = Image.new("RGB", (30, 20), (200, 10, 40))
    img.info["kimi_test_events"] = str(tmp_path)  # the candidate waits for `go`, never created
    events_file = HELPERS / "event_candidates.py"
    cand = IsolatedCandidate(f"{events_file}:gated", timeout_s=60)
    call = cand.start_call([img], config)
    cand.close()
    with pytest.raises(CandidateError, match="stopped before it answered"):
        call.result()
    # the candidate starts again for the next call
    (tmp_path / "go").touch()
    from kimi_oracle.pipelines import reference as ref

    assert torch.equal(cand([img], config).pixel_values, ref.preprocess([img], config).pixel_values)
    cand.close()
