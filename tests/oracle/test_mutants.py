"""Every planted bug is caught by the fuzzer, with the right check, within 300 examples."""

from __future__ import annotations

import pytest
from mutants.planted import MUTANTS, REQUEST_MUTANTS, correct

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.oracle.candidates import Candidate

SEED = 0
# One finding per check and no search after the first failing round: the question here is
# only whether (and how soon) the mutant is caught, with which check.
FAST = dict(split_by_mode=False, keep_searching=False)


def test_at_least_ten_mutants_over_every_check():
    assert len(MUTANTS) >= 10
    assert {m.check for m in MUTANTS} == {"grid_mismatch", "feature_length", "shape_dtype", "pixel_mismatch",
                                          "invariance", "crash"}


def test_unmutated_pipeline_fuzzes_clean():
    run = fuzz(Candidate("correct", correct), PreprocessConfig.k3(), FuzzOptions(examples=150, seed=SEED, max_side=48))
    assert run.findings == [], [f.message for f in run.findings]


def test_reference_fuzzes_clean_under_k25():
    run = fuzz("reference", PreprocessConfig.k25(), FuzzOptions(examples=60, seed=SEED, max_side=48))
    assert run.findings == []


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(mutant):
    run = fuzz(Candidate(mutant.name, mutant), PreprocessConfig.k3(),
               FuzzOptions(examples=300, seed=SEED, max_side=48, tolerance=mutant.tolerance, **FAST))
    found = {f.check for f in run.findings}
    assert mutant.check in found, f"{mutant.name}: expected {mutant.check}, found {sorted(found)}"
    assert run.first_found[mutant.check] <= 300
    if mutant.name in REQUEST_MUTANTS or mutant.name == "flatten_white":
        # Issue 16: a request mutant's pixel finding is named by its own root cause.
        named = {c for f in run.findings if f.check == mutant.check for c in f.root_causes}
        assert set(mutant.root_causes) <= named, (mutant.name, named)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6))
def test_kill_rate_over_seeds(seed):
    missed = []
    for mutant in MUTANTS:
        run = fuzz(Candidate(mutant.name, mutant), PreprocessConfig.k3(),
                   FuzzOptions(examples=300, seed=seed, max_side=48, tolerance=mutant.tolerance, **FAST))
        if not {mutant.check, *mutant.also} & {f.check for f in run.findings}:
            missed.append(mutant.name)
    assert missed == []
