#!/usr/bin/env python3
"""The engine model against the reference on the pixel goldens: per profile, how many cases
differ, by how many levels, and their root causes (kimi_oracle.oracle.diagnosis). Prints a
Markdown table for docs/spec.md ("Engine model: sglang-0.5.23").

    python scripts/measure_engine_model.py [--candidate sglang-0.5.23] [--profiles k3,k25,k3-small]

Each golden case runs alone (one image, its own config), in-process; the reference is re-run
(its output is the goldens', which the golden tests check). A case where the reference raises is
counted apart ("reference raises"), with whether the candidate returned a result there.
"""

from __future__ import annotations

import argparse
import collections
import time

import torch

from kimi_oracle.oracle.candidates import load_candidate
from kimi_oracle.oracle.diagnosis import attribute
from kimi_oracle.pipelines import reference
from kimi_oracle.workflows.golden import pixel_catalogue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--candidate", default="sglang-0.5.23")
    parser.add_argument("--profiles", default="k3,k25,k3-small")
    args = parser.parse_args()
    cand = load_candidate(args.candidate)
    print(f"candidate: {args.candidate}")
    print("| profile | cases | bit-identical | differ < 1 level | differ ≥ 1 level | max levels | "
          "reference raises (candidate returns) | root causes (cases) | not fully explained | run s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for profile in args.profiles.split(","):
        t0 = time.monotonic()
        same = sub = real = raises = returned = partial = 0
        worst = 0.0
        worst_case = ""
        causes: collections.Counter = collections.Counter()
        cases = pixel_catalogue(profile)
        for case in cases:
            img, config = case.make_image(), case.config()
            try:
                want = reference.preprocess([img], config)
            except Exception:
                raises += 1
                try:
                    cand([img], config)
                    returned += 1
                except Exception:
                    pass
                continue
            got = cand([img], config)
            if torch.equal(got.pixel_values, want.pixel_values) and torch.equal(got.grid_thws, want.grid_thws):
                same += 1
                continue
            a = attribute([img], config, got, expected=want)
            for c in a.root_causes:
                causes[c] += 1
            partial += not a.fully_explained
            if a.max_levels >= 1:
                real += 1
            else:
                sub += 1
            if a.max_levels > worst:
                worst, worst_case = a.max_levels, case.describe()
        listed = ", ".join(f"{c} {n}" for c, n in causes.most_common())
        print(f"| {profile} | {len(cases)} | {same} | {sub} | {real} | {worst:.0f} ({worst_case}) | "
              f"{raises} ({returned}) | {listed} | {partial} | {time.monotonic() - t0:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
