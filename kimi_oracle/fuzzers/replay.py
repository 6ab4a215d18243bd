"""Replaying a finding's case.json and checking real image files with the oracle."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from PIL import Image

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import AssumptionError, InputError
from kimi_oracle.fuzzers.cases import finding_from
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.checks import INVARIANCE, Verdict
from kimi_oracle.oracle.diagnosis import assumed_steps, full_name, parse_assumption
from kimi_oracle.oracle.judge import Rejected, evaluate
from kimi_oracle.results.report import Finding, write_finding


def _case_assumptions(case: dict[str, Any], directory: Path) -> tuple[tuple[str, str], ...]:
    """The variants a finding's reference was taken with (`fuzz --assume`, case.json's `assume`)."""
    names = case.get("assume") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError("case.json: assume must be a list of FAMILY/VARIANT strings", source=str(directory))
    try:
        return tuple(parse_assumption(n) for n in names)
    except AssumptionError as exc:
        raise InputError(f"case.json: {exc}", source=str(directory)) from None


def replay_case(case: dict[str, Any], directory: Path, candidate: Candidate, *,
                tolerance: str | None = None) -> tuple[Verdict, list[Image.Image], PreprocessConfig, list[str]]:
    """Re-run a finding's case.json: (verdict, images, config, notes)."""
    from kimi_oracle.inputs.generators import (CaseParams, images_equal,
                                               make_image)
    from kimi_oracle.results.report import load_case_image

    notes: list[str] = []
    config = PreprocessConfig.from_hf_json(case["config"])
    config = dataclasses.replace(config, name=str(case.get("profile") or config.name))
    images: list[Image.Image] = []
    for i, entry in enumerate(case["images"]):
        entry = {"index": i, **entry}
        params = entry.get("params")
        stored = load_case_image(directory, entry, i)
        if params:
            regenerated = make_image(CaseParams.from_dict(params))
            if stored is None:
                notes.append(f"image {entry['index']}: {entry.get('file')} missing; regenerated from its parameters")
                images.append(regenerated)
                continue
            if not images_equal(stored, regenerated):
                notes.append(f"image {entry['index']}: the generator now makes a different image from these "
                             f"parameters; using the stored file {entry['file']}")
        if stored is None:
            raise InputError(f"image {entry['index']}: input file {entry.get('file')} is missing and there are "
                             "no generator parameters", source=str(directory))
        images.append(stored)
    tol = tolerance or case.get("tolerance") or "exact"
    inv = case.get("check") == INVARIANCE
    assume = _case_assumptions(case, directory)
    if assume:
        notes.append("compared with the reference with " + ", ".join(full_name(f, v) for f, v in assume) + " applied")
    try:
        verdict = evaluate(candidate, images, config, tol, invariance=True,
                           steps=assumed_steps(config, assume) if assume else None)
    except Rejected as exc:
        raise InputError(f"the reference rejects this case now: {exc}", source=str(directory)) from None
    if inv and verdict.ok:
        verdict.message = "invariances hold"
    return verdict, images, config, notes


@dataclass
class CheckRun:
    """What `check_images` found so far: findings, one row per image (or batch), how it stopped."""

    findings: list[Finding] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = "done"  # or "interrupted" (Ctrl-C / SIGTERM): the rows cover what ran


def check_images(candidate: Candidate, images: Sequence[tuple[str, Image.Image, bytes | None]],
                 config: PreprocessConfig, tolerance: str = "exact", *, invariance: bool = True,
                 out_dir: str | Path | None = None, batch: int = 3,
                 on_image: Callable[[int], None] | None = None) -> CheckRun:
    """Run the oracle over real images, each alone, then (invariances) in small batches. An
    interrupt ends the run early with what was already judged (stopped = "interrupted")."""
    run = CheckRun()
    try:
        _check_images(run, candidate, images, config, tolerance, invariance, out_dir, batch, on_image)
    except KeyboardInterrupt:
        run.stopped = "interrupted"
    return run


def _check_images(run: CheckRun, candidate: Candidate, images: Sequence[tuple[str, Image.Image, bytes | None]],
                  config: PreprocessConfig, tolerance: str, invariance: bool, out_dir: str | Path | None,
                  batch: int, on_image: Callable[[int], None] | None) -> None:
    findings, rows = run.findings, run.rows

    def record(verdict: Verdict, group: Sequence[tuple[str, Image.Image, bytes | None]]) -> None:
        f = finding_from(verdict, candidate.spec, config, [g[1] for g in group], tolerance=tolerance,
                         engine="check", sources=[g[0] for g in group], raw_inputs=[g[2] for g in group])
        if out_dir is not None:
            write_finding(out_dir, f)
        findings.append(f)

    for i, (name, img, raw) in enumerate(images):
        interrupts.raise_if_requested()
        row = {"image": name, "size": f"{img.width}x{img.height}", "mode": img.mode}
        try:
            verdict = evaluate(candidate, [img], config, tolerance, invariance=invariance)
        except Rejected as exc:
            row.update(result="rejected", detail=str(exc))
            rows.append(row)
            continue
        row.update(result="ok" if verdict.ok else verdict.check, detail=verdict.message)
        if not verdict.ok:
            record(verdict, [(name, img, raw)])
        rows.append(row)
        if on_image is not None:
            on_image(i)
    if invariance and len(images) >= 2:
        ok_images = [(n, im, raw) for (n, im, raw), r in zip(images, rows) if r["result"] == "ok"]
        for start in range(0, len(ok_images), batch):
            group = ok_images[start : start + batch]
            interrupts.raise_if_requested()
            if len(group) < 2:
                continue
            try:
                verdict = evaluate(candidate, [g[1] for g in group], config, tolerance, invariance=True)
            except Rejected:
                continue
            if not verdict.ok:
                record(verdict, group)
                rows.append({"image": " + ".join(Path(g[0]).name for g in group), "size": "batch",
                             "mode": "", "result": verdict.check, "detail": verdict.message})
