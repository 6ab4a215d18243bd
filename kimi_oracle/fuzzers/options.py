"""The fuzz run's options and outcome: FuzzOptions, FuzzRun, the engine's shares and limits."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.files import versions
from kimi_oracle.inputs.draw import DrawOptions
from kimi_oracle.inputs.generators import MODES
from kimi_oracle.inputs.sizes import GATE_PHOTO_EXAMPLES, PHOTO_EVERY  # noqa: F401 (one home)
from kimi_oracle.inputs.strategies import DEFAULT_MAX_SIDE
from kimi_oracle.oracle.checks import FINDING_KINDS, Tolerance
from kimi_oracle.oracle.diagnosis import full_name, infer_profile
from kimi_oracle.results.report import Finding, finding_summary, root_cause_rows, summary_markdown


# Share of a budget the search gets once a failure waits to be shrunk (the rest shrinks).
SEARCH_SHARE = 0.8
# fuzz(): findings are diagnosed when published, not when met, and at most this share of a budget
# goes to diagnoses (a finding published past it carries no attribution: `repro` diagnoses it).
DIAGNOSIS_SHARE = 0.1
# How often (seconds of the clock) the search measures its overhead under FuzzOptions.overhead_s,
# and how far back each check reads the candidates' spans again (they arrive with the answers).
OVERHEAD_CHECK_S = 0.25
OVERHEAD_LAG_S = 2.0

# Invariances (a second run, the batch image by image, sub-batches, a permutation: up to six
# more candidate calls) run on one generated example in this many by default.
INVARIANCE_EVERY = 4

# The tile-crossing share the long runs (gate, nightly) give `FuzzOptions.tile_share`: one
# generated example in 200 is one image with both sides around 256, 512, 1024 or 2048 (±1). Such
# an example costs as much as many small ones; what this share costs: docs/measurements.md.
TILE_SHARE = 0.005
# The gate's real-photo examples by default: `inputs.sizes.GATE_PHOTO_EXAMPLES`.

# ... and each nightly worker, one example in NIGHTLY_PHOTO_EVERY.
NIGHTLY_PHOTO_EXAMPLES = 32
NIGHTLY_PHOTO_EVERY = 64

# Failures whose every reproduction costs a killed or restarted candidate process (the sandbox's
# exception names), and how many shrink steps such a finding gets before its smallest case so far
# is kept.
COSTLY_FAILURES = ("CallTimedOut", "ProcessDied")
MAX_COSTLY_SHRINK_STEPS = 4
# ... and how many shrink steps on a real-photo-sized case (over FINDING_LARGE_PIXELS) a group's
# shrink judges (its recorded case's replay among them); smaller cases are tried as usual.
MAX_LARGE_SHRINK_STEPS = 2

# Hypothesis' example limit while shrinking one group (its shrinker also stops after 500
# improvements); a budget's deadline usually ends a shrink first.
SHRINK_MAX_EXAMPLES = 1000


# Example counts per `--hypothesis-profile` when neither --examples nor --budget is given.
HYPOTHESIS_PROFILES = {
    "dev": {"max_examples": 25},
    "ci": {"max_examples": 100},
    "nightly": {"max_examples": 2000},
}


@dataclass
class FuzzOptions:
    """What a fuzz run draws and how long it runs."""

    examples: int | None = None
    budget_s: float | None = None  # the whole run, shrinking and publishing included
    seed: int | None = None
    tolerance: str = "exact"
    vary_config: bool = True
    max_images: int = 3
    max_side: int = DEFAULT_MAX_SIDE
    modes: tuple[str, ...] = MODES
    alpha_patterns: tuple[str, ...] | None = None
    invariance: bool = True
    invariance_every: int = INVARIANCE_EVERY  # invariances on generated examples i % this == 0
    tile_share: float = 0.0  # share of generated examples that are one tile-crossing image (draw.TILE_SIDES)
    # Real-photo examples (one image at a 12 Mpx or 4K size, `inputs.sizes.PHOTO_SIZES`, the mode
    # classes in turn): one generated example in `photo_every`, until `photo_examples` are drawn.
    photo_examples: int = 0
    photo_every: int = PHOTO_EVERY
    # Record a digest of each generated example's outcome (FuzzRun.outcomes): the gate compares
    # NEW's and OLD's, example by example, to find every input where they disagree.
    record_outcomes: bool = False
    shrink: bool = True
    hypothesis_profile: str = "ci"
    db_dir: Path | None = None  # saved failures (hypothesis example database); None: none
    split_by_mode: bool = True  # one pixel_mismatch / crash finding per mode class
    keep_searching: bool = True  # False: stop searching soon after the first failure (`_Engine.round_over`)
    clock: Callable[[], float] = time.monotonic  # the budget's clock (tests inject a fake one)
    # The harness's own allowance (the gate's lockstep run): seconds of the clock in which no
    # candidate works and the reference does not run, as `at_work(t0, t1)` (seconds at work
    # within that window) tells. The search ends (stopped "overhead") once what it spent, plus
    # what settling will take (its usual share of the run, or at least publishing the waiting
    # groups), reaches the allowance, once `overhead_min_examples` ran; the run's budget then ends
    # when settling has had that time.
    overhead_s: float | None = None
    at_work: Callable[[float, float], float] | None = None
    overhead_min_examples: int = 0  # examples the search runs whatever the allowance (a floor)
    # fuzz() under a budget: the share of it diagnoses may take (later findings are published with
    # their levels only, `attribution: {"deferred": ...}`); None: every reported finding is
    # diagnosed (the gate's absolute verdict reads their root causes).
    diagnosis_share: float | None = DIAGNOSIS_SHARE
    # `--oracle gpu`: an `oracle.gpu_oracle.GpuOracle` giving the expected results (a share of
    # them and every failure recomputed by the reference); None: the reference computes them all.
    oracle: Any = None
    # (family, variant) pairs of the diagnosis catalogue the reference is taken with (`--assume`):
    # the candidate is compared with the reference with those variants applied.
    assume: tuple[tuple[str, str], ...] = ()
    # Every bug its own finding (`fuzzers.peel`): an explained group's causes applied to the
    # reference, and the search for further causes goes on there (fuzz(); never the gate's pair).
    peel: bool = True

    def max_examples(self) -> int:
        """The number of examples the run draws (huge under a time budget alone)."""
        if self.examples is not None:
            return max(1, int(self.examples))
        if self.budget_s is not None:
            return 10**9
        return HYPOTHESIS_PROFILES.get(self.hypothesis_profile, HYPOTHESIS_PROFILES["ci"])["max_examples"]

    def draw_options(self) -> DrawOptions:
        """What each example is drawn from."""
        return DrawOptions(self.vary_config, self.max_images, self.max_side, tuple(self.modes),
                           tuple(self.alpha_patterns) if self.alpha_patterns is not None else None,
                           tiles=self.tile_share > 0, photos=self.photo_examples > 0)


@dataclass
class FuzzRun:
    """The outcome of a fuzz run."""

    candidate: str
    config: PreprocessConfig
    options: FuzzOptions
    seed: int
    findings: list[Finding] = field(default_factory=list)
    examples: int = 0  # examples run: saved failures replayed + generated (shrinking not counted)
    calls: int = 0  # every evaluation, shrinking included
    shrink_calls: int = 0  # evaluations while shrinking
    replayed: int = 0  # saved failures replayed (counted in examples)
    rejected: int = 0
    skipped_hanging: int = 0  # examples not judged: a mode class the candidate already hung on
    elapsed_s: float = 0.0
    search_s: float = 0.0  # of elapsed_s: replaying and generating examples
    first_found: dict[str, int] = field(default_factory=dict)  # check -> example number
    # generated example i -> digest of its outcome (the output's bytes, or how it failed or was not
    # judged); only with FuzzOptions.record_outcomes
    outcomes: dict[int, str] = field(default_factory=dict)
    stopped: str = "examples"
    started: str = ""
    # where the time went (fuzzers.publishing.RunTimes: candidate, reference, diagnosis,
    # shrinking, writing, harness), set at the end of the run
    time: dict[str, Any] = field(default_factory=dict)
    # CPU seconds of this (the fuzzing) process and of the candidate's executors over the run, per
    # example and their ratio (`cpu_report`): which of the two bounds the rate
    cpu: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """True when there is at least one finding."""
        return bool(self.findings)

    def counts(self) -> dict[str, int]:
        """Findings per check, every check listed."""
        out = {c: 0 for c in FINDING_KINDS}
        for f in self.findings:
            out[f.check] = out.get(f.check, 0) + 1
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (the `--json` document). `pipeline`: the candidate's inferred
        pipeline (family -> variant, `oracle.diagnosis.infer_profile`), `pipeline_summary` its
        line, `pipeline_apart` the pixel findings it does not explain."""
        profile = infer_profile(self.findings)
        return {
            "schema": "kimi-oracle.fuzz-run",
            "schema_version": 1,
            "command": "fuzz",
            "candidate": self.candidate,
            "profile": self.config.name,
            "config": self.config.to_hf_json(),
            "tolerance": str(Tolerance.parse(self.options.tolerance)),
            "seed": self.seed,
            "vary_config": self.options.vary_config,
            "invariance_every": self.options.invariance_every if self.options.invariance else None,
            "tile_share": self.options.tile_share,
            "photo_examples": self.options.photo_examples,
            "examples": self.examples,
            "calls": self.calls,
            "shrink_calls": self.shrink_calls,
            "replayed": self.replayed,
            "rejected": self.rejected,
            "skipped_hanging": self.skipped_hanging,
            "elapsed_s": round(self.elapsed_s, 3),
            "search_s": round(self.search_s, 3),
            "stopped": self.stopped,
            "started": self.started,
            "time": dict(self.time),
            "cpu": dict(self.cpu),
            "counts": self.counts(),
            "root_causes": root_cause_rows(self.findings),
            "assume": [full_name(f, v) for f, v in self.options.assume],
            "pipeline": dict(profile.pipeline),
            **profile.to_dict(),
            "findings": [finding_summary(f) for f in self.findings],
            "oracle": (self.options.oracle.summary() if self.options.oracle is not None
                       else {"oracle": "reference"}),
            "versions": versions(),
        }

    def markdown(self) -> str:
        """Markdown summary."""
        return summary_markdown(self.summary())
