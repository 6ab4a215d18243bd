"""The gate's invariance stage: fixed batches, batched = one by one, subsets, permutations, reruns."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any, Callable, Iterator

from kimi_oracle.core import interrupts
from kimi_oracle.core.activity import HarnessMeter
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import INVARIANCE, TIMEOUT, Verdict
from kimi_oracle.oracle.checks.invariance import check_invariance_lockstep
from kimi_oracle.oracle.diagnosis.change import diagnose_change, rows_of_another_image
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
    machine's speed. Each batch is drawn and made (by a second thread) while the calls of the one
    before are at work. Returns how many were checked."""
    from kimi_oracle.fuzzers.fuzzing import INVARIANCE_EVERY
    from kimi_oracle.fuzzers.options import OVERHEAD_LAG_S

    count = None if ctx.options.fuzz_examples is None else ctx.options.fuzz_examples // INVARIANCE_EVERY
    allowance = ctx.budget.invariance_overhead_s()
    harness = HarnessMeter(lambda a, b: ctx.at_work(window=(a, b)), time.monotonic(), OVERHEAD_LAG_S)
    batches = _drawn(ctx)
    checked, longest = 0, 0.0
    # The next batch is drawn and made by a second thread while this one waits for the calls
    # (the waits release the GIL).
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="invariance-batches",
                                               initializer=interrupts.quiet_thread) as maker:
        ahead = maker.submit(next, batches, None)
        while checked < (count if count is not None else DRAWN_MAX):
            began = time.monotonic()
            if count is None and (began + longest > deadline
                                  or (checked % 8 == 0 and harness.spent(began) >= allowance)):
                break
            batch = ahead.result()
            if batch is None:
                break
            ahead = maker.submit(next, batches, None)
            index, case, images = batch
            checked += _check_batch(ctx, stage, case.config, images, f"invariance:drawn/{index}",
                                    [p.to_dict() for p in case.images], ctx.options.profile)
            longest = max(longest, time.monotonic() - began)
    return checked


def _drawn(ctx: GateContext) -> Iterator[tuple[int, Any, list[Any]]]:
    """The drawn batches to check, in order: (index, case, images), each of two or more images
    the checkpoint accepts and none of a mode class NEW hung on."""
    from kimi_oracle.fuzzers.cases import generated_case
    from kimi_oracle.fuzzers.fuzzing import FuzzOptions

    options = FuzzOptions(seed=ctx.seed, vary_config=True, max_side=DRAWN_MAX_SIDE)
    for index in range(20 * DRAWN_MAX):
        interrupts.raise_if_requested()
        case = generated_case(ctx.config, options, ctx.seed + DRAWN_SEED_OFFSET, index)
        if len(case.images) < 2:
            continue
        images = case.make_images()
        try:
            reference.preprocess([im.copy() for im in images], case.config)
        except InputError:
            continue  # the checkpoint rejects it: no invariance to hold
        if set(mode_class(img) for img in images) & set(ctx.hung):
            continue  # (a mode class NEW hung on: the goldens' finding; no second timeout)
        yield index, case, images


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
    verdict, *old_verdict = _invariance_verdicts([ctx.new] + ([ctx.old] if ctx.old is not None else []),
                                                 config, images)
    if old_verdict and not old_verdict[0].ok:
        ctx.observations["old"].append(observation(input_id, NAME, old_verdict[0], images))
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
        obs = observation(input_id, NAME, verdict, images)
        if ctx.old is not None and verdict.stats.get("kind") == "batch_vs_single":
            _batch_change(ctx, obs, verdict, images, config)
        ctx.observations["new"].append(obs)
    return 1


def _batch_change(ctx: GateContext, obs: dict[str, Any], verdict: Verdict, images: list[Any],
                  config: PreprocessConfig) -> None:
    """What turns an image's output alone into its rows in the batch (`gate.changes`): another
    image's rows (`patch-order/rows-of-image-J`), or a step change read off the two outputs."""
    k = int((verdict.stats.get("indices") or [0])[0])
    try:
        full = ctx.new(images, config)
    except Exception:  # noqa: BLE001 - a crash here is the invariance finding's, already recorded
        return
    j = rows_of_another_image(full, k)
    if j is not None:
        obs["change"] = {"family": "patch-order", "variant": f"rows-of-image-{j}",
                         "name": f"patch-order/rows-of-image-{j}", "families": ["patch-order"], "exact": True,
                         "where": {"image": k, "summary": f"image {k}'s rows in the batch are image {j}'s"},
                         "levels": {"max": verdict.stats.get("max_level_diff"),
                                    "mean": verdict.stats.get("mean_level_diff")}, "tier": "batch"}
        return
    if verdict.expected is not None and verdict.actual is not None:
        change = diagnose_change([images[k]], config, verdict.expected, verdict.actual, old_attribution={})
        if change is not None and change.get("exact"):
            obs["change"] = change


def _invariance_verdicts(candidates: list[Any], config: PreprocessConfig, images: list[Any]) -> list[Verdict]:
    """Each candidate's invariance verdict on a batch (a crash or hang as its finding's verdict),
    NEW and OLD checked in lockstep: both at work on their calls while the answers before are
    compared (`check_invariance_lockstep`)."""
    def starter(candidate: Any) -> Callable[[list[Any]], Any]:
        start_call = getattr(candidate, "start_call", None)
        if start_call is not None:
            return lambda batch: start_call(batch, config)
        return lambda batch: _Answered(lambda: candidate(batch, config))  # (a function: run when asked)

    outcomes = check_invariance_lockstep([starter(c) for c in candidates], images, captured=(CandidateCrash,))
    return [Verdict(crash_check(o), str(o), crash_stats(o)) if isinstance(o, CandidateCrash) else o  # type: ignore[misc]
            for o in outcomes]


class _Answered:
    """A call of a candidate that runs in this process: made when its answer is asked for (its
    raise is then the answer's, as an executor's would be)."""

    def __init__(self, call: Callable[[], Any]):
        self.call = call

    def result(self) -> Any:
        return self.call()


def _invariance_batches(seed: int) -> list[list[CaseParams]]:
    """The stage's batches (their seeds from the gate's)."""
    base = seed % 1000
    return [
        [CaseParams(61, 45, "RGB", seed=base), CaseParams(30, 90, "RGBA", "checker", seed=base + 1),
         CaseParams(97, 13, "L", seed=base + 2), CaseParams(61, 45, "RGB", content="gradient", seed=base + 3)],
        [CaseParams(150, 61, "P", seed=base + 4), CaseParams(7, 7, "LA", "random", seed=base + 5),
         CaseParams(84, 56, "RGBA", "transparent", seed=base + 6)],
    ]
