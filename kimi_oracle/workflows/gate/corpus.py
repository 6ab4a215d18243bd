"""The gate's corpus stage: real image files (`--corpus DIR`) judged on NEW and, with a baseline, OLD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimi_oracle.core import interrupts
from kimi_oracle.core.errors import InputError
from kimi_oracle.fuzzers.fuzzing import finding_from
from kimi_oracle.oracle.checks import Verdict, same_output
from kimi_oracle.oracle.judge import evaluate
from kimi_oracle.pipelines import reference
from kimi_oracle.results.report import finding_summary, write_finding
from kimi_oracle.workflows.gate.changes import observe_change
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.observations import finding_observation, outputs_note, outputs_npz, outputs_window
from kimi_oracle.workflows.gate.options import Stage

# The stage's place in the gate (workflows.gate.run finds it): its name in the report, its
# order among the stages, and whether its rows take part in the relative verdict.
NAME = "corpus"
ORDER = 40
COMPARED = True


def run(ctx: GateContext) -> Stage:
    """Real image files (--corpus DIR, searched recursively) judged on NEW and, with a
    baseline, on OLD; with a baseline only the files where they give different results count."""
    stage = Stage(NAME)
    root = ctx.options.corpus_dir
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
            expected = reference.preprocess([img.copy()], ctx.config)
        except InputError:  # undecodable files, and files the checkpoint rejects
            counts["unreadable"] += 1
            continue
        _judge_file(ctx, stage, counts, rel, raw, img, expected)
    stage.details = {"dir": str(root), **counts}
    stage.summary = (f"{counts['files']} files ({counts['unreadable']} unreadable or rejected): NEW fails on "
                     f"{counts['failing_new']}" + (f", OLD on {counts['failing_old']}, they differ on "
                                                   f"{counts['new_and_old_disagree']}" if ctx.old else ""))
    stage.status = "fail" if stage.reasons else "pass"
    return stage


def _judge_file(ctx: GateContext, stage: Stage, counts: dict[str, int], rel: str, raw: bytes, img: Any,
                expected: Any) -> None:
    """One decoded file judged on NEW (and OLD): counted, and each side's failure (where the two
    differ) recorded as a finding and an observation."""
    verdicts = {"new": evaluate(ctx.new, [img], ctx.config, ctx.options.tolerance, invariance=False,
                                expected=expected)}
    if ctx.old is not None:
        verdicts["old"] = evaluate(ctx.old, [img], ctx.config, ctx.options.tolerance, invariance=False,
                                   expected=expected)
        nv, ov = verdicts["new"], verdicts["old"]
        same_failure = nv.check == ov.check and (
            same_output(nv.actual, ov.actual)
            or (nv.actual is None and ov.actual is None
                and nv.stats.get("exception") == ov.stats.get("exception")))
        if nv.ok == ov.ok and (nv.ok or same_failure):
            counts["failing_new"] += int(not nv.ok)
            counts["failing_old"] += int(not ov.ok)
            return  # the same result on both sides: no difference between them to judge
        counts["new_and_old_disagree"] += 1
    for side, verdict in sorted(verdicts.items(), key=lambda kv: kv[0] != "old"):  # (OLD's observation first)
        if verdict.ok:
            continue
        counts[f"failing_{side}"] += 1
        _record(ctx, stage, side, verdict, verdicts, rel, raw, img, expected)


def _record(ctx: GateContext, stage: Stage, side: str, verdict: Verdict, verdicts: dict[str, Verdict], rel: str,
            raw: bytes, img: Any, expected: Any) -> None:
    """A side's failure on a file: its finding folder (with both sides' outputs), entry and observation."""
    spec = ctx.candidate(side).spec
    f = finding_from(verdict, spec, ctx.config, [img], tolerance=ctx.options.tolerance,
                     engine="check", sources=[rel], raw_inputs=[raw])
    obs = finding_observation(f"corpus:{rel}", NAME, f)
    if obs is not None:
        ctx.observations[side].append(obs)
    other = verdicts.get("old" if side == "new" else "new")
    if side == "new" and other is not None:  # what turns OLD's output into NEW's on this file
        prior = next((o for o in reversed(ctx.observations["old"]) if o.get("input") == f"corpus:{rel}"), None)
        change = observe_change(ctx, obs, [img], ctx.config, verdict.actual, other.actual, 0, prior,
                                old_is_reference=other.ok)
        if change is not None:
            f.extra["change_from_baseline"] = change
    sides = {"expected": expected, "new": verdicts["new"].actual,
             "old": other.actual if side == "new" and other is not None else verdict.actual if side == "old" else None}
    window = outputs_window(f.stats, *sides.values())
    if window is not None:
        f.extra["outputs"] = outputs_note(window)
    write_finding(ctx.out_dir if side == "new" else ctx.out_dir / "baseline", f,
                  extra_files={"outputs.npz": outputs_npz(window, **sides)})
    ctx.findings_of(side).append({"stage": NAME, **finding_summary(f)})
    if not ctx.relative:
        stage.reasons.append(f"corpus {rel}: {verdict.check}: {verdict.message}")
