"""The gate's fuzz stage: NEW fuzzed against the reference, or NEW and OLD in lockstep, judged on both."""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable

from kimi_oracle.core import interrupts
from kimi_oracle.core.errors import InputError
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, FuzzRun, finding_from, fuzz, fuzz_pair, generated_case
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
from kimi_oracle.oracle.checks import ACCEPTS_INVALID, INVARIANCE, TIMEOUT, Verdict, same_output
from kimi_oracle.oracle.grouping import finding_key, image_at_fault
from kimi_oracle.oracle.judge import Rejected, evaluate
from kimi_oracle.pipelines import reference
from kimi_oracle.results.report import Finding, write_finding
from kimi_oracle.workflows.gate.budget import OVERHEAD_MIN_EXAMPLES, Budget
from kimi_oracle.workflows.gate.changes import observe_change
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.observations import (finding_observation, make_input_id, outputs_npz,
                                                      outputs_note, outputs_window)
from kimi_oracle.workflows.gate.options import Stage

# The stage's place in the gate (workflows.gate.run finds it): its name in the report, its
# order among the stages, and whether its rows take part in the relative verdict.
NAME = "fuzz"
ORDER = 30
COMPARED = True

# Generated examples where NEW's and OLD's outputs differ, judged on both sides beyond the
# findings' own inputs: per group (NEW's failure key, OLD's), and in all.
DIFFERING_PER_GROUP = 2
MAX_DIFFERING = 30


def _fuzz_options(ctx: GateContext, examples: int | None, budget_s: float | None) -> FuzzOptions:
    """The fuzzing options of the stage (and of re-drawing its examples)."""
    return FuzzOptions(examples=examples, budget_s=budget_s,
                       seed=ctx.seed, tolerance=ctx.options.tolerance, vary_config=True,
                       # With a baseline no example database: NEW and OLD draw the same cases.
                       db_dir=None if ctx.old is not None else ctx.out_dir / "hypothesis-db",
                       max_side=ctx.options.fuzz_max_side, shrink=ctx.options.fuzz_shrink,
                       tile_share=ctx.options.tile_share, photo_examples=ctx.options.photo_examples,
                       record_outcomes=ctx.old is not None, oracle=ctx.options.oracle,
                       diagnosis_share=None)  # (the verdict reads every finding's root causes)


def run(ctx: GateContext) -> Stage:
    """The fuzz stage within its share of the budget and, with a baseline, the harness time left
    of the gate's overhead allowance."""
    budget_s = ctx.budget.fuzz_s()
    allowance = ctx.budget.fuzz_overhead_s(ctx.overhead(ctx.budget.t0, time.monotonic()))
    return fuzzed(ctx, budget_s, allowance)


def fuzzed(ctx: GateContext, budget_s: float, overhead_s: float | None = None) -> Stage:
    """NEW fuzzed against the reference for `budget_s` (or --fuzz-examples); with a baseline NEW
    and OLD in lockstep, held to `overhead_s` of harness time."""
    stage = Stage(NAME)
    examples = ctx.options.fuzz_examples
    if examples is None and budget_s < 1.0:
        stage.summary = "no budget left for fuzzing"
        stage.status = "skipped"
        stage.reasons.append("fuzzing skipped: the goldens used the whole budget")
        return stage
    if ctx.old is not None:
        return _vs_baseline(ctx, stage, examples, budget_s, overhead_s)
    run = fuzz(ctx.new, ctx.config, _fuzz_options(ctx, examples, None if examples is not None else budget_s),
               out_dir=ctx.out_dir)
    disagreed = _project_findings(run)
    summary = run.summary()
    stage.details = {k: summary[k] for k in ("examples", "calls", "rejected", "seed", "stopped", "counts")}
    stage.details["skipped_hanging"] = summary.get("skipped_hanging", 0)
    stage.summary = f"{run.examples} examples in {run.elapsed_s:.1f}s, {len(run.findings)} findings"
    for f, entry in zip(run.findings, summary["findings"]):
        ctx.findings.append({"stage": NAME, **entry})
        obs = finding_observation(make_input_id("fuzz", f.config, f.params, f.images), NAME, f)
        if obs is not None:
            ctx.observations["new"].append(obs)
        if not ctx.relative and (f.check != ACCEPTS_INVALID or ctx.options.strict):
            stage.reasons.append(f"fuzz finding {entry['id']} ({entry['check']}): {entry['message']}")
    stage.status = "fail" if stage.reasons else "pass"
    _oracle_error(stage, disagreed)
    _fuzz_interrupted(ctx, stage, run)
    return stage


