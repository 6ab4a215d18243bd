"""The upgrade gate: one pass/fail verdict on a new preprocessing kernel.

Stages, in order (`STAGES`): `goldens`, the pixel goldens of every profile run with NEW;
`planner`, with `--planner SPEC`, the planner's plans against every recorded grid and on fuzzed
sizes; `fuzz`, differential fuzzing of NEW against the reference (with the same configuration
variation as `fuzz`); `corpus`, with `--corpus DIR`, real image files; `invariance`, checks on
generated batches; and `performance`, with a baseline, an interleaved A/B timing of NEW against
OLD.

NEW and OLD never run in the gate's process: each runs in its own executor process
(`fuzzers.sandbox.IsolatedCandidate`), reused between calls, every call bounded by the case
timeout (and the address space by the memory limit). A crash, exit, signal, hang or memory
exhaustion of NEW is a `fail` with findings; of OLD (the baseline, used by the timing only) an
`error`. The timing stage times each call inside the candidate's own executor
(`IsolatedCandidate.time_call`: the function's own time, without sending images or results), so
NEW and OLD are timed under the same conditions and a crash there is a finding, never a dead gate.

With a baseline the correctness verdict is relative (docs/gate.md): NEW and OLD are judged
against the reference on the same inputs (the pixel goldens of every profile, the fuzz stage's
cases, the invariance batches and, with `--corpus`, real files), and compared root cause by root
cause and mode class by mode class (`workflows.known`): a root cause NEW has and OLD has not, or
one that grew beyond `--margin`, fails; the same or less passes. Without a baseline the verdict
is absolute (any divergence fails) unless `--known FILE` lists the accepted divergences.

Ctrl-C and SIGTERM end the stage that runs with `error` and skip the rest; the report is still
written, says `stopped: interrupted`, and its verdict is `error`, never `pass`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from kimi_oracle.core import interrupts
from kimi_oracle.core.activity import Activity, union_seconds
from kimi_oracle.core.config import PROFILES, PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S, START_TIMEOUT_S, fresh_seed
from kimi_oracle.core.errors import InputError, KimiOracleError
from kimi_oracle.core.files import atomic_write_text, check_writable, utc_now, versions, write_json
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.core.threads import one_torch_thread
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.fuzzers.fuzzing import (TILE_SHARE, FuzzOptions, FuzzRun, finding_from, fuzz, fuzz_pair,
                                         generated_case)
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import (ACCEPTS_INVALID, CRASH, INVARIANCE, PIXEL_MISMATCH, SHAPE_DTYPE, TIMEOUT,
                                       Verdict, check_invariance, compare, same_output)
from kimi_oracle.oracle.diagnosis import finding_diagnosis
from kimi_oracle.oracle.grouping import finding_key, image_at_fault, mode_class
from kimi_oracle.oracle.judge import Rejected, evaluate
from kimi_oracle.pipelines import reference
from kimi_oracle.results.report import (Finding, diff_image, finding_summary, root_cause_markdown, root_cause_rows,
                                        write_finding)
from kimi_oracle.workflows import golden
from kimi_oracle.workflows.bench import BENCH_INPUTS, interleaved_ratio
from kimi_oracle.workflows.known import (DEFAULT_MARGIN_PCT, KnownFile, Margin, aggregate, compare_rows,
                                         read_known, row_reason, rows_markdown, write_known)

SCHEMA = "kimi-oracle.gate-report"
SCHEMA_VERSION = 2  # 2: `rows` (root cause x mode class x {OLD, NEW}, with verdicts), `margin_pct`, `known`
# The planner stage's share of the budget at most (its check stops there with what it judged).
PLANNER_SHARE = 0.2
# Shares of the budget: fuzzing gets what the goldens and invariances leave, minus the timing.
PERF_SHARE = 0.3
# Kept for the invariance stage, which runs after fuzzing (a few batches, each run ~10 times).
INVARIANCE_SHARE = 0.05
# Inputs of the A/B timing, cheapest first; as many as the timing share allows are run.
PERF_INPUTS = ("rgb-640x480", "rgba-1920x1080-chessboard", "batch16-mixed", "rgb-4032x3024-k25",
               "rgb-1920x1080", "rgb-7680x4320")
MAX_DIFF_IMAGES = 8
# Generated examples where NEW's and OLD's outputs differ, judged on both sides beyond the
# findings' inputs: per group (NEW's failure key, OLD's), and in all.
DIFFERING_PER_GROUP = 2
MAX_DIFFERING = 30
STAGES = ("goldens", "planner", "fuzz", "corpus", "invariance", "performance")
# With a baseline, golden cases where NEW and OLD give different results are re-run against the
# reference and diagnosed (root causes, about a quarter of a second each) up to this many per
# mode class of the case's image; the others are counted (the sample names the causes).
GOLDEN_RERUN_PER_CLASS = 2
# With a baseline, the fuzz stage's budget: NEW and OLD fuzzed in lockstep (one draw, one image
# and one reference run per example, both candidates at work on it at once) get this share; the
# rest goes to judging every failing input on the other side (an attribution per differing output).
FUZZ_PAIR_SHARE = 0.35
# The harness's own time (the wall-clock time in which no candidate's process works and the
# reference does not run: generating inputs, comparing, diagnosing, shrinking, writing) that the
# gate aims at, as a share of its budget (the target is at most 20 %). With a baseline the fuzz
# stage is held to what is left of it after the goldens, minus LATER_OVERHEAD_SHARE kept for the
# stages after it; of that, FUZZ_OVERHEAD_PAIR goes to the lockstep run (its search ends when
# spent: `FuzzOptions.overhead_s`), the rest to the differing examples and writing the findings.
OVERHEAD_AIM = 0.185
LATER_OVERHEAD_SHARE = 0.02
FUZZ_OVERHEAD_PAIR = 0.7
# The lockstep search runs at least this many examples whatever the allowance (a few seconds;
# docs/measurements.md): goldens that used the whole allowance never leave the fuzz stage
# without examples.
OVERHEAD_MIN_EXAMPLES = 500
# What writing one side's finding takes (diff image, PNG inputs, JSON, fsync; the figure it rests
# on: docs/measurements.md), kept back from the fuzz stage's allowance for each input judged on
# both sides.
WRITE_ESTIMATE_S = 0.015


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


class _Clock:
    """When the reference runs (spans of wall-clock time; the candidates' processes keep their own,
    `IsolatedCandidate.activity`): the overhead is the time none of them is at work."""

    def __init__(self) -> None:
        self.reference = Activity()

    @property
    def reference_s(self) -> float:
        return self.reference.seconds()

    def wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.reference.span():
                return func(*args, **kwargs)

        timed.__name__ = getattr(func, "__name__", "timed")
        timed.__doc__ = getattr(func, "__doc__", None)
        return timed

    @contextlib.contextmanager
    def reference_timed(self) -> Iterator[None]:
        """Count the reference's time wherever the oracle calls `reference.preprocess`."""
        original = reference.preprocess
        reference.preprocess = self.wrap(original)
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
    if verdict is None or verdict.check != PIXEL_MISMATCH:
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
    if verdict.check == PIXEL_MISMATCH:
        st = verdict.stats
        return (f"{label}: max {st.get('max_level_diff', 0):.3g} levels, mean {st.get('mean_level_diff', 0):.3g}, "
                f"{100 * st.get('share_differing', 0):.1f}% of values differ")
    return f"{label}: {verdict.check}: {verdict.message}"


