"""Fuzzing a video chunker (issue 42, items 2-4): every planted defect of tests/mutants/chunkers.py
is found within 300 drawn videos and named by the one variant that reproduces it; the same
rules written again independently (`faithful`) pass; a chunker that exits or returns another
form is an error, never a pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.fuzzers.chunker_fuzz import fuzz_chunker, run_chunker_isolated

CHUNKERS = str(Path(__file__).resolve().parents[1] / "mutants" / "chunkers.py")
K25 = PreprocessConfig.k25()


def test_the_rules_written_again_pass_and_the_reference_too():
    assert fuzz_chunker(f"{CHUNKERS}:faithful", K25, 300, seed=1).ok
    assert fuzz_chunker("reference", K25, 50, seed=2).ok


@pytest.mark.parametrize("name,field,variant", [
    ("rounded_milliseconds", "prompt", "timestamp-rounding/round"),
    ("repeated_tail", "frame_indices", "chunk-tail/repeat-last"),
    ("dropped_tail", "chunks", "chunk-tail/dropped"),
    ("floored_indices", "frame_indices", "frame-index-rounding/floor"),
    ("reversed_frames", "frame_indices", "frame-order/reversed"),
])
def test_each_planted_defect_is_found_and_named(name, field, variant):
    report = fuzz_chunker(f"{CHUNKERS}:{name}", K25, 300, seed=3)
    assert not report.ok and report.videos == 300
    (group,) = report.groups
    assert group.field == field and group.explained_by == [variant], group.to_dict()
    assert group.findings[0].actual != group.findings[0].expected


def test_a_chunker_that_exits_or_answers_another_form_is_an_error(tmp_path):
    dead = run_chunker_isolated(f"{CHUNKERS}:exits", K25, 10, seed=0)
    assert not dead.ok and "died" in dead.error and "exit code 3" in dead.error
    wrong = fuzz_chunker(f"{CHUNKERS}:not_a_list", K25, 5, seed=0)
    assert not wrong.ok and wrong.groups[0].field == "output" and wrong.groups[0].explained_by == []
    with pytest.raises(CandidateError):
        run_chunker_isolated(f"{tmp_path / 'missing.py'}:chunk", K25, 5, seed=0)
