"""Invariances: the candidate against itself (determinism, batch vs single, subsets, permutations)."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks.normalize import _coerce, _grid_rows
from kimi_oracle.oracle.checks.pixels import difference_magnitude
from kimi_oracle.oracle.checks.verdict import Verdict
from kimi_oracle.oracle.kinds import INVARIANCE, INVARIANCE_KINDS


def _same(a: PreprocessResult, b: PreprocessResult) -> tuple[bool, str]:
    if a.grid_thws.shape != b.grid_thws.shape or not torch.equal(a.grid_thws.to(torch.int64), b.grid_thws.to(torch.int64)):
        return False, f"grids {a.grid_thws.tolist()} vs {b.grid_thws.tolist()}"
    if a.pixel_values.shape != b.pixel_values.shape or a.pixel_values.dtype != b.pixel_values.dtype:
        return False, (f"pixel_values {list(a.pixel_values.shape)} {a.pixel_values.dtype} vs "
                       f"{list(b.pixel_values.shape)} {b.pixel_values.dtype}")
    pa = a.pixel_values.contiguous()
    pb = b.pixel_values.contiguous()
    if pa.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[pa.element_size()]
        diff = pa.view(width) != pb.view(width)
    else:
        diff = pa != pb
    if bool(diff.any()):
        rows = torch.nonzero(diff.reshape(diff.shape[0], -1).any(dim=1)).flatten().tolist() if diff.ndim else []
        return False, f"{int(diff.sum())} values differ, in patch rows {rows[:8]}{'...' if len(rows) > 8 else ''}"
    return True, ""


def _select(result: PreprocessResult, indices: Sequence[int]) -> PreprocessResult:
    parts = [result.image(i) for i in indices]
    return PreprocessResult(
        torch.cat([r.pixel_values for r in parts], dim=0),
        torch.cat([r.grid_thws for r in parts], dim=0),
    )


def invariance_plan(n: int) -> list[tuple[str, tuple[int, ...]]]:
    """The deterministic list of (kind, image indices) batches `check_invariance` runs for n images."""
    out: list[tuple[str, tuple[int, ...]]] = [("determinism", tuple(range(n)))]
    if n >= 2:
        out += [("batch_vs_single", (i,)) for i in range(n)]
        for k in range(2, n):
            out += [("subset", combo) for combo in itertools.combinations(range(n), k)]
        out.append(("permutation", tuple(reversed(range(n)))))
        if n >= 3:
            out.append(("permutation", tuple(range(1, n)) + (0,)))
    return out


def _full_problem(full: PreprocessResult, n: int) -> Verdict | None:
    """A verdict when the full batch's grids do not describe its rows (no invariance is defined)."""
    if _grid_rows(full.grid_thws) is None or len(full.grid_thws) != n or full.patch_offsets()[-1] != full.pixel_values.shape[0]:
        return Verdict(INVARIANCE, "the full batch's grids do not describe its rows; invariances undefined",
                       {"kind": "batch_vs_single"})
    return None


def _entry_verdict(full: PreprocessResult, kind: str, indices: tuple[int, ...], got: PreprocessResult, n: int,
                   config: PreprocessConfig | None) -> Verdict | None:
    """The failing verdict of one entry of the plan (the candidate's answer `got`), None when it holds."""
    want = full if kind == "determinism" else _select(full, indices)
    same, why = _same(want, got)
    if same:
        return None
    label = {
        "determinism": "a second run of the same batch differs",
        "batch_vs_single": f"image {indices[0]} alone differs from its rows in the batch of {n}",
        "subset": f"the sub-batch {list(indices)} differs from its rows in the batch of {n}",
        "permutation": f"the batch permuted to {list(indices)} does not give permuted rows",
    }[kind]
    stats: dict[str, Any] = {"kind": kind, "indices": list(indices), "batch_size": n, "detail": why}
    if config is not None and want.pixel_values.shape == got.pixel_values.shape:
        stats.update(difference_magnitude(want, got, config))
        why += (f" (max {stats['max_level_diff']:.3g} levels"
                + (f", {stats['max_ulp']} ulp)" if stats.get("max_ulp") is not None else ")"))
    return Verdict(INVARIANCE, f"{kind}: {label}: {why}", stats, expected=want, actual=got)


def check_invariance(
    run: Callable[[list[Image.Image]], PreprocessResult],
    images: Sequence[Image.Image],
    *,
    full: PreprocessResult | None = None,
    kinds: Sequence[str] = INVARIANCE_KINDS,
    config: PreprocessConfig | None = None,
) -> Verdict:
    """Candidate-only checks: two runs agree, a batch equals its images one by one, any subset
    equals the matching rows of the full batch, a permuted batch gives permuted rows (bitwise)."""
    images = list(images)
    if full is None:
        full = _coerce(run(images))
    n = len(images)
    problem = _full_problem(full, n)
    if problem is not None:
        return problem
    for kind, indices in invariance_plan(n):
        if kind not in kinds:
            continue
        verdict = _entry_verdict(full, kind, indices, _coerce(run([images[i] for i in indices])), n, config)
        if verdict is not None:
            return verdict
    return Verdict(None, "invariances hold", {"batch_size": n})


def check_invariance_lockstep(
    starts: Sequence[Callable[[list[Image.Image]], Any]],
    images: Sequence[Image.Image],
    *,
    kinds: Sequence[str] = INVARIANCE_KINDS,
    config: PreprocessConfig | None = None,
    captured: tuple[type[BaseException], ...] = (),
) -> list["Verdict | BaseException"]:
    """`check_invariance` for several candidates at once, each in its own process: `starts[c](batch)`
    starts candidate c's call and returns it at once (`.result()` waits for its answer). Each
    candidate's next call of the plan is started as soon as its previous answer is in, and the
    answers are compared while the next calls are at work. A candidate's checks end at its first
    failure (one call begun after it is left unanswered), or at an exception of a `captured`
    type raised by an answer, which is then its outcome; other exceptions propagate. Returns each
    candidate's verdict (or captured exception), the one `check_invariance` gives."""
    images = list(images)
    n = len(images)
    plan = [("full", tuple(range(n)))] + [(k, idx) for k, idx in invariance_plan(n) if k in kinds]
    outcomes: list[Verdict | BaseException | None] = [None] * len(starts)
    fulls: list[PreprocessResult | None] = [None] * len(starts)
    calls: list[Any] = [None] * len(starts)  # each candidate's call begun and not answered yet
    for step in range(len(plan) + 1):
        answers: dict[int, PreprocessResult] = {}
        for c, start in enumerate(starts):
            if outcomes[c] is not None:
                continue
            if step:
                call, calls[c] = calls[c], None
                try:
                    answers[c] = _coerce(call.result())
                except captured as exc:
                    outcomes[c] = exc
                    continue
            if step < len(plan):
                calls[c] = start([images[i] for i in plan[step][1]])
        for c, got in answers.items():  # (the next calls at work meanwhile)
            kind, indices = plan[step - 1]
            if kind == "full":
                fulls[c] = got
                outcomes[c] = _full_problem(got, n)
            else:
                outcomes[c] = _entry_verdict(fulls[c], kind, indices, got, n, config)  # type: ignore[arg-type]
    for call in calls:
        # A call begun after its candidate's failure: its answer is waited for here (without
        # raising), not by whatever that candidate is asked next (a hang costs its timeout now).
        wait = getattr(call, "wait", None)
        if wait is not None:
            wait()
    return [o if o is not None else Verdict(None, "invariances hold", {"batch_size": n}) for o in outcomes]