def _fuzz_interrupted(ctx: GateContext, stage: Stage, run: FuzzRun) -> None:
    """An interrupted run makes the stage an error (and the gate interrupted)."""
    if run.stopped == "interrupted":
        # fuzz() ends early on an interrupt and returns what it found: never a pass.
        ctx.interrupted = True
        stage.status = "error"
        stage.summary = f"interrupted after {run.examples} examples; " + stage.summary
        stage.reasons.insert(0, f"fuzz: interrupted after {run.examples} examples")


def _vs_baseline(ctx: GateContext, stage: Stage, examples: int | None, budget_s: float,
                 overhead_s: float | None = None) -> Stage:
    """NEW and OLD fuzzed in lockstep (`fuzz_pair`: FUZZ_PAIR_SHARE of the budget, or
    --fuzz-examples): the same cases, each made once; both sides' findings shrunk. Every
    input either side failed on is judged on the other too, so each finding compares NEW and
    OLD on the same input. `overhead_s`: the harness time the stage may take (under a
    budget): FUZZ_OVERHEAD_PAIR of it ends the lockstep run's search, the whole of it ends
    the differing examples."""
    t0 = time.monotonic()
    options = _fuzz_options(ctx, examples, None if examples is not None else Budget.pair_s(budget_s))
    if examples is None and overhead_s is not None:
        options = dataclasses.replace(options, overhead_s=Budget.pair_overhead_s(overhead_s),
                                      at_work=lambda a, b: ctx.at_work(window=(a, b)),
                                      overhead_min_examples=OVERHEAD_MIN_EXAMPLES)
    run_new, run_old = fuzz_pair(ctx.new, ctx.old, ctx.config, options, out_dir=None)
    disagreed = _project_findings(run_new)
    inputs: dict[str, dict[str, Finding]] = {}
    for side, run in (("new", run_new), ("old", run_old)):
        for f in run.findings:
            inputs.setdefault(make_input_id("fuzz", f.config, f.params, f.images), {}).setdefault(side, f)

    def allowance_spent() -> bool:  # what writing the differing examples' findings will take kept back
        if examples is not None or overhead_s is None:
            return False
        return ctx.overhead(t0, time.monotonic()) + Budget.writes_s(len(extra)) >= overhead_s

    # Every finding's input judged on both sides first (each finding needs it); then the
    # differing examples, in what is left of the allowance, and their writing.
    t_both = time.monotonic()
    disagree = _judge_on_both(ctx, inputs)
    t_differing = time.monotonic()
    extra: dict[str, dict[str, Finding]] = {}
    differing = _differing_examples(ctx, run_new, run_old, extra, allowance_spent, known=set(inputs))
    disagree += _judge_on_both(ctx, extra)
    t_end = time.monotonic()
    inputs.update(extra)
    stage.details = {"examples": run_new.examples, "calls": run_new.calls, "rejected": run_new.rejected,
                     "seed": ctx.seed, "stopped": run_new.stopped, "counts": run_new.counts(),
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
                                 "judged_on_both": round(t_differing - t_both, 3),
                                 "differing_examples": round(t_end - t_differing, 3)}}
    stage.summary = (f"{run_new.examples} examples for NEW, {run_old.examples} for OLD (seed {ctx.seed}: "
                     f"the same cases{'; the search ended at its overhead allowance' if run_new.stopped == 'overhead' else ''}"
                     f"); {len(inputs)} failing inputs judged on both, {disagree} where they "
                     f"differ; NEW {len(run_new.findings)} findings, OLD {len(run_old.findings)}")
    _oracle_error(stage, disagreed, otherwise="pass")
    _fuzz_interrupted(ctx, stage, run_new)
    _fuzz_interrupted(ctx, stage, run_old)
    return stage


