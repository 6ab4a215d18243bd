"""`nightly --ray` against local workers (issue 32): examples judged per second per worker with
1 and 2 workers, locally and through a local Ray cluster, Ray's overhead as a ratio; and the
driver's cost per finding folder and per database entry it writes (the model in docs/nightly.md).

Each campaign rate is measured by difference, so that starting the workers (and the actors)
cancels (the Ray campaigns share one local cluster started first): a campaign of `N` examples per worker less one of `SMALL` per worker, the same jobs.
Rate per worker = (N - SMALL) / (t(N) - t(SMALL)). Nothing is asserted about speed: the figures
go to the benchmark's extra_info and are printed.
"""

from __future__ import annotations

import os
import time

import pytest

from kimi_oracle.workflows.nightly import CampaignOptions, run_campaign

N, SMALL = 400, 50


def _campaign(out, jobs: int, examples: int, ray: bool) -> float:
    opts = CampaignOptions(out=out, budget_s=900.0, candidate="eager", engines=("hypothesis",), jobs=jobs,
                           max_examples=examples, seed=11, shrink=False)
    t0 = time.monotonic()
    if ray:
        from kimi_oracle.workflows.nightly.ray_driver import run_ray_campaign

        result = run_ray_campaign(opts, "auto")
    else:
        result = run_campaign(opts)
    elapsed = time.monotonic() - t0
    assert not result.summary["errors"], result.summary["errors"]
    assert result.summary["engines"]["hypothesis"]["examples"] >= jobs * examples * 0.95
    return elapsed


def _rate_per_worker(tmp_path, jobs: int, ray: bool) -> float:
    tag = f"{'ray' if ray else 'local'}-j{jobs}"
    small = _campaign(tmp_path / f"{tag}-small", jobs, SMALL, ray)
    full = _campaign(tmp_path / f"{tag}-full", jobs, N, ray)
    return (N - SMALL) / max(full - small, 1e-9)


def test_examples_per_second_per_worker_local_and_ray(benchmark, tmp_path):
    ray = pytest.importorskip("ray")
    rates = {f"local_jobs{jobs}": _rate_per_worker(tmp_path, jobs, False) for jobs in (1, 2)}
    # One local cluster (loopback use, 2 CPUs) for every Ray campaign: its start does not count.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rates.update({f"ray_jobs{jobs}": _rate_per_worker(tmp_path, jobs, True) for jobs in (1, 2)})
    finally:
        ray.shutdown()
    overhead = {f"jobs{j}": rates[f"local_jobs{j}"] / rates[f"ray_jobs{j}"] for j in (1, 2)}
    benchmark.extra_info.update({"per_worker": {k: round(v, 2) for k, v in rates.items()},
                                 "local_over_ray": {k: round(v, 3) for k, v in overhead.items()},
                                 "cpus": os.cpu_count(), "load": os.getloadavg()})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    print("examples/s per worker:", {k: round(v, 1) for k, v in rates.items()},
          "local/ray:", {k: round(v, 2) for k, v in overhead.items()}, "load", os.getloadavg())


def test_driver_cost_per_finding_and_per_entry(benchmark, tmp_path):
    """The driver's work per item a worker sends: a finding folder (a real one, its key already
    held, and a new key), and a database entry."""
    from kimi_oracle.workflows.nightly.ray_driver import _Sink

    src = CampaignOptions(out=tmp_path / "src", budget_s=300.0, candidate="tests/helpers/candidates_for_tests.py:"
                          "drops_last_row", engines=("hypothesis",), max_examples=3, seed=2, profile="k3-small")
    folder = next(f for f in (run_campaign(src).out / "findings").iterdir())
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    opts = CampaignOptions(out=tmp_path / "driver", engines=("hypothesis",))
    (opts.out / "findings").mkdir(parents=True)
    sink = _Sink(opts)
    count = 200
    t0 = time.perf_counter()
    sink.take([("finding", f"{folder.name}-{i}", files) for i in range(count)])  # one key: kept or dropped
    per_finding = (time.perf_counter() - t0) / count
    t0 = time.perf_counter()
    sink.take([("db", f"k{i % 20}/{i:016x}", os.urandom(64)) for i in range(count * 5)])
    per_entry = (time.perf_counter() - t0) / (count * 5)
    benchmark.extra_info.update({"per_finding_ms": round(per_finding * 1e3, 3), "per_entry_ms": round(per_entry * 1e3, 3),
                                 "finding_bytes": sum(len(v) for v in files.values())})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    print(f"driver: {per_finding * 1e3:.2f} ms per finding folder "
          f"({sum(len(v) for v in files.values())} bytes), {per_entry * 1e3:.3f} ms per database entry")
