"""Scenario fuzzing throughput of the built-in request-layer model (issue 23: >= 50 scenarios/s on
one core with small images)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.bench


def test_scenarios_per_second(benchmark, quick):
    """Scenarios per second of `fuzz --engine sglang-0.5.23` as the CLI runs it: the engine in its
    executor process (one torch thread), default scenario options (1-8 requests of 1-6 images of
    at most 40x40, alone runs for every image), the whole run's elapsed time."""
    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.fuzzers.engine_sandbox import IsolatedEngine
    from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions, fuzz_engine

    config = PreprocessConfig.k3()
    count = 100 if quick else 400
    runs = []
    with IsolatedEngine("sglang-0.5.23", config) as runner:
        fuzz_engine(runner, config, ScenarioFuzzOptions(examples=10, seed=0))  # imports, first calls

        def one_round():
            runs.append(fuzz_engine(runner, config, ScenarioFuzzOptions(examples=count, seed=len(runs) + 1)))

        benchmark.pedantic(one_round, rounds=2, iterations=1, warmup_rounds=0)
    rates = [r.examples / r.elapsed_s for r in runs]
    benchmark.extra_info.update({"scenarios": count, "scenarios_per_s": [round(x, 1) for x in rates],
                                 "findings": [len(r.findings) for r in runs]})
    assert all(not r.findings for r in runs)
    assert max(rates) >= 50, f"scenario fuzzing: {max(rates):.0f} scenarios/s (target >= 50 on one core)"