def _project_findings(run: Any) -> list[dict[str, Any]]:
    """`--oracle gpu`: the findings against kimi-oracle itself (the GPU oracle disagreed with the
    reference), taken out of the run: they are neither NEW's nor OLD's."""
    from kimi_oracle.oracle.kinds import PROJECT_KINDS

    mine = [f for f in run.findings if f.check in PROJECT_KINDS]
    run.findings = [f for f in run.findings if f.check not in PROJECT_KINDS]
    return [{"check": f.check, "message": f.message, "path": str(f.path) if f.path else None} for f in mine]


def _oracle_error(stage: Stage, disagreed: list[dict[str, Any]], otherwise: str | None = None) -> None:
    """A stage whose GPU oracle was caught wrong is an error (examples judged before the fallback
    may have passed against a wrong expected result), whatever NEW did; else its status is
    `otherwise` (when given)."""
    if not disagreed:
        if otherwise is not None:
            stage.status = otherwise
        return
    stage.details["oracle_disagreements"] = disagreed
    stage.status = "error"
    stage.reasons.insert(0, f"the GPU oracle disagreed with the reference ({disagreed[0]['message']}): a defect of "
                            "kimi-oracle, not NEW's; rerun with --oracle reference")


def _judge_on_both(ctx: GateContext, inputs: dict[str, dict[str, Finding]]) -> int:
    """Every failing input judged on the side that did not report it; observations for both
    sides; each side's finding written by the gate's writer thread (`GateContext.write_later`:
    zlib, PNG encoding and fsync release the GIL) while this one judges on and the next stages
    run. Returns how many inputs the sides disagree on."""
    disagree = 0
    for input_id, found in inputs.items():
        interrupts.raise_if_requested()
        base = found.get("new") or found["old"]
        new_f, new_out = (found["new"], found["new"].actual) if "new" in found else _replay(ctx, ctx.new, base)
        old_f, old_out = (found["old"], found["old"].actual) if "old" in found else _replay(ctx, ctx.old, base)
        # the same result: both pass, or both fail the same check with bit-identical outputs
        # (or, without outputs, the same way: crash and timeout keys name the failure type)
        same = (new_f is None) == (old_f is None) and (
            new_f is None or (new_f.check == old_f.check and (  # type: ignore[union-attr]
                same_output(new_out, old_out)
                or (new_out is None and old_out is None and new_f.key.split("{")[0] == old_f.key.split("{")[0]))))
        disagree += int(not same)
        index = image_at_fault(base.stats)  # both sides observed on the same image of the batch
        observed: dict[str, dict[str, Any] | None] = {"new": None, "old": None}
        for side, f in (("new", new_f), ("old", old_f)):
            if f is not None:
                observed[side] = finding_observation(input_id, NAME, f, index)
                if observed[side] is not None:
                    ctx.observations[side].append(observed[side])
        if not same and new_f is not None:  # what turns OLD's output into NEW's there
            _changed(ctx, observed, base, new_f, new_out, old_out, index, old_f is None)
        for side, f, other, other_out in (("new", new_f, old_f, old_out), ("old", old_f, new_f, new_out)):
            if f is None:
                continue
            f.extra["other_side"] = {
                "role": "baseline" if side == "new" else "candidate",
                "candidate": (ctx.old if side == "new" else ctx.new).spec,  # type: ignore[union-attr]
                "check": other.check if other is not None else None,
                "key": other.key if other is not None else None,
                "root_causes": list(other.root_causes) if other is not None else [],
                "same_output": same,
                "outputs": ""}
            sides = {"expected": f.expected, "new": f.actual if side == "new" else other_out,
                     "old": other_out if side == "new" else f.actual}
            window = outputs_window(f.stats, *sides.values())
            f.extra["other_side"]["outputs"] = outputs_note(window)
            # (the outputs compressed by the writer too: zlib releases the GIL, this thread judges on)
            ctx.write_later(NAME, side, f, functools.partial(
                _write_with_outputs, ctx.out_dir if side == "new" else ctx.out_dir / "baseline", f, window, sides))
    return disagree


