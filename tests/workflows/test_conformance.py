"""`kimi-oracle conformance` (issue 31 item 4) on the real releases: each part runs in its own
process and lands in one report, its findings explained and each with a repro folder; a path not
adapted is listed, not run; an unknown engine or part is exit 2 in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import run_cli


def _report(out: Path) -> dict:
    return json.loads((out / "conformance.json").read_text())


def test_conformance_reports_sglangs_planner(tmp_path, capsys):
    # One part, one process: SGLang's planner agrees with the checkpoint on 300 fuzzed sizes.
    out = tmp_path / "conf"
    code, _, err = run_cli(capsys, "conformance", "--engines", "sglang@0.5.23", "--out", out, "--planner-sizes",
                           "300", "--parts", "planner-fuzz", "--seed", "3")
    assert code == 0, err[-2000:]
    (sglang,) = _report(out)["engines"]
    assert sglang["version"] == "0.5.23"
    [part] = sglang["parts"]
    assert part["part"] == "planner-fuzz" and part["status"] == "pass" and part["profile"] == "k3"
    assert part["summary"].startswith("300 sizes") and Path(part["log"]).is_file()
    assert sglang["not_adapted"] == []  # every SGLang path is adapted
    md = (out / "conformance.md").read_text()
    assert "## sglang 0.5.23" in md and "| planner-fuzz | `sglang@0.5.23` | k3 | pass |" in md
    assert "kimi-oracle conformance --engines sglang@0.5.23" in md and str(out) + "/" not in md.split("\n", 4)[4]


@pytest.mark.slow  # (the image path and the request layer of the real SGLang: ~40 s)
def test_conformance_explains_sglangs_image_path_and_request_layer(tmp_path, capsys):
    out = tmp_path / "conf"
    code, _, err = run_cli(capsys, "conformance", "--engines", "sglang@0.5.23", "--out", out, "--examples", "4",
                           "--scenarios", "20", "--parts", "image-fuzz,requests,requests-mixed", "--seed", "1")
    # SGLang's deferred GPU path is knowingly inexact (docs/adapters.md: P resized in P, straight
    # alpha, float32 normalization), and its request layer normalizes a mixed deferred group with
    # the first item's statistics: findings, exit 1.
    assert code == 1, err[-2000:]
    parts = {(p["spec"], p["part"]): p for p in _report(out)["engines"][0]["parts"]}
    # the CPU backend (the checkpoint's processor on SGLang's items) is exact
    assert parts[("sglang-cpu@0.5.23", "image-fuzz")]["status"] == "pass"
    parts = {part: p for (spec, part), p in parts.items() if spec == "sglang@0.5.23"}
    image = parts["image-fuzz"]
    assert image["status"] == "findings" and image["findings"] and image["root_causes"] and image["pipeline"]
    for f in image["findings"]:  # each with its repro folder and its root causes named
        assert Path(f["path"], "case.json").is_file()
        assert f["root_causes"] and "unexplained" not in f["root_causes"], f
    assert parts["requests"]["status"] == "pass"
    mixed = parts["requests-mixed"]
    assert mixed["status"] == "findings" and any(f["check"] == "rows_invariance" for f in mixed["findings"])
    assert "| root cause | mode class |" in (out / "conformance.md").read_text()


def test_an_unknown_engine_or_part_is_exit_2_in_one_line(tmp_path, capsys):
    code, _, err = run_cli(capsys, "conformance", "--engines", "nosuch", "--out", tmp_path / "a")
    assert code == 2 and "unknown engine 'nosuch'" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "conformance", "--engines", "sglang", "--out", tmp_path / "b", "--parts", "x")
    assert code == 2 and "unknown part(s) x" in err
    # a misspelt engine after a good one: refused before anything runs
    code, _, err = run_cli(capsys, "conformance", "--engines", "sglang@0.5.23,vlm", "--out", tmp_path / "c")
    assert code == 2 and "unknown engine 'vlm'" in err and not (tmp_path / "c" / "sglang@0.5.23").exists()


def test_parts_that_apply_to_nothing_are_an_error_not_a_pass(tmp_path, capsys):
    # transformers has no request layer: `--parts requests` runs nothing, which is exit 2, never 0.
    code, _, err = run_cli(capsys, "conformance", "--engines", "transformers@5.23.0", "--out", tmp_path / "d",
                           "--parts", "requests")
    assert code == 2, err
    (entry,) = _report(tmp_path / "d")["engines"]
    assert "none of --parts requests applies" in entry["error"] and entry["parts"] == []


def test_video_parts_only_with_video_media_and_sglang_lists_its_none(tmp_path):
    # --media video (issue 42): the video planner of transformers as one part; SGLang 0.5.23's
    # "none" video path listed as not adapted, never run; without --media, no video part at all.
    from kimi_oracle.workflows.conformance import ConformanceOptions, plan_parts

    entry, parts = plan_parts("sglang@0.5.23", ConformanceOptions(engines=(), out=tmp_path, media="video"))
    assert not any(p.name.startswith("video") for p in parts)
    assert [n["role"] for n in entry["not_adapted"]] == ["video candidate"]
    _, image_parts = plan_parts("transformers@5.23.0", ConformanceOptions(engines=(), out=tmp_path))
    assert not any(p.name.startswith("video") for p in image_parts)
    _, video_parts = plan_parts("transformers@5.23.0", ConformanceOptions(engines=(), out=tmp_path, media="both"))
    assert {p.name for p in video_parts if p.name.startswith("video")} == {"video-fuzz", "video-planner-fuzz"}
    assert all(p.profile == "k25" for p in video_parts if p.name.startswith("video"))


@pytest.mark.slow
def test_conformance_names_transformers_video_budget_rule(tmp_path, capsys):
    out = tmp_path / "conf"
    code, _, err = run_cli(capsys, "conformance", "--engines", "transformers@5.23.0", "--out", out, "--media",
                           "video", "--parts", "video-planner-fuzz", "--planner-sizes", "400", "--seed", "1")
    assert code == 1, err[-2000:]
    (tf,) = _report(out)["engines"]
    (part,) = tf["parts"]
    assert part["part"] == "video-planner-fuzz" and part["profile"] == "k25" and part["status"] == "findings"
    keys = {f["key"] for f in part["findings"]}
    assert any(k.startswith("new_width{budget-divisor/none") for k in keys), keys
