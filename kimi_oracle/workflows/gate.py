"""The upgrade gate: one pass/fail verdict on a new preprocessing kernel.

Stages, in order: the pixel goldens of every profile run with NEW; differential fuzzing of NEW
against the reference (with the same configuration variation as `fuzz`); invariance checks on
generated batches; and, with a baseline, an interleaved A/B timing of NEW against OLD.

NEW and OLD never run in the gate's process: each runs in its own executor process
(`fuzzers.sandbox.IsolatedCandidate`), reused between calls, every call bounded by the case
timeout (and the address space by the memory limit). A crash, exit, signal, hang or memory
exhaustion of NEW is a `fail` with findings; of OLD (the baseline, used by the timing only) an
`error`. The timing stage times each call inside the candidate's own executor
(`IsolatedCandidate.time_call`: the function's own time, without sending images or results), so
NEW and OLD are timed under the same conditions and a crash there is a finding, never a dead gate.

Ctrl-C and SIGTERM end the stage that runs with `error` and skip the rest; the report is still
written, says `stopped: interrupted`, and its verdict is `error`, never `pass`.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PROFILES, PreprocessConfig
from kimi_oracle.core.errors import KimiOracleError
from kimi_oracle.core.files import atomic_write_text, utc_now, versions, write_json
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz, search_budget
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import Verdict, check_invariance, compare
from kimi_oracle.oracle.diagnosis import finding_diagnosis
from kimi_oracle.oracle.grouping import finding_key, mode_class
from kimi_oracle.pipelines import reference
from kimi_oracle.results.report import diff_image, root_cause_markdown, root_cause_rows
from kimi_oracle.workflows import golden
from kimi_oracle.workflows.bench import BENCH_INPUTS, interleaved_ratio

SCHEMA = "kimi-oracle.gate-report"
SCHEMA_VERSION = 1
# Shares of the budget: fuzzing gets what the goldens and invariances leave, minus the timing.
PERF_SHARE = 0.3
# Kept for the invariance stage, which runs after fuzzing (a few batches, each run ~10 times).
INVARIANCE_SHARE = 0.05
# Inputs of the A/B timing, cheapest first; as many as the timing share allows are run.
PERF_INPUTS = ("rgb-640x480", "rgba-1920x1080-chessboard", "batch16-mixed", "rgb-4032x3024-k25",
               "rgb-1920x1080", "rgb-7680x4320")
MAX_DIFF_IMAGES = 8
STAGES = ("goldens", "fuzz", "invariance", "performance")


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
    case_timeout_s: float = 30.0
    memory_limit_mb: int | None = None


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


class _Clock:
    """Seconds spent inside the candidates and inside the reference (the rest is overhead)."""

    def __init__(self) -> None:
        self.candidate_s = 0.0
        self.reference_s = 0.0

    def wrap(self, func: Callable[..., Any], attr: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                setattr(self, attr, getattr(self, attr) + time.perf_counter() - t0)

        timed.__name__ = getattr(func, "__name__", "timed")
        timed.__doc__ = getattr(func, "__doc__", None)
        return timed

    @contextlib.contextmanager
    def reference_timed(self) -> Iterator[None]:
        """Count the reference's time wherever the oracle calls `reference.preprocess`."""
        original = reference.preprocess
        reference.preprocess = self.wrap(original, "reference_s")
        try:
            yield
        finally:
            reference.preprocess = original


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "processor": platform.processor(),
                            "cpu_count": os.cpu_count(), "python": platform.python_version()}
    try:
        import torch

        info["cuda"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception:  # pragma: no cover - torch is a dependency
        info["cuda"] = None
    return info


def _invariance_batches(seed: int) -> list[list[CaseParams]]:
    base = seed % 1000
    return [
        [CaseParams(61, 45, "RGB", seed=base), CaseParams(30, 90, "RGBA", "checker", seed=base + 1),
         CaseParams(97, 13, "L", seed=base + 2), CaseParams(61, 45, "RGB", content="gradient", seed=base + 3)],
        [CaseParams(150, 61, "P", seed=base + 4), CaseParams(7, 7, "LA", "random", seed=base + 5),
         CaseParams(84, 56, "RGBA", "transparent", seed=base + 6)],
    ]


def _max_level(verdict: Verdict | None) -> float:
    if verdict is None or verdict.check != "pixel_mismatch":
        return float("inf")  # grids, lengths, dtypes, crashes: worse than any pixel difference
    return float(verdict.stats.get("max_level_diff", float("inf")))


def _describe_golden(change: Any, verdict: Verdict | None) -> str:
    entry = change.new or change.old or {}
    label = str(entry.get("id", change.key))
    try:
        label += f" ({CaseParams.from_dict(entry['params']).describe()})"
    except (KeyError, TypeError, ValueError):
        pass
    if verdict is None:
        return change.describe()
    if verdict.check == "pixel_mismatch":
        st = verdict.stats
        return (f"{label}: max {st.get('max_level_diff', 0):.3g} levels, mean {st.get('mean_level_diff', 0):.3g}, "
                f"{100 * st.get('share_differing', 0):.1f}% of values differ")
    return f"{label}: {verdict.check}: {verdict.message}"


class _BaselineCrash(Exception):
    """OLD crashed, died or hung during the timing: an error of the gate, not a finding on NEW."""

    def __init__(self, crash: CandidateCrash):
        super().__init__(f"the baseline failed: {crash}")
        self.crash = crash


class _VirtualClock:
    """A timer that advances by the seconds the executors report (`interleaved_ratio`'s timer)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _crash_check(exc: CandidateCrash) -> str:
    return getattr(exc, "check", "crash")


def _error_check(error: str) -> str:
    """The check a golden entry's recorded error stands for (`golden.pixel_entry`'s `error`)."""
    name = error.split(":", 1)[0]
    if name in ("CallTimedOut", "NotRunAfterTimeout"):
        return "timeout"
    if name == "ShapeDtypeError":
        return "shape_dtype"
    return "crash"


class Gate:
    """Runs the stages and builds the report."""

    def __init__(self, new: str, baseline: str | None, options: GateOptions, out_dir: Path,
                 progress: Callable[[str], None] | None = None):
        self.options = options
        self.out_dir = Path(out_dir)
        self.progress = progress or (lambda message: None)
        self.clock = _Clock()
        # Each candidate in its own executor process, started by run() before anything else: a
        # broken spec is a harness error (CandidateError, exit 2) and no report is written.
        self.new = IsolatedCandidate(new, timeout_s=options.case_timeout_s, memory_limit_mb=options.memory_limit_mb)
        self.old: IsolatedCandidate | None = None
        if baseline:
            self.old = IsolatedCandidate(baseline, timeout_s=options.case_timeout_s,
                                         memory_limit_mb=options.memory_limit_mb)
        self.config = PreprocessConfig.profile(options.profile)
        self.stages: list[Stage] = []
        self.findings: list[dict[str, Any]] = []
        self.seed = options.seed if options.seed is not None else int(time.time()) % (2**31)
        self.interrupted = False  # Ctrl-C or SIGTERM arrived: the running stage is an error
        self.hung: dict[str, str] = {}  # mode class -> golden case NEW timed out on

    def start(self) -> None:
        """Start both executors (CandidateError when a spec cannot be loaded)."""
        try:
            self.new.start()
            if self.old is not None:
                self.old.start()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop both executors."""
        self.new.close()
        if self.old is not None:
            self.old.close()

    # -- stages ----------------------------------------------------------------------------

    def goldens(self) -> Stage:
        stage = Stage("goldens")
        report = golden.check_pixels(self.new, self.options.golden_dir, profiles=PROFILES)
        self.hung.update(report.timed_out)
        stage.details["timed_out_on"] = dict(report.timed_out)
        judged = []  # (file report, change, verdict or None when it could not be re-run)
        tolerated = 0
        for file_report in report.files:
            for change in file_report.changes:
                # Digests only say "different": re-run the case against the reference to say by
                # how much, and to apply the gate's tolerance (digests are exact by nature).
                verdict, config = self._rejudge(file_report.profile, change)
                if verdict is not None and verdict.ok:
                    tolerated += 1
                else:
                    judged.append((file_report, change, verdict, config))
        judged.sort(key=lambda item: -_max_level(item[2]))
        files = []
        for f in report.files:
            d = f.to_dict()
            d["changes"] = d["changes"][:50]  # the .md and the reasons name them; keep the JSON small
            files.append(d)
        levels = [_max_level(v) for _, _, v, _ in judged]
        stage.details = {**stage.details, "files": files, "warnings": report.warnings,
                         "tolerance": self.options.tolerance,
                         "differing_within_tolerance": tolerated, "failing_cases": len(judged),
                         "failing_below_one_level": sum(1 for x in levels if x < 1.0),
                         "max_level_diff": max(levels, default=0.0)}
        if judged:
            below = stage.details["failing_below_one_level"]
            stage.summary = (f"{len(judged)} pixel golden cases differ ({below} by less than one level, "
                             f"worst {max(levels):.3g} levels)")
        else:
            stage.summary = "all pixel goldens match"
        if tolerated:
            stage.summary += f"; {tolerated} more differ within {self.options.tolerance}"
        stage.summary += f" (profiles {', '.join(f.profile for f in report.files)})"
        for f in report.files:
            stage.reasons += [f"golden {f.profile}: {problem}" for problem in f.problems]
        cases = []
        for file_report, change, verdict, config in judged:
            if verdict is not None and verdict.check in ("crash", "timeout"):
                self.findings.append({"stage": "goldens", "check": verdict.check, "profile": file_report.profile,
                                      "case": change.key, "message": verdict.message})
            elif verdict is not None and verdict.check == "pixel_mismatch" and config is not None:
                # Every differing golden case is diagnosed too: the root-cause table covers all of
                # them, however many the reasons list names.
                entry = self._golden_diagnosis(file_report.profile, change, verdict, config)
                self.findings.append(entry)
                cases.append({k: entry[k] for k in ("profile", "case", "key", "root_causes", "max_levels",
                                                    "mean_levels", "residual_max_levels")})
        stage.details["cases"] = cases  # every differing case's levels and root causes
        for file_report, change, verdict, _ in judged[:20]:
            stage.reasons.append(f"golden {file_report.profile}: {_describe_golden(change, verdict)}")
        if len(judged) > 20:
            stage.reasons.append(f"... and {len(judged) - 20} more golden differences")
        stage.status = "fail" if stage.reasons else "pass"
        self._golden_diff_images(judged)
        return stage

    def _golden_diagnosis(self, profile: str, change: Any, verdict: Verdict, config: PreprocessConfig) -> dict:
        """A golden pixel difference as a finding entry with its root causes (oracle.diagnosis)."""
        img = golden.PixelCase.from_entry(profile, change.new or change.old).make_image()
        fields = finding_diagnosis(str(verdict.check), verdict.stats, [img], config,
                                   expected=verdict.expected, actual=verdict.actual)
        fields.pop("attribution", None)
        return {"stage": "goldens", "check": str(verdict.check), "profile": profile, "case": change.key,
                "key": finding_key(str(verdict.check), verdict.stats, [img]), "message": verdict.message,
                "hits": 1, "max_levels_seen": fields["max_levels"], **fields}

    def _rejudge(self, profile: str, change: Any) -> tuple[Verdict | None, PreprocessConfig | None]:
        """The oracle's verdict on a changed golden case under the gate's tolerance, and the case's
        config (verdict None when the case cannot be re-run, e.g. it was added or removed)."""
        if change.change != "changed":
            return None, None
        error = (change.new or {}).get("error")
        if error and not (change.old or {}).get("error"):
            # NEW crashed, died or hung on this case (recorded by the golden run): not run again,
            # a hang would cost another whole timeout.
            return Verdict(_error_check(str(error)), str(error)), None
        try:
            case = golden.PixelCase.from_entry(profile, change.new or change.old)
            img, config = case.make_image(), case.config()
            expected = reference.preprocess([img], config)
            actual = self.new([img], config)
        except CandidateCrash as exc:
            return Verdict("crash", str(exc)), None
        except (KimiOracleError, ValueError, KeyError, TypeError):
            return None, None
        return compare(expected, actual, config, self.options.tolerance, sizes=[img.size]), config

    def _golden_diff_images(self, judged: list[Any]) -> None:
        """Diff images of the worst cases, from the results the re-judging already computed."""
        made = 0
        for file_report, change, verdict, config in judged:
            if made >= MAX_DIFF_IMAGES:
                break
            if verdict is None or verdict.expected is None or verdict.actual is None:
                continue
            try:
                picture = diff_image(verdict.expected, verdict.actual, config)
            except (ValueError, KeyError, TypeError, IndexError):  # e.g. outputs of different shapes
                continue
            if picture is None:
                continue
            target = self.out_dir / "golden-diffs" / f"{file_report.profile}-{change.key}.png".replace("/", "_")
            target.parent.mkdir(parents=True, exist_ok=True)
            picture.save(target)
            made += 1

    def fuzzing(self, budget_s: float) -> Stage:
        stage = Stage("fuzz")
        examples = self.options.fuzz_examples
        if examples is None and budget_s < 1.0:
            stage.summary = "no budget left for fuzzing"
            stage.status = "skipped"
            stage.reasons.append("fuzzing skipped: the goldens used the whole budget")
            return stage
        options = FuzzOptions(examples=examples, budget_s=None if examples is not None else search_budget(budget_s),
                              seed=self.seed, tolerance=self.options.tolerance,
                              vary_config=True, db_dir=self.out_dir / "hypothesis-db",
                              max_side=self.options.fuzz_max_side)
        run = fuzz(self.new, self.config, options, out_dir=self.out_dir)
        summary = run.summary()
        stage.details = {k: summary[k] for k in ("examples", "calls", "rejected", "seed", "stopped", "counts")}
        stage.details["skipped_hanging"] = summary.get("skipped_hanging", 0)
        stage.summary = f"{run.examples} examples in {run.elapsed_s:.1f}s, {len(run.findings)} findings"
        stage.status = "fail" if run.findings else "pass"
        for f in summary["findings"]:
            self.findings.append({"stage": "fuzz", **f})
            stage.reasons.append(f"fuzz finding {f['id']} ({f['check']}): {f['message']}")
        if run.stopped == "interrupted":
            # fuzz() ends early on an interrupt and returns what it found: never a pass.
            self.interrupted = True
            stage.status = "error"
            stage.summary = f"interrupted after {run.examples} examples; " + stage.summary
            stage.reasons.insert(0, f"fuzz: interrupted after {run.examples} examples")
        return stage

    def invariance(self) -> Stage:
        stage = Stage("invariance")
        checked = 0
        for profile in (self.options.profile, "k3-small"):
            config = PreprocessConfig.profile(profile)
            for batch in _invariance_batches(self.seed):
                images = [make_image(p) for p in batch]
                classes = sorted({mode_class(img) for img in images} & set(self.hung))
                if classes:
                    # NEW hangs on these inputs (the goldens showed it): another whole timeout
                    # would show nothing new. Not checked, and so not a pass.
                    stage.reasons.append(f"invariance ({profile}, {len(images)} images): not run: the candidate "
                                         f"timed out on {', '.join(classes)} images in the goldens")
                    continue
                try:
                    verdict = check_invariance(lambda imgs: self.new(imgs, config), images)
                except CandidateCrash as exc:
                    check = _crash_check(exc)
                    how = "timed out" if check == "timeout" else "crashed"
                    stage.reasons.append(f"invariance ({profile}): the candidate {how}: {exc}")
                    self.findings.append({"stage": "invariance", "check": check, "profile": profile,
                                          "message": str(exc), "images": [p.to_dict() for p in batch]})
                    continue
                checked += 1
                if not verdict.ok:
                    stage.reasons.append(f"invariance ({profile}, {len(images)} images): {verdict.message}")
                    self.findings.append({"stage": "invariance", "check": "invariance", "profile": profile,
                                          "message": verdict.message,
                                          "images": [p.to_dict() for p in batch]})
        stage.status = "fail" if stage.reasons else "pass"
        stage.summary = (f"{checked} batches checked" + (f", {len(stage.reasons)} failed" if stage.reasons else
                                                            ": batched = one by one, subsets, permutations, reruns"))
        return stage

    def performance(self, budget_s: float) -> Stage:
        stage = Stage("performance")
        if self.old is None:
            stage.summary = "no baseline given"
            return stage
        limit = 1.0 + self.options.perf_threshold_pct / 100.0
        deadline = time.monotonic() + budget_s
        rows = []
        new, old = self.new, self.old
        clock = _VirtualClock()  # advanced by the seconds measured inside the executors
        stage.details["timed_in"] = "each candidate's own executor process (transfers not counted)"
        for name in PERF_INPUTS:
            if rows and time.monotonic() > deadline:
                break
            spec = BENCH_INPUTS[name]
            images = spec.images()
            config = spec.config()

            def new_fn() -> None:
                clock.now += new.time_call(images, config)

            def old_fn() -> None:
                try:
                    clock.now += old.time_call(images, config)
                except CandidateCrash as exc:
                    raise _BaselineCrash(exc) from exc

            interrupts.raise_if_requested()
            t_pair = time.monotonic()
            new_fn()  # also sends the images to each executor, once
            old_fn()
            t_pair = time.monotonic() - t_pair
            if rows and t_pair * (self.options.perf_rounds + 1) > deadline - time.monotonic():
                stage.details.setdefault("not_timed", []).append(name)
                continue
            result = interleaved_ratio(new_fn, old_fn, rounds=self.options.perf_rounds, warmup=0, timer=clock)
            retried = False
            if abs(result["ratio"] - limit) <= max(result["noise"], 0.02):
                # Within noise of the threshold: measure once more with twice the rounds.
                interrupts.raise_if_requested()
                result = interleaved_ratio(new_fn, old_fn, rounds=2 * self.options.perf_rounds, warmup=0,
                                           timer=clock)
                retried = True
            row = {"input": name, "description": spec.description, "ratio": result["ratio"],
                   "noise": result["noise"], "new_median_s": result["new_median_s"],
                   "old_median_s": result["old_median_s"], "rounds": result["rounds"], "retried": retried,
                   "slower": result["ratio"] > limit}
            rows.append(row)
            if row["slower"]:
                stage.reasons.append(
                    f"performance on {name}: NEW takes {result['ratio']:.2f}x OLD's time "
                    f"(±{result['noise']:.2f}; threshold {limit:.2f}x)")
        stage.details.update({"threshold_ratio": limit, "inputs": rows})
        stage.status = "fail" if stage.reasons else "pass"
        worst = max(rows, key=lambda r: r["ratio"])
        stage.summary = (f"{len(rows)} inputs timed; worst {worst['input']} at {worst['ratio']:.2f}x "
                         f"(threshold {limit:.2f}x)")
        return stage

    # -- driver ----------------------------------------------------------------------------

    def _run_stage(self, name: str, func: Callable[[], Stage]) -> Stage:
        if self.interrupted or interrupts.requested():
            self.interrupted = True
            stage = Stage(name, "skipped", summary="not run: the gate was interrupted")
            self.stages.append(stage)
            return stage
        self.progress(f"gate: {name} ...")
        t0 = time.monotonic()
        try:
            stage = func()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (core.interrupts raises both so)
            self.interrupted = True
            stage = Stage(name, "error", summary="interrupted", reasons=[f"{name}: interrupted before it ended"])
        except _BaselineCrash as exc:
            stage = Stage(name, "error", summary=f"the baseline failed: {exc.crash}", reasons=[str(exc)])
        except CandidateCrash as exc:
            check = _crash_check(exc)
            how = "timed out" if check == "timeout" else "crashed"
            stage = Stage(name, "fail", summary=f"the candidate {how}: {exc}", reasons=[str(exc)])
            self.findings.append({"stage": name, "check": check, "message": str(exc)})
        except KimiOracleError as exc:
            stage = Stage(name, "error", summary=str(exc), reasons=[f"{name}: {exc}"])
        except Exception as exc:  # noqa: BLE001 - a stage must never take the report down with it
            stage = Stage(name, "error", summary=f"internal error: {type(exc).__name__}: {exc}",
                          reasons=[f"{name}: internal error: {type(exc).__name__}: {exc}"])
        if interrupts.requested() and stage.status != "error":
            # A signal whose exception was swallowed (it landed in a gc callback): the stage
            # may not have run to its end, so it cannot count.
            self.interrupted = True
            stage.status = "error"
            stage.reasons.insert(0, f"{name}: interrupted")
            stage.summary = "interrupted; " + stage.summary
        stage.elapsed_s = time.monotonic() - t0
        self.stages.append(stage)
        self.progress(f"gate: {name}: {stage.status} ({stage.elapsed_s:.1f}s) {stage.summary}")
        return stage

    def run(self) -> dict[str, Any]:
        """Run every stage, write gate-report.json and gate-report.md, return the report.

        CandidateError (before any report) when a candidate cannot be loaded. An interrupt
        makes the running stage an error and skips the rest; the report is written and its
        verdict is `error` (the CLI then exits 130/143)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        started = utc_now()
        t0 = time.monotonic()
        budget = self.options.budget_s
        try:
            self.start()
            with self.clock.reference_timed():
                self._run_stage("goldens", self.goldens)
                perf_budget = PERF_SHARE * budget if self.old is not None else 0.0
                fuzz_budget = budget - (time.monotonic() - t0) - perf_budget - INVARIANCE_SHARE * budget
                self._run_stage("fuzz", lambda: self.fuzzing(fuzz_budget))
                self._run_stage("invariance", self.invariance)
                self._run_stage("performance",
                                lambda: self.performance(max(budget - (time.monotonic() - t0), 0.0)))
        except KeyboardInterrupt:  # between stages, or while the executors start
            self.interrupted = True
        finally:
            try:
                self.close()
            except KeyboardInterrupt:
                self.interrupted = True
        ran = {s.name for s in self.stages}
        self.stages += [Stage(name, "skipped", summary="not run: the gate was interrupted")
                        for name in STAGES if name not in ran]
        # Held back from here on: a signal now makes the verdict `error`, and the report that
        # says so is complete before the signal's exception ends the process.
        with interrupts.held() as pending:
            if pending():
                self.interrupted = True
            return self._report(started, t0, budget)

    def _report(self, started: str, t0: float, budget: float) -> dict[str, Any]:
        elapsed = time.monotonic() - t0
        reasons = [r for s in self.stages for r in s.reasons]
        if self.interrupted:
            reasons.insert(0, "the gate was interrupted (SIGINT/SIGTERM): stages that did not run to their end "
                              "cannot pass")
        if self.interrupted or any(s.status == "error" for s in self.stages):
            verdict = "error"
        elif any(s.status == "fail" for s in self.stages):
            verdict = "fail"
        else:
            verdict = "pass"
        in_candidates = self.new.busy_s + (self.old.busy_s if self.old is not None else 0.0)
        overhead = max(elapsed - in_candidates - self.clock.reference_s, 0.0)
        report = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "verdict": verdict,
            "stopped": "interrupted" if self.interrupted else "done",
            "reasons": reasons,
            "candidate": self.new.spec,
            "baseline": self.old.spec if self.old else None,
            "profile": self.options.profile,
            "config": self.config.to_hf_json(),
            "tolerance": self.options.tolerance,
            "perf_threshold_pct": self.options.perf_threshold_pct,
            "budget_s": budget,
            "fuzz_examples": self.options.fuzz_examples,
            "case_timeout_s": self.options.case_timeout_s,
            "memory_limit_mb": self.options.memory_limit_mb,
            "seed": self.seed,
            "started": started,
            "finished": utc_now(),
            "elapsed_s": round(elapsed, 3),
            "time": {
                # Waiting for the candidates' processes (their calls and the transfers to them).
                "in_candidate_s": round(in_candidates, 3),
                "in_reference_s": round(self.clock.reference_s, 3),
                "overhead_s": round(overhead, 3),
                "overhead_share_of_budget": round(overhead / budget, 4) if budget else None,
                # Time past the budget (set-up, reports, a stage finishing its last case).
                "over_budget_s": round(max(elapsed - budget, 0.0), 3),
            },
            "candidate_processes": {
                role: {"calls": c.calls, "restarts": c.restarts, "crashes": c.crashes, "timeouts": c.timeouts}
                for role, c in (("new", self.new), ("baseline", self.old)) if c is not None
            },
            # Root causes of the goldens' and the fuzz stage's findings, per mode class, worst first.
            "root_causes": root_cause_rows([f for f in self.findings if f.get("stage") in ("goldens", "fuzz")]),
            "stages": {s.name: s.to_dict() for s in self.stages},
            "findings": self.findings,
            "timing_ratios": self._timing_rows(),
            "versions": versions(),
            "machine": _machine(),
        }
        write_json(self.out_dir / "gate-report.json", report)
        atomic_write_text(self.out_dir / "gate-report.md", render_markdown(report))
        return report

    def _timing_rows(self) -> list[dict[str, Any]]:
        for s in self.stages:
            if s.name == "performance":
                return list(s.details.get("inputs", []))
        return []


def render_markdown(report: dict[str, Any]) -> str:
    """The human-readable report."""
    icon = {"pass": "PASS", "fail": "FAIL", "skipped": "skipped", "error": "ERROR"}
    lines = [
        f"# kimi-oracle gate: {report['verdict'].upper()}",
        "",
        f"- candidate: `{report['candidate']}`" + (f", baseline: `{report['baseline']}`" if report["baseline"] else ""),
        *([f"- **interrupted** (SIGINT/SIGTERM): the verdict is ERROR, whatever ran before"]
          if report.get("stopped") == "interrupted" else []),
        f"- profile: {report['profile']}, tolerance: {report['tolerance']}, budget: {report['budget_s']:.0f}s, "
        f"seed: {report['seed']}",
        f"- ran {report['elapsed_s']:.1f}s: {report['time']['in_candidate_s']:.1f}s in the candidates' processes, "
        f"{report['time']['in_reference_s']:.1f}s in the reference, {report['time']['overhead_s']:.1f}s overhead "
        f"({100 * (report['time']['overhead_share_of_budget'] or 0):.1f}% of the budget: hypothesis, image "
        f"generation, comparisons, reports); {report['time']['over_budget_s']:.1f}s past the budget",
        "",
    ]
    if report.get("root_causes"):
        lines += root_cause_markdown(report["root_causes"])
    lines += [
        "## Stages",
        "",
        "| stage | status | time | summary |",
        "|---|---|---|---|",
    ]
    for s in report["stages"].values():
        lines.append(f"| {s['name']} | {icon.get(s['status'], s['status'])} | {s['elapsed_s']:.1f}s | {s['summary']} |")
    if report["reasons"]:
        lines += ["", "## Why it failed", ""]
        lines += [f"- {r}" for r in report["reasons"][:60]]
        if len(report["reasons"]) > 60:
            lines.append(f"- ... {len(report['reasons']) - 60} more in gate-report.json")
    if report["timing_ratios"]:
        lines += ["", "## A/B timing (NEW / OLD, median of interleaved pairs)", "",
                  "| input | ratio | noise | NEW median | OLD median | rounds |", "|---|---|---|---|---|---|"]
        for r in report["timing_ratios"]:
            lines.append(f"| {r['input']} | {r['ratio']:.3f} | ±{r['noise']:.3f} | {r['new_median_s'] * 1e3:.1f} ms | "
                         f"{r['old_median_s'] * 1e3:.1f} ms | {r['rounds']}{' (retried)' if r['retried'] else ''} |")
    fuzz_findings = [f for f in report["findings"] if f.get("stage") == "fuzz" and f.get("path")]
    if fuzz_findings:
        lines += ["", "## Findings (replay with `kimi-oracle repro DIR`)", ""]
        lines += [f"- `{f['path']}`: {f['check']}: {f['message']}" for f in fuzz_findings[:30]]
    lines += ["", f"Versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v), ""]
    return "\n".join(lines)
