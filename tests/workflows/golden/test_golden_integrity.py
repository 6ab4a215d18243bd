"""Golden files a candidate cannot rewrite: `golden check` reads and hashes every golden file
before any candidate runs and checks them against the manifest `golden regen --accept` writes; a
golden file that differs from it, or that changed while the candidate ran, fails naming the file;
the candidate runs in a temporary working directory, and what it prints stays out of our stdout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from breaking_candidates import REWRITER
from cli_run import run_cli
from kimi_oracle.workflows import golden, golden_manifest

HELPERS = Path(__file__).resolve().parents[2] / "helpers"
BREAKING = HELPERS / "breaking_candidates.py"


@pytest.fixture
def goldens(tmp_path, monkeypatch) -> Path:
    dest = tmp_path / "golden"
    shutil.copytree(golden.package_golden_dir(), dest, ignore=shutil.ignore_patterns("*.obtained", ".*"))
    monkeypatch.chdir(tmp_path)
    return dest


def _rewriter(tmp_path: Path, golden_dir: Path, *, forge: bool, result: str) -> Path:
    shutil.copy(BREAKING, tmp_path / "breaking_candidates.py")
    path = tmp_path / "rewriter.py"
    path.write_text(REWRITER.format(golden_dir=str(golden_dir), forge=forge, result=result))
    return path


def test_the_shipped_goldens_match_their_manifest():
    gdir = golden.package_golden_dir()
    names = [golden_manifest.relative_name(k, p) for k, p in golden._selection(None, None)]
    assert golden_manifest.verify(gdir, golden_manifest.read_goldens(gdir, names)) == {}


def test_a_golden_file_changed_while_the_candidate_ran_is_named(goldens, tmp_path, capsys):
    cand = _rewriter(tmp_path, goldens, forge=False, result="reference.preprocess")
    code, out, err = run_cli(capsys, "golden", "check", "--golden-dir", goldens, "--kind", "pixels", "--profile", "k3",
                             "--candidate", cand, "--json", "--out", tmp_path / "o1")
    assert code == 1, err
    report = json.loads(out)
    assert report["ok"] is False
    (k3,) = report["files"]
    assert any("pixels/k3.jsonl changed while the candidate ran" in p for p in k3["problems"]), k3["problems"]
    # The check compared the bytes read before the candidate ran: no entry differs.
    assert k3["changes"] == []
    # The next check names the file that no longer matches the manifest.
    code, out, err = run_cli(capsys, "golden", "check", "--golden-dir", goldens, "--kind", "pixels",
                             "--profile", "k3", "--json", "--out", tmp_path / "o2")
    assert code == 1
    problems = json.loads(out)["files"][0]["problems"]
    assert any("pixels/k3.jsonl changed since `golden regen --accept` wrote it" in p for p in problems), problems


def test_a_golden_file_edited_by_hand_fails_and_regen_accept_writes_the_manifest(goldens, tmp_path, capsys):
    path = goldens / "grids" / "k3.jsonl"
    path.write_bytes(path.read_bytes() + b"\n")
    report = golden.check(goldens, kinds=["grids"], profiles=["k3"], out_dir=tmp_path / "o")
    assert not report.ok and any("grids/k3.jsonl changed since" in p for p in report.files[0].problems)
    (goldens / "manifest.json").unlink()
    report = golden.check(goldens, kinds=["grids"], profiles=["k3-small"], out_dir=tmp_path / "o")
    assert not report.ok and any("no manifest.json" in p for p in report.files[0].problems)
    path.write_bytes(path.read_bytes()[:-1])
    code, _, err = run_cli(capsys, "golden", "regen", "--golden-dir", goldens, "--kind", "grids", "--accept",
                           "--out", tmp_path / "o")
    assert code == 0, err
    assert golden.check(goldens, kinds=["grids"], out_dir=tmp_path / "o").ok
    # The golden files themselves are byte for byte the shipped ones.
    assert path.read_bytes() == (golden.package_golden_dir() / "grids" / "k3.jsonl").read_bytes()


def test_the_candidate_runs_in_a_directory_of_its_own_and_its_prints_stay_out(goldens, tmp_path, capsys):
    cand = tmp_path / "chatty.py"
    cand.write_text("import sys\nfrom pathlib import Path\nfrom kimi_oracle.pipelines import reference\n"
                    "def preprocess(images, config):\n"
                    "    Path('written-by-the-candidate').write_text('x')\n"
                    "    sys.stdout.write('chatter {not json\\n' * 2000)\n"
                    "    print('more chatter', flush=True)\n"
                    "    return reference.preprocess(images, config)\n")
    code, out, err = run_cli(capsys, "golden", "check", "--golden-dir", goldens, "--kind", "pixels",
                             "--profile", "k3", "--candidate", cand, "--json", "--out", tmp_path / "o")
    assert code == 0, err
    assert json.loads(out)["ok"] is True  # stdout is the JSON report alone
    assert "chatter" not in err
    assert not (tmp_path / "written-by-the-candidate").exists()


@pytest.mark.slow
def test_a_candidate_forging_the_goldens_it_is_checked_against_fails(goldens, tmp_path, capsys):
    cand = _rewriter(tmp_path, goldens, forge=True, result="negated")
    code, out, err = run_cli(capsys, "golden", "check", "--golden-dir", goldens, "--kind", "pixels",
                             "--candidate", cand, "--case-timeout", "120s", "--out", tmp_path / "o")
    assert code == 1, out + err
    assert "all 4 files match" not in out
    assert "changed while the candidate ran" in out
