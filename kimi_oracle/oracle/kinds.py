"""The oracle's vocabulary: the kinds of finding and the pixel tolerance policies (no torch).

`oracle.checks` re-exports all of it; the CLI parses `--tolerance` and lists kinds from here
without importing torch (a usage error or `--help` answers at once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from kimi_oracle.core.errors import KimiOracleError

GRID_MISMATCH = "grid_mismatch"
FEATURE_LENGTH = "feature_length"
SHAPE_DTYPE = "shape_dtype"
PIXEL_MISMATCH = "pixel_mismatch"
INVARIANCE = "invariance"
CRASH = "crash"
TIMEOUT = "timeout"
ACCEPTS_INVALID = "accepts_invalid"
# The differential checks, in the order `compare` runs them.
CHECKS = (GRID_MISMATCH, FEATURE_LENGTH, SHAPE_DTYPE, PIXEL_MISMATCH)
# Every kind of finding (the nightly runner adds `timeout`).
FINDING_KINDS = CHECKS + (INVARIANCE, CRASH, TIMEOUT, ACCEPTS_INVALID)
# `--oracle gpu` only: the project's GPU pipeline and the reference disagreed (a finding against
# this project, not the candidate: `oracle.gpu_oracle`); listed by the runs that use that oracle.
ORACLE_DISAGREEMENT = "oracle_disagreement"
# Kinds of finding against this project itself (not the candidate).
PROJECT_KINDS = (ORACLE_DISAGREEMENT,)
# Kinds that are reported but do not fail a run unless it is strict (`--strict`): a result for an
# input the checkpoint rejects is the engine being more lenient than the checkpoint, not wrong.
REPORTED_ONLY = (ACCEPTS_INVALID,)
# Kinds whose findings are split by the mode class of the image at fault (`oracle.grouping`;
# a crash is keyed by its cause there instead).
PER_MODE_CLASS = (PIXEL_MISMATCH, CRASH, TIMEOUT)
# What a finding of a kind other than pixel_mismatch means (pixel findings name root causes); a
# kind without one reads "the oracle's <kind> check failed" (`results.aggregation.cause_meaning`).
CHECK_MEANINGS = {
    ACCEPTS_INVALID: "the candidate returned a result for an input the checkpoint rejects (a failure only "
                     "under --strict)",
    GRID_MISMATCH: "the grids differ from the checkpoint's (\"deferred GPU preprocessing produced wrong grids\")",
    FEATURE_LENGTH: "the rows produced differ from the grids' patch count (\"deferred feature length does not "
                    "match image grids\")",
    ORACLE_DISAGREEMENT: "kimi-oracle's GPU pipeline and its CPU reference disagree (--oracle gpu): a defect of this "
                         "project; the run fell back to the reference",
}


def failing(checks: "Sequence[str]", strict: bool = False) -> list[str]:
    """The kinds among `checks` that fail a run: all of them when `strict`, else all but
    `REPORTED_ONLY`."""
    return [c for c in checks if strict or c not in REPORTED_ONLY]
INVARIANCE_KINDS = ("determinism", "batch_vs_single", "subset", "permutation")


class ToleranceError(KimiOracleError):
    """A tolerance policy string that is not `exact`, `levels:K` or `bf16`."""


@dataclass(frozen=True)
class Tolerance:
    """Pixel comparison policy: bitwise, within K uint8 levels, or bitwise after both sides are cast
    to bfloat16 (`bf16`: for float32 or bfloat16 candidates)."""

    kind: str = "exact"
    levels: float = 0.0

    @classmethod
    def parse(cls, text: "str | Tolerance | None") -> "Tolerance":
        """`exact`, `levels:K` (K ≥ 0) or `bf16`."""
        if isinstance(text, Tolerance):
            return text
        if text is None:
            return cls()
        value = str(text).strip().lower()
        if value == "exact":
            return cls("exact")
        if value == "bf16":
            return cls("bf16")
        if value.startswith("levels:"):
            try:
                k = float(value.split(":", 1)[1])
            except ValueError:
                k = float("nan")
            if not math.isfinite(k) or k < 0:
                raise ToleranceError(f"bad tolerance {text!r}: levels:K needs a number K >= 0")
            return cls("levels", k)
        raise ToleranceError(f"bad tolerance {text!r}: expected exact, levels:K or bf16")

    def __str__(self) -> str:
        if self.kind == "levels":
            k = int(self.levels) if float(self.levels).is_integer() else self.levels
            return f"levels:{k}"
        return self.kind


__all__ = ["ACCEPTS_INVALID", "CHECKS", "CHECK_MEANINGS", "CRASH", "FEATURE_LENGTH", "FINDING_KINDS", "GRID_MISMATCH",
           "INVARIANCE", "INVARIANCE_KINDS", "PER_MODE_CLASS", "PIXEL_MISMATCH", "REPORTED_ONLY", "SHAPE_DTYPE",
           "TIMEOUT", "Tolerance", "ToleranceError", "failing"]
