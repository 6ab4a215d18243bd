"""The differential fuzzing engine: hypothesis draws cases, the oracle judges, findings result.

`fuzz(candidate, config, options)` runs N examples or a time budget and returns a `FuzzRun`
with the shrunk findings (one per failed check); `evaluate` judges one batch of images and is
shared by `repro`, `check`, the pytest plugin, the nightly runner and the gate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from PIL import Image

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError, KimiOracleError
from kimi_oracle.core.files import versions
from kimi_oracle.inputs.generators import MODES, FuzzCase
from kimi_oracle.inputs.strategies import DEFAULT_MAX_SIDE, fuzz_cases
from kimi_oracle.oracle.candidates import Candidate, load_candidate
from kimi_oracle.oracle.checks import FINDING_KINDS, INVARIANCE, PIXEL_MISMATCH, TIMEOUT, Tolerance, Verdict
from kimi_oracle.oracle.diagnosis import finding_diagnosis
from kimi_oracle.oracle.grouping import failure_type, finding_key, mode_class
from kimi_oracle.oracle.judge import Rejected, evaluate
from kimi_oracle.results.report import Finding, finding_summary, root_cause_rows, summary_markdown, write_finding

# Checks a fuzz run reports on, in report order.
# fuzz() may run this factor over its budget while it shrinks what it found; a caller with a hard
# deadline gives it `search_budget(seconds_left)`.
SHRINK_GRACE = 1.25


# Failures whose every reproduction costs a killed or restarted candidate process (the sandbox's
# exception names), and how many shrink steps such a finding gets before its smallest case so far
# is kept.
COSTLY_FAILURES = ("CallTimedOut", "ProcessDied")
MAX_COSTLY_SHRINK_STEPS = 4


def search_budget(seconds_left: float) -> float:
    """The `FuzzOptions.budget_s` that, shrinking included, ends within `seconds_left`."""
    return seconds_left / SHRINK_GRACE

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
    budget_s: float | None = None
    seed: int | None = None
    tolerance: str = "exact"
    vary_config: bool = True
    max_images: int = 3
    max_side: int = DEFAULT_MAX_SIDE
    modes: tuple[str, ...] = MODES
    alpha_patterns: tuple[str, ...] | None = None
    invariance: bool = True
    shrink: bool = True
    hypothesis_profile: str = "ci"
    db_dir: Path | None = None  # hypothesis example database; None: no database
    split_by_mode: bool = True  # one pixel_mismatch / crash finding per mode class
    keep_searching: bool = True  # after a failure, search on (new seeds) until the examples are spent
    clock: Callable[[], float] = time.monotonic  # the budget's clock (tests inject a fake one)

    def max_examples(self) -> int:
        """The example count hypothesis is given (huge under a time budget)."""
        if self.examples is not None:
            return max(1, int(self.examples))
        if self.budget_s is not None:
            return 10**9
        return HYPOTHESIS_PROFILES.get(self.hypothesis_profile, HYPOTHESIS_PROFILES["ci"])["max_examples"]


@dataclass
class FuzzRun:
    """The outcome of a fuzz run."""

    candidate: str
    config: PreprocessConfig
    options: FuzzOptions
    seed: int
    findings: list[Finding] = field(default_factory=list)
    examples: int = 0  # generated examples run (shrinking not counted)
    calls: int = 0  # every evaluation, shrinking included
    rejected: int = 0
    skipped_hanging: int = 0  # examples not judged: a mode class the candidate already hung on
    elapsed_s: float = 0.0
    first_found: dict[str, int] = field(default_factory=dict)  # check -> example number
    stopped: str = "examples"
    started: str = ""

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
        """JSON-ready summary (the `--json` document)."""
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
            "examples": self.examples,
            "calls": self.calls,
            "rejected": self.rejected,
            "skipped_hanging": self.skipped_hanging,
            "elapsed_s": round(self.elapsed_s, 3),
            "stopped": self.stopped,
            "started": self.started,
            "counts": self.counts(),
            "root_causes": root_cause_rows(self.findings),
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
                 raw_inputs: Sequence[bytes | None] = ()) -> Finding:
    """A Finding for a failed verdict."""
    extra: dict[str, Any] = {}
    if verdict.check == INVARIANCE:
        extra["invariance"] = {"kind": verdict.stats.get("kind"), "indices": verdict.stats.get("indices")}
    diagnosis = finding_diagnosis(str(verdict.check), verdict.stats, images, config,
                                  expected=verdict.expected, actual=verdict.actual)
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
# the hypothesis run


def _database(directory: Path, namespace: bytes) -> Any:
    """A directory database whose keys are prefixed with `namespace` (one per candidate, profile
    and drawing options, so a replay is relevant); public hypothesis API only."""
    from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

    inner = DirectoryBasedExampleDatabase(str(directory))

    class Namespaced(ExampleDatabase):
        def save(self, key: bytes, value: bytes) -> None:
            inner.save(namespace + key, value)

        def fetch(self, key: bytes):  # type: ignore[override]
            return inner.fetch(namespace + key)

        def delete(self, key: bytes, value: bytes) -> None:
            inner.delete(namespace + key, value)

        def move(self, src: bytes, dest: bytes, value: bytes) -> None:
            inner.move(namespace + src, namespace + dest, value)

    return Namespaced()


def _save_only(inner: Any) -> Any:
    """Later rounds save new failures but neither replay nor delete the first round's."""
    from hypothesis.database import ExampleDatabase

    class SaveOnly(ExampleDatabase):
        def save(self, key: bytes, value: bytes) -> None:
            inner.save(key, value)

        def fetch(self, key: bytes):  # type: ignore[override]
            return iter(())

        def delete(self, key: bytes, value: bytes) -> None:
            pass

        def move(self, src: bytes, dest: bytes, value: bytes) -> None:
            inner.save(dest, value)

    return SaveOnly()


