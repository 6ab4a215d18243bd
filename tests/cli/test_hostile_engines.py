"""Engines that lie or escape (tests/helpers/hostile_engines.py), through `fuzz --engine`: no false
pass, nothing of the engine loaded in this process, and an engine confined as a candidate is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_run import run_cli

HOSTILE = Path(__file__).resolve().parents[1] / "helpers" / "hostile_engines.py"


def _fuzz(capsys, tmp_path, name, *extra):
    return run_cli(capsys, "fuzz", "--engine", f"{HOSTILE}:{name}", "--examples", "4", "--seed", "1", "--no-shrink",
                   "--out", tmp_path / name, "--json", tmp_path / f"{name}.json", *extra)


def _checks(tmp_path, name):
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    return {f["check"] for finding in doc["findings"] for f in finding["findings"]}


def test_rows_split_by_the_engines_own_grids_fail_grid_and_feature_length(tmp_path, capsys):
    # encode returns t*h*(w-1) rows per item and writes that grid back into the item: the rows
    # split by those grids agree with the same image alone, so only the checkpoint's grids catch it.
    code, out, _ = _fuzz(capsys, tmp_path, "short_rows")
    assert code == 1, out
    checks = _checks(tmp_path, "short_rows")
    assert {"grid_mismatch", "feature_length"} <= checks, checks
    assert "the engine rewrote its item's grid" in out


def test_a_tensor_subclass_cannot_vote_itself_equal(tmp_path, capsys):
    # +1.0 on every batch item after the first, behind a __torch_function__ that makes
    # torch.equal answer True: compared as bytes, the batch differs from the image alone.
    code, out, err = _fuzz(capsys, tmp_path, "liar")
    assert code == 1, out + err
    assert "rows_invariance" in _checks(tmp_path, "liar")
    assert "max |diff| 1 " in out
    # Nothing of the engine was imported here (a file spec loads as _kimi_candidate_<stem>_<digest>).
    assert not [m for m in sys.modules if m == "hostile_engines" or m.startswith("_kimi_candidate_hostile_engines")]


def test_float_ids_are_not_truncated_into_ids(tmp_path, capsys):
    code, out, _ = _fuzz(capsys, tmp_path, "float_ids")
    assert code == 1, out
    assert "input_ids" in _checks(tmp_path, "float_ids")
    assert "only integers are ids" in out


def test_an_engine_is_confined_as_a_candidate(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _fuzz(capsys, tmp_path, "chatty")
    assert code == 0 and "chatty engine" not in out + err  # its output went to its capped log
    code, out, err = _fuzz(capsys, tmp_path, "writes_cwd")
    assert code == 0, out + err
    assert not (tmp_path / "engine-was-here.txt").exists()  # it wrote into its own directory



def test_what_an_engine_forks_dies_with_it(tmp_path):
    # The probe: a child the engine forked outlived the CLI and wrote a file 25 s later.
    # Run as a user runs it (its own process, its own environment); once the CLI has exited, the
    # child is dead (a zombie until init reaps it, or gone).
    marker = tmp_path / "child.pid"
    env = {**os.environ, "KIMI_TEST_CHILD_PID": str(marker)}
    proc = subprocess.run([sys.executable, "-m", "kimi_oracle", "fuzz", "--engine", f"{HOSTILE}:forks", "--examples",
                           "2", "--seed", "1", "--out", str(tmp_path / "out")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and marker.exists(), proc.stdout + proc.stderr
    pid = int(marker.read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("Z", "X", "gone"), state


def test_memory_limit_and_a_hanging_factory(tmp_path, capsys):
    code, out, err = _fuzz(capsys, tmp_path, "hog", "--memory-limit", "300")
    assert code == 1, out + err
    assert "MemoryError" in out
    code, out, err = _fuzz(capsys, tmp_path, "slow_factory", "--case-timeout", "1s")
    assert code == 2
    assert "while making an engine (its factory)" in err and "--case-timeout" in err
