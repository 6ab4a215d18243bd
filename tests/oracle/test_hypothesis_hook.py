"""The fuzzer uses hypothesis' public API, except one hook: the per-phase example counts of
`hypothesis.statistics`. pyproject pins the hypothesis range; these tests fail on an upgrade that
breaks what the fuzzer relies on, instead of letting example counts silently change."""

from __future__ import annotations

from hypothesis import Phase, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings
from hypothesis import strategies as st

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz


def test_statistics_hook_reports_generated_examples():
    from hypothesis.statistics import collector

    seen: list[dict] = []

    @settings(max_examples=17, database=None, phases=[Phase.generate])
    @given(st.integers())
    def body(n):
        pass

    with collector.with_value(seen.append):
        body()
    assert len(seen) == 1
    assert len(seen[0]["generate-phase"]["test-cases"]) == 17


def test_seeded_runs_are_reproducible_and_seeds_differ():
    def draws(at_seed: int) -> list[int]:
        out: list[int] = []

        @settings(max_examples=20, database=None, phases=[Phase.generate])
        @hypothesis_seed(at_seed)
        @given(st.integers(0, 10**9))
        def body(n):
            out.append(n)

        body()
        return out

    assert draws(5) == draws(5)
    assert draws(5) != draws(6)


def test_fuzz_runs_the_examples_asked_for():
    # Hypothesis' count includes drawn cases it discarded, so it may exceed the candidate calls.
    run = fuzz("reference", PreprocessConfig.k3_small(), FuzzOptions(examples=25, seed=3, invariance=False))
    assert run.findings == [] and run.calls == 25 and run.examples >= 25
