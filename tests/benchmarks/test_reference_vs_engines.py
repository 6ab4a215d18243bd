"""The reference against the CPU paths of the engines the project ships adapters for (issue 33,
item 3): "never slower than them, on the same images in the same run".

Each engine path is the pinned release loaded by its adapter (`vllm@0.33.0`: the fused K2.5 CPU
processor and its numba kernel; `vllm-k3@0.33.0`; `transformers@5.23.0`: Kimi_K25ImageProcessor's
torchvision backend), in its own executor, as
`gate` times candidates (`IsolatedCandidate.time_call`: the call's own time inside its process).
The reference runs the same way, on one thread (`candidates_for_tests.reference_one_thread`),
and so do the engines: one torch thread per executor (the executors' default) and
NUMBA_NUM_THREADS=1 (set in the test, before its executors start). The images are the floor
benchmark's (`reference_speed_cases`) of the engine's profile. Interleaved, median of 5 per-pair
ratios. Needs the pinned releases (fetched once into the engine cache, as .ci/run does); without
a network and a cached wheel the test is skipped, saying so. About 40 s here once the releases
are cached.

Not timed: `sglang-cpu`. SGLang's K3 `cpu` backend hands the pixels to the checkpoint's own
processor, which the adapter supplies as this reference (`adapters.sglang`): its time is the
reference's on its default threads plus SGLang's bookkeeping, the reference against itself
(measured once: 1.11-1.27x, our one thread against its two)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_speed_cases import CASES
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.workflows import bench

pytestmark = pytest.mark.targets  # (left out of a plain `kimi-oracle bench`, as the floor)

REFERENCE = f"{Path(__file__).parents[1] / 'helpers' / 'candidates_for_tests.py'}:reference_one_thread"

def _images(profile: str) -> dict[str, CaseParams]:
    """The floor benchmark's images of one profile (the same images, `reference_speed_cases`)."""
    return {name: params for name, (params, p, _, _) in CASES.items() if p == profile}


ENGINE_PATHS = {
    "vllm-k3@0.33.0": "k3",
    "vllm@0.33.0": "k25",
    "transformers@5.23.0": "k25",
}


class _Clock:
    """The executors' own seconds, summed: `interleaved_ratio`'s timer."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("engine", list(ENGINE_PATHS))
def test_the_reference_is_not_slower_than_an_engines_cpu_path(benchmark, engine, monkeypatch):
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    # Numba reads it when the executor imports it. Executors are forked from a server that
    # inherits this process's environment when it starts: run this file in a session of its own
    # (`pytest -m targets ... tests/benchmarks/test_reference_vs_engines.py`), so that no earlier
    # test has started that server with numba's default of one thread per core.
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")

    profile = ENGINE_PATHS[engine]
    images = _images(profile)
    config = PreprocessConfig.profile(profile)
    try:
        theirs = IsolatedCandidate(engine, timeout_s=600, start_timeout_s=600)
        theirs.start()
    except CandidateError as exc:
        pytest.skip(f"{engine} cannot be loaded here: {exc}")
    ours = IsolatedCandidate(REFERENCE, timeout_s=600)
    rows = {}
    try:
        for name, params in images.items():
            batch = [make_image(params)]
            clock = _Clock()

            def reference_call() -> None:
                clock.now += ours.time_call(batch, config)

            def engine_call() -> None:
                clock.now += theirs.time_call(batch, config)

            rows[name] = bench.interleaved_ratio(reference_call, engine_call, rounds=5, timer=clock)
    finally:
        theirs.close()
        ours.close()
    benchmark.extra_info.update({"engine": engine, "profile": profile, "cases": {
        name: {k: v for k, v in r.items() if k != "ratios"} for name, r in rows.items()}})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    slower = {name: r for name, r in rows.items() if r["ratio"] > 1.0}
    assert not slower, "; ".join(
        f"{engine} {name}: reference {r['new_median_s'] * 1e3:.1f} ms, engine {r['old_median_s'] * 1e3:.1f} ms "
        f"({r['ratio']:.2f}x, target <= 1.0x)" for name, r in slower.items())
