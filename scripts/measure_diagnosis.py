#!/usr/bin/env python3
"""Root causes found by a default `fuzz` run of 300 examples, per candidate, and what attribution
costs per finding. Prints a Markdown table for docs/measurements.md.

    python scripts/measure_diagnosis.py [--examples 300] [--seed 1]

Candidates: the built-in `eager` and every planted mutant of tests/mutants/planted.py. The runs
are in-process (library `fuzz`), with default options otherwise: the k3 profile, config variation
on, invariances on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from kimi_oracle.core.config import PreprocessConfig  # noqa: E402
from kimi_oracle.fuzzers import cases, fuzzing, settle  # noqa: E402
from kimi_oracle.oracle import diagnosis  # noqa: E402
from kimi_oracle.oracle.candidates import Candidate, load_candidate  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    from mutants.planted import MUTANTS

    candidates = [("eager", load_candidate("eager"), ())] + [
        (m.name, Candidate(m.name, m), m.root_causes) for m in MUTANTS]
    timings: list[float] = []
    real = diagnosis.finding_diagnosis

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            timings.append(time.perf_counter() - t0)

    settle.finding_diagnosis = cases.finding_diagnosis = timed  # where fuzz() and finding_from diagnose
    print("| candidate | planted | findings | root causes found (levels ≥ 1) | float rounding only | "
          "attribution per finding (median / max ms) | run s |")
    print("|---|---|---|---|---|---|---|")
    for name, cand, planted in candidates:
        timings.clear()
        t0 = time.monotonic()
        run = fuzzing.fuzz(cand, PreprocessConfig.k3(), fuzzing.FuzzOptions(examples=args.examples, seed=args.seed))
        elapsed = time.monotonic() - t0
        pixel = [f for f in run.findings if f.check == "pixel_mismatch"]
        real_causes = sorted({c for f in pixel if (f.max_levels or 0) >= 1 for c in f.root_causes})
        noise = sorted({c for f in pixel if (f.max_levels or 0) < 1 for c in f.root_causes})
        others = sorted({f.check for f in run.findings if f.check != "pixel_mismatch"})
        parts = ([", ".join(real_causes)] if real_causes else []) + (["checks: " + ", ".join(others)] if others else [])
        found = "; ".join(parts) or "-"
        pix_t = [t * 1000 for t in timings] or [0.0]
        print(f"| {name} | {', '.join(planted) or '-'} | {len(run.findings)} | {found} | {', '.join(noise) or '-'} | "
              f"{statistics.median(pix_t):.1f} / {max(pix_t):.0f} | {elapsed:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
