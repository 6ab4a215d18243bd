"""`kimi-oracle fuzz --media video --chunker SPEC` (issue 42): exit 1 with the finding named, 0 for
the checkpoint's own rules written again, 2 for K3 without --video-rules and for what is not
judged on video yet (never run as images instead)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import exit_code_of as run_cli

CHUNKERS = str(Path(__file__).resolve().parents[1] / "mutants" / "chunkers.py")


def test_a_planted_chunker_defect_fails_the_run_and_is_named(tmp_path, capsys):
    code = run_cli("fuzz", "--media", "video", "--chunker", f"{CHUNKERS}:repeated_tail", "--examples", "200",
                   "--seed", "5", "--profile", "k25", "--json", tmp_path / "v.json")
    out = capsys.readouterr().out
    assert code == 1 and "explained by chunk-tail/repeat-last" in out
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["ok"] is False and doc["videos"] == 200 and doc["seed"] == 5
    assert doc["groups"][0]["explained_by"] == ["chunk-tail/repeat-last"]


def test_k3_needs_the_k25_rules_asked_for(capsys):
    assert run_cli("fuzz", "--media", "video", "--chunker", f"{CHUNKERS}:faithful", "--examples", "50",
                   "--profile", "k3") == 2
    assert "--video-rules k25" in capsys.readouterr().err
    assert run_cli("fuzz", "--media", "video", "--chunker", f"{CHUNKERS}:faithful", "--examples", "50",
                   "--profile", "k3", "--video-rules", "k25", "--seed", "1") == 0


def test_what_is_not_judged_on_video_is_refused(capsys):
    assert run_cli("fuzz", "--media", "video", "--candidate", "reference") == 2
    assert run_cli("fuzz", "--media", "both", "--chunker", "reference") == 2
    assert "only a chunker is judged" in capsys.readouterr().err
