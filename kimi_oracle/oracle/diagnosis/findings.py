"""The diagnosis fields every finding carries, attributions memoized per process.

`finding_diagnosis` is what the fuzzer, the gate and the golden check call for a finding: the
root causes, the magnitudes before and after them, and the attribution itself (its
`explanation` and `variants` included).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any, Mapping, Sequence

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import KimiOracleError
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks import PIXEL_MISMATCH, update_digest
from kimi_oracle.oracle.diagnosis.attribution import attribute
from kimi_oracle.oracle.diagnosis.catalogue import UNEXPLAINED
from kimi_oracle.oracle.diagnosis.search import image_key

# Reference runs one finding's attribution may spend: FINDING_MAX_RUNS on images of up to
# FINDING_FULL_PIXELS (the fuzzer's sizes: most runs cost a table lookup, a resize a millisecond
# or two), fewer in proportion on larger ones, never fewer than FINDING_MIN_RUNS (a run costs in
# proportion to the pixels: this bounds the time per finding, not by a clock). The greedy search
# takes tens of runs, the stacked search up to STACK_RUNS.
FINDING_MAX_RUNS = 3000
FINDING_MIN_RUNS = 400
FINDING_FULL_PIXELS = 64 * 64
# An image at fault of more than FINDING_LARGE_PIXELS (real photos: 4K is 8.3 Mpx, 12 Mpx; the
# tile-crossing examples stay below) is not attributed within a run unless asked (`large=True`:
# `repro`): one reference run costs ~0.1-2 s there and the search ~50 s and GBs a finding
# (docs/measurements.md). Its levels are measured; its attribution says it was deferred.
FINDING_LARGE_PIXELS = 6 << 20


def finding_runs(img: Any) -> int:
    """The reference runs a finding's attribution may spend on this image (by its pixels)."""
    pixels = max(1, int(getattr(img, "width", 1)) * int(getattr(img, "height", 1)))
    return max(FINDING_MIN_RUNS, min(FINDING_MAX_RUNS, FINDING_MAX_RUNS * FINDING_FULL_PIXELS // pixels))

def finding_diagnosis(check: str, stats: Mapping[str, Any] | None, images: Sequence[Any],
                      config: PreprocessConfig, expected: Any = None, actual: Any = None,
                      assume: Sequence[tuple[str, str]] = (), large: bool = False) -> dict[str, Any]:
    """`root_causes`, `max_levels`, `mean_levels`, `residual_max_levels`, `residual_mean_levels`
    and the `attribution` itself for a finding. Pixel mismatches are attributed (on the image at
    fault); other checks have no root cause (`[]`) and carry the levels their stats measured.
    `assume`: the variants the reference was taken with (`expected` is that reference's result)."""
    stats = stats or {}
    fields: dict[str, Any] = {
        "root_causes": [],
        "max_levels": _finite_or_none(stats.get("max_level_diff", 0.0)),
        "mean_levels": _finite_or_none(stats.get("mean_level_diff", 0.0)),
        "residual_max_levels": _finite_or_none(stats.get("max_level_diff", 0.0)),
        "residual_mean_levels": _finite_or_none(stats.get("mean_level_diff", 0.0)),
        "attribution": None,
    }
    if check != PIXEL_MISMATCH or actual is None or not images:
        return fields
    from kimi_oracle.oracle.grouping import image_at_fault

    index = min(image_at_fault(stats), len(images) - 1)
    pixels = int(getattr(images[index], "width", 0)) * int(getattr(images[index], "height", 0))
    if pixels > FINDING_LARGE_PIXELS and not large:
        fields["attribution"] = {"deferred": f"the image at fault has {pixels / 1e6:.1f} Mpx, more than a run "
                                             "attributes: `kimi-oracle repro` diagnoses this finding",
                                 "explanation": "", "variants": []}
        return fields
    key = _attribution_key(images, config, actual, expected, index, assume)
    known = _ATTRIBUTIONS.get(key) if key is not None else None
    if known is not None:
        # The same images, config and result attributed before (the gate's baseline returns the
        # candidate's very output on many inputs): the same deterministic answer.
        fields.update(copy.deepcopy(known))
        return fields
    try:
        found = attribute(images, config, actual, expected=expected, image=index, max_runs=finding_runs(images[index]),
                          assume=assume)
    except (KimiOracleError, ValueError) as exc:  # a result the diagnosis cannot line up
        fields["root_causes"] = [UNEXPLAINED]
        fields["attribution"] = {"error": f"{type(exc).__name__}: {exc}", "explanation": UNEXPLAINED, "variants": []}
        return fields
    fields.update(root_causes=list(found.root_causes) or [UNEXPLAINED],
                  max_levels=_finite_or_none(found.max_levels), mean_levels=_finite_or_none(found.mean_levels),
                  residual_max_levels=_finite_or_none(found.residual_max_levels),
                  residual_mean_levels=_finite_or_none(found.residual_mean_levels),
                  attribution=found.to_dict())
    if key is None:
        return fields
    if len(_ATTRIBUTIONS) >= ATTRIBUTION_MEMO:
        _ATTRIBUTIONS.pop(next(iter(_ATTRIBUTIONS)))
    _ATTRIBUTIONS[key] = copy.deepcopy({k: fields[k] for k in _ATTRIBUTED_FIELDS})
    return fields


# Attributions kept per process (oldest dropped first), keyed by everything they depend on.
ATTRIBUTION_MEMO = 256
_ATTRIBUTIONS: dict[bytes, dict[str, Any]] = {}
_ATTRIBUTED_FIELDS = ("root_causes", "max_levels", "mean_levels", "residual_max_levels",
                      "residual_mean_levels", "attribution")


def _attribution_key(images: Sequence[Any], config: PreprocessConfig, actual: Any, expected: Any,
                     index: int, assume: Sequence[tuple[str, str]] = ()) -> bytes | None:
    """None, or a digest of what an attribution depends on: the config, every image (mode, size, pixels,
    frames, info, the encoded file it came from), the candidate's result and the expectation."""
    h = hashlib.blake2b(digest_size=20)
    h.update(json.dumps(config.image_hf_json(), sort_keys=True, default=str).encode())
    h.update(str(index).encode())
    h.update(repr(list(assume)).encode())
    for img in images:
        if not isinstance(img, Image.Image):
            return None  # not memoized
        h.update(image_key(img))
    for result in (actual, expected):
        if result is not None and not isinstance(result, PreprocessResult):
            return None
        h.update(b"-" if result is None else b"+")
        if result is not None:
            update_digest(h, result)
    return h.digest()


def _finite_or_none(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
