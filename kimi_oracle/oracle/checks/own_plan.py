"""The engine's self-check: a candidate's result against the plans its own planner advertised."""

from __future__ import annotations

from typing import Sequence

from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks.normalize import _coerce, _grid_rows, _rows_of
from kimi_oracle.oracle.checks.verdict import Verdict
from kimi_oracle.oracle.kinds import FEATURE_LENGTH, GRID_MISMATCH


def self_check(result: PreprocessResult, own_plans: Sequence[ResizePlan],
               sizes: Sequence[tuple[int, int]] | None = None) -> Verdict:
    """A candidate's result against the plans its own planner advertised for the same images
    (the grids that fixed the prompt's token span): the serving engine's own two checks.

    `grid_mismatch`: the grids produced differ from the advertised ones ("deferred GPU
    preprocessing produced wrong grids"); `feature_length`: the rows produced differ from Σ t·h·w
    of the advertised grids ("deferred feature length does not match image grids").
    """
    result = _coerce(result)
    advertised = [tuple(int(v) for v in p.grid_thw) for p in own_plans]
    produced = _grid_rows(result.grid_thws)
    where = (lambda i: f"image {i} ({sizes[i][0]}x{sizes[i][1]})") if sizes else (lambda i: f"image {i}")
    if produced is None or len(produced) != len(advertised) or any(
            tuple(a) != tuple(b) for a, b in zip(produced, advertised)):
        # `mismatched` as `compare` writes it (expected: what the planner advertised).
        mismatched = [] if produced is None else [
            {"image": i, "expected": list(e), "actual": list(a), "size": list(sizes[i]) if sizes else None}
            for i, (a, e) in enumerate(zip(produced, advertised)) if tuple(a) != tuple(e)]
        if produced is None or len(produced) != len(advertised):
            detail = (f"{len(produced) if produced is not None else 'no'} grids produced for "
                      f"{len(advertised)} advertised")
        else:
            first = mismatched[0]["image"]
            detail = f"{where(first)}: grid {tuple(produced[first])} produced, {advertised[first]} advertised"
        return Verdict(GRID_MISMATCH, "self-check: deferred GPU preprocessing produced wrong grids: " + detail, {
            "self_check": True,
            "advertised_grids": [list(g) for g in advertised],
            "produced_grids": [list(g) for g in produced] if produced is not None else None,
            "mismatched": mismatched,
        })
    want = sum(_rows_of(g) for g in advertised)
    rows = int(result.pixel_values.shape[0]) if result.pixel_values.ndim >= 1 else None
    if rows != want:
        return Verdict(FEATURE_LENGTH, f"self-check: deferred feature length does not match image grids: "
                       f"the advertised grids give {want} patch rows, pixel_values has {rows}", {
                           "self_check": True, "advertised_rows": want, "produced_rows": rows,
                           "rows_per_image": [_rows_of(g) for g in advertised]})
    return Verdict(None, "self-check passed", {"self_check": True})

