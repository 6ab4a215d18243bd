"""`kimi-oracle fuzz --media video|both` with `--chunker`, `--candidate` and `--planner` (issue 42):
exit 1 with the finding named, 0 for the checkpoint's own rules written again, 2 for K3 without
--video-rules, for an engine without a video path and for what is not judged on video yet (never
run as images instead)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import exit_code_of as run_cli

CHUNKERS = str(Path(__file__).resolve().parents[1] / "mutants" / "chunkers.py")
VIDEO = str(Path(__file__).resolve().parents[1] / "mutants" / "video_candidates.py")


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


def test_a_planted_candidate_defect_fails_the_run_and_is_named(tmp_path, capsys):
    code = run_cli("fuzz", "--media", "both", "--candidate", f"{VIDEO}:no_divisor", "--examples", "150",
                   "--seed", "5", "--profile", "k25", "--json", tmp_path / "v.json", "--out", tmp_path / "out")
    out = capsys.readouterr().out
    assert code == 1 and "explained: budget-divisor/none" in out
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["ok"] is False and doc["examples"] == 150 and doc["media"] == "both" and doc["unexplained"] == 0
    assert {tuple(g["explained_by"]) for g in doc["groups"]} == {("budget-divisor/none",)}
    assert json.loads((tmp_path / "out" / "video-report.json").read_text()) == doc
    assert run_cli("fuzz", "--media", "video", "--candidate", f"{VIDEO}:faithful", "--examples", "40",
                   "--seed", "2", "--profile", "k25") == 0


def test_a_video_planner_that_ignores_the_video_budget_is_named(tmp_path, capsys):
    planner = tmp_path / "planner.py"
    planner.write_text(
        "from kimi_oracle.core.geometry import plan\n"
        "def plan_video(width, height, num_frames, config):\n"
        "    p = plan(width, height, config, limit=config.in_patch_limit_each_frame)\n"
        "    return {'num_tokens': p.num_tokens, 'new_width': p.new_w, 'new_height': p.new_h,\n"
        "            'pad_width': p.pad_w, 'pad_height': p.pad_h}\n")
    code = run_cli("fuzz", "--media", "video", "--planner", str(planner), "--examples", "300", "--seed", "1",
                   "--profile", "k25", "--json", tmp_path / "p.json")
    assert code == 1
    doc = json.loads((tmp_path / "p.json").read_text())
    keys = {g["key"] for g in doc["groups"]}
    assert "new_width{budget-divisor/none}" in keys and not any("unexplained" in k for k in keys), keys
    assert run_cli("fuzz", "--media", "video", "--planner", "reference", "--examples", "200", "--profile", "k25",
                   "--seed", "1") == 0


def test_what_is_not_judged_on_video_is_refused(capsys):
    assert run_cli("fuzz", "--media", "both", "--chunker", "reference", "--profile", "k25") == 2
    assert "--chunker takes --media video" in capsys.readouterr().err
    assert run_cli("fuzz", "--media", "video", "--engine", "sglang", "--profile", "k25") == 2
    assert "no built-in engine's released request layer takes video" in capsys.readouterr().err
    assert run_cli("fuzz", "--media", "video", "--candidate", "sglang@0.5.23", "--profile", "k25") == 2
    assert "sglang has no video path" in capsys.readouterr().err
    assert run_cli("fuzz", "--media", "both", "--candidate", f"{VIDEO}:images_only", "--profile", "k25") == 2


def test_nightly_with_video_media_counts_the_video_groups(tmp_path):
    out = tmp_path / "night"
    code = run_cli("nightly", "--candidate", f"{VIDEO}:no_divisor", "--profile", "k25", "--media", "video",
                   "--video-examples", "25", "--budget", "60s", "--max-examples", "1", "--engines", "hypothesis",
                   "--seed", "2", "--out", out)
    summary = json.loads((out / "summary.json").read_text())
    assert code == 1 and summary["exit_code"] == 1 and summary["video"]["ok"] is False
    assert {tuple(g["explained_by"]) for g in summary["video"]["groups"]} == {("budget-divisor/none",)}
    assert (out / "video.json").is_file() and "kimi-oracle.nightly.video" in (out / "junit.xml").read_text()
    assert "## Video" in (out / "summary.md").read_text()


def test_a_video_request_engine_expanding_per_frame_fails_named(tmp_path, capsys):
    engines = str(Path(__file__).resolve().parents[1] / "mutants" / "video_requests.py")
    code = run_cli("fuzz", "--media", "both", "--engine", f"{engines}:per_frame", "--examples", "60", "--seed", "3",
                   "--profile", "k25", "--json", tmp_path / "r.json")
    assert code == 1 and "input_ids{expansion/per-frame}" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["requests"] == 60
