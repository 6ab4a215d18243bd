"""Benchmark suite options. Every test here is marked `bench` and left out of the default run."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("kimi-oracle benchmarks")
    group.addoption("--kimi-bench-candidates", default=os.environ.get("KIMI_BENCH_CANDIDATES", "reference,eager,gpu"),
                    help="comma-separated candidate specs to benchmark (default: reference,eager,gpu)")
    group.addoption("--kimi-bench-quick", action="store_true",
                    default=os.environ.get("KIMI_BENCH_QUICK", "") not in ("", "0"),
                    help="quick mode: fewer inputs and rounds (a CPU run stays under 2 minutes)")
    group.addoption("--kimi-bench-inputs", default="",
                    help="comma-separated benchmark input names (default: all, or the quick set)")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    only = config.getoption("--kimi-bench-inputs")
    keep = []
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.bench)
            # A run restricted to some inputs skips the fixed-input target benchmarks.
            if only and "bench_input_name" not in getattr(item, "fixturenames", ()):
                continue
        keep.append(item)
    items[:] = keep


def pytest_generate_tests(metafunc):
    if "candidate_spec" in metafunc.fixturenames:
        specs = [s.strip() for s in metafunc.config.getoption("--kimi-bench-candidates").split(",") if s.strip()]
        metafunc.parametrize("candidate_spec", specs)
    if "bench_input_name" in metafunc.fixturenames:
        from kimi_oracle.workflows.bench import select_inputs

        inputs = select_inputs(metafunc.config.getoption("--kimi-bench-quick"))
        only = [n for n in metafunc.config.getoption("--kimi-bench-inputs").split(",") if n]
        if only:
            from kimi_oracle.workflows.bench import BENCH_INPUTS

            inputs = [BENCH_INPUTS[n] for n in only]
        metafunc.parametrize("bench_input_name", [b.name for b in inputs])


@pytest.fixture
def quick(request) -> bool:
    return request.config.getoption("--kimi-bench-quick")


@pytest.fixture
def bench_input(bench_input_name):
    from kimi_oracle.workflows.bench import BENCH_INPUTS

    return BENCH_INPUTS[bench_input_name]
