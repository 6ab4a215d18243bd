"""The fuzzer's rate over a longer run and beside a busy core (issue 26's targets on eager, 2 idle
cores: >= 1,000 examples/s after the first minute; with one core busy with another job, at least
half the idle rate).

Both run `fuzz` as `kimi-oracle fuzz --budget` runs it (default options, the candidate in its
executor process, no example database) after a 20-example warm-up, counting examples as they are
judged (`on_example`). Where the time goes is in `extra_info`: each process's CPU seconds per
example (Linux `/proc`), which bound the rate on two cores whatever overlaps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from process_cpu import cpu_seconds

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

pytestmark = pytest.mark.targets  # (left out of a plain `kimi-oracle bench`)


def _cpu_s(pid: int) -> float | None:
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError, ValueError):  # (no /proc: the rates are measured all the same)
        return None


def _rate(marks: list[tuple[float, int]], since: float, until: float | None = None) -> float:
    """Examples per second between the marks at `since` and `until` seconds (default: the last)."""
    inside = [m for m in marks if m[0] >= since and (until is None or m[0] <= until)]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _timed_run(candidate: IsolatedCandidate, budget: float, seed: int) -> dict:
    """One budgeted run: its (seconds, examples) marks, the run, each process's CPU seconds."""
    config = PreprocessConfig.k3()
    marks: list[tuple[float, int]] = []
    start = time.perf_counter()
    own, executor = _cpu_s(os.getpid()), _cpu_s(candidate._proc.pid) if candidate._proc else None
    run = fuzz(candidate, config, FuzzOptions(budget_s=budget, seed=seed),
               on_example=lambda r: marks.append((time.perf_counter() - start, r.examples)))
    own_end = _cpu_s(os.getpid())
    executor_end = _cpu_s(candidate._proc.pid) if candidate._proc else None
    cpu = {"main_s": None if own is None or own_end is None else round(own_end - own, 2),
           "executor_s": None if executor is None or executor_end is None else round(executor_end - executor, 2)}
    return {"marks": marks, "run": run, "cpu": cpu}


def _per_example_ms(cpu: dict, examples: int) -> dict:
    return {k.replace("_s", "_ms_per_example"): round(v / examples * 1e3, 3) if v is not None and examples else None
            for k, v in cpu.items()}


def test_fuzz_rate_after_the_first_minute(benchmark, quick):
    budget, first = (30.0, 10.0) if quick else (150.0, 60.0)
    got: dict = {}
    with IsolatedCandidate("eager") as candidate:
        fuzz(candidate, PreprocessConfig.k3(), FuzzOptions(examples=20, seed=0))  # imports and first calls
        benchmark.pedantic(lambda: got.update(_timed_run(candidate, budget, seed=1)), rounds=1, iterations=1)
    marks, run = got["marks"], got["run"]
    after = _rate(marks, first)
    windows = [round(_rate(marks, a, a + 30.0), 1) for a in range(0, int(budget) - 29, 30)]
    benchmark.extra_info.update({
        "budget_s": budget, "examples": run.examples, "elapsed_s": round(run.elapsed_s, 3),
        "examples_per_s": round(run.examples / run.elapsed_s, 1), "after_first_s": first,
        "examples_per_s_after_first": round(after, 1), "examples_per_s_per_30s": windows,
        "findings": len(run.findings), "time": run.time, "cpu_s": got["cpu"],
        **_per_example_ms(got["cpu"], run.examples),
    })
    assert abs(run.elapsed_s - budget) <= 0.05 * budget  # the budget holds
    if not quick:
        assert after >= 1000, (f"fuzz on eager after the first minute: {after:.0f} examples/s "
                               f"(per 30 s: {windows}; target >= 1,000 on 2 idle cores)")


def test_fuzz_rate_with_one_core_busy(benchmark, quick):
    budget = 5.0 if quick else 20.0
    rates: dict[str, list[float]] = {"idle": [], "busy": []}
    with IsolatedCandidate("eager") as candidate:
        fuzz(candidate, PreprocessConfig.k3(), FuzzOptions(examples=20, seed=0))

        def rounds():
            # idle, busy, idle: the busy run between two idle ones, the same seed for each
            for state in ("idle", "busy", "idle"):
                hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if state == "busy" else None
                try:
                    run = fuzz(candidate, PreprocessConfig.k3(), FuzzOptions(budget_s=budget, seed=1))
                finally:
                    if hog is not None:
                        hog.kill()
                        hog.wait()
                rates[state].append(run.examples / run.elapsed_s)

        benchmark.pedantic(rounds, rounds=1, iterations=1)
    idle = sum(rates["idle"]) / len(rates["idle"])
    ratio = rates["busy"][0] / idle
    benchmark.extra_info.update({"budget_s": budget, "idle_examples_per_s": [round(r, 1) for r in rates["idle"]],
                                 "busy_examples_per_s": round(rates["busy"][0], 1), "ratio": round(ratio, 3)})
    if not quick:
        assert ratio >= 0.5, f"one core busy: {ratio:.2f} of the idle rate (target >= 0.5)"

