"""The video golden file (issue 42): `golden/video/k25.jsonl` holds the docs' worked examples (hand
arithmetic of the spec), the reference and the planted `faithful` chunk pipeline (written from the
spec, tests/mutants/video_candidates.py) both reproduce it, a pad one level brighter changes the
six pixel digests and nothing else, K3 has none, and the default check stays the image kinds."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import exit_code_of as run_cli

from kimi_oracle.workflows import golden

MUTANTS = str(Path(__file__).resolve().parents[2] / "mutants" / "video_candidates.py")
GOLDEN = Path(golden.default_golden_dir()) / "video" / "k25.jsonl"


def _entries():
    lines = GOLDEN.read_text().splitlines()
    return {e["id"]: e for e in map(json.loads, lines[1:])}


def test_the_recorded_table_holds_the_worked_examples():
    entries = _entries()
    e = entries["chunks/300@30/hms"]  # 20 sampled frames, 5 chunks; 189 / 30 truncates to .299
    assert (e["sampled"], e["chunks"]) == (20, 5)
    assert e["head"] == [[0, 16, 31, 47], [63, 79, 94, 110]] and e["tail"] == [252, 268, 283, 299]
    assert e["timestamps_head"] == ["00:00:00.000", "00:00:02.100", "00:00:04.200"]
    e = entries["chunks/25@10/hms"]  # (0, 6, 12, 18), (24,): 2.4 s reads 00:00:02.399
    assert e["head"] == [[0, 6, 12, 18], [24]] and e["timestamp_tail"] == "00:00:02.399"
    p = entries["plan/1920x1080/t4"]  # sqrt(4096 / (137 * 77)) -> 1196x672, pad 8, 43 x 24 tokens
    assert (p["new_w"], p["new_h"], p["pad_w"], p["grid_thw"], p["num_tokens"]) == (1196, 672, 8, [4, 48, 86], 1032)
    p = entries["plan/1920x1080/t3/video8192"]  # round(8192 / 3) = 2731 patches a frame -> 976x549
    assert (p["new_w"], p["new_h"], p["grid_thw"], p["num_tokens"]) == (976, 549, [3, 40, 70], 700)


def test_the_reference_and_the_spec_written_again_match_it(tmp_path):
    assert run_cli("golden", "check", "--media", "video", "--out", tmp_path / "ref") == 0
    assert run_cli("golden", "check", "--media", "video", "--candidate", f"{MUTANTS}:faithful",
                   "--out", tmp_path / "faithful") == 0


def test_a_pad_one_level_brighter_changes_the_pixel_digests_only(tmp_path, capsys):
    assert run_cli("golden", "check", "--media", "video", "--candidate", f"{MUTANTS}:pad_one",
                   "--out", tmp_path, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    (file,) = report["files"]
    keys = [c["key"] for c in file["changes"]]
    assert len(keys) == 6 and all(k.startswith("pixels/") for k in keys)
    assert (tmp_path / "video" / "k25.jsonl.obtained").is_file()


def test_k3_has_no_video_golden_and_the_default_is_the_image_kinds(capsys):
    assert run_cli("golden", "check", "--media", "video", "--profile", "k3") == 2
    assert "image-only" in capsys.readouterr().err
    assert golden.MEDIA_KINDS["image"] == ("grids", "pixels") and golden.check.__defaults__ is not None
    selection = golden.checking._selection(None, None)
    assert {kind for kind, _ in selection} == {"grids", "pixels"}
    assert ("video", "k25") in golden.checking._selection(golden.MEDIA_KINDS["both"], None)


def test_a_callable_and_a_chunks_only_candidate_are_judged(tmp_path):
    from kimi_oracle.pipelines.video import preprocess_media

    def brighter(items, config):  # a callable: run as given, never the reference in its place
        out = preprocess_media(items, config)
        out.pixel_values += 1.0
        return out
    report = golden.check(None, brighter, kinds=["video"], out_dir=tmp_path / "callable")
    assert not report.ok and len(report.files[0].changes) == 6
    chunks_only = tmp_path / "chunks_only.py"  # declares nothing: takes chunks only
    chunks_only.write_text("from kimi_oracle.pipelines.video import preprocess_chunks\n"
                           "def preprocess(chunks, config):\n    return preprocess_chunks(chunks, config)\n")
    assert run_cli("golden", "check", "--media", "video", "--candidate", str(chunks_only), "--out", tmp_path / "c") == 0
