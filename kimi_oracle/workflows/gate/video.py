"""The gate's video stage (`--media video|both`, issue 42): NEW (and OLD, with a baseline) fuzzed
on the same drawn batches of K2.5 chunks (and images, with `both`) by `fuzzers.video_fuzz`, each
in its own forked run, within `Budget.video_s` (VIDEO_SHARE of `--budget`, kept back from the fuzz,
invariance and engine stages; at least 30 s). A run stopped by its budget judged fewer batches:
said in the summary, not a failure.

Verdict: without a baseline, any video finding fails (absolute, as the planner stage); with one, a
group of NEW's whose key (check and named steps, or a crash's error) OLD does not have fails, and
NEW without a group OLD has is an improvement, reported. A candidate that does not take video
(`kimi_oracle_media`), a profile without the video rules, or a run that dies is the stage's error.
"""

from __future__ import annotations

from kimi_oracle.core.errors import ConfigError, KimiOracleError
from kimi_oracle.core.video import require_video
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.options import Stage

NAME = "video"
ORDER = 57
COMPARED = False


def run(ctx: GateContext) -> Stage:
    """Fuzz NEW (and OLD) on `video_examples` drawn batches of chunks; see the module's verdict."""
    from kimi_oracle.fuzzers.video_fuzz import run_media_isolated

    stage = Stage(NAME)
    media = ctx.options.media
    if media == "image":
        stage.summary = "--media image: no video judged"
        return stage
    try:
        require_video(ctx.config)
    except ConfigError as exc:
        stage.status, stage.reasons = "error", [f"video: {exc}"]
        return stage
    budget = max(ctx.budget.video_s(), 30.0)  # (VIDEO_SHARE of --budget, kept from the stages before)
    sides = {"new": ctx.new.spec, **({"old": ctx.old.spec} if ctx.old is not None else {})}
    reports = {}
    for side, spec in sides.items():
        ctx.progress(f"video: {side} {spec} on {ctx.options.video_examples} batches (--media {media})")
        try:
            reports[side] = run_media_isolated(spec, ctx.config, media, ctx.options.video_examples, ctx.seed,
                                               tolerance=ctx.options.tolerance, budget_s=budget / len(sides))
        except KimiOracleError as exc:
            stage.status, stage.reasons = "error", [f"video: {side} {spec}: {exc}"]
            return stage
    stage.details = {side: r.to_dict() for side, r in reports.items()}
    for side, r in reports.items():
        if r.error:
            stage.reasons.append(f"video: {side} {sides[side]}: {r.error}")
    new_keys = {g.key: g for g in reports["new"].groups}
    old_keys = {g.key for g in reports["old"].groups} if "old" in reports else set()
    for key, g in new_keys.items():
        if key in old_keys:
            continue
        stage.reasons.append(f"video: {key}: {g.count} batches ({g.explanation}); smallest: "
                             f"{g.findings[0].case.describe()}")
        ctx.findings.append({"stage": NAME, "check": g.check, "key": key, "message": g.findings[0].verdict.message,
                             "explained_by": g.explained_by})
    fixed = sorted(old_keys - set(new_keys))
    stage.details["fixed"] = fixed
    stage.summary = (f"{reports['new'].examples} batches: NEW {len(new_keys)} groups"
                     + (f", OLD {len(old_keys)}; new in NEW: {len(set(new_keys) - old_keys)}, fixed: {len(fixed)}"
                        if "old" in reports else ""))
    stage.status = "fail" if stage.reasons else "pass"
    return stage


__all__ = ["COMPARED", "NAME", "ORDER", "run"]
