"""Golden pixel runs: opening the candidate and running pixel cases through it in batches."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S
from kimi_oracle.core.errors import BackendError, CandidateError
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle import candidates as oracle_candidates
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.checks import TIMEOUT, shape_dtype_problems
from kimi_oracle.workflows.golden.common import _BATCH_IMAGES
from kimi_oracle.workflows.golden.catalogue import PixelCase


# ---------------------------------------------------------------------------------------------
# candidates


def _is_reference(spec: Any) -> bool:
    return spec is None or (isinstance(spec, str) and spec.strip() == "reference")


def open_candidate(spec: str | Callable | None, *, case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
                   memory_limit_mb: int | None = None) -> tuple[str, Candidate, Callable[[], None]]:
    """(label, candidate, close) for `spec`: a spec string other than the reference is started in
    its own process (`sandbox.IsolatedCandidate`; CandidateError when it cannot be loaded) and
    `close` stops it; the reference, Candidate objects and plain callables run in-process."""
    if isinstance(spec, str) and not _is_reference(spec):
        from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

        isolated = IsolatedCandidate(spec, timeout_s=case_timeout_s, memory_limit_mb=memory_limit_mb)
        isolated.start()
        return isolated.spec, isolated, isolated.close
    label, fn = load_candidate(spec)
    return label, fn, lambda: None


def load_candidate(spec: str | Callable | None) -> tuple[str, Candidate]:
    """(label, candidate) for a spec (`None` is the reference) or a plain callable, loaded and
    wrapped by `kimi_oracle.oracle.candidates` like in every other command (in-process: see
    `open_candidate` for a spec that runs in its own process)."""
    if callable(spec) and not isinstance(spec, Candidate):
        label = getattr(spec, "__name__", None) or type(spec).__name__
        return label, Candidate(label, spec)
    if isinstance(spec, Candidate):
        return spec.spec, spec
    loaded = oracle_candidates.load_candidate(spec or "reference")
    return loaded.spec, loaded


class ShapeDtypeError(CandidateError):
    """The candidate's result has the wrong shape or dtype (the oracle's `shape_dtype` check)."""


def _checked(result: PreprocessResult, config: PreprocessConfig) -> PreprocessResult:
    # The same shape/dtype rule as the oracle: int32 grids or float64 pixels are not accepted.
    problems = shape_dtype_problems(result, config)
    if problems:
        raise ShapeDtypeError("; ".join(problems))
    return result


def _split(result: PreprocessResult, count: int) -> list[PreprocessResult] | None:
    if result.num_images != count:
        return None
    offsets = result.patch_offsets()
    if result.pixel_values.ndim == 0 or offsets[-1] != int(result.pixel_values.shape[0]):
        return None
    return [result.image(i) for i in range(count)]


def run_pixel_cases(cases: Sequence[PixelCase], candidate: Candidate,
                    hung: dict[str, str] | None = None) -> list[PreprocessResult | BaseException]:
    """Run `candidate` on every case; one call per config group, per image when a batch fails.

    A batch whose grids do not account for its rows, or that raises, is rerun image by image,
    so that every case gets its own result or its own error. `hung` (mode class -> the case the
    candidate timed out on) is filled as timeouts happen and may be shared between calls: a
    case of a mode class in it is not run again, its error says so.
    """
    with warnings.catch_warnings():
        # Pillow warns about palette transparency given as bytes on every such image.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\..*")
        return _run_pixel_cases(cases, candidate, {} if hung is None else hung)


class NotRunAfterTimeout(Exception):
    """A case not run: the candidate already timed out on an image of the same mode class."""


def _mode_class(img: Any) -> str:
    from kimi_oracle.oracle.grouping import mode_class

    return mode_class(img)


def _run_pixel_cases(cases: Sequence[PixelCase], candidate: Candidate,
                     hung: dict[str, str]) -> list[PreprocessResult | BaseException]:
    results: list[PreprocessResult | BaseException | None] = [None] * len(cases)
    groups: dict[str, list[int]] = {}
    for index, case in enumerate(cases):
        groups.setdefault(case.config_key(), []).append(index)
    for indices in groups.values():
        for start in range(0, len(indices), _BATCH_IMAGES):
            chunk = indices[start : start + _BATCH_IMAGES]
            config = cases[chunk[0]].config()
            images = [cases[i].make_image() for i in chunk]
            parts = None
            if not any(_mode_class(img) in hung for img in images):
                try:
                    parts = _split(_checked(candidate(images, config), config), len(chunk))
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception:
                    parts = None
            if parts is None:
                for i, img in zip(chunk, images):
                    results[i] = _run_one(cases[i], candidate, config, img, hung)
            else:
                for i, part in zip(chunk, parts):
                    results[i] = part
    return [r for r in results if r is not None]


def _run_one(case: PixelCase, candidate: Candidate, config: PreprocessConfig, img: Any = None,
             hung: dict[str, str] | None = None) -> PreprocessResult | BaseException:
    img = case.make_image() if img is None else img
    cls = _mode_class(img)
    if hung is not None and cls in hung:
        return NotRunAfterTimeout(f"not run: the candidate already timed out on a {cls} image ({hung[cls]})")
    try:
        return _checked(candidate([img], config), config)
    except ShapeDtypeError as exc:  # the candidate's fault on this case: its golden entry differs
        return exc
    except (KeyboardInterrupt, SystemExit, CandidateError, BackendError):
        # A broken candidate (bad return type, no backend) is a harness error, not a finding.
        raise
    except Exception as exc:  # its crash, death or timeout on this case: the case's error entry
        if hung is not None and getattr(exc, "check", None) == TIMEOUT:
            hung.setdefault(cls, case.id)
        return exc