def _changed(ctx: GateContext, observed: dict[str, Any], base: Finding, new_f: Finding, new_out: Any, old_out: Any,
             index: int, old_is_reference: bool) -> None:
    """NEW's observation (and finding) given the change from OLD's output (`gate.changes`)."""
    change = observe_change(ctx, observed["new"], base.images, base.config, new_out, old_out, index,
                            observed["old"], old_is_reference=old_is_reference)
    if change is not None:
        new_f.extra["change_from_baseline"] = change


def _write_with_outputs(out_dir: Any, f: Finding, window: tuple[int, int, int] | None,
                        sides: dict[str, Any]) -> Any:
    """`write_finding` with the input's outputs (`outputs.npz`: expected, new, old)."""
    return write_finding(out_dir, f, extra_files={"outputs.npz": outputs_npz(window, **sides)})


def _differing_examples(ctx: GateContext, run_new: FuzzRun, run_old: FuzzRun,
                        inputs: dict[str, dict[str, Finding]], allowance_spent: Callable[[], bool] = lambda: False,
                        known: set[str] | frozenset[str] = frozenset()) -> int:
    """Every generated example where NEW's and OLD's outcomes differ (their digests, example by
    example: both runs drew the same cases), beyond the findings' own inputs (`known`, and those
    in `inputs`): grouped by how each side fails there, up to DIFFERING_PER_GROUP examples of
    each group (at most MAX_DIFFERING in all, none once `allowance_spent()`) are judged on both
    sides and join `inputs` unshrunk. Returns how many examples differ."""
    indices = sorted(i for i, d in run_new.outcomes.items() if i in run_old.outcomes and run_old.outcomes[i] != d)
    # Not re-run: examples a side did not judge (a mode class it hung on) or timed out on:
    # each would cost a whole case timeout again, and the hang is a finding of its own.
    costly = ("not-judged", f"{TIMEOUT}:")
    rerun = [i for i in indices
             if not any(o[i].startswith(costly) for o in (run_new.outcomes, run_old.outcomes))]
    options = _fuzz_options(ctx, None, None)
    per_group: dict[tuple[str, str], int] = {}
    taken = 0
    for i in rerun:
        if taken >= MAX_DIFFERING or allowance_spent():
            break
        interrupts.raise_if_requested()
        case = generated_case(ctx.config, options, run_new.seed, i)
        images = case.make_images()
        key = make_input_id("fuzz", case.config, [p.to_dict() for p in case.images], images)
        if key in inputs or key in known:
            continue  # a finding's own input: judged on both sides already (a photo's costs seconds)
        try:
            expected = reference.preprocess([im.copy() for im in images], case.config)
        except InputError:
            expected = None  # the checkpoint rejects it: evaluate runs the candidates anyway
        verdicts: dict[str, Verdict] = {}
        keys = []
        for side, candidate in (("new", ctx.new), ("old", ctx.old)):
            try:
                verdict = evaluate(candidate, images, case.config, ctx.options.tolerance, invariance=False,
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
        # (generated example i is the run's example i + 1: no saved failures replay here)
        inputs[key] = {
            side: finding_from(verdict, (ctx.new if side == "new" else ctx.old).spec,  # type: ignore[union-attr]
                               case.config, images, params=[p.to_dict() for p in case.images],
                               tolerance=ctx.options.tolerance, seed=run_new.seed, example=i + 1)
            for side, verdict in verdicts.items()}
        per_group[group] = per_group.get(group, 0) + 1
        taken += 1
    return len(indices)


def _replay(ctx: GateContext, candidate: IsolatedCandidate, base: Finding) -> tuple[Finding | None, Any]:
    """`candidate` on another side's finding input: (its finding or None when it passes, its output)."""
    try:
        verdict = evaluate(candidate, base.images, base.config, ctx.options.tolerance,
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
                         tolerance=ctx.options.tolerance, engine=base.engine, seed=base.seed,
                         example=base.example)
    return f, verdict.actual
