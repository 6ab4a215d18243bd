"""Kill-rate report: fuzz every planted mutant over several seeds, print a Markdown table.

    cd tests && python -m mutants.kill_report [SEEDS] [name,name,...]

Each run: k3 profile with config variation, at most 300 examples, images up to 48 px, one
finding per check, stop after the first failing round (as tests/oracle/test_mutants.py does).
"examples" is the number of generated examples before the right check first failed.
"""

from __future__ import annotations

import statistics
import sys
import time

from mutants.planted import MUTANTS

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.oracle.candidates import Candidate


def main(argv: list[str]) -> int:
    seeds = range(int(argv[0]) if argv else 5)
    names = set(argv[1].split(",")) if len(argv) > 1 and argv[1] else {m.name for m in MUTANTS}
    print("| mutant | bug | check | killed | median examples | max examples | per seed |")
    print("|---|---|---|---|---|---|---|")
    killed_all = total = 0
    for m in MUTANTS:
        if m.name not in names:
            continue
        got = []
        for seed in seeds:
            run = fuzz(Candidate(m.name, m), PreprocessConfig.k3(),
                       FuzzOptions(examples=300, seed=seed, max_side=48, tolerance=m.tolerance,
                                   split_by_mode=False, keep_searching=False))
            got.append(run.first_found.get(m.check))
        hits = [g for g in got if g is not None]
        killed_all += len(hits)
        total += len(got)
        print(f"| {m.name} | {m.note} | {m.check} | {len(hits)}/{len(got)} | "
              f"{statistics.median(hits) if hits else '-'} | {max(hits) if hits else '-'} | "
              f"{', '.join('-' if g is None else str(g) for g in got)} |", flush=True)
    print(f"\nkill rate: {killed_all}/{total}")
    return 0 if killed_all == total else 1


if __name__ == "__main__":
    started = time.monotonic()
    code = main(sys.argv[1:])
    print(f"({time.monotonic() - started:.0f} s)")
    sys.exit(code)
