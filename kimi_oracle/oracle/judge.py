"""Judging one batch: the reference's expectation, the candidate's result, the differential
checks and (when they pass) the invariances. Shared by fuzz, repro, check, the pytest plugin,
the nightly runner and the gate."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.oracle.candidates import Candidate, CandidateCrash
from kimi_oracle.oracle.checks import CRASH, Tolerance, Verdict, check_invariance, compare
from kimi_oracle.pipelines import reference


class Rejected(Exception):
    """The reference itself refuses this input (e.g. the checkpoint's side assert): not a case."""


def _crash_verdict(exc: CandidateCrash) -> Verdict:
    # A candidate failure names its own check when it has one: the sandbox's timeout is `timeout`.
    return Verdict(getattr(exc, "check", CRASH), f"candidate raised {exc.exc_type}: {exc.exc_message}"[:500], {
        "exception": f"{exc.exc_type}: {exc.exc_message}"[:2000],
        "traceback": exc.traceback[-6000:],
    })


def evaluate(
    candidate: Candidate | Callable[[list[Image.Image], PreprocessConfig], Any],
    images: Sequence[Image.Image],
    config: PreprocessConfig,
    tolerance: "str | Tolerance" = "exact",
    *,
    invariance: bool = True,
    expected: Any = None,
) -> Verdict:
    """Judge `candidate` on one batch: differential checks, then (when they pass) invariances.

    Raises Rejected when the reference refuses the input, CandidateError / BackendError on
    harness problems; a candidate exception becomes a `crash` verdict.
    """
    if not isinstance(candidate, Candidate):
        candidate = Candidate(getattr(candidate, "__name__", "candidate"), candidate)
    images = list(images)
    if expected is None:
        try:
            expected = reference.preprocess([img.copy() if not img.info else _copy(img) for img in images], config)
        except InputError as exc:
            raise Rejected(str(exc)) from None
    try:
        actual = candidate(images, config)
    except CandidateCrash as exc:
        return _crash_verdict(exc)
    verdict = compare(expected, actual, config, tolerance, sizes=[img.size for img in images])
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
