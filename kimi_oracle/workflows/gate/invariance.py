"""The gate's invariance stage: fixed batches, batched = one by one, subsets, permutations, reruns."""

from __future__ import annotations

from typing import Any

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import INVARIANCE, TIMEOUT, Verdict, check_invariance
from kimi_oracle.oracle.grouping import mode_class
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.observations import crash_check, crash_stats, observation
from kimi_oracle.workflows.gate.options import Stage

# The stage's place in the gate (workflows.gate.run finds it): its name in the report, its
# order among the stages, and whether its rows take part in the relative verdict.
NAME = "invariance"
ORDER = 50
COMPARED = True


def run(ctx: GateContext) -> Stage:
    """The invariance stage: fixed batches on NEW (and OLD): batched = one by one, subsets,
    permutations, reruns."""
    stage = Stage(NAME)
    checked = 0
    for profile in (ctx.options.profile, "k3-small"):
        config = PreprocessConfig.profile(profile)
        for index, batch in enumerate(_invariance_batches(ctx.seed)):
            images = [make_image(p) for p in batch]
            input_id = f"invariance:{profile}/{index}"
            classes = sorted({mode_class(img) for img in images} & set(ctx.hung))
            if classes:
                # NEW hangs on these inputs (the goldens showed it): another whole timeout
                # would show nothing new. Not checked, and so not a pass.
                stage.reasons.append(f"invariance ({profile}, {len(images)} images): not run: the candidate "
                                     f"timed out on {', '.join(classes)} images in the goldens")
                continue
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
                                     "message": verdict.message, "images": [p.to_dict() for p in batch]})
                ctx.observations["new"].append(observation(input_id, NAME, verdict, images))
                continue
            checked += 1
            if not verdict.ok:
                if not ctx.relative:
                    stage.reasons.append(f"invariance ({profile}, {len(images)} images): {verdict.message}")
                ctx.findings.append({"stage": NAME, "check": INVARIANCE, "profile": profile,
                                     "message": verdict.message,
                                     "images": [p.to_dict() for p in batch]})
                ctx.observations["new"].append(observation(input_id, NAME, verdict, images))
    stage.status = "fail" if stage.reasons else "pass"
    stage.summary = (f"{checked} batches checked" + (f", {len(stage.reasons)} failed" if stage.reasons else
                                                        ": batched = one by one, subsets, permutations, reruns"))
    return stage


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
