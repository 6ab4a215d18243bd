"""How a finding is explained, as reports show it: its label and variants, and the rule for
"float rounding only" (docs/diagnosis.md).

A pixel finding's attribution (`oracle.diagnosis`) says `explained`, `partly explained` or
`unexplained` and lists the variants taken (`family/variant`); a finding whose diagnosis was
deferred (a fuzz budget's diagnosis share spent) says `deferred`.
"""

from __future__ import annotations

from typing import Any, Mapping

from kimi_oracle.core.explanation import DEFERRED, EXPLAINED, PARTLY_EXPLAINED, UNEXPLAINED
from kimi_oracle.core.levels import is_sub_level

# The family whose variants are float rounding of the normalization.
FLOAT_ROUNDING_FAMILY = "normalize-float"


def explanation_fields(attribution: Mapping[str, Any] | None) -> dict[str, Any]:
    """A pixel finding's `explanation` and the `variants` its attribution took; {} for findings
    without an attribution."""
    if not isinstance(attribution, Mapping):
        return {}
    if "deferred" in attribution:
        return {"explanation": DEFERRED, "variants": []}
    return {"explanation": attribution.get("explanation") or UNEXPLAINED,
            "variants": list(attribution.get("variants") or [])}


def explanation_line(attribution: Mapping[str, Any] | None) -> str:
    """`diagnosis: explained by resample-float/uint8-aa, ...` (partly: with the residual in
    levels); "" without an attribution."""
    fields = explanation_fields(attribution)
    if not fields:
        return ""
    text = f"diagnosis: {fields['explanation']}"
    if fields["variants"]:
        text += " by " + ", ".join(fields["variants"])
    if fields["explanation"] == PARTLY_EXPLAINED and isinstance(attribution, Mapping):
        left = attribution.get("residual_max_levels")
        text += f"; left: max {left:.4g} levels" if isinstance(left, (int, float)) else "; left: max - levels"
    where = attribution.get("where") if isinstance(attribution, Mapping) else None
    if isinstance(where, list) and where and isinstance(where[0], Mapping) and where[0].get("summary"):
        text += f"; where: {where[0]['summary']}"
    return text


def reproduced(entry: Mapping[str, Any]) -> bool:
    """True when a finding (a summary entry, or one carrying its `attribution`) was reproduced
    bit for bit by its variants."""
    attribution = entry.get("attribution")
    if isinstance(attribution, Mapping) and "deferred" not in attribution:
        return attribution.get("residual_differing") == 0
    return entry.get("residual_max_levels") == 0 and entry.get("explanation", EXPLAINED) == EXPLAINED


def float_rounding(cause: str, top: float, entry: Mapping[str, Any]) -> bool:
    """A root-cause row's share of a finding is float rounding only: a normalization variant,
    under one level (`top`, the finding's largest difference), on a finding it reproduces (an
    unexplained sub-level difference is not)."""
    return is_sub_level(top) and cause == FLOAT_ROUNDING_FAMILY and reproduced(entry)


__all__ = ["FLOAT_ROUNDING_FAMILY", "explanation_fields", "explanation_line", "float_rounding", "reproduced"]
