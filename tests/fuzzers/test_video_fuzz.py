"""Fuzzing a video candidate (issue 42): the planted defects of tests/mutants/video_candidates.py
are each found within 300 drawn batches and named by their one step; the rules written again
(`faithful`) pass with images among the chunks; a stacked defect is one cause; a crash is grouped
by its error; a candidate that exits is an error, never a pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.fuzzers.video_fuzz import fuzz_media, run_media_isolated

MUTANTS = str(Path(__file__).resolve().parents[1] / "mutants" / "video_candidates.py")
K25 = PreprocessConfig.k25()


def test_the_rules_written_again_pass_with_images_among_the_chunks():
    report = fuzz_media(f"{MUTANTS}:faithful", K25, "both", 80, seed=5)
    assert report.ok and report.examples == 80, report.lines()
    assert fuzz_media("reference", K25, "video", 30, seed=6).ok


@pytest.mark.parametrize("name,family", [
    ("video_divisor", "budget-divisor/video"),
    ("no_divisor", "budget-divisor/none"),
    ("last_frame", "chunk-size/last"),
    ("pad_one", "pad/level-1"),
])
def test_each_planted_defect_is_found_and_named(name, family):
    report = fuzz_media(f"{MUTANTS}:{name}", K25, "video", 300, seed=5)
    assert not report.ok and report.examples == 300
    assert report.groups and report.unexplained == 0, report.lines()
    for group in report.groups:
        assert group.explained_by == [family] and group.explanation == "explained", group.to_dict()
        assert group.confirmed == len(group.findings) > 0


def test_a_stacked_defect_is_one_cause_per_check(tmp_path):
    stacked = tmp_path / "stacked.py"
    stacked.write_text(
        "from kimi_oracle.pipelines.video import preprocess_media\n"
        "from kimi_oracle.pipelines.variants.chunk_rules import ChunkRule\n"
        "from kimi_oracle.oracle.diagnosis import steps_for\n"
        "kimi_oracle_media = ('image', 'video')\n"
        "def preprocess(items, config):\n"
        "    return preprocess_media(items, config, rule=ChunkRule(divisor='none'),\n"
        "                            steps=steps_for(config, [('pad', 'level-1')]))\n")
    report = fuzz_media(str(stacked), K25, "both", 120, seed=3)
    assert {tuple(g.explained_by) for g in report.groups} == {("budget-divisor/none", "pad/level-1")}, report.lines()
    assert {g.check for g in report.groups} <= {"grid_mismatch", "pixel_mismatch"}
    assert all(g.explanation == "explained" for g in report.groups)


def test_a_crash_is_one_finding_per_error_and_an_exit_is_an_error():
    report = fuzz_media(f"{MUTANTS}:unequal_refused", K25, "video", 300, seed=5)
    (group,) = report.groups
    assert group.key == "crash{ValueError: cannot stack frames of unequal sizes}" and group.count > 1
    assert group.explanation == "a crash"
    chunks = [item for item in group.findings[0].case.items if isinstance(item, tuple)]
    assert any(len({(f.width, f.height) for f in chunk}) > 1 for chunk in chunks)  # what it refuses
    dead = run_media_isolated(f"{MUTANTS}:exits", K25, "video", 5, seed=0)
    assert not dead.ok and "died" in dead.error and "exit code 3" in dead.error


def test_media_that_the_candidate_does_not_declare_is_refused():
    with pytest.raises(CandidateError, match="kimi_oracle_media"):
        fuzz_media(f"{MUTANTS}:images_only", K25, "video", 5, seed=0)
    with pytest.raises(CandidateError, match="kimi_oracle_media"):
        fuzz_media(f"{MUTANTS}:images_only", K25, "both", 5, seed=0)


def test_a_bad_return_mid_run_is_the_runs_error_and_a_budget_stop_is_no_pass(tmp_path):
    late = tmp_path / "late.py"
    late.write_text(
        "from kimi_oracle.pipelines.video import preprocess_media\n"
        "calls = []\n"
        "def preprocess(items, config):\n"
        "    calls.append(1)\n"
        "    return None if len(calls) > 20 else preprocess_media(items, config)\n")
    report = fuzz_media(str(late), K25, "video", 50, seed=1)
    assert not report.ok and report.error and "returned None" in report.error and report.examples < 50
    stopped = fuzz_media(f"{MUTANTS}:faithful", K25, "video", 50, seed=1, budget_s=0.0)
    assert stopped.examples == 0 and stopped.stopped and not stopped.ok  # nothing judged: never a pass
