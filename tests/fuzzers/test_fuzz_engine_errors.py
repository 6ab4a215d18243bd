"""A harness error in the middle of a run must not lose the findings already made."""

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.pipelines import reference


def test_findings_are_written_before_a_harness_error_ends_the_run(tmp_path):
    calls = {"n": 0}

    def flaky_harness(images, config):
        calls["n"] += 1
        if calls["n"] == 1:
            out = reference.preprocess(images, config)
            out.grid_thws = out.grid_thws + 2  # a wrong grid: a finding
            return out
        return "not a result"  # from then on: a harness error (CandidateError)

    with pytest.raises(CandidateError):
        fuzz(Candidate("flaky", flaky_harness), PreprocessConfig.k3_small(),
             FuzzOptions(examples=20, seed=1, invariance=False), out_dir=tmp_path)
    written = list((tmp_path / "findings").glob("grid_mismatch*/case.json"))
    assert len(written) == 1


def test_write_finding_says_whether_it_created_the_folder(tmp_path):
    from kimi_oracle.fuzzers.fuzzing import finding_from
    from kimi_oracle.inputs.generators import CaseParams, make_image
    from kimi_oracle.oracle.checks import Verdict

    img = make_image(CaseParams(9, 9, "RGB", seed=1))
    verdict = Verdict("grid_mismatch", "planted", {})
    first = finding_from(verdict, "x", PreprocessConfig.k3(), [img])
    second = finding_from(verdict, "x", PreprocessConfig.k3(), [img])
    from kimi_oracle.results.report import write_finding

    write_finding(tmp_path, first)
    write_finding(tmp_path, second)  # same id: the existing folder is kept, not rewritten
    assert first.written_here and not second.written_here and first.path == second.path
