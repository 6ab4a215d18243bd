"""Invariances: the candidate against itself (determinism, batch vs single, subsets, permutations)."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks.normalize import _coerce, _grid_rows
from kimi_oracle.oracle.checks.pixels import difference_magnitude
from kimi_oracle.oracle.checks.verdict import Verdict
from kimi_oracle.oracle.kinds import INVARIANCE, INVARIANCE_KINDS


def _same(a: PreprocessResult, b: PreprocessResult) -> tuple[bool, str]:
    if a.grid_thws.shape != b.grid_thws.shape or not torch.equal(a.grid_thws.to(torch.int64), b.grid_thws.to(torch.int64)):
        return False, f"grids {a.grid_thws.tolist()} vs {b.grid_thws.tolist()}"
    if a.pixel_values.shape != b.pixel_values.shape or a.pixel_values.dtype != b.pixel_values.dtype:
        return False, (f"pixel_values {list(a.pixel_values.shape)} {a.pixel_values.dtype} vs "
                       f"{list(b.pixel_values.shape)} {b.pixel_values.dtype}")
    pa = a.pixel_values.contiguous()
    pb = b.pixel_values.contiguous()
    if pa.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[pa.element_size()]
        diff = pa.view(width) != pb.view(width)
    else:
        diff = pa != pb
    if bool(diff.any()):
        rows = torch.nonzero(diff.reshape(diff.shape[0], -1).any(dim=1)).flatten().tolist() if diff.ndim else []
        return False, f"{int(diff.sum())} values differ, in patch rows {rows[:8]}{'...' if len(rows) > 8 else ''}"
    return True, ""


def _select(result: PreprocessResult, indices: Sequence[int]) -> PreprocessResult:
    parts = [result.image(i) for i in indices]
    return PreprocessResult(
        torch.cat([r.pixel_values for r in parts], dim=0),
        torch.cat([r.grid_thws for r in parts], dim=0),
    )


def invariance_plan(n: int) -> list[tuple[str, tuple[int, ...]]]:
    """The deterministic list of (kind, image indices) batches `check_invariance` runs for n images."""
    out: list[tuple[str, tuple[int, ...]]] = [("determinism", tuple(range(n)))]
    if n >= 2:
        out += [("batch_vs_single", (i,)) for i in range(n)]
        for k in range(2, n):
            out += [("subset", combo) for combo in itertools.combinations(range(n), k)]
        out.append(("permutation", tuple(reversed(range(n)))))
        if n >= 3:
            out.append(("permutation", tuple(range(1, n)) + (0,)))
    return out


def check_invariance(
    run: Callable[[list[Image.Image]], PreprocessResult],
    images: Sequence[Image.Image],
    *,
    full: PreprocessResult | None = None,
    kinds: Sequence[str] = INVARIANCE_KINDS,
    config: PreprocessConfig | None = None,
) -> Verdict:
    """Candidate-only checks: two runs agree, a batch equals its images one by one, any subset
    equals the matching rows of the full batch, a permuted batch gives permuted rows (bitwise)."""
    images = list(images)
    if full is None:
        full = _coerce(run(images))
    n = len(images)
    if _grid_rows(full.grid_thws) is None or len(full.grid_thws) != n or full.patch_offsets()[-1] != full.pixel_values.shape[0]:
        return Verdict(INVARIANCE, "the full batch's grids do not describe its rows; invariances undefined",
                       {"kind": "batch_vs_single"})
    for kind, indices in invariance_plan(n):
        if kind not in kinds:
            continue
        got = _coerce(run([images[i] for i in indices]))
        want = full if kind == "determinism" else _select(full, indices)
        same, why = _same(want, got)
        if not same:
            label = {
                "determinism": "a second run of the same batch differs",
                "batch_vs_single": f"image {indices[0]} alone differs from its rows in the batch of {n}",
                "subset": f"the sub-batch {list(indices)} differs from its rows in the batch of {n}",
                "permutation": f"the batch permuted to {list(indices)} does not give permuted rows",
            }[kind]
            stats: dict[str, Any] = {"kind": kind, "indices": list(indices), "batch_size": n, "detail": why}
            if config is not None and want.pixel_values.shape == got.pixel_values.shape:
                stats.update(difference_magnitude(want, got, config))
                why += (f" (max {stats['max_level_diff']:.3g} levels"
                        + (f", {stats['max_ulp']} ulp)" if stats.get("max_ulp") is not None else ")"))
            return Verdict(INVARIANCE, f"{kind}: {label}: {why}", stats, expected=want, actual=got)
    return Verdict(None, "invariances hold", {"batch_size": n})

