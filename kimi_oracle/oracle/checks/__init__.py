"""The oracle's checks, one module per job; every name is importable from this package.

`compare` runs the checks in a fixed order and names the first that fails:
`grid_mismatch` → `feature_length` → `shape_dtype` → `pixel_mismatch`. Later checks are
meaningless once an earlier one fails (rows cannot be matched to images when the grids differ).
`check_invariance` compares the candidate with itself: batch vs one-by-one, subsets,
permutations, and two identical runs. `self_check` compares a result with the candidate's own
plan (an engine that exposes its planner): the engine's own two errors. `accepts_invalid` is the
kind of a result returned for an input the checkpoint rejects (`judge.evaluate`); it is reported
but fails a run only under `--strict` (`REPORTED_ONLY`, `failing`).

Modules: `chain` (the compare chain), `pixels` (pixel statistics), `levels` (normalized values as
levels), `locations` (where a value lies), `normalize` (a candidate's return value as a result),
`identity` (bit-identical results), `own_plan` (the self-check), `invariance`, `verdict`. The
vocabulary (kinds, tolerance policies) lives in `oracle.kinds`, which imports no torch: the CLI
parses options with it before anything runs.
"""

from __future__ import annotations

from kimi_oracle.oracle.checks.chain import compare, full_verdict, shape_dtype_problems
from kimi_oracle.oracle.checks.identity import same_output, update_digest
from kimi_oracle.oracle.checks.invariance import check_invariance, invariance_plan
from kimi_oracle.oracle.checks.levels import levels_at, levels_of
from kimi_oracle.oracle.checks.locations import describe_location, locate, source_range
from kimi_oracle.oracle.checks.normalize import _describe, as_result  # noqa: F401 - _describe: candidates
from kimi_oracle.oracle.checks.own_plan import self_check
from kimi_oracle.oracle.checks.pixels import difference_magnitude, pixel_stats, ulp_distance
from kimi_oracle.oracle.checks.verdict import Verdict
from kimi_oracle.oracle.kinds import (  # noqa: F401 - re-exported: its public home was here
    ACCEPTS_INVALID,
    CHECKS,
    CRASH,
    FEATURE_LENGTH,
    FINDING_KINDS,
    GRID_MISMATCH,
    INVARIANCE,
    INVARIANCE_KINDS,
    PIXEL_MISMATCH,
    REPORTED_ONLY,
    SHAPE_DTYPE,
    TIMEOUT,
    Tolerance,
    ToleranceError,
    failing,
)


__all__ = [
    "ACCEPTS_INVALID",
    "CHECKS",
    "CRASH",
    "FEATURE_LENGTH",
    "FINDING_KINDS",
    "GRID_MISMATCH",
    "INVARIANCE",
    "INVARIANCE_KINDS",
    "PIXEL_MISMATCH",
    "REPORTED_ONLY",
    "SHAPE_DTYPE",
    "TIMEOUT",
    "Tolerance",
    "ToleranceError",
    "Verdict",
    "as_result",
    "check_invariance",
    "compare",
    "describe_location",
    "difference_magnitude",
    "failing",
    "invariance_plan",
    "levels_at",
    "levels_of",
    "locate",
    "pixel_stats",
    "same_output",
    "self_check",
    "source_range",
    "ulp_distance",
    "update_digest",
]
