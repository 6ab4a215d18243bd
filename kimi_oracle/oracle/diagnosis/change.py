"""The change between two candidates: which single step turns OLD's output into NEW's.

The gate has both kernels' outputs on the same inputs; what changed between OLD and NEW is a
difference of two outputs that share every other step. `diagnose_change` says, for one image of
one input, where the two differ (`regions.Where`), by how much, and which step change explains
it, in two tiers:

1. On the outputs themselves, with OLD's output as the base: the padding alone replaced (the
   fill measured: `pad/level-N`), the patches or channels reordered (`patch-order`, catalogued
   or fitted), the values re-tabled per level (`normalize-float`: a catalogued arithmetic, or
   statistics solved from the affine relation). Each is checked bit for bit on the whole image.
2. Otherwise on OLD's inferred pipeline: the attribution of NEW started from the steps OLD's own
   attribution reproduced it with (the reference's when OLD is the reference there), so that
   the variants it takes are the change (`attribute(base=...)`).

The result is `exact` only when the named change reproduces NEW bit for bit. Rule:
docs/diagnosis.md ("The change between two candidates").
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import KimiOracleError
from kimi_oracle.core.explanation import EXPLAINED
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.images import ImageSource, load_images
from kimi_oracle.core.threads import one_torch_thread
from kimi_oracle.oracle.candidates import as_result
from kimi_oracle.oracle.diagnosis import fitted
from kimi_oracle.oracle.diagnosis.attribution import attribute
from kimi_oracle.oracle.diagnosis.catalogue import _NORMALIZERS, _PATCH_ORDERS, BY_ELIMINATION, UNEXPLAINED, steps_for
from kimi_oracle.oracle.diagnosis.regions import Where, canvas, locate
from kimi_oracle.pipelines.reference import CHECKPOINT, normalization_lut

# Reference runs the second tier may spend on one image (the greedy search takes tens; one change is one step).
CHANGE_MAX_RUNS = 300


def _rows(result: Any, index: int) -> torch.Tensor:
    grids = torch.as_tensor(result.grid_thws).reshape(-1, 3)
    counts = [int(c) for c in grids.prod(dim=1).tolist()]
    lo = sum(counts[:index])
    return result.pixel_values[lo: lo + counts[index]].detach().float().contiguous()


def _same(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> bool:
    a = torch.as_tensor(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a).float().contiguous()
    b = torch.as_tensor(np.ascontiguousarray(b) if isinstance(b, np.ndarray) else b).float().contiguous()
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def _on_outputs(new: torch.Tensor, old: torch.Tensor, where: Where, p: Any, config: PreprocessConfig) -> tuple[str, str] | None:
    """Tier 1: a change of NEW's output read off OLD's output (pad, order, table), exact."""
    patch = config.patch_size
    if where.confined_to_pad:
        region = fitted.pad_region(new, p, patch)
        fill = None if region is None else fitted.pad_fill(region, normalization_lut(config))
        if isinstance(fill, fitted.PadValues):  # a level under another arithmetic (sub-level apart)?
            near = fitted.levels_under(np.array(fill.values, dtype=np.float32).reshape(1, 3), config)[0]
            if (near >= 0).all():
                fill = fitted.PadLevels(tuple(int(v) for v in near))  # type: ignore[arg-type]
        if fill is not None:
            return "pad", fill.name
    values = canvas(old, p, patch)
    for name, fn in _PATCH_ORDERS.items():
        if _same(fn(values, patch), new):
            return "patch-order", name
    fi = fitted.FitInput(old, new.numpy(), p, config, CHECKPOINT)
    for name, _apply in fitted.fit_patch_order(fi):
        order = _order_function(name)
        if order is not None and _same(order(values, patch), new):
            return "patch-order", name
    pairs = fitted.level_pairs(old.numpy(), new.numpy(), config)
    if pairs is not None:
        tables = [("checkpoint", normalization_lut(config))] + [(n, f(config)) for n, f in _NORMALIZERS.items()]
        for name, table in tables:
            if all(np.array_equal(table[c][lv].view(np.int32), y.view(np.int32)) for c, (lv, y) in enumerate(pairs)):
                return "normalize-float", name
        fn = fitted.fit_constants(pairs, config)
        if fn is not None:
            return "normalize-float", fn.name_for(config)
    return None


def _order_function(name: str) -> Any:
    """The patchify function a fitted patch-order name stands for."""
    parsed = fitted.parse_patch_order(name)
    if parsed is None:
        return None
    return parsed[1](CHECKPOINT).patchify


def _old_steps(old_attribution: Mapping[str, Any] | None, config: PreprocessConfig) -> Any:
    """The steps OLD's attribution reproduced OLD with (the reference's when OLD has none: it
    equals the reference there); None when OLD was not reproduced bit for bit."""
    if old_attribution is None:
        return CHECKPOINT
    if not isinstance(old_attribution, Mapping) or old_attribution.get("explanation") != EXPLAINED:
        return None
    names = [n for n in old_attribution.get("variants") or [] if isinstance(n, str) and "/" in n]
    pairs = [tuple(n.split("/", 1)) for n in names]
    if any(v == BY_ELIMINATION for _, v in pairs):
        return None
    try:
        return steps_for(config, pairs)  # type: ignore[arg-type]
    except (KeyError, ValueError):
        return None


def diagnose_change(images: Sequence[ImageSource], config: PreprocessConfig, new: Any, old: Any, *, index: int = 0,
                    old_attribution: Mapping[str, Any] | None = None, old_is_reference: bool = False,
                    max_runs: int = CHANGE_MAX_RUNS) -> dict[str, Any] | None:
    """What changed from OLD's output to NEW's on image `index` of one input, or None when the
    two are bit-identical there or do not line up (other grids or shapes: no pixel change).

    `old_attribution`: OLD's own attribution on this input (its `to_dict`), whose variants are
    OLD's inferred pipeline; with `old_is_reference` OLD's output is the reference's. Returns
    `family`, `variant` (`family/variant` in `name`; the measured parameters are in the name),
    `families` (several when the second tier needed a stack), `where`, `levels` (max / mean
    levels between the two outputs), `exact` (the change reproduces NEW bit for bit), `tier`."""
    try:
        new_r, old_r = as_result(new), as_result(old)
        if not torch.equal(torch.as_tensor(new_r.grid_thws), torch.as_tensor(old_r.grid_thws)) \
                or new_r.pixel_values.shape != old_r.pixel_values.shape:
            return None
        decoded = load_images(images)
        a, b = _rows(new_r, index), _rows(old_r, index)
    except (KimiOracleError, AttributeError, IndexError, RuntimeError, TypeError, ValueError):
        return None
    img = decoded[index]
    p = plan(img.width, img.height, config)
    if a.shape[0] != p.num_patches:
        return None
    where = locate(a, b, img, p, config, index)
    if not where.differing:
        return None
    out: dict[str, Any] = {"family": UNEXPLAINED, "variant": "", "name": UNEXPLAINED, "families": [UNEXPLAINED],
                           "where": where.to_dict(), "levels": {"max": where.to_dict()["max_levels"],
                                                                "mean": where.to_dict()["mean_levels"]},
                           "exact": False, "tier": None}
    j = rows_of_another_image(new_r, index, like=old_r)
    if j is not None:  # (a batch-only defect: a group of same-size images given one's rows)
        return {**out, "family": "patch-order", "variant": f"rows-of-image-{j}", "name": f"patch-order/rows-of-image-{j}",
                "families": ["patch-order"], "exact": True, "tier": "outputs"}
    with one_torch_thread():
        found = _on_outputs(a, b, where, p, config)
        if found is not None:
            family, variant = found
            return {**out, "family": family, "variant": variant, "name": f"{family}/{variant}",
                    "families": [family], "exact": True, "tier": "outputs"}
        base = CHECKPOINT if old_is_reference else _old_steps(old_attribution, config)
        if base is None:
            return out
        try:
            att = attribute(decoded, config, new_r, image=index, max_runs=max_runs, base=base)
        except (KimiOracleError, ValueError):
            return out
    if not att.variants:
        return out
    families = list(dict.fromkeys(v.split("/", 1)[0] for v in att.variants))
    first = att.variants[0]
    alternatives = sorted({a for e in att.explained for a in e.alternatives})
    return {**out, "family": families[0], "variant": first.split("/", 1)[1], "name": first,
            "families": families, "variants": list(att.variants), "alternatives": alternatives,
            "exact": att.fully_explained, "tier": "steps"}


def rows_of_another_image(batch: Any, k: int, like: Any = None) -> int | None:
    """j when image k's rows of a batch's result are bit for bit image j's rows (j != k: an
    engine that gave one image of a group another's rows), else None. `like`: another result of
    the same batch (OLD's) whose image j's rows they are instead, image k's own there differing."""
    try:
        r = as_result(batch)
        other = r if like is None else as_result(like)
        offsets = r.patch_offsets()
        mine = r.pixel_values[offsets[k]:offsets[k + 1]]
        if like is not None and _same(other.pixel_values[offsets[k]:offsets[k + 1]], mine):
            return None
        for j in range(len(offsets) - 1):
            if j != k and _same(other.pixel_values[offsets[j]:offsets[j + 1]], mine):
                return j
    except (AttributeError, IndexError, RuntimeError, TypeError, ValueError):
        return None
    return None
