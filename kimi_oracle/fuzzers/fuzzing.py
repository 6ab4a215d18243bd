"""The differential fuzzing engine: seeded draws find, the oracle judges, hypothesis shrinks.

`fuzz(candidate, config, options)` runs N examples or a time budget and returns a `FuzzRun`
with the shrunk findings (one per failure group); `evaluate` (re-exported from `oracle.judge`)
judges one batch of images and is shared by `repro`, `check`, the pytest plugin, the nightly
runner and the gate.

How a run goes:

1. Saved failures (`FuzzOptions.db_dir`) are replayed first; each counts as an example.
2. The search: example i (0-based) is drawn by `inputs.draw.draw_fuzz_case` from
   `RandomSource(derive(seed, i))`. It depends only on (seed, i, the drawing options, the base
   config), never on the candidate or on what earlier examples found: two candidates fuzzed with
   the same seed and example count see the same cases (the gate relies on it). Invariances run on
   every `invariance_every`-th example (i % invariance_every == 0), differential checks on all.
   A group's simplest failing case (shortest choice list) is kept for shrinking; `fuzz_pair`
   also diagnoses its first case when it is met (that time is what publishing the group is
   expected to take), `fuzz` only when it publishes (the mean publishing time so far is then
   the expectation).
   With a database (or two runs differing in it) the generated examples are fewer, not others.
3. Shrinking: the simplest failing case of each new failure group (`oracle.grouping.finding_key`)
   is handed to hypothesis as a recorded choice sequence (`inputs.strategies`), which replays it
   and shrinks it; other groups' failures are ignored while one group is shrunk.
4. Publishing: one finding per group, diagnosed, written under `out_dir`; a first case with root
   causes the shrunk one lost is a finding of its own (`_lost_causes`). In `fuzz`, each case is
   diagnosed once, a database's earlier diagnosis of the same case and result is reused
   (`fuzzers.publishing.DiagnosisStore`), at most `DIAGNOSIS_SHARE` of a budget goes to
   diagnoses (later findings carry the levels and an attribution saying it was deferred), and
   the folders are written by a background thread (all written when `fuzz` returns).
   `FuzzRun.time` says where the time went (`fuzzers.publishing.RunTimes`).

Counts and budgets: `examples` = N exactly (saved failures replayed + generated examples;
rejected and hanging-skipped ones included); shrinking is counted apart in `shrink_calls` (and in
`calls`, every evaluation). A budget covers the whole run, shrinking and publishing included: the
search stops at `SEARCH_SHARE` of it once something waits to be shrunk (or earlier, when what is
left is what publishing the waiting groups is expected to take), else at the end; no example starts that would end past it (as
long as the longest of its kind so far). The rest is shared among the groups, each shrink
stopping (with its smallest case so far) before a step would pass its deadline; time left over
goes back to the search.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

from PIL import Image

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import fresh_seed
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.core.errors import AssumptionError, InputError, KimiOracleError
from kimi_oracle.core.files import versions
from kimi_oracle.core.threads import one_torch_thread
from kimi_oracle.inputs.draw import (ChoiceSource, DrawOptions, RandomSource,
                                     ReplayError, derive, draw_fuzz_case,
                                     is_tile_example)
from kimi_oracle.inputs.generators import MODES, FuzzCase
from kimi_oracle.inputs.strategies import DEFAULT_MAX_SIDE, recorded_fuzz_cases
from kimi_oracle.oracle.candidates import Candidate, load_candidate
from kimi_oracle.oracle.checks import (FINDING_KINDS, INVARIANCE,
                                       PIXEL_MISMATCH, TIMEOUT, Tolerance,
                                       Verdict, update_digest)
from kimi_oracle.fuzzers.publishing import Publisher
from kimi_oracle.oracle.diagnosis import assumed_steps, finding_diagnosis, full_name, infer_profile, parse_assumption
from kimi_oracle.oracle.grouping import failure_type, finding_key, mode_class
from kimi_oracle.oracle.judge import Rejected, evaluate
from kimi_oracle.pipelines import reference
from kimi_oracle.results.report import (Finding, finding_summary,
                                        root_cause_rows, summary_markdown,
                                        write_finding)

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

# Failures whose every reproduction costs a killed or restarted candidate process (the sandbox's
# exception names), and how many shrink steps such a finding gets before its smallest case so far
# is kept.
COSTLY_FAILURES = ("CallTimedOut", "ProcessDied")
MAX_COSTLY_SHRINK_STEPS = 4

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
    # (family, variant) pairs of the diagnosis catalogue the reference is taken with (`--assume`):
    # the candidate is compared with the reference with those variants applied.
    assume: tuple[tuple[str, str], ...] = ()

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
                           tiles=self.tile_share > 0)


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
            "counts": self.counts(),
            "root_causes": root_cause_rows(self.findings),
            "assume": [full_name(f, v) for f, v in self.options.assume],
            "pipeline": dict(profile.pipeline),
            **profile.to_dict(),
            "findings": [finding_summary(f) for f in self.findings],
            "versions": versions(),
        }

    def markdown(self) -> str:
        """Markdown summary."""
        return summary_markdown(self.summary())


# ---------------------------------------------------------------------------------------------
# one case


def finding_from(verdict: Verdict, candidate: str, config: PreprocessConfig, images: Sequence[Image.Image], *,
                 params: Sequence[dict | None] | None = None, tolerance: str = "exact", engine: str = "hypothesis",
                 seed: int | None = None, example: int | None = None, sources: Sequence[str | None] = (),
                 raw_inputs: Sequence[bytes | None] = (), diagnosis: dict[str, Any] | None = None,
                 assume: Sequence[tuple[str, str]] = ()) -> Finding:
    """A Finding for a failed verdict (`diagnosis`: its fields when made already; `assume`: the
    variants the reference was taken with)."""
    extra: dict[str, Any] = {}
    if assume:  # `repro` compares with the same reference
        extra["assume"] = [full_name(f, v) for f, v in assume]
    if verdict.check == INVARIANCE:
        extra["invariance"] = {"kind": verdict.stats.get("kind"), "indices": verdict.stats.get("indices")}
    if diagnosis is None:
        diagnosis = finding_diagnosis(str(verdict.check), verdict.stats, images, config,
                                      expected=verdict.expected, actual=verdict.actual,
                                      **({"assume": tuple(assume)} if assume else {}))
    return Finding(
        check=str(verdict.check),
        message=verdict.message,
        candidate=candidate,
        config=config,
        images=list(images),
        params=list(params) if params is not None else [None] * len(images),
        tolerance=str(Tolerance.parse(tolerance)),
        engine=engine,
        seed=seed,
        example=example,
        stats=verdict.stats,
        sources=list(sources),
        raw_inputs=list(raw_inputs),
        expected=verdict.expected,
        actual=verdict.actual,
        extra=extra,
        key=finding_key(str(verdict.check), verdict.stats, images),
        **diagnosis,
    )


# ---------------------------------------------------------------------------------------------
# the engine


def _database(directory: Path) -> Any:
    """The saved failures: hypothesis' directory database (entries are written to a temporary file
    and renamed into place), values are choice sequences (`hypothesis.database.choices_to_bytes`)."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    return DirectoryBasedExampleDatabase(str(directory))


