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
import resource
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
                                        write_finding)  # noqa: F401 (re-exported)

# The engine's parts live in their own modules; every name this module had stays importable here.
from kimi_oracle.fuzzers.budget import _Budget  # noqa: F401
from kimi_oracle.fuzzers.cases import (_Record, example_source, finding_from,  # noqa: F401
                                       generated_case, outcome_digest)
from kimi_oracle.fuzzers.options import (COSTLY_FAILURES, DIAGNOSIS_SHARE, GATE_PHOTO_EXAMPLES,  # noqa: F401
                                         NIGHTLY_PHOTO_EVERY, NIGHTLY_PHOTO_EXAMPLES,
                                         HYPOTHESIS_PROFILES, INVARIANCE_EVERY,
                                         MAX_COSTLY_SHRINK_STEPS, OVERHEAD_CHECK_S,
                                         OVERHEAD_LAG_S, SEARCH_SHARE,
                                         SHRINK_MAX_EXAMPLES, TILE_SHARE,
                                         FuzzOptions, FuzzRun)
from kimi_oracle.fuzzers.replay import CheckRun, _case_assumptions, _check_images, check_images, replay_case  # noqa: F401
from kimi_oracle.fuzzers.search import _database, _Engine, _namespace  # noqa: F401
from kimi_oracle.fuzzers.settle import _lost_causes, _Settling  # noqa: F401
from kimi_oracle.fuzzers.shrink import (_Failed, _find_harness, _HarnessAbort,  # noqa: F401
                                        _hypothesis_gave_up, _only_our_failures,
                                        _seed_database, _Shrinking, _Stop)


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
        engine.peeling = partner.peeling = False  # (the gate compares NEW's groups with OLD's as met)
    else:
        # fuzz(): finding folders are written by a background thread while the run goes on
        engine.publisher = Publisher(engine.clock, options.db_dir, options.diagnosis_share, background=True)
    run, publisher = engine.run, engine.publisher
    cpu0 = (_own_cpu_s(), getattr(candidate, "cpu_s", None))
    try:
        with publisher.times.reference_timed(reference):
            abort = _search_and_settle(engine, partner, options)
    finally:
        publisher.writer.close()  # every queued folder is written (or its error raised) before the run ends
    run.elapsed_s = engine.clock() - engine.start  # (the last writes included)
    run.time = publisher.times.to_dict(getattr(engine.candidate, "activity", None))
    run.cpu = cpu_report(_own_cpu_s() - cpu0[0], None if cpu0[1] is None else candidate.cpu_s - cpu0[1],
                         run.examples)
    run.cpu["search"] = getattr(run, "search_cpu", None)
    if options.oracle is not None:
        run.findings += disagreement_findings(options.oracle, run, out_dir)
    if abort is not None:
        raise abort.error from None
    if partner is not None:
        partner.run.search_s, partner.run.elapsed_s, partner.run.stopped = run.search_s, run.elapsed_s, run.stopped
        return run, partner.run
    return run


def disagreement_findings(oracle: Any, run: FuzzRun, out_dir: str | Path | None) -> list[Finding]:
    """`--oracle gpu`: each disagreement between the GPU pipeline and the reference as a finding
    against the project (check `oracle_disagreement`), its folder written under `out_dir`."""
    from kimi_oracle.oracle.gpu_oracle import ORACLE_DISAGREEMENT, PROJECT
    from kimi_oracle.results.finding_files import write_finding

    out = []
    for d in oracle.disagreements:
        finding = Finding(check=ORACLE_DISAGREEMENT, candidate=PROJECT, config=d.config, images=d.images,
                          params=[None] * len(d.images), tolerance="exact", seed=run.seed,
                          example=d.example if d.example is not None else run.examples,
                          message=f"the GPU pipeline and the reference disagree ({d.why}): {d.message}; the run "
                                  "fell back to the reference", stats={"why": d.why}, expected=d.reference,
                          actual=d.gpu, key=ORACLE_DISAGREEMENT)
        if out_dir is not None:
            finding.path = write_finding(out_dir, finding)
        out.append(finding)
    return out


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # (every thread of this process; no child)
    return usage.ru_utime + usage.ru_stime


def cpu_report(oracle_s: float, candidate_s: float | None, examples: int) -> dict[str, Any]:
    """The run's CPU split: seconds of the fuzzing process (the oracle: drawing, the reference,
    comparing, diagnosing, shrinking, writing) and of the candidate's executors (None: the
    candidate ran in this process), per example, and oracle / candidate."""
    per = max(examples, 1)
    return {"oracle_s": round(oracle_s, 3), "candidate_s": None if candidate_s is None else round(candidate_s, 3),
            "oracle_ms_per_example": round(1e3 * oracle_s / per, 4),
            "candidate_ms_per_example": None if candidate_s is None else round(1e3 * candidate_s / per, 4),
            "ratio": round(oracle_s / candidate_s, 4) if candidate_s else None}


def _search_and_settle(engine: _Engine, partner: _Engine | None, options: FuzzOptions) -> _HarnessAbort | None:
    """The search and settle passes of a run (fuzz, fuzz_pair); a harness error is returned (the
    caller raises it once the writes have ended)."""
    run = engine.run
    target = options.max_examples()
    abort: _HarnessAbort | None = None
    search_s = 0.0
    search_cpu = [0.0, 0.0]  # the search passes' CPU seconds: this process's, the candidate's executors'
    first_pass = True
    while True:
        began = engine.clock()
        cpu0 = (_own_cpu_s(), getattr(engine.candidate, "cpu_s", None))
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
        search_cpu[0] += _own_cpu_s() - cpu0[0]
        if cpu0[1] is not None:
            search_cpu[1] += engine.candidate.cpu_s - cpu0[1]
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
    # The search alone (drawing, the reference, comparing, the attributions made then), without
    # shrinking and publishing: what bounds the rate of examples (issue 33).
    run.search_cpu = cpu_report(search_cpu[0], search_cpu[1] if hasattr(engine.candidate, "cpu_s") else None,
                                run.examples)
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


__all__ = [
    "CheckRun",
    "FuzzOptions",
    "FuzzRun",
    "HYPOTHESIS_PROFILES",
    "TILE_SHARE",
    "GATE_PHOTO_EXAMPLES",
    "NIGHTLY_PHOTO_EVERY",
    "NIGHTLY_PHOTO_EXAMPLES",
    "Rejected",
    "fuzz_pair",
    "check_images",
    "evaluate",
    "finding_from",
    "fuzz",
    "replay_case",
]
