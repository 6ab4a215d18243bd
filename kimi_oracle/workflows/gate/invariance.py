"""The gate's invariance stage: fixed batches, batched = one by one, subsets, permutations, reruns."""

from __future__ import annotations

import time
from typing import Any

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import INVARIANCE, TIMEOUT, Verdict, check_invariance
from kimi_oracle.oracle.grouping import mode_class
from kimi_oracle.pipelines import reference
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.observations import crash_check, crash_stats, observation
from kimi_oracle.workflows.gate.options import Stage

# The stage's place in the gate (workflows.gate.run finds it): its name in the report, its
# order among the stages, and whether its rows take part in the relative verdict.
NAME = "invariance"
ORDER = 50
COMPARED = True

# Drawn batches: at most this many a run; their seed is the gate's plus this offset (other cases
# than the fuzz stage's).
DRAWN_MAX = 5000
DRAWN_SEED_OFFSET = 7919
# Their longest side (the fuzzers' ratio sizes reach about four times it): images large enough
# that a batch costs the candidates more than the harness (eager against eager, 200 batches here:
# this process 4.4 s of CPU to the executors' 5.9 s at 256, 7.7 s to 14.3 s at 512); they stop at
# the harness time the gate allows them (`Budget.invariance_overhead_s`).
DRAWN_MAX_SIDE = 512


def run(ctx: GateContext) -> Stage:
    """The invariance stage: fixed batches on NEW (and OLD): batched = one by one, subsets,
    permutations, reruns; then drawn batches for the rest of the stage's share of the budget."""
    stage = Stage(NAME)
    checked = 0
    deadline = time.monotonic() + ctx.budget.invariance_s()
    for profile in (ctx.options.profile, "k3-small"):
        config = PreprocessConfig.profile(profile)
        for index, batch in enumerate(_invariance_batches(ctx.seed)):
            checked += _check_batch(ctx, stage, config, [make_image(p) for p in batch], f"invariance:{profile}/{index}",
                                    [p.to_dict() for p in batch], profile)
    drawn = _drawn_batches(ctx, stage, deadline)
    stage.status = "fail" if stage.reasons else "pass"
    stage.details["drawn_batches"] = drawn
    stage.summary = (f"{checked + drawn} batches checked ({drawn} drawn)"
                     + (f", {len(stage.reasons)} failed" if stage.reasons else
                        ": batched = one by one, subsets, permutations, reruns"))
    return stage


def _drawn_batches(ctx: GateContext, stage: Stage, deadline: float) -> int:
    """Generated fuzz cases of two or more images (the gate's seed, configurations varied) checked
    like the fixed batches: as many as fit before `deadline` (the correctness share the fuzz
    stage's overhead allowance left unspent: their cost is mostly the candidates'), or with
    --fuzz-examples N exactly N / INVARIANCE_EVERY of them, so the verdict does not depend on the
    machine's speed. Returns how many were checked."""
    from kimi_oracle.fuzzers.cases import generated_case
    from kimi_oracle.fuzzers.fuzzing import INVARIANCE_EVERY, FuzzOptions

    count = None if ctx.options.fuzz_examples is None else ctx.options.fuzz_examples // INVARIANCE_EVERY
    options = FuzzOptions(seed=ctx.seed, vary_config=True, max_side=DRAWN_MAX_SIDE)
    allowance = ctx.budget.invariance_overhead_s()
    t0 = time.monotonic()
    checked, longest, index = 0, 0.0, 0
    while checked < (count if count is not None else DRAWN_MAX) and index < 20 * DRAWN_MAX:
        began = time.monotonic()
        if count is None and (began + longest > deadline
                              or (checked % 8 == 0 and ctx.overhead(t0, began) >= allowance)):
            break
        interrupts.raise_if_requested()
        case = generated_case(ctx.config, options, ctx.seed + DRAWN_SEED_OFFSET, index)
        index += 1
        if len(case.images) < 2:
            continue
        images = case.make_images()
        try:
            reference.preprocess([im.copy() for im in images], case.config)
        except InputError:
            continue  # the checkpoint rejects it: no invariance to hold
        if set(mode_class(img) for img in images) & set(ctx.hung):
            continue  # (a mode class NEW hung on: the goldens' finding; no second timeout)
        checked += _check_batch(ctx, stage, case.config, images, f"invariance:drawn/{index - 1}",
                                [p.to_dict() for p in case.images], ctx.options.profile)
        longest = max(longest, time.monotonic() - began)
    return checked


def _check_batch(ctx: GateContext, stage: Stage, config: PreprocessConfig, images: list[Any], input_id: str,
                 params: list[dict[str, Any]], profile: str) -> int:
    """One batch on OLD (observed) and NEW (a finding when it fails): 1 when NEW was checked."""
    classes = sorted({mode_class(img) for img in images} & set(ctx.hung))
    if classes:
        # NEW hangs on these inputs (the goldens showed it): another whole timeout would show
        # nothing new. Not checked, and so not a pass.
        stage.reasons.append(f"invariance ({profile}, {len(images)} images): not run: the candidate "
                             f"timed out on {', '.join(classes)} images in the goldens")
        return 0
    if ctx.old is not None:
        old_verdict = _invariance_verdict(ctx.old, config, images)
        if not old_verdict.ok:
            ctx.observations["old"].append(observation(input_id, NAME, old_verdict, images))
    verdict = _invariance_verdict(ctx.new, config, images)
    if verdict.check not in (None, INVARIANCE):
        how = "timed out" if verdict.check == TIMEOUT else "crashed"
        if not ctx.relative:
            stage.reasons.append(f"invariance ({profile}): the candidate {how}: {verdict.message}")
        ctx.findings.append({"stage": NAME, "check": verdict.check, "profile": profile,
                             "message": verdict.message, "images": params,
                             "config": config.to_hf_json()})
        ctx.observations["new"].append(observation(input_id, NAME, verdict, images))
        return 0
    if not verdict.ok:
        if not ctx.relative:
            stage.reasons.append(f"invariance ({profile}, {len(images)} images): {verdict.message}")
        ctx.findings.append({"stage": NAME, "check": INVARIANCE, "profile": profile,
                             "message": verdict.message, "images": params,
                             "config": config.to_hf_json()})
        ctx.observations["new"].append(observation(input_id, NAME, verdict, images))
    return 1


def _invariance_verdict(candidate: IsolatedCandidate, config: PreprocessConfig, images: list[Any]) -> Verdict:
    """A candidate's invariance verdict on a batch (a crash or hang as its finding's verdict)."""
    try:
        return check_invariance(lambda imgs: candidate(imgs, config), images)
    except CandidateCrash as exc:
        return Verdict(crash_check(exc), str(exc), crash_stats(exc))


def _invariance_batches(seed: int) -> list[list[CaseParams]]:
    """The stage's batches (their seeds from the gate's)."""
    base = seed % 1000
    return [
        [CaseParams(61, 45, "RGB", seed=base), CaseParams(30, 90, "RGBA", "checker", seed=base + 1),
         CaseParams(97, 13, "L", seed=base + 2), CaseParams(61, 45, "RGB", content="gradient", seed=base + 3)],
        [CaseParams(150, 61, "P", seed=base + 4), CaseParams(7, 7, "LA", "random", seed=base + 5),
         CaseParams(84, 56, "RGBA", "transparent", seed=base + 6)],
    ]
