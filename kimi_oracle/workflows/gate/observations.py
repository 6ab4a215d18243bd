"""What one side failed on, as the gate records it: observations (for the rows), input ids, outputs."""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any, Sequence

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.candidates import CandidateCrash
from kimi_oracle.oracle.checks import CRASH, PIXEL_MISMATCH, Verdict
from kimi_oracle.oracle.diagnosis import finding_diagnosis
from kimi_oracle.oracle.grouping import finding_key, image_at_fault
from kimi_oracle.results.report import Finding


def crash_check(exc: CandidateCrash) -> str:
    return getattr(exc, "check", CRASH)


def crash_stats(exc: CandidateCrash) -> dict[str, Any]:
    return {"exception": f"{getattr(exc, 'exc_type', type(exc).__name__)}: {getattr(exc, 'exc_message', exc)}"[:2000]}


def make_input_id(prefix: str, config: PreprocessConfig, params: Sequence[Any], images: Sequence[Any]) -> str:
    """An id for one input, the same whichever candidate ran it."""
    h = hashlib.sha256(json.dumps(config.image_hf_json(), sort_keys=True, default=str).encode())
    for i, img in enumerate(images):
        p = params[i] if i < len(params) else None
        if p:
            h.update(json.dumps(p, sort_keys=True, default=str).encode())
        else:
            h.update(f"{img.mode}{img.size}".encode())
            h.update(hashlib.sha256(img.tobytes()).digest())
    return f"{prefix}:{h.hexdigest()[:16]}"


def observation(input_id: str, stage: str, verdict: Verdict, images: Sequence[Any],
                 diagnosis: dict[str, Any] | None = None) -> dict[str, Any]:
    """One failed input of one side, for `workflows.known.aggregate`."""
    d = diagnosis or {}
    return {"input": input_id, "stage": stage, "check": str(verdict.check),
            "key": finding_key(str(verdict.check), verdict.stats, list(images)) if images else str(verdict.check),
            "message": verdict.message, "root_causes": list(d.get("root_causes") or []),
            "attribution": d.get("attribution"), "max_levels": d.get("max_levels", verdict.stats.get("max_level_diff")),
            "mean_levels": d.get("mean_levels", verdict.stats.get("mean_level_diff")),
            "share": verdict.stats.get("share_differing")}


def image_share(expected: Any, actual: Any, index: int) -> float | None:
    """The share of image `index`'s output values that differ (None when the outputs do not line up)."""
    import torch

    try:
        grids = torch.as_tensor(expected.grid_thws).reshape(-1, 3)
        if not torch.equal(grids, torch.as_tensor(actual.grid_thws).reshape(-1, 3)):
            return None
        counts = [int(c) for c in grids.prod(dim=1).tolist()]
        start = sum(counts[:index])
        e = expected.pixel_values[start : start + counts[index]]
        a = actual.pixel_values[start : start + counts[index]]
        if e.shape != a.shape or e.numel() == 0:
            return None
        return float((e.float() != a.float()).float().mean())
    except (AttributeError, IndexError, RuntimeError, TypeError, ValueError):
        return None


def finding_observation(input_id: str, stage: str, f: Finding, index: int | None = None) -> dict[str, Any] | None:
    """The observation of a finding on image `index` of its batch (default: its image at fault),
    so that NEW and OLD are compared on the same image of the same input; its levels are those
    of its own case (unscaled). None when that image's output does not differ."""
    own = image_at_fault(f.stats)
    index = own if index is None else min(index, max(len(f.images) - 1, 0))
    stats = {**f.stats, "worst": {"image": index}}
    obs = {"input": input_id, "stage": stage, "check": f.check, "key": f.key or f.check, "message": f.message,
           "root_causes": list(f.root_causes), "attribution": f.attribution, "max_levels": f.max_levels,
           "mean_levels": f.mean_levels, "share": None}
    if f.check != PIXEL_MISMATCH:
        if index != own and f.images:
            obs["key"] = finding_key(f.check, stats, f.images)
        return obs
    obs["share"] = image_share(f.expected, f.actual, index)
    if obs["share"] == 0.0:
        return None  # this side's difference is on another image of the batch
    if index != own:
        d = finding_diagnosis(f.check, stats, f.images, f.config, expected=f.expected, actual=f.actual)
        obs.update(root_causes=list(d["root_causes"]), attribution=d["attribution"], max_levels=d["max_levels"],
                   mean_levels=d["mean_levels"])
        obs["key"] = finding_key(f.check, {"max_level_diff": d["max_levels"] or 0.0, "worst": {"image": index}},
                                 f.images)
    return obs


# `outputs.npz` keeps whole results up to this many values a result (16 MiB of float32: an
# output of ~1.4 Mpx); of a larger one (a real photo's output is ~36 Mi values, 146 MiB a side,
# several seconds of zlib each) it keeps OUTPUTS_WINDOW_ROWS patch rows around the worst value,
# and `kimi-oracle repro` recomputes the rest.
OUTPUTS_MAX_VALUES = 1 << 22
OUTPUTS_WINDOW_ROWS = 1024


def outputs_window(stats: dict[str, Any] | None, *results: Any) -> tuple[int, int, int] | None:
    """The patch rows [lo, hi) of `total` that `outputs_npz` keeps of these results, as (lo, hi,
    total), or None when it keeps them whole: OUTPUTS_WINDOW_ROWS rows around the worst value
    that `stats` names (its image's patch), when the largest result is over OUTPUTS_MAX_VALUES."""
    sized = [r for r in results if isinstance(r, PreprocessResult)]
    if not sized or max(int(r.pixel_values.numel()) for r in sized) <= OUTPUTS_MAX_VALUES:
        return None
    total = max(int(r.pixel_values.shape[0]) for r in sized)
    worst = (stats or {}).get("worst")
    row = 0
    try:
        offsets = sized[0].patch_offsets()
        patch = int(worst.get("patch", 0)) if isinstance(worst, dict) else 0
        row = offsets[min(image_at_fault(stats), len(offsets) - 2)] + patch
    except (TypeError, ValueError, IndexError):
        pass
    lo = max(0, min(row - OUTPUTS_WINDOW_ROWS // 2, total - OUTPUTS_WINDOW_ROWS))
    return lo, min(total, lo + OUTPUTS_WINDOW_ROWS), total


def outputs_note(window: tuple[int, int, int] | None) -> str:
    """What a finding's `outputs.npz` holds, for its case.json."""
    if window is None:
        return "outputs.npz (expected, new, old)"
    lo, hi, total = window
    return (f"outputs.npz (expected, new, old: patch rows {lo}-{hi - 1} of {total}, around the worst value; "
            f"`kimi-oracle repro` recomputes the whole outputs)")


def outputs_npz(window: tuple[int, int, int] | None = None, **results: Any) -> bytes:
    """The results of one input (expected, new, old) as one .npz (float32 values, int grids); with
    a `window` (lo, hi, total) only patch rows [lo, hi) of each, and `{name}_rows` = [lo, hi, total]."""
    import numpy as np
    import torch

    arrays = {}
    for name, r in results.items():
        if isinstance(r, PreprocessResult):
            values = torch.as_tensor(r.pixel_values).detach()
            if window is not None:
                values = values[window[0]:window[1]]
                n = int(r.pixel_values.shape[0])
                arrays[f"{name}_rows"] = np.array([min(window[0], n), min(window[1], n), n], dtype=np.int64)
            arrays[f"{name}_pixel_values"] = values.float().cpu().numpy()
            arrays[f"{name}_grid_thws"] = torch.as_tensor(r.grid_thws).detach().cpu().numpy()
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()
