"""The gate's inputs and its unit of result: `GateOptions` (what runs, how strict) and `Stage`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.fuzzers.fuzzing import GATE_PHOTO_EXAMPLES, TILE_SHARE
from kimi_oracle.workflows.known import DEFAULT_MARGIN_PCT


@dataclass(kw_only=True)
class GateOptions:
    """What the gate runs and how strict it is, grouped by what each field governs (keywords
    only: the fields' order is their grouping, not a contract)."""

    # What NEW is judged on: the profile fuzzed around, the pixel tolerance, the goldens, real
    # files (`--corpus DIR`), and `--planner SPEC`: NEW's planner, judged against every grid
    # golden and on `planner_sizes` fuzzed sizes and configs (plans are integers: any difference
    # fails; sizes the checkpoint rejects are reported only).
    profile: str = "k3"
    tolerance: str = "exact"
    golden_dir: Path | None = None
    corpus_dir: Path | None = None
    planner: str | None = None
    planner_sizes: int = 200_000
    # The whole gate's time and seed; the longest one call of NEW or OLD may take (its process
    # is then killed: a timeout finding), and the address space their processes may add (MiB;
    # None: no limit).
    budget_s: float = 600.0
    seed: int | None = None
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S
    memory_limit_mb: int | None = None
    # The fuzz stage. A larger side than `fuzz`'s default: per example the harness costs about
    # the same whatever the size, so larger images keep the gate's time in the candidate rather
    # than in the harness. `fuzz_examples`: exactly this many examples instead of what fits
    # into the budget, so that the verdict does not depend on the machine's speed (the budget
    # still bounds the timing stage). `tile_share`: fuzzers.fuzzing.TILE_SHARE, one example in
    # 200 crosses kernel tiles. `fuzz_shrink=False` (library callers and tests): findings
    # unshrunk, cheaper, under the same verdict rules.
    fuzz_max_side: int = 256
    fuzz_examples: int | None = None
    tile_share: float = TILE_SHARE
    # Real-photo examples of the fuzz stage (fuzzers.fuzzing.GATE_PHOTO_EXAMPLES: 12 Mpx and 4K,
    # the mode classes in turn, one example in inputs.sizes.PHOTO_EVERY until drawn).
    photo_examples: int = GATE_PHOTO_EXAMPLES
    fuzz_shrink: bool = True
    # The timing stage: the slowdown that fails, and the interleaved rounds.
    perf_threshold_pct: float = 10.0
    perf_rounds: int = 7
    # The verdict: how far a shared root cause's max/mean levels or share may grow before it is
    # `worse` (percent, plus workflows.known.SLACK), against OLD or against the known limits;
    # `--known FILE` (accepted divergences, TOML), `--write-known FILE` (NEW's rows as a starting
    # known file), and `--strict` (accepts_invalid rows fail too).
    margin_pct: float = DEFAULT_MARGIN_PCT
    known_path: Path | None = None
    write_known_path: Path | None = None
    strict: bool = False
    # `--engine SPEC`: its request layer fuzzed on `engine_scenarios` scenarios (within the
    # budget's engine share; `mixed_configs` varies mean, std and background too): any finding fails.
    engine: str | None = None
    engine_scenarios: int = 500
    mixed_configs: bool = False
    # `--media video|both`: the video stage fuzzes NEW (and OLD) on `video_examples` drawn
    # batches of K2.5 chunks (with images, `both`); `image` (the default) skips it.
    media: str = "image"
    video_examples: int = 200
    # `--oracle gpu`: the fuzz stage's expected results from the GPU pipeline (`oracle.gpu_oracle`;
    # the reference rechecks a share and every failure); None: the reference's.
    oracle: Any = None
    # Library callers and tests: only the golden cases this accepts run (golden.CaseFilter).
    golden_select: Callable[[Any], bool] | None = None


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
