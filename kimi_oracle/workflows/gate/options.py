"""The gate's inputs and its unit of result: `GateOptions` (what runs, how strict) and `Stage`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.fuzzers.fuzzing import TILE_SHARE
from kimi_oracle.workflows.known import DEFAULT_MARGIN_PCT


@dataclass
class GateOptions:
    """What the gate runs and how strict it is."""

    profile: str = "k3"
    budget_s: float = 600.0
    perf_threshold_pct: float = 10.0
    tolerance: str = "exact"
    seed: int | None = None
    golden_dir: Path | None = None
    perf_rounds: int = 7
    # Larger than `fuzz`'s default: per example the harness costs about the same whatever the
    # size, so larger images keep the gate's time in the candidate rather than in the harness.
    fuzz_max_side: int = 256
    # Fuzz exactly this many examples instead of what fits into the budget: the verdict then does
    # not depend on the machine's speed (the budget still bounds the timing stage).
    fuzz_examples: int | None = None
    # Longest one call of NEW or OLD may take (its process is then killed: a timeout finding),
    # and the address space their processes may add (MiB; None: no limit).
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S
    memory_limit_mb: int | None = None
    # How far a shared root cause's max/mean levels or share may grow before it is `worse`
    # (percent, plus workflows.known.SLACK), against OLD or against the known limits.
    margin_pct: float = DEFAULT_MARGIN_PCT
    known_path: Path | None = None  # --known FILE: accepted divergences (TOML)
    write_known_path: Path | None = None  # --write-known FILE: NEW's rows as a starting known file
    strict: bool = False  # accepts_invalid rows fail too
    corpus_dir: Path | None = None  # real image files judged on NEW (and OLD)
    # --planner SPEC: NEW's planner, judged against every grid golden and on `planner_sizes`
    # fuzzed sizes and configs (plans are integers: any difference fails; sizes the checkpoint
    # rejects are reported only).
    planner: str | None = None
    planner_sizes: int = 200_000
    tile_share: float = TILE_SHARE  # fuzzers.fuzzing.TILE_SHARE: one example in 200 crosses kernel tiles
    # Library callers and tests: only the golden cases this accepts run (golden.CaseFilter), and
    # fuzz findings unshrunk (cheaper; the verdict rules are the same).
    golden_select: Callable[[Any], bool] | None = None
    fuzz_shrink: bool = True


@dataclass
class Stage:
    """The result of one stage."""

    name: str
    status: str = "skipped"  # pass | fail | skipped | error
    elapsed_s: float = 0.0
    summary: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "status": self.status, "elapsed_s": round(self.elapsed_s, 3),
                "summary": self.summary, "reasons": self.reasons, "details": self.details}
