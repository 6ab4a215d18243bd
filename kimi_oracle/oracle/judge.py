"""Judging one batch: the reference's expectation, the candidate's result, the differential
checks and (when they pass) the invariances. Shared by fuzz, repro, check, the pytest plugin,
the nightly runner and the gate."""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.oracle.candidates import Candidate, CandidateCrash, SelfCheckFailed
from kimi_oracle.oracle.checks import (ACCEPTS_INVALID, CRASH, Tolerance, Verdict, check_invariance, compare,
                                       same_output)
from kimi_oracle.pipelines import reference


class Rejected(Exception):
    """The reference refuses this input (e.g. the checkpoint's side assert) and the candidate
    raised too: they agree, not a case."""


def _crash_verdict(exc: CandidateCrash) -> Verdict:
    # A candidate failure names its own check when it has one: the sandbox's timeout is `timeout`,
    # a failed self-check (the candidate's result against its own plan) `grid_mismatch` or
    # `feature_length`.
    check = getattr(exc, "check", CRASH)
    if isinstance(exc, SelfCheckFailed) or exc.exc_type == SelfCheckFailed.__name__:
        stats = dict(getattr(exc, "stats", None) or {"self_check": True})
        return Verdict(check, exc.exc_message[:500], stats)
    stats = {"exception": f"{exc.exc_type}: {exc.exc_message}"[:2000], "traceback": exc.traceback[-6000:]}
    output = (getattr(exc, "details", None) or {}).get("output")
    if output:  # what the candidate printed last (its process' capped log), kept with the finding
        stats["output"] = str(output)
    return Verdict(check, f"candidate raised {exc.exc_type}: {exc.exc_message}"[:500], stats)


def _agrees_with_rejection(exc: CandidateCrash) -> bool:
    """A Python exception agrees with the checkpoint's own raise; a hang, a death of the
    candidate's process or a failed self-check does not."""
    return (getattr(exc, "check", CRASH) == CRASH and not exc.exc_type.startswith("ProcessDied")
            and exc.exc_type != SelfCheckFailed.__name__)


def _judge_rejected(call: Any, images: list[Image.Image], reason: str) -> Verdict:
    """The checkpoint rejects `images`: the candidate still runs. A result is an `accepts_invalid`
    finding; a raise agrees (Rejected)."""
    try:
        actual = call.result()
    except CandidateCrash as exc:
        if _agrees_with_rejection(exc):
            raise Rejected(f"{reason} (the candidate raised too: {exc.exc_type})") from None
        return _crash_verdict(exc)
    grids = actual.grid_thws.tolist() if actual.grid_thws.ndim else []
    sizes = [list(img.size) for img in images]
    return Verdict(ACCEPTS_INVALID, f"the checkpoint rejects this input ({reason}) but the candidate returned "
                   f"a result: grids {grids}"[:500], {
                       "reference_error": reason[:2000], "actual_grids": grids, "sizes": sizes,
                       "pixel_values_shape": list(actual.pixel_values.shape)}, actual=actual)


def evaluate(
    candidate: Candidate | Callable[[list[Image.Image], PreprocessConfig], Any],
    images: Sequence[Image.Image],
    config: PreprocessConfig,
    tolerance: "str | Tolerance" = "exact",
    *,
    invariance: bool = True,
    expected: Any = None,
    call: Any = None,
    same_as: Verdict | None = None,
    steps: reference.Steps | None = None,
    brief: bool = False,
) -> Verdict:
    """Judge `candidate` on one batch: differential checks, then (when they pass) invariances.

    When the reference refuses the input (the checkpoint's side assert, or any other raise of
    the reference on a valid image) the candidate still runs: a result is an `accepts_invalid`
    verdict, a raise agrees and raises Rejected. CandidateError / BackendError on harness
    problems; a candidate exception on a valid input becomes a `crash` verdict.

    `call`: the candidate's call, already started (`Candidate.start_call`; by default started
    here, before the reference runs, so that an executor's candidate works meanwhile).
    `same_as`: another candidate's verdict on the same images, config, tolerance and `expected`
    (the gate's lockstep fuzzing): when this one returned the same bytes and no invariance is
    asked, that verdict is copied. `steps`: the reference's steps with assumed variants
    (`fuzz --assume`); the checkpoint's by default. `brief`: a pixel mismatch judged only as
    far as its group (`checks.compare`; `checks.chain.full_verdict` completes it).
    """
    if not isinstance(candidate, Candidate):
        candidate = Candidate(getattr(candidate, "__name__", "candidate"), candidate)
    images = list(images)
    if call is None:
        call = candidate.start_call(images, config)
    if expected is None:
        try:
            expected = reference.preprocess([img.copy() if not img.info else _copy(img) for img in images], config,
                                            steps=steps or reference.CHECKPOINT)
        except InputError as exc:
            return _judge_rejected(call, images, str(exc))
    try:
        actual = call.result()
    except CandidateCrash as exc:
        return _crash_verdict(exc)
    if (same_as is not None and not invariance and same_as.expected is expected
            and same_output(same_as.actual, actual)):
        return Verdict(same_as.check, same_as.message, copy.deepcopy(same_as.stats),
                       expected=same_as.expected, actual=actual)
    verdict = compare(expected, actual, config, tolerance, sizes=[img.size for img in images], brief=brief)
    if not verdict.ok or not invariance:
        return verdict
    try:
        inv = check_invariance(lambda batch: candidate(batch, config), images, full=actual, config=config)
    except CandidateCrash as exc:
        return _crash_verdict(exc)
    if not inv.ok:
        return inv
    verdict.stats["invariance"] = "held"
    return verdict


def _copy(img: Image.Image) -> Image.Image:
    out = img.copy()
    out.info = dict(img.info)
    return out



__all__ = ["Rejected", "evaluate"]
