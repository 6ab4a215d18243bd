"""The gate's goldens stage: the pixel goldens of every profile on NEW (and OLD), re-judged and diagnosed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PROFILES, PreprocessConfig
from kimi_oracle.core.errors import InputError, KimiOracleError
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
from kimi_oracle.inputs.generators import CaseParams
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import ACCEPTS_INVALID, CRASH, PIXEL_MISMATCH, SHAPE_DTYPE, TIMEOUT, Verdict, compare
from kimi_oracle.oracle.diagnosis import finding_diagnosis
from kimi_oracle.oracle.grouping import finding_key, image_at_fault, mode_class
from kimi_oracle.pipelines import reference
from kimi_oracle.results.report import diff_image
from kimi_oracle.workflows import golden
from kimi_oracle.workflows.gate.changes import observe_change
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.observations import crash_check, crash_stats, observation
from kimi_oracle.workflows.gate.options import Stage

# The stage's place in the gate (workflows.gate.run finds it): its name in the report, its
# order among the stages, and whether its rows take part in the relative verdict.
NAME = "goldens"
ORDER = 10
COMPARED = True

MAX_DIFF_IMAGES = 8
# Without a baseline: the goldens stage stops re-judging at this share of the budget (the cases
# left fail as they are: their digests differ), and attributes at most this many differing cases
# per mode class (the others keep their levels; the sample names the causes). A candidate wrong
# on all 470 cases ran 175-464 s of a 60 s budget and 5.3 GB.
GOLDENS_SHARE = 0.4
GOLDEN_DIAGNOSE_PER_CLASS = 3
GOLDEN_MIN_REJUDGED = MAX_DIFF_IMAGES  # re-judged whatever the budget (a few seconds at most)
# With a baseline, golden cases where NEW and OLD give different results are re-run against the
# reference and diagnosed (root causes, about a quarter of a second each) up to this many per
# mode class of the case's image; the others are counted (the sample names the causes).
GOLDEN_RERUN_PER_CLASS = 2


def run(ctx: GateContext) -> Stage:
    """The goldens stage: NEW alone (absolute) or, with a baseline, NEW against OLD."""
    if ctx.old is not None:
        return _vs_baseline(ctx)
    return _absolute(ctx)


# -- NEW alone -------------------------------------------------------------------------------

def _absolute(ctx: GateContext) -> Stage:
    """Every golden case whose digest differs re-judged against the reference (under the gate's
    tolerance) and its pixel differences diagnosed."""
    stage = Stage(NAME)
    # (the gate re-judges and diagnoses the differing cases itself, under its tolerance)
    report = golden.check_pixels(ctx.new, ctx.options.golden_dir, profiles=PROFILES, diagnose=False,
                                 select=ctx.options.golden_select)
    ctx.hung.update(report.timed_out)
    stage.details["timed_out_on"] = dict(report.timed_out)
    judged, tolerated, accepted_invalid = _rejudge_all(ctx, report)
    _summarize_absolute(ctx, stage, report, judged, tolerated, accepted_invalid)
    stage.details["cases"] = _record_judged(ctx, judged)  # every differing case's levels and root causes
    if not ctx.relative:  # with --known the rows decide (and name the failing ones)
        for file_report, change, verdict, _ in judged[:20]:
            stage.reasons.append(f"golden {file_report.profile}: {_describe_golden(change, verdict)}")
        if len(judged) > 20:
            stage.reasons.append(f"... and {len(judged) - 20} more golden differences")
    stage.status = "fail" if stage.reasons else "pass"
    _golden_diff_images(ctx, [(f.profile, c.key, v, cfg) for f, c, v, cfg in judged])
    return stage


def _deadline(ctx: GateContext) -> float | None:
    """When the goldens stage stops re-judging (GOLDENS_SHARE of the budget from the gate's start)."""
    budget = getattr(ctx, "budget", None)
    return None if budget is None else budget.t0 + GOLDENS_SHARE * budget.total_s


def _lighten(judged: list) -> None:
    # Only the worst MAX_DIFF_IMAGES keep their outputs (for the diff images): memory stays bounded
    # by them, not by the number of differing cases (470 kept 5 GB).
    with_outputs = [k for k, item in enumerate(judged) if item[2] is not None and item[2].actual is not None]
    kept = set(sorted(with_outputs, key=lambda k: -_max_level(judged[k][2]))[:MAX_DIFF_IMAGES])
    for k, (_, _, verdict, _) in enumerate(judged):
        if k not in kept and verdict is not None:
            verdict.expected = verdict.actual = None


def _rejudge_all(ctx: GateContext, report: Any) -> tuple[list[tuple[Any, Any, Verdict | None, Any]], int, list[str]]:
    """Every changed case re-judged, within the stage's share of the budget: (the failing ones,
    worst first: file report, change, verdict or None when it could not be re-run, config), how
    many differ within the tolerance, and the cases the checkpoint rejects that returned a result
    (accepts_invalid, observed here). Past the deadline a case is not re-run: it fails as it is
    (its digest differs from the golden's), counted in `ctx.golden_not_rejudged`."""
    judged = []
    tolerated = 0
    accepted_invalid: list[str] = []
    deadline = _deadline(ctx)
    ctx.golden_not_rejudged = 0
    for file_report in report.files:
        for change in file_report.changes:
            interrupts.raise_if_requested()
            done = len(judged) + tolerated + len(accepted_invalid) - ctx.golden_not_rejudged
            if deadline is not None and time.monotonic() >= deadline and done >= GOLDEN_MIN_REJUDGED:
                ctx.golden_not_rejudged += 1
                judged.append((file_report, change, None, None))
                continue
            # Digests only say "different": re-run the case against the reference to say by
            # how much, and to apply the gate's tolerance (digests are exact by nature).
            verdict, config = _rejudge(ctx, file_report.profile, change)
            if verdict is not None and verdict.check == PIXEL_MISMATCH and config is not None:
                verdict.stats["_diagnosis"] = _diagnose_now(ctx, file_report.profile, change, verdict, config,
                                                            deadline)
            if verdict is not None and verdict.ok:
                tolerated += 1
            elif verdict is not None and verdict.check == ACCEPTS_INVALID and not ctx.options.strict:
                # reported (a row, a finding entry), fails only with --strict
                accepted_invalid.append(f"{file_report.profile}/{change.key}")
                ctx.observations["new"].append(_golden_observation(file_report.profile, change, verdict))
            else:
                judged.append((file_report, change, verdict, config))
                if len(judged) > 4 * MAX_DIFF_IMAGES:
                    _lighten(judged)
    _lighten(judged)
    judged.sort(key=lambda item: -_max_level(item[2]))
    return judged, tolerated, accepted_invalid


def _diagnose_now(ctx: GateContext, profile: str, change: Any, verdict: Verdict, config: PreprocessConfig,
                  deadline: float | None) -> dict:
    """A differing case's finding entry, diagnosed while its outputs are at hand: attributed for
    the first GOLDEN_DIAGNOSE_PER_CLASS cases of each mode class before the deadline, its levels
    only (the attribution deferred, said so) for the others."""
    counts = ctx.__dict__.setdefault("golden_diagnosed", {})
    img = golden.PixelCase.from_entry(profile, change.new or change.old).make_image()
    cls = mode_class(img)
    late = deadline is not None and time.monotonic() >= deadline and sum(counts.values()) >= 1
    if counts.get(cls, 0) >= GOLDEN_DIAGNOSE_PER_CLASS or late:
        fields = finding_diagnosis(str(verdict.check), verdict.stats, [img], config)  # (levels only)
        fields["attribution"] = {"deferred": f"more than {GOLDEN_DIAGNOSE_PER_CLASS} {cls} golden cases differ, or the "
                                             "stage's share of the budget was spent: not attributed",
                                 "explanation": "", "variants": []}
    else:
        counts[cls] = counts.get(cls, 0) + 1
        fields = finding_diagnosis(str(verdict.check), verdict.stats, [img], config,
                                   expected=verdict.expected, actual=verdict.actual)
    return _golden_entry(profile, change, verdict, img, fields)


def _golden_entry(profile: str, change: Any, verdict: Verdict, img: Any, fields: dict) -> dict:
    """A golden pixel difference as a finding entry, with its diagnosis `fields`."""
    return {"stage": NAME, "check": str(verdict.check), "profile": profile, "case": change.key,
            "key": finding_key(str(verdict.check), verdict.stats, [img]), "message": verdict.message,
            "hits": 1, "max_levels_seen": fields["max_levels"], **fields}


def _summarize_absolute(ctx: GateContext, stage: Stage, report: Any, judged: list, tolerated: int,
                        accepted_invalid: list[str]) -> None:
    """The stage's details, summary and the golden files' problems as reasons."""
    files = []
    for f in report.files:
        d = f.to_dict()
        d["changes"] = d["changes"][:50]  # the .md and the reasons name them; keep the JSON small
        files.append(d)
    levels = [_max_level(v) for _, _, v, _ in judged if v is not None]  # (not re-judged: counted apart)
    stage.details = {**stage.details, "files": files, "warnings": report.warnings,
                     "tolerance": ctx.options.tolerance,
                     "differing_within_tolerance": tolerated, "failing_cases": len(judged),
                     "failing_below_one_level": sum(1 for x in levels if is_sub_level(x)),
                     "max_level_diff": max(levels, default=0.0)}
    if judged:
        below = stage.details["failing_below_one_level"]
        stage.summary = (f"{len(judged)} pixel golden cases differ ({below} by less than one level, "
                         f"worst {max(levels, default=0.0):.3g} levels)")
    else:
        stage.summary = "all pixel goldens match"
    if tolerated:
        stage.summary += f"; {tolerated} more differ within {ctx.options.tolerance}"
    if accepted_invalid:
        stage.details["accepts_invalid"] = accepted_invalid
        stage.summary += (f"; {len(accepted_invalid)} cases the checkpoint rejects return a result "
                          "(accepts_invalid: fails only with --strict)")
    stage.summary += f" (profiles {', '.join(f.profile for f in report.files)})"
    for f in report.files:
        stage.reasons += [f"golden {f.profile}: {problem}" for problem in f.problems]
    skipped = getattr(ctx, "golden_not_rejudged", 0)
    if skipped:  # (they differ from their goldens: failures, with or without --known)
        stage.details["not_rejudged_within_budget"] = skipped
        stage.summary += f"; {skipped} not re-judged within the stage's {GOLDENS_SHARE:.0%} of the budget"
        stage.reasons.append(f"goldens: {skipped} golden cases differ from their digests and were not re-judged "
                             f"within the stage's {GOLDENS_SHARE:.0%} of --budget: they fail as they are")


def _record_judged(ctx: GateContext, judged: list) -> list[dict[str, Any]]:
    """The failing cases as findings and observations of NEW; returns the pixel cases' levels and
    root causes."""
    cases = []
    for file_report, change, verdict, config in judged:
        input_id = f"golden:{file_report.profile}/{change.key}"
        if verdict is not None and verdict.check in (CRASH, TIMEOUT):
            ctx.findings.append({"stage": NAME, "check": verdict.check, "profile": file_report.profile,
                                 "case": change.key, "message": verdict.message})
            ctx.observations["new"].append(_golden_observation(file_report.profile, change, verdict))
        elif verdict is not None and verdict.check == PIXEL_MISMATCH and config is not None:
            # Every differing golden case is in the root-cause table (a sample per mode class
            # attributed, the rest with their levels: `_diagnose_now`).
            entry = verdict.stats.pop("_diagnosis", None) or _golden_diagnosis(file_report.profile, change, verdict,
                                                                              config)
            attribution = entry.pop("attribution", None)
            ctx.findings.append(entry)
            ctx.observations["new"].append({**entry, "input": input_id, "attribution": attribution,
                                            "share": verdict.stats.get("share_differing")})
            cases.append({k: entry[k] for k in ("profile", "case", "key", "root_causes", "max_levels",
                                                "mean_levels", "residual_max_levels")})
        elif verdict is not None:
            ctx.observations["new"].append(_golden_observation(file_report.profile, change, verdict))
    return cases


# -- NEW against OLD -------------------------------------------------------------------------

def _vs_baseline(ctx: GateContext) -> Stage:
    """The pixel goldens of every profile run with NEW and with OLD; the cases where they give
    different results are judged against the reference on both sides (and diagnosed)."""
    stage = Stage(NAME)
    gdir = ctx.options.golden_dir
    new_report = golden.check_pixels(ctx.new, gdir, profiles=PROFILES, diagnose=False,
                                     select=ctx.options.golden_select)
    ctx.hung.update(new_report.timed_out)
    old_report = golden.check_pixels(ctx.old, gdir, profiles=PROFILES, diagnose=False,
                                     select=ctx.options.golden_select)
    stage.details["timed_out_on"] = dict(new_report.timed_out)
    stage.details["baseline_timed_out_on"] = dict(old_report.timed_out)
    new_changes, old_changes = _changed(new_report), _changed(old_report)
    old_problems = {p for f in old_report.files for p in f.problems}
    for f in new_report.files:
        # a golden file NEW could not be compared with (and OLD could)
        stage.reasons += [f"golden {f.profile}: {p}" for p in f.problems if p not in old_problems]
    cases = sorted(set(new_changes) | set(old_changes))
    disagree = [k for k in cases if not _same_entry(_entry(new_changes, k), _entry(old_changes, k))]
    judged, not_rerun = _judge_disagreeing(ctx, disagree, new_changes, old_changes)
    fixed, rerun_counts = _observe_both(ctx, judged)
    n_cases = sum(len(f.changes) for f in new_report.files)
    stage.details.update({
        "files": [{k: v for k, v in f.to_dict().items() if k != "changes"} for f in new_report.files],
        "warnings": new_report.warnings, "tolerance": ctx.options.tolerance,
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


def _changed(report: Any) -> dict[tuple[str, str], Any]:
    """A golden report's changes by (profile, case key)."""
    return {(f.profile, c.key): c for f in report.files for c in f.changes}


def _entry(changes: dict[tuple[str, str], Any], key: tuple[str, str]) -> dict[str, Any] | None:
    """A side's record of a case (None: the same as the golden's)."""
    return (changes.get(key) or _NO_CHANGE).new


def _judge_disagreeing(ctx: GateContext, disagree: list[tuple[str, str]], new_changes: dict,
                       old_changes: dict) -> tuple[list[tuple], dict[str, int]]:
    """The cases NEW and OLD disagree on, judged on both sides: (profile, key, images, config, new
    verdict, old verdict, re-run) each, and how many per mode class were not re-run."""
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
        en, eo = _entry(new_changes, (profile, key)), _entry(old_changes, (profile, key))
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
    not_rerun = _rerun_sample(ctx, per_class, new_changes, old_changes, judged)
    return judged, not_rerun


def _rerun_sample(ctx: GateContext, per_class: dict[str, list], new_changes: dict, old_changes: dict,
                  judged: list[tuple]) -> dict[str, int]:
    """At most GOLDEN_RERUN_PER_CLASS cases of each mode class re-run against the reference on both
    sides (added to `judged`); returns how many of each class were not."""
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
            nv = _case_verdict(ctx, ctx.new, _entry(new_changes, (profile, key)), img, config, expected)
            ov = _case_verdict(ctx, ctx.old, _entry(old_changes, (profile, key)), img, config, expected)
            judged.append((profile, key, [img], config, nv, ov, True))
    return not_rerun


def _observe_both(ctx: GateContext, judged: list[tuple]) -> tuple[int, dict[str, int]]:
    """Each side's failures on the judged cases as observations (pixel differences diagnosed, OLD's
    not where NEW is right), NEW's worst as diff images; returns (cases NEW fixed, re-run counts)."""
    fixed = 0
    diffs = []
    rerun_counts = {"rerun": 0, "judged_from_records": 0}
    for profile, key, images, config, nv, ov, rerun in judged:
        input_id = f"golden:{profile}/{key}"
        rerun_counts["rerun" if rerun else "judged_from_records"] += 1
        if nv is not None and nv.ok and ov is not None and not ov.ok:
            fixed += 1
        observed: dict[str, Any] = {"new": None, "old": None}
        for side, v in (("new", nv), ("old", ov)):
            if v is None or v.ok:
                continue
            if v.check != PIXEL_MISMATCH:
                ctx.observations[side].append(observation(input_id, NAME, v, images))
            elif side == "old" and nv is not None and nv.ok:
                continue  # fixed by NEW: OLD's causes are not diagnosed here
            else:
                observed[side] = _diagnosed(input_id, NAME, v, images, config)
                ctx.observations[side].append(observed[side])
                if side == "new":
                    diffs.append((profile, key, v, config))
        if observed["new"] is not None and ov is not None:  # what turns OLD's output into NEW's
            observe_change(ctx, observed["new"], images, config, nv.actual, ov.actual,
                           image_at_fault(nv.stats), observed["old"], old_is_reference=ov.ok)
    _golden_diff_images(ctx, diffs)
    return fixed, rerun_counts


# -- one case --------------------------------------------------------------------------------

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


def _rejudge(ctx: GateContext, profile: str, change: Any) -> tuple[Verdict | None, PreprocessConfig | None]:
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
        actual = ctx.new([img], config)
    except CandidateCrash as exc:
        return Verdict(CRASH, str(exc)), None
    except (KimiOracleError, ValueError, KeyError, TypeError):
        return None, None
    return compare(expected, actual, config, ctx.options.tolerance, sizes=[img.size]), config


def _golden_diagnosis(profile: str, change: Any, verdict: Verdict, config: PreprocessConfig) -> dict:
    """A golden pixel difference as a finding entry with its root causes (oracle.diagnosis)."""
    img = golden.PixelCase.from_entry(profile, change.new or change.old).make_image()
    fields = finding_diagnosis(str(verdict.check), verdict.stats, [img], config,
                               expected=verdict.expected, actual=verdict.actual)
    return _golden_entry(profile, change, verdict, img, fields)


def _golden_observation(profile: str, change: Any, verdict: Verdict) -> dict[str, Any]:
    """A non-pixel golden failure (crash, timeout, grid, ...) as an observation of NEW."""
    try:
        images = [golden.PixelCase.from_entry(profile, change.new or change.old).make_image()]
    except (KimiOracleError, ValueError, KeyError, TypeError):
        images = []
    stats = dict(verdict.stats)
    stats.setdefault("exception", verdict.message)
    return observation(f"golden:{profile}/{change.key}", NAME, Verdict(verdict.check, verdict.message, stats),
                       images)


def _case_verdict(ctx: GateContext, candidate: IsolatedCandidate, entry: dict[str, Any] | None, img: Any,
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
        return Verdict(crash_check(exc), str(exc), crash_stats(exc))
    return compare(expected, actual, config, ctx.options.tolerance, sizes=[img.size])


def _diagnosed(input_id: str, stage: str, verdict: Verdict, images: Sequence[Any],
               config: PreprocessConfig) -> dict[str, Any]:
    """An observation with its root causes (pixel differences are attributed)."""
    fields = finding_diagnosis(str(verdict.check), verdict.stats, list(images), config,
                               expected=verdict.expected, actual=verdict.actual)
    return observation(input_id, stage, verdict, images, fields)


def _golden_diff_images(ctx: GateContext, judged: list[tuple[str, str, Verdict | None, Any]]) -> None:
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
        target = ctx.out_dir / "golden-diffs" / f"{profile}-{case_key}.png".replace("/", "_")
        target.parent.mkdir(parents=True, exist_ok=True)
        picture.save(target)
        made += 1