def _statistics_collector(callback: Callable[[dict], None]) -> Any:
    # The one hypothesis hook outside its documented API: per-phase counts of generated examples
    # (what --hypothesis-show-statistics prints). pyproject pins the hypothesis range it is known
    # to work in, and tests/oracle/test_hypothesis_hook.py fails on an upgrade that breaks it.
    from hypothesis.statistics import collector

    return collector.with_value(callback)


class _Stop(BaseException):
    """Ends the hypothesis run at once (BaseException: hypothesis does not shrink it)."""


class _HarnessAbort(BaseException):
    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class _Failed(Exception):
    """Raised inside the hypothesis test; one subclass per check, so each is shrunk separately."""


_FAILURE_TYPES: dict[str, type] = {}


def _failure_type(group: str) -> type:
    # One exception type per failure group: hypothesis shrinks each group separately.
    if group not in _FAILURE_TYPES:
        _FAILURE_TYPES[group] = type(f"{group}_failure", (_Failed,), {})
    return _FAILURE_TYPES[group]


def fuzz(
    candidate: Candidate | str,
    config: PreprocessConfig,
    options: FuzzOptions | None = None,
    *,
    out_dir: str | Path | None = None,
    on_example: Callable[["FuzzRun"], None] | None = None,
) -> FuzzRun:
    """Fuzz `candidate` against the reference around `config`; findings written under `out_dir`."""
    from hypothesis import HealthCheck, Phase, Verbosity, given
    from hypothesis import seed as hypothesis_seed
    from hypothesis import settings

    options = options or FuzzOptions()
    if isinstance(candidate, str):
        candidate = load_candidate(candidate)
    tol = Tolerance.parse(options.tolerance)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**32)
    run = FuzzRun(candidate.spec, config, options, seed)
    from kimi_oracle.core.files import utc_now

    run.started = utc_now()
    records: dict[str, tuple[FuzzCase, Verdict, int]] = {}
    first_by_group: dict[str, int] = {}
    clock = options.clock
    start = clock()
    budget = options.budget_s

    def over_budget() -> bool:
        if budget is None:
            return False
        elapsed = clock() - start
        # A little grace for shrinking what was found (SHRINK_GRACE).
        return elapsed > (budget * SHRINK_GRACE if records else budget)

    progress = {"examples_before": 0, "round_calls": 0}

    known: set[str] = set()  # groups found in earlier rounds: not shrunk again
    costly_steps: dict[str, int] = {}  # shrink steps spent on failures that cost a process each
    hanging: set[str] = set()  # mode classes of the images the candidate timed out on
    seen_levels: dict[str, dict[str, Any]] = {}  # per key: generated examples hit, largest levels
    shrinking_now: set[str] = set()  # groups this round is shrinking
    first_cases: dict[str, tuple[FuzzCase, Verdict, int]] = {}  # each pixel key's first, unshrunk case

    def body(case: FuzzCase) -> None:
        interrupts.raise_if_requested()  # an interrupt swallowed elsewhere is not lost
        if over_budget():
            run.stopped = "budget"
            raise _Stop()
        images = case.make_images()
        if hanging and any(mode_class(img) in hanging for img in images):
            # A mode class the candidate already hung on would cost a whole case timeout again
            # and could only re-find that timeout: not judged, counted apart.
            run.skipped_hanging += 1
            return
        run.calls += 1
        progress["round_calls"] += 1
        try:
            verdict = evaluate(candidate, images, case.config, tol, invariance=options.invariance)
        except Rejected:
            run.rejected += 1
            from hypothesis import reject

            reject()
        except KimiOracleError as exc:
            raise _HarnessAbort(exc) from None
        if on_example is not None:
            on_example(run)
        if verdict.ok:
            return
        check = str(verdict.check)
        group = finding_key(check, verdict.stats, images) if options.split_by_mode else check
        if group not in shrinking_now:
            seen = seen_levels.setdefault(group, {"hits": 0, "max": 0.0})
            seen["hits"] += 1
            level = verdict.stats.get("max_level_diff")
            if isinstance(level, (int, float)):
                seen["max"] = max(seen["max"], float(level))
        if group in known:
            return
        # Before a round's first failure every call is a generated example, so this count is the
        # number of examples it took to find the group (after that, shrink calls inflate it).
        found_at = progress["examples_before"] + progress["round_calls"]
        run.first_found.setdefault(check, found_at)
        first = first_by_group.setdefault(group, found_at)
        shrinking = group in records
        shrinking_now.add(group)  # this round's later failures of this group are shrink steps
        if not shrinking and check == PIXEL_MISMATCH and options.shrink:
            first_cases[group] = (case, verdict, found_at)
        records[group] = (case, verdict, first)
        if check == TIMEOUT and len(images) == 1:
            # Once (shrunk to) one image, the mode class that hangs is known.
            hanging.add(mode_class(images[0]))
        if shrinking and failure_type(verdict.stats).split("[")[0] in COSTLY_FAILURES:
            # Each step of shrinking a hang waits the whole case timeout, each death restarts the
            # candidate's process: keep the smallest case so far after a few steps and go on.
            costly_steps[group] = costly_steps.get(group, 0) + 1
            if costly_steps[group] >= MAX_COSTLY_SHRINK_STEPS:
                raise _Stop()
        raise _failure_type(group)(verdict.message)

    strategy = fuzz_cases(
        config,
        vary_config=options.vary_config,
        max_images=options.max_images,
        max_side=options.max_side,
        modes=options.modes,
        alpha_patterns=options.alpha_patterns,
    )
    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
    if options.shrink:
        phases.append(Phase.shrink)
    namespace = hashlib.sha256(json.dumps(
        [candidate.spec, config.to_hf_json(), options.vary_config, options.max_images, options.max_side,
         list(options.modes), options.alpha_patterns, str(tol)], sort_keys=True).encode()).hexdigest()[:32]
    database = _database(options.db_dir, namespace.encode() + b":") if options.db_dir else None
    target = options.max_examples()
    # Hypothesis stops generating soon after its first failure; further rounds (new seeds, the
    # groups found so far masked) keep searching until the example count or budget is spent.
    def publish() -> None:
        """Write what was found so far (also when a harness error ends the run early)."""
        run.elapsed_s = clock() - start
        order = {c: i for i, c in enumerate(FINDING_KINDS)}
        for group in sorted(records, key=lambda g: (order.get(g.split("[")[0], 99), first_by_group[g], g)):
            case, verdict, example = records[group]
            finding = finding_from(verdict, candidate.spec, case.config, case.make_images(),
                                   params=[p.to_dict() for p in case.images], tolerance=str(tol),
                                   seed=seed, example=example)
            finding.extra["group"] = group
            seen = seen_levels.get(group, {})
            finding.hits = max(1, int(seen.get("hits", 1)))
            if seen.get("max") is not None and finding.max_levels is not None:
                finding.max_levels_seen = max(float(seen["max"]), float(finding.max_levels))
            if out_dir is not None:
                write_finding(out_dir, finding)
            run.findings.append(finding)
            # The first case of a key was attributed when it was met: root causes that shrinking
            # lost (a small opaque image cannot show straight alpha) are a finding of their own,
            # with that unshrunk case as its repro.
            first = first_cases.pop(group, None)
            if first is not None and finding.check == "pixel_mismatch":
                first_case, first_verdict, first_example = first
                extra_finding = finding_from(first_verdict, candidate.spec, first_case.config,
                                             first_case.make_images(),
                                             params=[p.to_dict() for p in first_case.images], tolerance=str(tol),
                                             seed=seed, example=first_example)
                lost = _lost_causes(finding, extra_finding)
                if lost:
                    extra_finding.key = f"{group}{{{'+'.join(lost)}}}"
                    extra_finding.extra["group"] = extra_finding.key
                    extra_finding.extra["unshrunk"] = "root causes the shrunk case of " + group + " does not show"
                    extra_finding.hits = finding.hits
                    extra_finding.max_levels_seen = finding.max_levels_seen
                    if out_dir is not None:
                        write_finding(out_dir, extra_finding)
                    run.findings.append(extra_finding)
        records.clear()

    for round_index in range(64):
        remaining = target - run.examples
        if interrupts.requested():
            run.stopped = "interrupted"
        if remaining <= 0 or run.stopped in ("budget", "interrupted"):
            break
        before = run.calls
        known.update(records)
        round_seed = seed if round_index == 0 else (seed * 1000003 + round_index) % 2**32
        # @seed switches the database off, but the settings applied over it (with our database)
        # replace the settings @seed left: a seeded run still saves and replays failures.
        test = settings(
            max_examples=remaining,
            deadline=None,
            database=database if round_index == 0 or database is None else _save_only(database),
            phases=phases,
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            print_blob=False,
            report_multiple_bugs=True,
            derandomize=False,
        )(hypothesis_seed(round_seed)(given(strategy)(body)))
        progress["round_calls"] = 0
        shrinking_now.clear()
        generated: list[int] = []

        def collect(stats: dict) -> None:
            for phase in ("reuse-phase", "generate-phase"):
                # Examples that ran to a verdict; cases hypothesis discarded (rejected by the
                # reference, or drawn past its buffer) are not examples.
                generated.append(sum(1 for t in (stats.get(phase) or {}).get("test-cases", [])
                                     if t.get("status") in ("valid", "interesting")))

        try:
            with _statistics_collector(collect):
                test()
        except _Stop:
            pass
        except _HarnessAbort as abort:
            publish()
            raise abort.error from None
        except KeyboardInterrupt:
            run.stopped = "interrupted"
        except BaseException as exc:  # hypothesis raises our failures (or a group of them)
            if not _only_our_failures(exc):
                harness = _find_harness(exc)
                publish()
                if harness is not None:
                    raise harness from None
                raise
        # Hypothesis' own count of generated examples when it reports one; else every call.
        run.examples += sum(generated) if generated else run.calls - before
        progress["examples_before"] = run.examples
        if run.calls == before:
            break  # nothing ran: the search space is exhausted
        if records and not options.keep_searching:
            break
    if interrupts.requested():
        run.stopped = "interrupted"
    publish()
    return run


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
            if c not in known and c != "unexplained" and levels.get(c, (0.0, 0.0))[0] >= 1.0]


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


def replay_case(case: dict[str, Any], directory: Path, candidate: Candidate, *,
                tolerance: str | None = None) -> tuple[Verdict, list[Image.Image], PreprocessConfig, list[str]]:
    """Re-run a finding's case.json: (verdict, images, config, notes)."""
    from kimi_oracle.inputs.generators import CaseParams, images_equal, make_image
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
    try:
        verdict = evaluate(candidate, images, config, tol, invariance=True)
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
    "Rejected",
    "check_images",
    "evaluate",
    "finding_from",
    "fuzz",
    "replay_case",
]
