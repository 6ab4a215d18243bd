"""Diagnosis report (docs/diagnosis.md, "Measured"): the planted pixel mutants and step variants
alone, and random stacks of two or three step variants, fuzzed; per pixel finding, whether the
attribution reproduced it exactly, whether every step it took is a planted family (or ties
with one), and its search time. Prints Markdown.

    cd tests && python -m mutants.diagnosis_report [EXAMPLES] [STACKS]
"""

from __future__ import annotations

import random
import statistics
import sys

from mutants.planted import MUTANTS
from mutants.stacked import STEP_MUTANTS, Stack, stack

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.oracle.candidates import Candidate

CLIP = dict(image_mean=(0.48145466, 0.4578275, 0.40821073), image_std=(0.26862954, 0.26130258, 0.27577711))


def measure(name: str, candidate, families: set[str], examples: int, seed: int) -> list[tuple[bool, bool, float]]:
    import dataclasses

    config = dataclasses.replace(PreprocessConfig.k3_small(), **CLIP)
    run = fuzz(Candidate(name, candidate), config, FuzzOptions(examples=examples, seed=seed, invariance=False,
                                                               max_images=1, max_side=48,
                                                               modes=("RGB", "RGBA", "LA", "L", "P")))
    out = []
    for f in run.findings:
        if f.check != "pixel_mismatch" or not f.attribution:
            continue
        a = f.attribution
        planted = all(e["root_cause"] in families or any(x.split("/")[0] in families for x in e.get("alternatives", []))
                      or e["root_cause"] in e.get("equivalent", ()) for e in a.get("explained", []))
        out.append((a.get("explanation") == "explained", planted and bool(a.get("explained")),
                    float(a.get("seconds") or 0.0)))
    return out


def row(label: str, found: list[tuple[bool, bool, float]]) -> str:
    if not found:
        return f"| {label} | 0 | - | - | - | - | - |"
    secs = sorted(t for _, _, t in found)
    exact = sum(e for e, _, _ in found)
    own = sum(n for _, n, _ in found)
    p90 = secs[min(len(secs) - 1, int(0.9 * len(secs)))]
    return (f"| {label} | {len(found)} | {exact} ({100 * exact / len(found):.0f} %) | {own} | "
            f"{1000 * statistics.median(secs):.0f} ms | {1000 * p90:.0f} ms | {1000 * secs[-1]:.0f} ms |")


def main(argv: list[str]) -> int:
    examples = int(argv[0]) if argv else 60
    n_stacks = int(argv[1]) if len(argv) > 1 else 20
    planted, singles, stacked = [], [], []
    pixel = [m for m in MUTANTS if m.check == "pixel_mismatch" and m.root_causes and m.name not in
             ("exif_transpose", "last_frame", "jpeg_own_colour_conversion")]  # (request inputs: not drawn here)
    for i, m in enumerate(pixel):
        planted += measure(m.name, m, set(m.root_causes), examples, 50 + i)
    for i, m in enumerate(STEP_MUTANTS):
        s = Stack((m,))
        singles += measure(s.name, s, {v.split("/")[0] for v in s.variants}, examples, i)
    rng = random.Random(25)
    for i in range(n_stacks):
        s = stack(rng)
        stacked += measure(s.name, s, {v.split("/")[0] for v in s.variants}, examples, 100 + i)
    print("| candidates | pixel findings | explained exactly | only planted families | median | p90 | max |")
    print("|---|---|---|---|---|---|---|")
    print(row(f"{len(pixel)} planted pixel mutants (tests/mutants/planted.py)", planted))
    print(row(f"{len(STEP_MUTANTS)} planted step variants", singles))
    print(row(f"{n_stacks} stacks of 2-3 (seed 25)", stacked))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
