"""The executor sandbox: a dying or hanging candidate becomes an exception, the next call works."""

from __future__ import annotations

import re

import pytest
import torch
from nightly_helpers import planted

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.fuzzers.sandbox import CandidateDied, CandidateRaised, CandidateTimeout, IsolatedCandidate
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.pipelines import reference

CFG = PreprocessConfig.k3_small()


def _img(w, h=5, mode="RGBA", alpha="checker"):
    return make_image(CaseParams(w, h, mode, alpha))


def test_abort_becomes_candidate_died_and_the_executor_restarts():
    with IsolatedCandidate(planted("aborting"), timeout_s=10) as cand:
        good = cand([_img(8)], CFG)
        assert torch.equal(good.pixel_values, reference.preprocess([_img(8)], CFG).pixel_values)
        with pytest.raises(CandidateDied) as info:
            cand([_img(14)], CFG)
        assert "SIGABRT" in info.value.exc_message
        assert "aborting" in info.value.traceback  # the Python stack at the abort
        again = cand([_img(9, mode="P", alpha="key")], CFG)
        assert again.grid_thws.tolist() == reference.preprocess([_img(9, mode="P", alpha="key")], CFG).grid_thws.tolist()
        assert cand.crashes == 1 and cand.restarts == 1


def test_hang_becomes_candidate_timeout():
    # (That this test ends at all shows the call was cut off: the candidate never returns.)
    with IsolatedCandidate(planted("hanging"), timeout_s=1.0) as cand:
        with pytest.raises(CandidateTimeout) as info:
            cand([_img(30)], CFG)
        assert info.value.check == "timeout" and info.value.details["timeout_s"] == 1.0
        waited = float(re.search(r"waited ([0-9.]+) s", info.value.exc_message).group(1))
        assert waited >= 1.0  # it gave the candidate its whole timeout
        assert "hanging" in info.value.traceback  # where it hung
        assert cand.timeouts == 1 and cand.crashes == 0
        # The next call gets a fresh executor; a generous timeout, so that a busy machine cannot
        # turn this quick call into a second timeout.
        cand.timeout_s = 120.0
        assert cand([_img(10)], CFG).num_images == 1
        assert cand.restarts == 1


def test_python_exception_is_candidate_raised():
    with IsolatedCandidate(planted("drops_last_row")) as cand:
        out = cand([_img(10)], CFG)  # a wrong result is not an exception
        assert out.pixel_values.shape[0] == reference.preprocess([_img(10)], CFG).pixel_values.shape[0] - 1
    import kimi_oracle.fuzzers.sandbox as sb

    with IsolatedCandidate("kimi_oracle.core.geometry:plan") as cand:  # wrong signature: TypeError inside
        with pytest.raises(CandidateRaised) as info:
            cand([_img(3)], CFG)
        assert info.value.exc_type == "TypeError"
    assert sb  # module imported for the name


def test_bad_spec_is_a_harness_error():
    with pytest.raises(CandidateError):
        IsolatedCandidate("/nonexistent/cand.py:fn").start()
    with pytest.raises(CandidateError):
        IsolatedCandidate("kimi_oracle.pipelines.reference:no_such_function").start()


def test_fuzzing_files_a_hang_as_a_timeout_finding(tmp_path):
    import json

    from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz

    with IsolatedCandidate(planted("hanging"), timeout_s=1.0) as cand:
        run = fuzz(cand, CFG, FuzzOptions(examples=20, seed=2, shrink=False, keep_searching=False, invariance=False),
                   out_dir=tmp_path)
    assert [f.check for f in run.findings] == ["timeout"]
    assert run.counts()["timeout"] == 1 and run.counts()["crash"] == 0
    (path,) = (tmp_path / "findings").iterdir()
    assert path.name.startswith("timeout-")
    case = json.loads((path / "case.json").read_text())
    assert case["check"] == "timeout" and "CallTimedOut" in case["message"]
    assert any(img["size"][0] > 20 for img in case["images"])  # the input it hung on


@pytest.mark.parametrize("limit", [None, 2048])
def test_an_executor_under_a_memory_limit_keeps_no_output_slabs(limit):
    # Kept slabs would count against the candidate's address-space limit between its calls.
    from kimi_oracle.pipelines import outputs

    with IsolatedCandidate(planted("tells_its_output_pool"), memory_limit_mb=limit) as cand:
        with pytest.raises(CandidateRaised) as info:
            cand([_img(8)], CFG)
    assert info.value.exc_message == f"output pool enabled: {limit is None and outputs._counts_references()}"