def _namespace(candidate: Candidate, config: PreprocessConfig, options: FuzzOptions, tol: Tolerance) -> bytes:
    """The database key of a run's saved failures: one per candidate, profile, drawing options,
    tolerance and assumed variants (`--assume`; none: the key as before), so that a replay is
    relevant (and a stored diagnosis is the same reference's)."""
    parts: list[Any] = [candidate.spec, config.to_hf_json(), dataclasses.asdict(options.draw_options()), str(tol)]
    if options.assume:
        parts.append([list(pair) for pair in options.assume])
    return ("fuzz-cases:" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]).encode()


def _seed_database(choices: Sequence[int]) -> Any:
    """A database holding one recorded choice sequence under hypothesis' secondary key: the reuse
    phase replays it as a failure not shrunk yet (entries under the primary key count as shrunk
    already and are not shrunk again), and the shrink phase shrinks it. Saves nothing."""
    from hypothesis.database import ExampleDatabase, choices_to_bytes

    blob = choices_to_bytes(list(choices))

    class SeedOnly(ExampleDatabase):
        def save(self, key: bytes, value: bytes) -> None:
            pass

        def fetch(self, key: bytes):  # type: ignore[override]
            if key.endswith(b".secondary"):
                yield blob

        def delete(self, key: bytes, value: bytes) -> None:
            pass

        def move(self, src: bytes, dest: bytes, value: bytes) -> None:
            pass

    return SeedOnly()


class _Stop(BaseException):
    """Ends a hypothesis shrink at once (BaseException: hypothesis neither catches nor shrinks it)."""


class _HarnessAbort(BaseException):
    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class _Failed(Exception):
    """Raised inside the hypothesis shrink for the group being shrunk."""


@dataclass
class _Record:
    """A group's case: the smallest failing case so far (the first one until shrunk)."""

    case: FuzzCase
    choices: tuple[int, ...]
    verdict: Verdict
    example: int  # the example number the group was first met at (1-based)
    invariance: bool  # whether the invariances ran on it
    saved: bool = False  # replayed from the database: shrunk in an earlier run
    finding: Finding | None = None  # the case's finding (diagnosed), once made
    cost_to_judge: float = 0.0  # the clock's time judging it took
    cost: float = 0.0  # the clock's time making that finding took
    shrunk: bool = False  # a case the shrink found
    tile: bool = False  # a tile-crossing example's case (one image of ~256-2048 px sides)


