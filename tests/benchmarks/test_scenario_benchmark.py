"""Scenario fuzzing throughput of the built-in request-layer model (issue 23: >= 50 scenarios/s on
one core with small images)."""

from __future__ import annotations

import time

import pytest
from process_cpu import cpu_seconds as _cpu_s

pytestmark = pytest.mark.bench


def test_scenarios_per_second(benchmark, quick):
    """Scenarios per second of `fuzz --engine sglang-0.5.23` as the CLI runs it: the engine in its
    executor process (one torch thread), default scenario options (1-8 requests of 1-6 images of
    at most 40x40, an alone run for every distinct image, path and config). The two processes
    take turns (one scenario in flight), so the rate on one core is scenarios over the CPU time of
    both; on a machine shared with other work the wall-clock rate is lower and is recorded too."""
    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.fuzzers.engine_sandbox import IsolatedEngine
    from kimi_oracle.fuzzers.scenario_fuzz import ScenarioFuzzOptions, fuzz_engine

    config = PreprocessConfig.k3()
    count = 100 if quick else 400
    runs, cpu = [], []
    with IsolatedEngine("sglang-0.5.23", config) as runner:
        fuzz_engine(runner, config, ScenarioFuzzOptions(examples=10, seed=0))  # imports, first calls
        pid = runner._proc.pid

        def one_round():
            c0, e0 = time.process_time(), _cpu_s(pid)
            runs.append(fuzz_engine(runner, config, ScenarioFuzzOptions(examples=count, seed=len(runs) + 1)))
            cpu.append(time.process_time() - c0 + _cpu_s(pid) - e0)

        benchmark.pedantic(one_round, rounds=2, iterations=1, warmup_rounds=0)
    per_core = [r.examples / c for r, c in zip(runs, cpu)]
    benchmark.extra_info.update({"scenarios": count, "cpu_s": [round(c, 2) for c in cpu],
                                 "scenarios_per_cpu_s": [round(x, 1) for x in per_core],
                                 "scenarios_per_wall_s": [round(r.examples / r.elapsed_s, 1) for r in runs],
                                 "findings": [len(r.findings) for r in runs]})
    assert all(not r.findings for r in runs)
    assert max(per_core) >= 50, f"scenario fuzzing: {max(per_core):.0f} scenarios per CPU second (target >= 50)"