@dataclass
class _NoChange:
    new: None = None


_NO_CHANGE = _NoChange()


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
    return getattr(exc, "check", CRASH)


def _error_check(error: str) -> str:
    """The check a golden entry's recorded error stands for (`golden.pixel_entry`'s `error`)."""
    name = error.split(":", 1)[0]
    if name in ("CallTimedOut", "NotRunAfterTimeout"):
        return TIMEOUT
    if name == "ShapeDtypeError":
        return SHAPE_DTYPE
    return CRASH


def _entry_verdict(entry: dict[str, Any] | None, golden_entry: dict[str, Any] | None) -> Verdict | None:
    """A side's verdict on a golden case from its record alone (None: a pixel result that only a
    re-run could judge). `golden_entry` is the recorded golden (the reference's)."""
    if entry is None:
        return Verdict()  # the golden's own result
    rejected = bool(golden_entry and "error" in golden_entry)
    error = entry.get("error")
    if error:
        if rejected:
            return Verdict()  # rejected as the checkpoint does (another message)
        return Verdict(_error_check(str(error)), str(error), {"exception": str(error)})
    if rejected:
        return Verdict(ACCEPTS_INVALID, "returned a result for an input the checkpoint rejects")
    return None


def _same_entry(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two golden records of one case say the same result (None: the recorded golden's)."""
    if a is None or b is None:
        return a is b
    return all(a.get(k) == b.get(k) for k in ("sha256", "grid_thw", "error"))


def _input_id(prefix: str, config: PreprocessConfig, params: Sequence[Any], images: Sequence[Any]) -> str:
    """An id for one input, the same whichever candidate ran it."""
    h = hashlib.sha256(json.dumps(config.to_hf_json(), sort_keys=True, default=str).encode())
    for i, img in enumerate(images):
        p = params[i] if i < len(params) else None
        if p:
            h.update(json.dumps(p, sort_keys=True, default=str).encode())
        else:
            h.update(f"{img.mode}{img.size}".encode())
            h.update(hashlib.sha256(img.tobytes()).digest())
    return f"{prefix}:{h.hexdigest()[:16]}"


def _crash_stats(exc: CandidateCrash) -> dict[str, Any]:
    return {"exception": f"{getattr(exc, 'exc_type', type(exc).__name__)}: {getattr(exc, 'exc_message', exc)}"[:2000]}


def _observation(input_id: str, stage: str, verdict: Verdict, images: Sequence[Any],
                 diagnosis: dict[str, Any] | None = None) -> dict[str, Any]:
    """One failed input of one side, for `workflows.known.aggregate`."""
    d = diagnosis or {}
    return {"input": input_id, "stage": stage, "check": str(verdict.check),
            "key": finding_key(str(verdict.check), verdict.stats, list(images)) if images else str(verdict.check),
            "message": verdict.message, "root_causes": list(d.get("root_causes") or []),
            "attribution": d.get("attribution"), "max_levels": d.get("max_levels", verdict.stats.get("max_level_diff")),
            "mean_levels": d.get("mean_levels", verdict.stats.get("mean_level_diff")),
            "share": verdict.stats.get("share_differing")}


def _image_share(expected: Any, actual: Any, index: int) -> float | None:
    """The share of image `index`'s output values that differ (None when the outputs do not line up)."""
    import torch

    try:
        grids = torch.as_tensor(expected.grid_thws).reshape(-1, 3)
        if not torch.equal(grids, torch.as_tensor(actual.grid_thws).reshape(-1, 3)):
            return None
        counts = [int(c) for c in grids.prod(dim=1).tolist()]
        start = sum(counts[:index])
        e = expected.pixel_values[start : start + counts[index]]
        a = actual.pixel_values[start : start + counts[index]]
        if e.shape != a.shape or e.numel() == 0:
            return None
        return float((e.float() != a.float()).float().mean())
    except (AttributeError, IndexError, RuntimeError, TypeError, ValueError):
        return None


def _finding_observation(input_id: str, stage: str, f: Finding, index: int | None = None) -> dict[str, Any] | None:
    """The observation of a finding on image `index` of its batch (default: its image at fault),
    so that NEW and OLD are compared on the same image of the same input; its levels are those
    of its own case (unscaled). None when that image's output does not differ."""
    own = image_at_fault(f.stats)
    index = own if index is None else min(index, max(len(f.images) - 1, 0))
    stats = {**f.stats, "worst": {"image": index}}
    obs = {"input": input_id, "stage": stage, "check": f.check, "key": f.key or f.check, "message": f.message,
           "root_causes": list(f.root_causes), "attribution": f.attribution, "max_levels": f.max_levels,
           "mean_levels": f.mean_levels, "share": None}
    if f.check != PIXEL_MISMATCH:
        if index != own and f.images:
            obs["key"] = finding_key(f.check, stats, f.images)
        return obs
    obs["share"] = _image_share(f.expected, f.actual, index)
    if obs["share"] == 0.0:
        return None  # this side's difference is on another image of the batch
    if index != own:
        d = finding_diagnosis(f.check, stats, f.images, f.config, expected=f.expected, actual=f.actual)
        obs.update(root_causes=list(d["root_causes"]), attribution=d["attribution"], max_levels=d["max_levels"],
                   mean_levels=d["mean_levels"])
        obs["key"] = finding_key(f.check, {"max_level_diff": d["max_levels"] or 0.0, "worst": {"image": index}},
                                 f.images)
    return obs


def _outputs_npz(**results: Any) -> bytes:
    """The results of one input (expected, new, old) as one .npz (float32 values, int grids)."""
    import numpy as np
    import torch

    arrays = {}
    for name, r in results.items():
        if isinstance(r, PreprocessResult):
            arrays[f"{name}_pixel_values"] = torch.as_tensor(r.pixel_values).detach().float().cpu().numpy()
            arrays[f"{name}_grid_thws"] = torch.as_tensor(r.grid_thws).detach().cpu().numpy()
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


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
        # (a candidate whose import hangs is given the budget at most, never more)
        start = {"start_timeout_s": min(START_TIMEOUT_S, options.budget_s)}
        self.new = IsolatedCandidate(new, timeout_s=options.case_timeout_s, memory_limit_mb=options.memory_limit_mb,
                                     **start)
        self.old: IsolatedCandidate | None = None
        if baseline:
            self.old = IsolatedCandidate(baseline, timeout_s=options.case_timeout_s,
                                         memory_limit_mb=options.memory_limit_mb, **start)
        self.config = PreprocessConfig.profile(options.profile)
        # Read before anything starts: a bad file is a usage error (exit 2), never a verdict.
        self.known: KnownFile | None = read_known(options.known_path) if options.known_path else None
        # A path the run could not write is an error now, not after the whole run.
        if options.write_known_path is not None:
            check_writable(options.write_known_path, "--write-known")
        check_writable(self.out_dir, "--out", directory=True)
        self.margin = Margin(options.margin_pct / 100.0)
        # Relative verdict: rows against OLD and/or the known file instead of "any finding fails".
        self.relative = baseline is not None or self.known is not None
        self.observations: dict[str, list[dict[str, Any]]] = {"new": [], "old": []}
        self.rows: list[dict[str, Any]] = []
        self.stages: list[Stage] = []
        self.findings: list[dict[str, Any]] = []
        self.baseline_findings: list[dict[str, Any]] = []  # OLD's, with a baseline
        self.seed = options.seed if options.seed is not None else fresh_seed()
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
        if self.old is not None:
            return self.goldens_vs_baseline()
        stage = Stage("goldens")
        # (the gate re-judges and diagnoses the differing cases itself, under its tolerance)
        report = golden.check_pixels(self.new, self.options.golden_dir, profiles=PROFILES, diagnose=False,
                                     select=self.options.golden_select)
        self.hung.update(report.timed_out)
        stage.details["timed_out_on"] = dict(report.timed_out)
        judged = []  # (file report, change, verdict or None when it could not be re-run)
        tolerated = 0
        accepted_invalid: list[str] = []
        for file_report in report.files:
            for change in file_report.changes:
                # Digests only say "different": re-run the case against the reference to say by
                # how much, and to apply the gate's tolerance (digests are exact by nature).
                verdict, config = self._rejudge(file_report.profile, change)
                if verdict is not None and verdict.ok:
                    tolerated += 1
                elif verdict is not None and verdict.check == ACCEPTS_INVALID and not self.options.strict:
                    # reported (a row, a finding entry), fails only with --strict
                    accepted_invalid.append(f"{file_report.profile}/{change.key}")
                    self.observations["new"].append(self._golden_observation(file_report.profile, change, verdict))
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
                         "failing_below_one_level": sum(1 for x in levels if is_sub_level(x)),
                         "max_level_diff": max(levels, default=0.0)}
        if judged:
            below = stage.details["failing_below_one_level"]
            stage.summary = (f"{len(judged)} pixel golden cases differ ({below} by less than one level, "
                             f"worst {max(levels):.3g} levels)")
        else:
            stage.summary = "all pixel goldens match"
        if tolerated:
            stage.summary += f"; {tolerated} more differ within {self.options.tolerance}"
        if accepted_invalid:
            stage.details["accepts_invalid"] = accepted_invalid
            stage.summary += (f"; {len(accepted_invalid)} cases the checkpoint rejects return a result "
                              "(accepts_invalid: fails only with --strict)")
        stage.summary += f" (profiles {', '.join(f.profile for f in report.files)})"
        for f in report.files:
            stage.reasons += [f"golden {f.profile}: {problem}" for problem in f.problems]
        cases = []
        for file_report, change, verdict, config in judged:
            input_id = f"golden:{file_report.profile}/{change.key}"
            if verdict is not None and verdict.check in (CRASH, TIMEOUT):
                self.findings.append({"stage": "goldens", "check": verdict.check, "profile": file_report.profile,
                                      "case": change.key, "message": verdict.message})
                self.observations["new"].append(self._golden_observation(file_report.profile, change, verdict))
            elif verdict is not None and verdict.check == PIXEL_MISMATCH and config is not None:
                # Every differing golden case is diagnosed too: the root-cause table covers all of
                # them, however many the reasons list names.
                entry = self._golden_diagnosis(file_report.profile, change, verdict, config)
                attribution = entry.pop("attribution", None)
                self.findings.append(entry)
                self.observations["new"].append({**entry, "input": input_id, "attribution": attribution,
                                                 "share": verdict.stats.get("share_differing")})
                cases.append({k: entry[k] for k in ("profile", "case", "key", "root_causes", "max_levels",
                                                    "mean_levels", "residual_max_levels")})
            elif verdict is not None:
                self.observations["new"].append(self._golden_observation(file_report.profile, change, verdict))
        stage.details["cases"] = cases  # every differing case's levels and root causes
        if not self.relative:  # with --known the rows decide (and name the failing ones)
            for file_report, change, verdict, _ in judged[:20]:
                stage.reasons.append(f"golden {file_report.profile}: {_describe_golden(change, verdict)}")
            if len(judged) > 20:
                stage.reasons.append(f"... and {len(judged) - 20} more golden differences")
        stage.status = "fail" if stage.reasons else "pass"
        self._golden_diff_images([(f.profile, c.key, v, cfg) for f, c, v, cfg in judged])
        return stage

    def _golden_diagnosis(self, profile: str, change: Any, verdict: Verdict, config: PreprocessConfig) -> dict:
        """A golden pixel difference as a finding entry with its root causes (oracle.diagnosis)."""
        img = golden.PixelCase.from_entry(profile, change.new or change.old).make_image()
        fields = finding_diagnosis(str(verdict.check), verdict.stats, [img], config,
                                   expected=verdict.expected, actual=verdict.actual)
        return {"stage": "goldens", "check": str(verdict.check), "profile": profile, "case": change.key,
                "key": finding_key(str(verdict.check), verdict.stats, [img]), "message": verdict.message,
                "hits": 1, "max_levels_seen": fields["max_levels"], **fields}

    def _golden_observation(self, profile: str, change: Any, verdict: Verdict) -> dict[str, Any]:
        """A non-pixel golden failure (crash, timeout, grid, ...) as an observation of NEW."""
        try:
            images = [golden.PixelCase.from_entry(profile, change.new or change.old).make_image()]
        except (KimiOracleError, ValueError, KeyError, TypeError):
            images = []
        stats = dict(verdict.stats)
        stats.setdefault("exception", verdict.message)
        return _observation(f"golden:{profile}/{change.key}", "goldens", Verdict(verdict.check, verdict.message, stats),
                            images)

    def goldens_vs_baseline(self) -> Stage:
        """The pixel goldens of every profile run with NEW and with OLD; the cases where they give
        different results are judged against the reference on both sides (and diagnosed)."""
        stage = Stage("goldens")
        gdir = self.options.golden_dir
        new_report = golden.check_pixels(self.new, gdir, profiles=PROFILES, diagnose=False,
                                         select=self.options.golden_select)
        self.hung.update(new_report.timed_out)
        old_report = golden.check_pixels(self.old, gdir, profiles=PROFILES, diagnose=False,
                                         select=self.options.golden_select)
        stage.details["timed_out_on"] = dict(new_report.timed_out)
        stage.details["baseline_timed_out_on"] = dict(old_report.timed_out)

        def changed(report: Any) -> dict[tuple[str, str], Any]:
            return {(f.profile, c.key): c for f in report.files for c in f.changes}

        new_changes, old_changes = changed(new_report), changed(old_report)
        old_problems = {p for f in old_report.files for p in f.problems}
        for f in new_report.files:
            # a golden file NEW could not be compared with (and OLD could)
            stage.reasons += [f"golden {f.profile}: {p}" for p in f.problems if p not in old_problems]
        cases = sorted(set(new_changes) | set(old_changes))
        disagree = [k for k in cases if not _same_entry((new_changes.get(k) or _NO_CHANGE).new,
                                                        (old_changes.get(k) or _NO_CHANGE).new)]
        # Cases whose records carry an error (a crash, hang or rejection, NEW's, OLD's or the
        # golden's) are judged from the records; of the others, a sample per mode class of the
        # case's image (the profiles taken in turn) is re-run against the reference on both sides
        # and diagnosed: every re-run costs a reference call, two candidate calls and up to two
        # attributions (about a quarter of a second each).
        judged = []  # (profile, key, images, config, new verdict, old verdict, re-run)
        per_class: dict[str, list[tuple[int, int, str, str, Any, PreprocessConfig]]] = {}
        rank: dict[tuple[str, str], int] = {}
        for profile, key in disagree:
            interrupts.raise_if_requested()
            change = new_changes.get((profile, key)) or old_changes[(profile, key)]
            en = (new_changes.get((profile, key)) or _NO_CHANGE).new
            eo = (old_changes.get((profile, key)) or _NO_CHANGE).new
            try:
                case = golden.PixelCase.from_entry(profile, change.old or change.new)
                img, config = case.make_image(), case.config()
            except (KimiOracleError, ValueError, KeyError, TypeError):
                continue
            if any(e and "error" in e for e in (en, eo, change.old)):
                judged.append((profile, key, [img], config, _entry_verdict(en, change.old),
                               _entry_verdict(eo, change.old), False))
                continue
            cls = mode_class(img)
            n = rank[(cls, profile)] = rank.get((cls, profile), -1) + 1
            per_class.setdefault(cls, []).append((n, PROFILES.index(profile) if profile in PROFILES else 99,
                                                  profile, key, img, config))
        not_rerun: dict[str, int] = {}
        for cls, items in sorted(per_class.items()):
            items.sort(key=lambda it: it[:2])
            for _, _, profile, key, img, config in items[GOLDEN_RERUN_PER_CLASS:]:
                not_rerun[cls] = not_rerun.get(cls, 0) + 1
            for _, _, profile, key, img, config in items[:GOLDEN_RERUN_PER_CLASS]:
                interrupts.raise_if_requested()
                try:
                    expected = reference.preprocess([img], config)
                except InputError:
                    continue  # the reference rejects it now (the goldens were recorded elsewhere)
                nv = self._case_verdict(self.new, (new_changes.get((profile, key)) or _NO_CHANGE).new, img,
                                        config, expected)
                ov = self._case_verdict(self.old, (old_changes.get((profile, key)) or _NO_CHANGE).new, img,
                                        config, expected)
                judged.append((profile, key, [img], config, nv, ov, True))
        fixed = 0
        diffs = []
        rerun_counts = {"rerun": 0, "judged_from_records": 0}
        for profile, key, images, config, nv, ov, rerun in judged:
            input_id = f"golden:{profile}/{key}"
            rerun_counts["rerun" if rerun else "judged_from_records"] += 1
            if nv is not None and nv.ok and ov is not None and not ov.ok:
                fixed += 1
            for side, v in (("new", nv), ("old", ov)):
                if v is None or v.ok:
                    continue
                if v.check != PIXEL_MISMATCH:
                    self.observations[side].append(_observation(input_id, "goldens", v, images))
                elif side == "old" and nv is not None and nv.ok:
                    continue  # fixed by NEW: OLD's causes are not diagnosed here
                else:
                    self.observations[side].append(self._diagnosed(input_id, "goldens", v, images, config))
                    if side == "new":
                        diffs.append((profile, key, v, config))
        self._golden_diff_images(diffs)
        n_cases = sum(len(f.changes) for f in new_report.files)
        stage.details.update({
            "files": [{k: v for k, v in f.to_dict().items() if k != "changes"} for f in new_report.files],
            "warnings": new_report.warnings, "tolerance": self.options.tolerance,
            "cases_differing_from_goldens": {"new": n_cases,
                                             "old": sum(len(f.changes) for f in old_report.files)},
            "cases_new_and_old_disagree": len(disagree), "fixed_by_new_of_judged": fixed, **rerun_counts,
            "not_rerun_per_mode_class": not_rerun})
        stage.summary = (f"NEW and OLD give different results on {len(disagree)} of the golden cases "
                         f"(NEW differs from the goldens on {n_cases}, OLD on "
                         f"{stage.details['cases_differing_from_goldens']['old']}); judged on both sides: "
                         f"{len(judged)} ({rerun_counts['rerun']} re-run and diagnosed), NEW right where OLD "
                         f"is not on {fixed}")
        if not_rerun:
            stage.summary += (f"; {sum(not_rerun.values())} more not re-run (at most {GOLDEN_RERUN_PER_CLASS} "
                              "per mode class are)")
        stage.status = "fail" if stage.reasons else "pass"
        return stage

    def _case_verdict(self, candidate: IsolatedCandidate, entry: dict[str, Any] | None, img: Any,
                      config: PreprocessConfig, expected: PreprocessResult | None) -> Verdict:
        """One side's verdict on a golden case from its golden record (None: the golden's result)."""
        if entry is None:
            return Verdict()
        error = entry.get("error")
        if expected is None:  # the checkpoint rejects the case
            if error:
                return Verdict()
            return Verdict(ACCEPTS_INVALID, "returned a result for an input the checkpoint rejects")
        if error:  # crashed, died or hung in the golden run: not run again (a hang costs a timeout)
            return Verdict(_error_check(str(error)), str(error), {"exception": str(error)})
        try:
            actual = candidate([img], config)
        except CandidateCrash as exc:
            return Verdict(_crash_check(exc), str(exc), _crash_stats(exc))
        return compare(expected, actual, config, self.options.tolerance, sizes=[img.size])

    def _diagnosed(self, input_id: str, stage: str, verdict: Verdict, images: Sequence[Any],
                   config: PreprocessConfig) -> dict[str, Any]:
        """An observation with its root causes (pixel differences are attributed)."""
        fields = finding_diagnosis(str(verdict.check), verdict.stats, list(images), config,
                                   expected=verdict.expected, actual=verdict.actual)
        return _observation(input_id, stage, verdict, images, fields)

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
        if (change.old or {}).get("error"):
            # the checkpoint rejects this case: another error text is a rejection too
            return _entry_verdict(change.new, change.old), None
        try:
            case = golden.PixelCase.from_entry(profile, change.new or change.old)
            img, config = case.make_image(), case.config()
            expected = reference.preprocess([img], config)
            actual = self.new([img], config)
        except CandidateCrash as exc:
            return Verdict(CRASH, str(exc)), None
        except (KimiOracleError, ValueError, KeyError, TypeError):
            return None, None
        return compare(expected, actual, config, self.options.tolerance, sizes=[img.size]), config

    def _golden_diff_images(self, judged: list[tuple[str, str, Verdict | None, Any]]) -> None:
        """Diff images of the worst cases (profile, case key, verdict, config), from the results the
        re-judging already computed."""
        made = 0
        for profile, case_key, verdict, config in judged:
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
            target = self.out_dir / "golden-diffs" / f"{profile}-{case_key}.png".replace("/", "_")
            target.parent.mkdir(parents=True, exist_ok=True)
            picture.save(target)
            made += 1

    def _fuzz_options(self, examples: int | None, budget_s: float | None) -> FuzzOptions:
        return FuzzOptions(examples=examples, budget_s=budget_s,
                           seed=self.seed, tolerance=self.options.tolerance, vary_config=True,
                           # With a baseline no example database: NEW and OLD draw the same cases.
                           db_dir=None if self.old is not None else self.out_dir / "hypothesis-db",
                           max_side=self.options.fuzz_max_side, shrink=self.options.fuzz_shrink,
                           tile_share=self.options.tile_share, record_outcomes=self.old is not None)

    def fuzzing(self, budget_s: float, overhead_s: float | None = None) -> Stage:
        stage = Stage("fuzz")
        examples = self.options.fuzz_examples
        if examples is None and budget_s < 1.0:
            stage.summary = "no budget left for fuzzing"
            stage.status = "skipped"
            stage.reasons.append("fuzzing skipped: the goldens used the whole budget")
            return stage
        if self.old is not None:
            return self.fuzzing_vs_baseline(stage, examples, budget_s, overhead_s)
        run = fuzz(self.new, self.config, self._fuzz_options(examples, None if examples is not None else budget_s),
                   out_dir=self.out_dir)
        summary = run.summary()
        stage.details = {k: summary[k] for k in ("examples", "calls", "rejected", "seed", "stopped", "counts")}
        stage.details["skipped_hanging"] = summary.get("skipped_hanging", 0)
        stage.summary = f"{run.examples} examples in {run.elapsed_s:.1f}s, {len(run.findings)} findings"
        for f, entry in zip(run.findings, summary["findings"]):
            self.findings.append({"stage": "fuzz", **entry})
            obs = _finding_observation(_input_id("fuzz", f.config, f.params, f.images), "fuzz", f)
            if obs is not None:
                self.observations["new"].append(obs)
            if not self.relative and (f.check != ACCEPTS_INVALID or self.options.strict):
                stage.reasons.append(f"fuzz finding {entry['id']} ({entry['check']}): {entry['message']}")
        stage.status = "fail" if stage.reasons else "pass"
        self._fuzz_interrupted(stage, run)
        return stage

    def _fuzz_interrupted(self, stage: Stage, run: FuzzRun) -> None:
        if run.stopped == "interrupted":
            # fuzz() ends early on an interrupt and returns what it found: never a pass.
            self.interrupted = True
            stage.status = "error"
            stage.summary = f"interrupted after {run.examples} examples; " + stage.summary
            stage.reasons.insert(0, f"fuzz: interrupted after {run.examples} examples")

    def fuzzing_vs_baseline(self, stage: Stage, examples: int | None, budget_s: float,
                            overhead_s: float | None = None) -> Stage:
        """NEW and OLD fuzzed in lockstep (`fuzz_pair`: FUZZ_PAIR_SHARE of the budget, or
        --fuzz-examples): the same cases, each made once; both sides' findings shrunk. Every
        input either side failed on is judged on the other too, so each finding compares NEW and
        OLD on the same input. `overhead_s`: the harness time the stage may take (under a
        budget): FUZZ_OVERHEAD_PAIR of it ends the lockstep run's search, the whole of it ends
        the differing examples."""
        t0 = time.monotonic()
        options = self._fuzz_options(examples, None if examples is not None else budget_s * FUZZ_PAIR_SHARE)
        if examples is None and overhead_s is not None:
            options = dataclasses.replace(options, overhead_s=FUZZ_OVERHEAD_PAIR * overhead_s,
                                          at_work=lambda a, b: self._at_work(window=(a, b)),
                                          overhead_min_examples=OVERHEAD_MIN_EXAMPLES)
        run_new, run_old = fuzz_pair(self.new, self.old, self.config, options, out_dir=None)
        inputs: dict[str, dict[str, Finding]] = {}
        for side, run in (("new", run_new), ("old", run_old)):
            for f in run.findings:
                inputs.setdefault(_input_id("fuzz", f.config, f.params, f.images), {}).setdefault(side, f)
        t_differing = time.monotonic()

        def allowance_spent() -> bool:  # what judging and writing `inputs` will take kept back
            if examples is not None or overhead_s is None:
                return False
            return self._overhead(t0, time.monotonic()) + WRITE_ESTIMATE_S * 2 * len(inputs) >= overhead_s

        differing = self._differing_examples(run_new, run_old, inputs, allowance_spent)
        t_both = time.monotonic()
        disagree = 0
        # Findings are written by one writer thread while this one judges the next inputs (the
        # writes are mostly zlib, PNG encoding and fsync, which release the GIL); each is atomic,
        # and all are done before the stage ends, in order.
        writes: list[tuple[str, Finding, concurrent.futures.Future]] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="finding-writer") as writer:
            try:
                disagree = self._judge_on_both(inputs, writer, writes)
            finally:
                failed: BaseException | None = None
                for side, f, done in writes:
                    try:
                        done.result()
                    except Exception as exc:  # noqa: BLE001 - the first write error is the stage's
                        failed = failed or exc
                        continue
                    entry = {"stage": "fuzz", **finding_summary(f)}
                    (self.findings if side == "new" else self.baseline_findings).append(entry)
                if failed is not None and sys.exc_info()[0] is None:
                    raise failed
        stage.details = {"examples": run_new.examples, "calls": run_new.calls, "rejected": run_new.rejected,
                         "seed": self.seed, "stopped": run_new.stopped, "counts": run_new.counts(),
                         "skipped_hanging": run_new.skipped_hanging,
                         "baseline": {"examples": run_old.examples, "calls": run_old.calls,
                                      "stopped": run_old.stopped, "counts": run_old.counts()},
                         "inputs_judged_on_both": len(inputs), "inputs_new_and_old_disagree": disagree,
                         # the harness time the stage was allowed (None: --fuzz-examples, no allowance)
                         "overhead_allowance_s": None if examples is not None or overhead_s is None
                         else round(overhead_s, 3),
                         "examples_where_outputs_differ": differing,
                         # where the stage's time went (seconds)
                         "seconds": {"new_run": round(run_new.elapsed_s, 3), "new_search": round(run_new.search_s, 3),
                                     "old_run": round(run_old.elapsed_s, 3),
                                     "old_search": round(run_old.search_s, 3),
                                     "differing_examples": round(t_both - t_differing, 3),
                                     "judged_on_both": round(time.monotonic() - t_both, 3)}}
        stage.summary = (f"{run_new.examples} examples for NEW, {run_old.examples} for OLD (seed {self.seed}: "
                         f"the same cases{'; the search ended at its overhead allowance' if run_new.stopped == 'overhead' else ''}"
                         f"); {len(inputs)} failing inputs judged on both, {disagree} where they "
                         f"differ; NEW {len(run_new.findings)} findings, OLD {len(run_old.findings)}")
        stage.status = "pass"
        self._fuzz_interrupted(stage, run_new)
        self._fuzz_interrupted(stage, run_old)
        return stage

    def _judge_on_both(self, inputs: dict[str, dict[str, Finding]], writer: concurrent.futures.Executor,
                       writes: list) -> int:
        """Every failing input judged on the side that did not report it; observations for both
        sides, each side's finding handed to `writer`. Returns how many inputs the sides disagree on."""
        disagree = 0
        for input_id, found in inputs.items():
            interrupts.raise_if_requested()
            base = found.get("new") or found["old"]
            new_f, new_out = (found["new"], found["new"].actual) if "new" in found else self._replay(self.new, base)
            old_f, old_out = (found["old"], found["old"].actual) if "old" in found else self._replay(self.old, base)
            # the same result: both pass, or both fail the same check with bit-identical outputs
            # (or, without outputs, the same way: crash and timeout keys name the failure type)
            same = (new_f is None) == (old_f is None) and (
                new_f is None or (new_f.check == old_f.check and (  # type: ignore[union-attr]
                    same_output(new_out, old_out)
                    or (new_out is None and old_out is None and new_f.key.split("{")[0] == old_f.key.split("{")[0]))))
            disagree += int(not same)
            index = image_at_fault(base.stats)  # both sides observed on the same image of the batch
            for side, f, other, other_out in (("new", new_f, old_f, old_out), ("old", old_f, new_f, new_out)):
                if f is None:
                    continue
                obs = _finding_observation(input_id, "fuzz", f, index)
                if obs is not None:
                    self.observations[side].append(obs)
                f.extra["other_side"] = {
                    "role": "baseline" if side == "new" else "candidate",
                    "candidate": (self.old if side == "new" else self.new).spec,  # type: ignore[union-attr]
                    "check": other.check if other is not None else None,
                    "key": other.key if other is not None else None,
                    "root_causes": list(other.root_causes) if other is not None else [],
                    "same_output": same,
                    "outputs": "outputs.npz (expected, new, old)"}
                npz = _outputs_npz(expected=f.expected, new=f.actual if side == "new" else other_out,
                                   old=other_out if side == "new" else f.actual)
                writes.append((side, f, writer.submit(
                    write_finding, self.out_dir if side == "new" else self.out_dir / "baseline", f,
                    extra_files={"outputs.npz": npz})))
        return disagree

    def _differing_examples(self, run_new: FuzzRun, run_old: FuzzRun, inputs: dict[str, dict[str, Finding]],
                            allowance_spent: Callable[[], bool] = lambda: False) -> int:
        """Every generated example where NEW's and OLD's outcomes differ (their digests, example by
        example: both runs drew the same cases), beyond the findings' own inputs: grouped by how
        each side fails there, up to DIFFERING_PER_GROUP examples of each group (at most
        MAX_DIFFERING in all, none once `allowance_spent()`) are judged on both sides and join
        `inputs` unshrunk. Returns how many examples differ."""
        indices = sorted(i for i, d in run_new.outcomes.items() if i in run_old.outcomes and run_old.outcomes[i] != d)
        # Not re-run: examples a side did not judge (a mode class it hung on) or timed out on:
        # each would cost a whole case timeout again, and the hang is a finding of its own.
        costly = ("not-judged", f"{TIMEOUT}:")
        rerun = [i for i in indices
                 if not any(o[i].startswith(costly) for o in (run_new.outcomes, run_old.outcomes))]
        options = self._fuzz_options(None, None)
        per_group: dict[tuple[str, str], int] = {}
        taken = 0
        for i in rerun:
            if taken >= MAX_DIFFERING or allowance_spent():
                break
            interrupts.raise_if_requested()
            case = generated_case(self.config, options, run_new.seed, i)
            images = case.make_images()
            try:
                expected = reference.preprocess([im.copy() for im in images], case.config)
            except InputError:
                expected = None  # the checkpoint rejects it: evaluate runs the candidates anyway
            verdicts: dict[str, Verdict] = {}
            keys = []
            for side, candidate in (("new", self.new), ("old", self.old)):
                try:
                    verdict = evaluate(candidate, images, case.config, self.options.tolerance, invariance=False,
                                       expected=expected)
                except Rejected:
                    keys.append("rejected")
                    continue
                keys.append(finding_key(str(verdict.check), verdict.stats, images) if not verdict.ok else "ok")
                if not verdict.ok:
                    verdicts[side] = verdict
            group = (keys[0], keys[-1])
            if not verdicts or per_group.get(group, 0) >= DIFFERING_PER_GROUP:
                continue  # (no attribution spent on an example that is not kept)
            input_id = _input_id("fuzz", case.config, [p.to_dict() for p in case.images], images)
            if input_id in inputs:
                continue
            # (generated example i is the run's example i + 1: no saved failures replay here)
            inputs[input_id] = {
                side: finding_from(verdict, (self.new if side == "new" else self.old).spec,  # type: ignore[union-attr]
                                   case.config, images, params=[p.to_dict() for p in case.images],
                                   tolerance=self.options.tolerance, seed=run_new.seed, example=i + 1)
                for side, verdict in verdicts.items()}
            per_group[group] = per_group.get(group, 0) + 1
            taken += 1
        return len(indices)

    def _replay(self, candidate: IsolatedCandidate, base: Finding) -> tuple[Finding | None, Any]:
        """`candidate` on another side's finding input: (its finding or None when it passes, its output)."""
        try:
            verdict = evaluate(candidate, base.images, base.config, self.options.tolerance,
                               invariance=base.check == INVARIANCE, expected=base.expected)
        except Rejected:
            return None, None
        if verdict.ok:
            return None, verdict.actual
        if verdict.check == base.check and same_output(verdict.actual, base.actual):
            # the same output as the other side: its diagnosis holds, no second attribution
            f = dataclasses.replace(base, candidate=candidate.spec, message=verdict.message, stats=verdict.stats,
                                    expected=verdict.expected, actual=verdict.actual, extra=dict(base.extra),
                                    hits=1, max_levels_seen=None, path=None)
        else:
            f = finding_from(verdict, candidate.spec, base.config, base.images, params=base.params,
                             tolerance=self.options.tolerance, engine=base.engine, seed=base.seed,
                             example=base.example)
        return f, verdict.actual

    def planner_stage(self) -> Stage:
        """--planner SPEC: the planner against every recorded grid and on fuzzed sizes/configs
        (oracle.planner, in its own process). Absolute: a plan is integers, and the checkpoint's
        arithmetic is exact, so even with a baseline any differing field fails."""
        stage = Stage("planner")
        spec = self.options.planner
        if spec is None:
            stage.summary = "no --planner given"
            return stage
        # (each call within --case-timeout, the whole check within its share of --budget)
        report = golden.check_planner(spec, golden_dir=self.options.golden_dir,
                                      fuzz_sizes=self.options.planner_sizes, config=self.config, seed=self.seed,
                                      case_timeout_s=self.options.case_timeout_s,
                                      budget_s=PLANNER_SHARE * self.options.budget_s)
        stage.details = report.to_dict()
        lines = report.lines()
        stage.summary = lines[-1] if lines else ""
        for f in report.findings.values():
            stage.reasons.append(f"planner {f.key} ({f.hits} sizes), first in {f.source}: {f.message}")
            self.findings.append({"stage": "planner", "check": f.kind, "key": f.key, "message": f.message,
                                  "size": list(f.size), "field": f.field})
        stage.reasons += [f"planner: error: {e}" for e in report.errors]
        stage.status = "fail" if stage.reasons else "pass"
        return stage

    def corpus(self) -> Stage:
        """Real image files (--corpus DIR, searched recursively) judged on NEW and, with a
        baseline, on OLD; with a baseline only the files where they give different results count."""
        stage = Stage("corpus")
        root = self.options.corpus_dir
        if root is None:
            stage.summary = "no --corpus given"
            return stage
        from kimi_oracle.core.images import decode, read_file

        root = Path(root)
        if not root.is_dir():
            raise InputError("not a directory", source=str(root))
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
        counts = {"files": len(files), "unreadable": 0, "rejected": 0, "failing_new": 0, "failing_old": 0,
                  "new_and_old_disagree": 0}
        for path in files:
            interrupts.raise_if_requested()
            rel = path.relative_to(root).as_posix()
            try:
                raw = read_file(path)
                img = decode(raw, name=rel)
                expected = reference.preprocess([img.copy()], self.config)
            except InputError:  # undecodable files, and files the checkpoint rejects
                counts["unreadable"] += 1
                continue
            verdicts = {"new": evaluate(self.new, [img], self.config, self.options.tolerance, invariance=False,
                                        expected=expected)}
            if self.old is not None:
                verdicts["old"] = evaluate(self.old, [img], self.config, self.options.tolerance, invariance=False,
                                           expected=expected)
                nv, ov = verdicts["new"], verdicts["old"]
                same_failure = nv.check == ov.check and (
                    same_output(nv.actual, ov.actual)
                    or (nv.actual is None and ov.actual is None
                        and nv.stats.get("exception") == ov.stats.get("exception")))
                if nv.ok == ov.ok and (nv.ok or same_failure):
                    counts["failing_new"] += int(not nv.ok)
                    counts["failing_old"] += int(not ov.ok)
                    continue  # the same result on both sides: no difference between them to judge
                counts["new_and_old_disagree"] += 1
            for side, verdict in verdicts.items():
                if verdict.ok:
                    continue
                counts[f"failing_{side}"] += 1
                spec = self.new.spec if side == "new" else self.old.spec  # type: ignore[union-attr]
                f = finding_from(verdict, spec, self.config, [img], tolerance=self.options.tolerance,
                                 engine="check", sources=[rel], raw_inputs=[raw])
                obs = _finding_observation(f"corpus:{rel}", "corpus", f)
                if obs is not None:
                    self.observations[side].append(obs)
                other = verdicts.get("old" if side == "new" else "new")
                write_finding(self.out_dir if side == "new" else self.out_dir / "baseline", f,
                              extra_files={"outputs.npz": _outputs_npz(
                                  expected=expected, new=verdicts["new"].actual,
                                  old=other.actual if side == "new" and other is not None else verdict.actual
                                  if side == "old" else None)})
                (self.findings if side == "new" else self.baseline_findings).append(
                    {"stage": "corpus", **finding_summary(f)})
                if not self.relative:
                    stage.reasons.append(f"corpus {rel}: {verdict.check}: {verdict.message}")
        stage.details = {"dir": str(root), **counts}
        stage.summary = (f"{counts['files']} files ({counts['unreadable']} unreadable or rejected): NEW fails on "
                         f"{counts['failing_new']}" + (f", OLD on {counts['failing_old']}, they differ on "
                                                       f"{counts['new_and_old_disagree']}" if self.old else ""))
        stage.status = "fail" if stage.reasons else "pass"
        return stage

    def invariance(self) -> Stage:
        stage = Stage("invariance")
        checked = 0
        for profile in (self.options.profile, "k3-small"):
            config = PreprocessConfig.profile(profile)
            for index, batch in enumerate(_invariance_batches(self.seed)):
                images = [make_image(p) for p in batch]
                input_id = f"invariance:{profile}/{index}"
                classes = sorted({mode_class(img) for img in images} & set(self.hung))
                if classes:
                    # NEW hangs on these inputs (the goldens showed it): another whole timeout
                    # would show nothing new. Not checked, and so not a pass.
                    stage.reasons.append(f"invariance ({profile}, {len(images)} images): not run: the candidate "
                                         f"timed out on {', '.join(classes)} images in the goldens")
                    continue
                if self.old is not None:
                    old_verdict = self._invariance_verdict(self.old, config, images)
                    if not old_verdict.ok:
                        self.observations["old"].append(_observation(input_id, "invariance", old_verdict, images))
                verdict = self._invariance_verdict(self.new, config, images)
                if verdict.check not in (None, INVARIANCE):
                    how = "timed out" if verdict.check == TIMEOUT else "crashed"
                    if not self.relative:
                        stage.reasons.append(f"invariance ({profile}): the candidate {how}: {verdict.message}")
                    self.findings.append({"stage": "invariance", "check": verdict.check, "profile": profile,
                                          "message": verdict.message, "images": [p.to_dict() for p in batch]})
                    self.observations["new"].append(_observation(input_id, "invariance", verdict, images))
                    continue
                checked += 1
                if not verdict.ok:
                    if not self.relative:
                        stage.reasons.append(f"invariance ({profile}, {len(images)} images): {verdict.message}")
                    self.findings.append({"stage": "invariance", "check": INVARIANCE, "profile": profile,
                                          "message": verdict.message,
                                          "images": [p.to_dict() for p in batch]})
                    self.observations["new"].append(_observation(input_id, "invariance", verdict, images))
        stage.status = "fail" if stage.reasons else "pass"
        stage.summary = (f"{checked} batches checked" + (f", {len(stage.reasons)} failed" if stage.reasons else
                                                            ": batched = one by one, subsets, permutations, reruns"))
        return stage

    @staticmethod
    def _invariance_verdict(candidate: IsolatedCandidate, config: PreprocessConfig, images: list[Any]) -> Verdict:
        try:
            return check_invariance(lambda imgs: candidate(imgs, config), images)
        except CandidateCrash as exc:
            return Verdict(_crash_check(exc), str(exc), _crash_stats(exc))

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
            if (abs(result["ratio"] - limit) <= max(result["noise"], 0.02)
                    and t_pair * 2 * self.options.perf_rounds <= deadline - time.monotonic()):
                # Within noise of the threshold: measure once more with twice the rounds (when
                # they fit in the stage's budget; else the first measurement stands).
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
            how = "timed out" if check == TIMEOUT else "crashed"
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
        t1 = time.monotonic()
        stage.elapsed_s = t1 - t0
        stage.details["overhead_s"] = round(self._overhead(t0, t1), 3)
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
            with self.clock.reference_timed(), one_torch_thread():
                self._run_stage("goldens", self.goldens)
                self._run_stage("planner", self.planner_stage)
                perf_budget = PERF_SHARE * budget if self.old is not None else 0.0
                fuzz_budget = budget - (time.monotonic() - t0) - perf_budget - INVARIANCE_SHARE * budget
                # the harness time left for fuzzing (module comment at OVERHEAD_AIM)
                allowance = max((OVERHEAD_AIM - LATER_OVERHEAD_SHARE) * budget
                                - self._overhead(t0, time.monotonic()), 0.0)
                self._run_stage("fuzz", lambda: self.fuzzing(fuzz_budget, allowance))
                self._run_stage("corpus", self.corpus)
                self._run_stage("invariance", self.invariance)
                self._compare()
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

    def _compare(self) -> None:
        """The rows (root cause x mode class x {OLD, NEW}) and their verdicts; with a baseline or a
        known file they decide the correctness stages (a stage fails when a failing row has an
        input from it)."""
        new = aggregate(self.observations["new"])
        old = aggregate(self.observations["old"]) if self.old is not None else None
        self.rows = compare_rows(new, old, self.margin, known=self.known, strict=self.options.strict)
        if not self.relative:
            return
        for stage in self.stages:
            if stage.name in ("goldens", "fuzz", "corpus", "invariance") and stage.status in ("pass", "fail"):
                failing = [r for r in self.rows if r["fails"] and stage.name in r["stages"]]
                stage.status = "fail" if failing or stage.reasons else "pass"
                if failing:
                    stage.summary += f"; {len(failing)} failing row(s)"

    def _at_work(self, window: tuple[float, float] | None = None, reference: bool = True) -> float:
        """Wall-clock seconds (within `window`) in which a candidate's process worked or was
        waited for, or (with `reference`) the reference ran: the union of their spans."""
        return union_seconds(self.new.activity, self.old.activity if self.old is not None else None,
                             self.clock.reference if reference else None, window=window)

    def _overhead(self, t0: float, t1: float) -> float:
        """The harness's time within [t0, t1]: the seconds in which no candidate's process worked
        or was waited for and the reference did not run."""
        return (t1 - t0) - self._at_work(window=(t0, t1))

    def _report(self, started: str, t0: float, budget: float) -> dict[str, Any]:
        elapsed = time.monotonic() - t0
        reasons = [r for s in self.stages for r in s.reasons]
        if self.relative:
            reasons = [row_reason(r) for r in self.rows if r["fails"]] + reasons
        if self.interrupted:
            reasons.insert(0, "the gate was interrupted (SIGINT/SIGTERM): stages that did not run to their end "
                              "cannot pass")
        if self.interrupted or any(s.status == "error" for s in self.stages):
            verdict = "error"
        elif any(s.status == "fail" for s in self.stages):
            verdict = "fail"
        else:
            verdict = "pass"
        # Wall-clock unions: the candidates' processes work while this one computes the reference
        # and draws the next example, so their times overlap; the overhead is the time in which
        # no candidate's process works, none is waited for and the reference does not run.
        in_candidates = self._at_work(reference=False)
        overhead = max(elapsed - self._at_work(), 0.0)
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
                # A candidate's process at work or waited for (its calls and the transfers to it),
                # NEW's and OLD's as one wall-clock union; it overlaps in_reference_s.
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
            "rows": self.rows,
            "relative": self.relative,
            "margin_pct": self.options.margin_pct,
            "known": str(self.options.known_path) if self.options.known_path else None,
            "strict": self.options.strict,
            "root_causes": root_cause_rows([f for f in self.findings if f.get("stage") in ("goldens", "fuzz")]),
            "stages": {s.name: s.to_dict() for s in self.stages},
            "findings": self.findings,
            "baseline_findings": self.baseline_findings,
            "timing_ratios": self._timing_rows(),
            "versions": versions(),
            "machine": _machine(),
        }
        if self.options.write_known_path is not None and not self.interrupted:
            try:
                path = write_known(self.options.write_known_path, self.rows, self.new.spec,
                                   note=f"gate seed {self.seed}, profile {self.options.profile}")
                report["wrote_known"] = str(path)
            except OSError as exc:  # the reports are still written; the run is an error
                report["verdict"] = "error"
                report["reasons"].insert(0, f"--write-known {self.options.write_known_path}: cannot write: "
                                            f"{exc.strerror or exc}")
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
        f"{report['time']['in_reference_s']:.1f}s in the reference (the two overlap), "
        f"{report['time']['overhead_s']:.1f}s overhead "
        f"({100 * (report['time']['overhead_share_of_budget'] or 0):.1f}% of the budget: time in which neither "
        f"works, spent by the fuzzing engine, root-cause attribution, image generation, comparisons, reports); "
        f"{report['time']['over_budget_s']:.1f}s past the budget",
        "",
    ]
    if report.get("relative"):
        lines.append("- verdict by root cause and mode class against "
                     + (f"the baseline `{report['baseline']}`" if report["baseline"] else "")
                     + (" and " if report["baseline"] and report.get("known") else "")
                     + (f"the known divergences in `{report['known']}`" if report.get("known") else "")
                     + f", margin {report['margin_pct']:g}% (docs/gate.md)")
        lines.append("")
    lines += rows_markdown(report.get("rows") or [],
                           "OLD" if report["baseline"] else "known limits" if report.get("known") else "OLD (none)")
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