class _Engine:
    """One fuzz run's state and stages (fuzz() below is the public entry)."""

    def __init__(self, candidate: Candidate, config: PreprocessConfig, options: FuzzOptions,
                 out_dir: str | Path | None, on_example: Callable[[FuzzRun], None] | None):
        from kimi_oracle.core.files import utc_now

        self.candidate, self.config, self.options = candidate, config, options
        self.out_dir, self.on_example = out_dir, on_example
        self.tol = Tolerance.parse(options.tolerance)
        seed = options.seed if options.seed is not None else fresh_seed()
        self.run = FuzzRun(candidate.spec, config, options, seed)
        self.run.started = utc_now()
        self.draw_options = options.draw_options()
        self.clock = options.clock
        self.start = self.clock()
        self.budget = options.budget_s
        self.records: dict[str, _Record] = {}
        self.first_cases: dict[str, _Record] = {}  # each unpublished group's first case (diagnosed when met)
        self.seen: dict[str, dict[str, Any]] = {}  # per group: generated examples hit, largest levels
        self.hanging: set[str] = set()  # mode classes of the images the candidate timed out on
        self.last_new = 0  # the example number the latest new group was met at
        self.published: set[str] = set()  # groups whose finding is out (a budget's later search)
        self.longest = {False: 0.0, True: 0.0}  # the longest example so far: ordinary, tile-crossing
        self.last_done: float | None = None  # when the latest example's judging (and noting) ended
        # Under FuzzOptions.overhead_s: the harness's time in the search, measured up to overhead_checked
        # (every OVERHEAD_CHECK_S, from next_overhead_check on).
        self.harness_s = 0.0
        self.overhead_checked = self.next_overhead_check = self.start
        self.database = _database(options.db_dir) if options.db_dir else None
        # fuzz_pair: the baseline's engine, judged on every generated example of this one in lockstep
        self.partner: _Engine | None = None
        self.db_key = _namespace(candidate, config, options, self.tol)
        # fuzz_pair: each group's first case is diagnosed when met (the gate compares root causes
        # of first and shrunk cases, NEW's and OLD's); fuzz(): when published, within a budget.
        self.eager_diagnosis = False
        self.publisher = Publisher(self.clock, options.db_dir, options.diagnosis_share)

    # -- one evaluation

    def judge(self, case: FuzzCase, invariance: bool, *, shrinking: bool = False, hangs_judged: bool = False
              ) -> tuple[list[Image.Image], Verdict] | None:
        """The verdict on one case; None when the reference rejects it or it is not judged."""
        return self.finish(self.begin(case, shrinking=shrinking, hangs_judged=hangs_judged), invariance,
                           shrinking=shrinking)

    def begin(self, case: FuzzCase, *, shrinking: bool = False, images: list[Image.Image] | None = None,
              hangs_judged: bool = False) -> tuple[list[Image.Image], PreprocessConfig, Any] | None:
        """A case's images and config, and the candidate's call on them started (`Candidate.start_call`: an
        executor's candidate works on them while this process goes on); None when not judged.
        `hangs_judged`: a mode class the candidate hung on is judged all the same (shrinking a
        timeout, whose every step is such a case; the costly-step cap bounds what it waits)."""
        interrupts.raise_if_requested()  # an interrupt swallowed elsewhere is not lost
        if images is None:
            images = case.make_images()
        if not hangs_judged and self.hanging and any(mode_class(img) in self.hanging for img in images):
            # A mode class the candidate already hung on would cost a whole case timeout again
            # and could only re-find that timeout: not judged, counted apart.
            if not shrinking:
                self.run.skipped_hanging += 1
            return None
        try:
            return images, case.config, self.candidate.start_call(images, case.config)
        except KimiOracleError as exc:
            raise _HarnessAbort(exc) from None

    def finish(self, started: tuple[list[Image.Image], PreprocessConfig, Any] | None, invariance: bool, *,
               shrinking: bool = False, expected: Any = None, same_as: Verdict | None = None
               ) -> tuple[list[Image.Image], Verdict] | None:
        """The verdict on a begun case (the reference runs now, then the call's result is taken)."""
        if started is None:
            return None
        images, config, call = started
        run = self.run
        run.calls += 1
        if shrinking:
            run.shrink_calls += 1
        try:
            verdict = evaluate(self.candidate, images, config, self.tol, invariance=invariance, call=call,
                               expected=expected, same_as=same_as,
                               steps=assumed_steps(config, self.options.assume) if self.options.assume else None)
        except Rejected:
            if not shrinking:
                run.rejected += 1
            return None
        except KimiOracleError as exc:
            raise _HarnessAbort(exc) from None
        if self.on_example is not None:
            self.on_example(run)
        return images, verdict

    def group_of(self, verdict: Verdict, images: Sequence[Image.Image]) -> str:
        check = str(verdict.check)
        return finding_key(check, verdict.stats, images) if self.options.split_by_mode else check

    def note(self, case: FuzzCase, choices: Sequence[int], images: list[Image.Image], verdict: Verdict,
             invariance: bool, *, saved: bool = False, took: float = 0.0, tile: bool = False,
             number: int | None = None) -> None:
        """Record a failing example (replayed or generated): hits, levels, a group's first case.
        A tile-crossing example (one image of ~256-2048 px sides: a short choice sequence) never
        replaces a group's case: shrinking and diagnosing it would cost hundreds of small ones.
        `number`: the example's number (1-based; default: the examples counted so far, which is it
        unless the search has begun the next one already)."""
        check = str(verdict.check)
        group = self.group_of(verdict, images)
        if group in self.published:
            return
        seen = self.seen.setdefault(group, {"hits": 0, "max": 0.0})
        seen["hits"] += 1
        level = verdict.stats.get("max_level_diff")
        if isinstance(level, (int, float)):
            seen["max"] = max(seen["max"], float(level))
        example = number if number is not None else self.run.examples
        known = self.records.get(group)
        if known is not None:
            # Hypothesis keeps the simplest failing case of each kind it generated; so do we: the
            # shrink starts from it (shorter choice sequences first, then smaller choices).
            if not known.saved and not tile and (len(choices) < len(known.choices)
                                    or len(choices) == len(known.choices) and tuple(choices) < known.choices):
                self.records[group] = _Record(case, tuple(choices), verdict, known.example, invariance, False,
                                              cost_to_judge=took)
            return
        self.last_new = example
        self.run.first_found.setdefault(check, example)
        record = _Record(case, tuple(choices), verdict, example, invariance, saved, cost_to_judge=took, tile=tile)
        self.records[group] = record
        self.first_cases[group] = record
        if check == TIMEOUT and len(images) == 1:
            self.hanging.add(mode_class(images[0]))
        if not self.eager_diagnosis:
            # Diagnosed when published (fuzz()): publishing is expected to take what it took so far.
            record.cost = self.publisher.estimate()
            return
        # The first case is diagnosed when it is met: its finding is published as is when the
        # case is not shrunk, its root causes are compared with the shrunk case's, and what it
        # cost tells the budget how long publishing this group will take.
        began = self.clock()
        record.finding = self.finding(record)
        record.cost = self.clock() - began

    def diagnosis_spent(self) -> bool:
        """fuzz() under a budget: whether the diagnoses have had their share of it."""
        return not self.eager_diagnosis and self.publisher.spent(self.budget)

    # -- stages

    def search_over(self, next_cost: float = 0.0, in_flight: float = 0.0) -> bool:
        """Under a budget, the search ends when nothing waits to be shrunk and the next example
        (as long as the longest of its kind so far, tile-crossing or not) would end past the
        budget; else when what is left of it is (1 - SEARCH_SHARE) of it, or twice what
        diagnosing the waiting groups' first cases took (shrinking, then publishing, needs at
        least that). `in_flight`: what the example begun and not judged yet will take (counted
        as spent already)."""
        if self.budget is None:
            return False
        left = self.start + self.budget - self.clock() - in_flight
        if not self.records and not (self.partner is not None and self.partner.records):
            return left <= 0 or next_cost > left + 1e-6  # (1 µs: sums of float clock readings)
        shrinking = (1 - SEARCH_SHARE) * self.budget if self.options.shrink else 0.0
        return left <= max(shrinking, self.publishing()) or next_cost > left + 1e-6

    def publishing(self) -> float:
        """What publishing the waiting groups will take: fuzz(), their count times the expected
        time of one; fuzz_pair, twice what diagnosing their first cases took (`waiting`)."""
        if not self.eager_diagnosis:
            return len(self.first_cases) * self.publisher.estimate() + self.publisher.backlog()
        return 2 * self.waiting()

    def waiting(self) -> float:
        """What diagnosing the waiting groups' first cases took (the partner's too): publishing
        them takes about as long again."""
        waiting = sum(r.cost for r in self.first_cases.values())
        if self.partner is not None:  # fuzz_pair: the baseline's groups are published too (those
            # this side has as well as they were met: `_settle_pair`)
            waiting += sum(r.cost for g, r in self.partner.first_cases.items() if g not in self.records)
        return waiting

    def overhead_spent(self) -> bool:
        """Under `FuzzOptions.overhead_s`: whether the search has spent its part of the harness's
        allowance (measured every OVERHEAD_CHECK_S of the clock); then the run's budget shrinks to
        the search's time plus settling's."""
        options = self.options
        if options.overhead_s is None or options.at_work is None:
            return False
        now = self.clock()
        if now < self.next_overhead_check:
            return False
        self.next_overhead_check = now + OVERHEAD_CHECK_S
        # Summed window by window (the union of spans within adjacent windows adds up to the
        # union within their span), so that each check reads only recent spans; the last
        # OVERHEAD_LAG_S are read again at each check, since an executor's span is recorded when
        # its answer arrives (a span later than that counts as the harness's: the safe side).
        until = max(self.overhead_checked, now - OVERHEAD_LAG_S)
        self.harness_s += (until - self.overhead_checked) - options.at_work(self.overhead_checked, until)
        self.overhead_checked = until
        spent = self.harness_s + (now - until) - options.at_work(until, now)
        if self.run.examples < options.overhead_min_examples:
            return False
        elapsed = now - self.start
        # What settling will add (mostly the harness's: hypothesis, the reference, diagnoses):
        # the share of the run it gets under a budget, or publishing the waiting groups.
        settling = max(elapsed * (1 - SEARCH_SHARE) / SEARCH_SHARE if options.shrink else 0.0, self.publishing())
        if spent + settling < options.overhead_s:
            return False
        took = elapsed + settling
        self.budget = took if self.budget is None else min(self.budget, took)
        if self.partner is not None:
            self.partner.budget = self.budget
        return True

    def over(self, fraction: float) -> bool:
        return self.budget is not None and self.clock() - self.start >= self.budget * fraction

    def replay_saved(self, target: int) -> None:
        """Replay the saved failures first (each an example); entries that no longer fail, or no
        longer describe a case of these options, are deleted."""
        from hypothesis.database import choices_from_bytes

        if self.database is None:
            return
        run = self.run
        entries = sorted(self.database.fetch(self.db_key), key=lambda b: (len(b), b))
        for blob in entries:
            if run.examples >= target or self.over(1.0):
                return
            choices = choices_from_bytes(blob)
            source = ChoiceSource(choices or ())
            try:
                if not choices or not all(isinstance(c, int) for c in choices):
                    raise ReplayError("not a list of integers")
                case = draw_fuzz_case(source, self.config, self.draw_options)
                if not source.exhausted:
                    raise ReplayError("choices left over")
            except (ReplayError, ValueError):
                self.database.delete(self.db_key, blob)
                continue
            run.examples += 1
            run.replayed += 1
            judged = self.judge(case, True)
            if judged is None:
                continue
            images, verdict = judged
            if verdict.ok:
                self.database.delete(self.db_key, blob)
                continue
            self.note(case, choices, images, verdict, True, saved=True)

    def round_over(self) -> bool:
        """keep_searching=False: the search stops like one hypothesis round after its first
        failure: once at least 10 examples ran and twice as many as when the latest new group was
        met (at most 1000 more than the first group's); at once when shrinking is off."""
        if not self.options.shrink:
            return True
        first = min(r.example for r in self.records.values())
        examples = self.run.examples
        return examples >= 10 and examples >= min(first + 1000, 2 * self.last_new)

    def search(self, target: int) -> None:
        """Generated examples until `target` examples ran, the budget's search share is spent or
        (keep_searching=False) something failed."""
        run, options = self.run, self.options
        every = max(1, int(options.invariance_every))
        first = run.replayed  # generated example i is run example first + i
        if run.stopped == "budget":
            run.stopped = "examples"  # a later pass (time left after shrinking) decides anew
        # One example ahead: example i+1 is drawn, made and sent to the candidate before example
        # i is judged (the reference, the comparison), so that a candidate in an executor process
        # works while this process does. Not with keep_searching=False, whose stop depends on
        # each verdict before the next example.
        ahead = options.keep_searching
        self.last_done = None  # (a later pass: the time shrinking took is no example's)
        pending: dict[str, Any] | None = None
        while True:
            upcoming = self.next_example(target, first, every, pending)
            if pending is not None and upcoming is not None and self.hung(pending):
                self.complete(pending)  # its hang decides whether the next one is judged
                pending = None
            if upcoming is not None:
                images = upcoming.pop("images")
                upcoming["started"] = self.begin(upcoming["case"], images=images)
                if self.partner is not None:  # the baseline works on the same images meanwhile
                    self.partner.run.examples += 1
                    upcoming["partner_started"] = self.partner.begin(upcoming["case"], images=images)
            if pending is not None:
                self.complete(pending)
            if upcoming is None:
                return
            pending = upcoming
            if not ahead:
                self.complete(pending)
                pending = None

    def next_example(self, target: int, first: int, every: int, pending: dict[str, Any] | None
                     ) -> dict[str, Any] | None:
        """The next generated example (drawn and made, counted), or None when the search ends
        (run.stopped says why when it is not the example count)."""
        run, options = self.run, self.options
        if run.examples >= target:
            return None
        if interrupts.requested():
            run.stopped = "interrupted"
            return None
        if self.records and not options.keep_searching and self.round_over():
            return None
        if self.overhead_spent():
            run.stopped = "overhead"
            return None
        i = run.examples - first
        source, tile = example_source(run.seed, i, options.tile_share)
        # The example in flight counts as begun: the next one must end within the budget too.
        if self.search_over(self.longest[tile], self.longest[pending["tile"]] if pending else 0.0):
            run.stopped = "budget"
            return None
        run.examples += 1
        case = draw_fuzz_case(source, self.config, self.draw_options)
        return {"i": i, "number": run.examples, "source": source, "tile": tile, "case": case,
                "invariance": options.invariance and i % every == 0, "images": case.make_images()}

    @staticmethod
    def hung(pending: dict[str, Any]) -> bool:
        """Whether the example in flight hung on either side (waited for): then it is judged
        before the next one starts."""
        hangs = False
        for key in ("started", "partner_started"):
            started = pending.get(key)
            wait = getattr(started[2], "wait", None) if started is not None else None
            hangs = (wait is not None and wait() == TIMEOUT) or hangs
        return hangs

    def complete(self, example: dict[str, Any]) -> None:
        """Judge a begun generated example and record what it found (then the partner's call on
        it, against the same expectation)."""
        judged = self._complete(example)
        if self.partner is not None:
            expected = judged[1].expected if judged is not None else None
            self.partner._complete({**example, "started": example.get("partner_started"), "expected": expected,
                                    "same_as": judged[1] if judged is not None else None})

    def _complete(self, example: dict[str, Any]) -> tuple[list[Image.Image], Verdict] | None:
        run = self.run
        began = self.clock()  # waiting for the candidate's answer, the reference, the comparison
        judged = self.finish(example["started"], example["invariance"], expected=example.get("expected"),
                             same_as=example.get("same_as"))
        done = self.clock()
        took = done - began
        # What an example costs the search: from the end of the previous one's judging (its
        # diagnosis excluded) to the end of this one's, the next example's drawing and making
        # included; the longest of its kind tells the budget whether another one fits.
        period = done - self.last_done if self.last_done is not None else took
        tile = example["tile"]
        self.longest[tile] = max(self.longest[tile], took, period)
        try:
            if self.options.record_outcomes:
                run.outcomes[example["i"]] = outcome_digest(judged[1] if judged is not None else None)
            if judged is None:
                return None
            images, verdict = judged
            if not verdict.ok:
                self.note(example["case"], example["source"].choices, images, verdict, example["invariance"],
                          took=took, tile=example["tile"], number=example["number"])
            return judged
        finally:
            self.last_done = self.clock()

    def shrink(self, group: str, deadline: float | None) -> None:
        """Shrink a group's case with hypothesis (reuse + shrink phases over its recorded choices);
        its smallest failing case so far is kept when the deadline or the costly-step cap ends it."""
        from hypothesis import HealthCheck, Phase, Verbosity, given, reject
        from hypothesis import seed as hypothesis_seed
        from hypothesis import settings

        record = self.records[group]
        hangs_judged = record.verdict.check == TIMEOUT  # each of its steps may be a hanging mode class
        costly = {"steps": 0}
        clock = self.clock
        step = {"cost": record.cost_to_judge}  # the last step's time: the next one's estimate

        def body(drawn: tuple[FuzzCase, tuple[int, ...]]) -> None:
            case, choices = drawn
            began = clock()
            if deadline is not None and began + step["cost"] > deadline:
                raise _Stop()
            try:
                judged = self.judge(case, record.invariance, shrinking=True, hangs_judged=hangs_judged)
            finally:
                step["cost"] = clock() - began
            if judged is None:
                reject()
            images, verdict = judged
            if verdict.ok or self.group_of(verdict, images) != group:
                return  # another group's failure is not this group's shrink step
            if (len(choices), choices) <= (len(self.records[group].choices), self.records[group].choices):
                self.records[group] = _Record(case, tuple(choices), verdict, record.example, record.invariance,
                                              shrunk=True)
            if verdict.check == TIMEOUT and len(images) == 1:
                self.hanging.add(mode_class(images[0]))
            if failure_type(verdict.stats).split("[")[0] in COSTLY_FAILURES:
                # Each step of shrinking a hang waits the whole case timeout, each death restarts
                # the candidate's process: keep the smallest case so far after a few steps.
                costly["steps"] += 1
                if costly["steps"] >= MAX_COSTLY_SHRINK_STEPS:
                    raise _Stop()
            raise _Failed(verdict.message)

        test = settings(
            max_examples=SHRINK_MAX_EXAMPLES,
            deadline=None,
            database=_seed_database(record.choices),
            phases=[Phase.reuse, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            print_blob=False,
            report_multiple_bugs=False,
        )(hypothesis_seed(self.run.seed)(given(recorded_fuzz_cases(self.config, self.draw_options))(body)))
        # (@seed switches the database off; the settings applied over it put ours back.)
        try:
            test()
        except (_Stop, _Failed):
            pass
        except BaseException as exc:
            if isinstance(exc, (_HarnessAbort, KeyboardInterrupt)):
                raise
            harness = _find_harness(exc)
            if harness is not None:
                raise _HarnessAbort(harness) from None
            if not _only_our_failures(exc) and not _hypothesis_gave_up(exc):
                raise
            # (hypothesis gave up or found the candidate flaky: the smallest case so far is kept)

    def save(self, group: str) -> None:
        record = self.records[group]
        if self.database is None or record.saved or not record.choices:
            return
        from hypothesis.database import choices_to_bytes

        self.database.save(self.db_key, choices_to_bytes(list(record.choices)))

    def finding(self, record: _Record) -> Finding:
        case = record.case  # fresh images: the candidate may have altered the ones it was given
        images = case.make_images()
        return finding_from(record.verdict, self.candidate.spec, case.config, images,
                            params=[p.to_dict() for p in case.images], tolerance=str(self.tol),
                            seed=self.run.seed, example=record.example,
                            diagnosis=self.diagnosis(record, images), assume=self.options.assume)

    def diagnosis(self, record: _Record, images: list[Image.Image]) -> dict[str, Any]:
        """The diagnosis fields of a record's finding (`fuzzers.publishing.Publisher.diagnose`;
        fuzz_pair: always a new one)."""
        budget = None if self.eager_diagnosis else self.budget
        return self.publisher.diagnose(record.verdict, images, record.case.config, (self.db_key, record.choices),
                                       budget, functools.partial(finding_diagnosis, assume=self.options.assume)
                                       if self.options.assume else finding_diagnosis)

    def publish(self, group: str, past_end: bool = False) -> None:
        """The group's finding (and, when shrinking lost root causes, its first case's), written.
        `past_end`: the settle's time is spent."""
        run, out_dir = self.run, self.out_dir
        began = self.clock()
        record = self.records[group]
        first = self.first_cases.pop(group, None)
        if record.finding is None and not record.shrunk and first is not None and first.finding is not None and past_end:
            # Past the budget, a simpler case met later (not one the shrink found) is not
            # diagnosed anew: the first case, diagnosed when it was met, is the finding.
            record = first
        finding = record.finding if record.finding is not None else self.finding(record)
        finding.extra["group"] = group
        seen = self.seen.get(group, {})
        finding.hits = max(1, int(seen.get("hits", 1)))
        if seen.get("max") is not None and finding.max_levels is not None:
            finding.max_levels_seen = max(float(seen["max"]), float(finding.max_levels))
        if out_dir is not None:
            self.publisher.writer.submit(write_finding, out_dir, finding)
        run.findings.append(finding)
        # The first case of a key was attributed when it was met (fuzz(): now, while the
        # diagnosis share lasts): root causes that shrinking lost (a small opaque image cannot
        # show straight alpha) are a finding of their own, with that unshrunk case as its repro.
        if (first is not None and first is not record and first.finding is None and finding.check == PIXEL_MISMATCH
                and self.options.shrink and not self.eager_diagnosis and not self.diagnosis_spent()):
            first.finding = self.finding(first)
        if (first is not None and first is not record and first.finding is not None
                and finding.check == PIXEL_MISMATCH and self.options.shrink):
            extra_finding = first.finding
            lost = _lost_causes(finding, extra_finding)
            if lost:
                extra_finding.key = f"{group}{{{'+'.join(lost)}}}"
                extra_finding.extra["group"] = extra_finding.key
                extra_finding.extra["unshrunk"] = "root causes the shrunk case of " + group + " does not show"
                extra_finding.hits = finding.hits
                extra_finding.max_levels_seen = finding.max_levels_seen
                if out_dir is not None:
                    self.publisher.writer.submit(write_finding, out_dir, extra_finding)
                run.findings.append(extra_finding)
        self.publisher.costs.append(self.clock() - began)

    def settle(self, shrink: bool = True, until: float | None = None, keep: Collection[str] = ()) -> None:
        """Shrink (unless off, interrupted or replayed from the database), save and publish every
        group in report order; the time left until `until` (default: the budget's end) is shared
        among the groups still to go, each given its share minus the time publishing one has
        taken on average. Groups in `keep` are published as they were met (not shrunk)."""
        run = self.run
        end = until if until is not None else self.start + self.budget if self.budget is not None else None
        order = {c: i for i, c in enumerate(FINDING_KINDS)}
        groups = sorted(self.records, key=lambda g: (order.get(g.split("[")[0], 99), self.records[g].example, g))
        abort: _HarnessAbort | None = None
        for k, group in enumerate(groups):
            shrinkable = (shrink and self.options.shrink and abort is None and run.stopped != "interrupted"
                          and not self.records[group].saved and group not in keep)
            if shrinkable:
                deadline = None
                if end is not None:
                    # Publishing (diagnosis, files) cannot stop half-way: every group still to go
                    # keeps the average publishing time so far; the rest is shared for shrinking.
                    # The first case's diagnosis time stands for each group's publishing time.
                    now = self.clock()
                    to_shrink = [g for g in groups[k:] if g not in keep]
                    reserve = (sum(self.first_cases.get(g, self.records[g]).cost for g in to_shrink)
                               if self.eager_diagnosis
                               else len(to_shrink) * self.publisher.estimate() + self.publisher.backlog())
                    deadline = now + (end - now - reserve) / len(to_shrink)
                try:
                    if deadline is None or deadline > self.clock():
                        with self.publisher.times.shrinking.span():
                            self.shrink(group, deadline)
                except _HarnessAbort as exc:
                    abort = exc
                except KeyboardInterrupt:
                    run.stopped = "interrupted"
            self.save(group)
            # (a kept group's finding is its first case, diagnosed when it was met)
            self.publish(group, past_end=group in keep or (end is not None and self.clock() >= end))
        self.published.update(self.records)
        self.records.clear()
        if abort is not None:
            raise abort


def outcome_digest(verdict: Verdict | None) -> str:
    """What a candidate did on one input, as a short digest: equal for two candidates exactly
    when they returned the same bytes (grids and pixel values) or failed the same way."""
    if verdict is None:
        return "not-judged"
    actual = verdict.actual
    if actual is None:
        return f"{verdict.check}:{str(verdict.stats.get('exception', verdict.message)).split(':')[0]}"
    h = hashlib.sha256()
    update_digest(h, actual)
    return h.hexdigest()[:24]


def example_source(seed: int, index: int, tile_share: float) -> tuple[RandomSource, bool]:
    """Generated example `index`'s source of choices, and whether it is a tile-crossing example:
    the search's and `generated_case`'s one definition."""
    tiles = tile_share > 0
    tile = tiles and is_tile_example(index, tile_share)
    return RandomSource(derive(seed, index), (int(tile),) if tiles else ()), tile


def generated_case(config: PreprocessConfig, options: FuzzOptions, seed: int, index: int) -> FuzzCase:
    """Generated example `index` of a run with this seed and these options (the search draws
    exactly this case: it depends on nothing else)."""
    source, _ = example_source(seed, index, options.tile_share)
    return draw_fuzz_case(source, config, options.draw_options())


def fuzz(
    candidate: Candidate | str,
    config: PreprocessConfig,
    options: FuzzOptions | None = None,
    *,
    out_dir: str | Path | None = None,
    on_example: Callable[["FuzzRun"], None] | None = None,
) -> FuzzRun:
    """Fuzz `candidate` against the reference around `config`; findings written under `out_dir`.

    A harness error (KimiOracleError) ends the run after the findings so far are published."""
    with one_torch_thread():  # the oracle's own torch work (core.threads)
        return _fuzz(candidate, config, options, out_dir, on_example)


def fuzz_pair(
    new: Candidate | str,
    old: Candidate | str,
    config: PreprocessConfig,
    options: FuzzOptions | None = None,
    *,
    out_dir: str | Path | None = None,
    on_example: Callable[[FuzzRun], None] | None = None,
) -> tuple[FuzzRun, FuzzRun]:
    """NEW and OLD judged on the same generated examples in lockstep: each example is drawn, made
    and computed by the reference once, and both candidates work on it at once (each in its own
    executor, while this process judges the example before). NEW's run is `fuzz`'s (its budget
    and stops decide; its findings are written under `out_dir`); OLD's run counts the same
    examples (`outcomes` by the same indices). NEW's groups are shrunk, and OLD's that NEW has
    not (`_settle_pair`), the time left after the search shared in proportion to them. Saved
    failures are not replayed (`db_dir` is ignored)."""
    options = dataclasses.replace(options or FuzzOptions(), db_dir=None)
    with one_torch_thread():
        return _fuzz(new, config, options, out_dir, on_example, baseline=old)  # type: ignore[return-value]


def _fuzz(candidate: Candidate | str, config: PreprocessConfig, options: FuzzOptions | None,
          out_dir: str | Path | None, on_example: Callable[["FuzzRun"], None] | None,
          baseline: Candidate | str | None = None) -> FuzzRun | tuple[FuzzRun, FuzzRun]:
    options = options or FuzzOptions()
    if isinstance(candidate, str):
        candidate = load_candidate(candidate)
    engine = _Engine(candidate, config, options, out_dir, on_example)
    partner = None
    if baseline is not None:
        if isinstance(baseline, str):
            baseline = load_candidate(baseline)
        partner = engine.partner = _Engine(baseline, config, options, None, None)
        partner.run.seed, partner.start = engine.run.seed, engine.start
        engine.eager_diagnosis = partner.eager_diagnosis = True
    else:
        # fuzz(): finding folders are written by a background thread while the run goes on
        engine.publisher = Publisher(engine.clock, options.db_dir, options.diagnosis_share, background=True)
    run, publisher = engine.run, engine.publisher
    try:
        with publisher.times.reference_timed(reference):
            abort = _search_and_settle(engine, partner, options)
    finally:
        publisher.writer.close()  # every queued folder is written (or its error raised) before the run ends
    run.elapsed_s = engine.clock() - engine.start  # (the last writes included)
    run.time = publisher.times.to_dict(getattr(engine.candidate, "activity", None))
    if abort is not None:
        raise abort.error from None
    if partner is not None:
        partner.run.search_s, partner.run.elapsed_s, partner.run.stopped = run.search_s, run.elapsed_s, run.stopped
        return run, partner.run
    return run


def _search_and_settle(engine: _Engine, partner: _Engine | None, options: FuzzOptions) -> _HarnessAbort | None:
    """The search and settle passes of a run (fuzz, fuzz_pair); a harness error is returned (the
    caller raises it once the writes have ended)."""
    run = engine.run
    target = options.max_examples()
    abort: _HarnessAbort | None = None
    search_s = 0.0
    first_pass = True
    while True:
        began = engine.clock()
        examples_before = run.examples
        try:
            if first_pass:
                engine.replay_saved(target)
            engine.search(target)
        except KeyboardInterrupt:
            run.stopped = "interrupted"
        except _HarnessAbort as exc:
            abort = exc
        search_s += engine.clock() - began
        if interrupts.requested():
            run.stopped = "interrupted"
        try:
            # After a harness error the findings so far are published unshrunk, then it is raised.
            if partner is None:
                engine.settle(shrink=abort is None)
            else:
                partner.run.stopped = run.stopped  # (an interrupt ends the baseline's shrinking too)
                _settle_pair(engine, partner, shrink=abort is None)
        except _HarnessAbort as exc:
            abort = exc
        first_pass = False
        # Under a budget, time that shrinking left over goes back to the search (a group found
        # then is shrunk in what remains).
        if (abort is not None or run.stopped in ("interrupted", "overhead") or engine.budget is None
                or run.examples >= target or not options.keep_searching or engine.over(1.0)
                or run.examples == examples_before):
            break
    if interrupts.requested():
        run.stopped = "interrupted"
    run.search_s = search_s
    run.elapsed_s = engine.clock() - engine.start
    return abort


def _settle_pair(engine: _Engine, partner: _Engine, shrink: bool) -> None:
    """fuzz_pair's settle: the time left is shared between NEW's groups and OLD's in proportion
    to the counts they shrink, NEW's first (each side's settle ends at its share's end). OLD's
    groups that NEW has too are not shrunk (unless met on a tile-crossing example): the gate
    judges NEW's shrunk case on OLD as well, and OLD's finding is the case it was met on
    (diagnosed then)."""
    middle = None
    # (a group OLD met on a tile-crossing example is shrunk all the same: its first case would
    # cost the gate an attribution at up to 4 Mpx on each side)
    shared = {g for g in engine.records
              if g in partner.records and not partner.first_cases.get(g, partner.records[g]).tile}
    if engine.budget is not None:
        now = engine.clock()
        mine, theirs = len(engine.records), len(set(partner.records) - shared)
        middle = now + max(engine.start + engine.budget - now, 0.0) * mine / max(mine + theirs, 1)
    engine.settle(shrink=shrink, until=middle)
    partner.settle(shrink=shrink, keep=shared)


def _lost_causes(shrunk: Finding, first: Finding) -> list[str]:
    """Root causes of a key's first case that its shrunk case does not show: not merely an
    equally good alternative (a tie the diagnosis recorded as equivalent) and accounting for at
    least one level there."""
    from kimi_oracle.results.report import cause_levels

    def ties(f: Finding) -> set[str]:
        explained = (f.attribution or {}).get("explained") or []
        return {c for e in explained for c in (e.get("equivalent") or [])}

    known = set(shrunk.root_causes) | ties(shrunk) | ties(first)
    levels = cause_levels(first)
    return [c for c in first.root_causes
            if c not in known and c != "unexplained" and not is_sub_level(levels.get(c, (0.0, 0.0))[0])]


def _only_our_failures(exc: BaseException) -> bool:
    if isinstance(exc, _Failed):
        return True
    inner = getattr(exc, "exceptions", None)
    if inner:
        return all(_only_our_failures(e) for e in inner)
    # hypothesis' Flaky* errors wrap ours when the candidate is not deterministic
    if type(exc).__name__.startswith("Flaky"):
        return True
    return False


def _hypothesis_gave_up(exc: BaseException) -> bool:
    """Whether a shrink ended on hypothesis' own verdict about the test (Unsatisfiable when its
    replays were all rejected, Flaky* when the candidate answered differently, a health check)
    rather than on an error of the harness: then the group's case so far stands."""
    from hypothesis.errors import HypothesisException

    # (a TypeError among them, InvalidArgument or InvalidDefinition, is a bug of ours: raised)
    return isinstance(exc, HypothesisException) and not isinstance(exc, TypeError)


def _find_harness(exc: BaseException) -> BaseException | None:
    if isinstance(exc, KimiOracleError):
        return exc
    if isinstance(exc, _HarnessAbort):
        return exc.error
    for e in getattr(exc, "exceptions", None) or ():
        found = _find_harness(e)
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------------------------------------
# replay and real files


def _case_assumptions(case: dict[str, Any], directory: Path) -> tuple[tuple[str, str], ...]:
    """The variants a finding's reference was taken with (`fuzz --assume`, case.json's `assume`)."""
    names = case.get("assume") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError("case.json: assume must be a list of FAMILY/VARIANT strings", source=str(directory))
    try:
        return tuple(parse_assumption(n) for n in names)
    except AssumptionError as exc:
        raise InputError(f"case.json: {exc}", source=str(directory)) from None


def replay_case(case: dict[str, Any], directory: Path, candidate: Candidate, *,
                tolerance: str | None = None) -> tuple[Verdict, list[Image.Image], PreprocessConfig, list[str]]:
    """Re-run a finding's case.json: (verdict, images, config, notes)."""
    from kimi_oracle.inputs.generators import (CaseParams, images_equal,
                                               make_image)
    from kimi_oracle.results.report import load_case_image

    notes: list[str] = []
    config = PreprocessConfig.from_hf_json(case["config"])
    config = dataclasses.replace(config, name=str(case.get("profile") or config.name))
    images: list[Image.Image] = []
    for i, entry in enumerate(case["images"]):
        entry = {"index": i, **entry}
        params = entry.get("params")
        stored = load_case_image(directory, entry, i)
        if params:
            regenerated = make_image(CaseParams.from_dict(params))
            if stored is None:
                notes.append(f"image {entry['index']}: {entry.get('file')} missing; regenerated from its parameters")
                images.append(regenerated)
                continue
            if not images_equal(stored, regenerated):
                notes.append(f"image {entry['index']}: the generator now makes a different image from these "
                             f"parameters; using the stored file {entry['file']}")
        if stored is None:
            raise InputError(f"image {entry['index']}: input file {entry.get('file')} is missing and there are "
                             "no generator parameters", source=str(directory))
        images.append(stored)
    tol = tolerance or case.get("tolerance") or "exact"
    inv = case.get("check") == INVARIANCE
    assume = _case_assumptions(case, directory)
    if assume:
        notes.append("compared with the reference with " + ", ".join(full_name(f, v) for f, v in assume) + " applied")
    try:
        verdict = evaluate(candidate, images, config, tol, invariance=True,
                           steps=assumed_steps(config, assume) if assume else None)
    except Rejected as exc:
        raise InputError(f"the reference rejects this case now: {exc}", source=str(directory)) from None
    if inv and verdict.ok:
        verdict.message = "invariances hold"
    return verdict, images, config, notes


@dataclass
class CheckRun:
    """What `check_images` found so far: findings, one row per image (or batch), how it stopped."""

    findings: list[Finding] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = "done"  # or "interrupted" (Ctrl-C / SIGTERM): the rows cover what ran


def check_images(candidate: Candidate, images: Sequence[tuple[str, Image.Image, bytes | None]],
                 config: PreprocessConfig, tolerance: str = "exact", *, invariance: bool = True,
                 out_dir: str | Path | None = None, batch: int = 3,
                 on_image: Callable[[int], None] | None = None) -> CheckRun:
    """Run the oracle over real images, each alone, then (invariances) in small batches. An
    interrupt ends the run early with what was already judged (stopped = "interrupted")."""
    run = CheckRun()
    try:
        _check_images(run, candidate, images, config, tolerance, invariance, out_dir, batch, on_image)
    except KeyboardInterrupt:
        run.stopped = "interrupted"
    return run


def _check_images(run: CheckRun, candidate: Candidate, images: Sequence[tuple[str, Image.Image, bytes | None]],
                  config: PreprocessConfig, tolerance: str, invariance: bool, out_dir: str | Path | None,
                  batch: int, on_image: Callable[[int], None] | None) -> None:
    findings, rows = run.findings, run.rows

    def record(verdict: Verdict, group: Sequence[tuple[str, Image.Image, bytes | None]]) -> None:
        f = finding_from(verdict, candidate.spec, config, [g[1] for g in group], tolerance=tolerance,
                         engine="check", sources=[g[0] for g in group], raw_inputs=[g[2] for g in group])
        if out_dir is not None:
            write_finding(out_dir, f)
        findings.append(f)

    for i, (name, img, raw) in enumerate(images):
        interrupts.raise_if_requested()
        row = {"image": name, "size": f"{img.width}x{img.height}", "mode": img.mode}
        try:
            verdict = evaluate(candidate, [img], config, tolerance, invariance=invariance)
        except Rejected as exc:
            row.update(result="rejected", detail=str(exc))
            rows.append(row)
            continue
        row.update(result="ok" if verdict.ok else verdict.check, detail=verdict.message)
        if not verdict.ok:
            record(verdict, [(name, img, raw)])
        rows.append(row)
        if on_image is not None:
            on_image(i)
    if invariance and len(images) >= 2:
        ok_images = [(n, im, raw) for (n, im, raw), r in zip(images, rows) if r["result"] == "ok"]
        for start in range(0, len(ok_images), batch):
            group = ok_images[start : start + batch]
            interrupts.raise_if_requested()
            if len(group) < 2:
                continue
            try:
                verdict = evaluate(candidate, [g[1] for g in group], config, tolerance, invariance=True)
            except Rejected:
                continue
            if not verdict.ok:
                record(verdict, group)
                rows.append({"image": " + ".join(Path(g[0]).name for g in group), "size": "batch",
                             "mode": "", "result": verdict.check, "detail": verdict.message})


__all__ = [
    "CheckRun",
    "FuzzOptions",
    "FuzzRun",
    "HYPOTHESIS_PROFILES",
    "TILE_SHARE",
    "Rejected",
    "fuzz_pair",
    "check_images",
    "evaluate",
    "finding_from",
    "fuzz",
    "replay_case",
]
