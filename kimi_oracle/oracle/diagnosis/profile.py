"""The engine profile: the candidate's inferred pipeline, from the explanations of a run's findings.

For each step family that explains some finding, the variant that explains most findings (a
step's bit-identical alternatives count as explaining it too); the profile is the map from
family id to that variant (`fuzz --json`'s `pipeline`), the findings it does not account for
listed apart. Rule: docs/diagnosis.md ("Engine profile").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kimi_oracle.core.explanation import EXPLAINED, PARTLY_EXPLAINED
from kimi_oracle.oracle.checks import PIXEL_MISMATCH
from kimi_oracle.oracle.diagnosis.catalogue import BY_ELIMINATION, ROOT_CAUSE_IDS


@dataclass
class EngineProfile:
    """The inferred pipeline (family -> variant), and the findings it does not explain."""

    pipeline: dict[str, str] = field(default_factory=dict)
    explained: list[str] = field(default_factory=list)  # keys of the findings the profile explains
    apart: list[str] = field(default_factory=list)  # keys of the pixel findings it does not

    def summary(self) -> str:
        """`resample-float: uint8-aa; normalize-float: (x/255-mean)/std` (or "" when empty)."""
        return "; ".join(f"{family}: {variant}" for family, variant in self.pipeline.items())

    def to_dict(self) -> dict[str, Any]:
        """The `pipeline_*` fields of a run's summary (besides `pipeline` itself)."""
        return {"pipeline_summary": self.summary(), "pipeline_explains": list(self.explained),
                "pipeline_apart": list(self.apart)}


def _steps(attribution: Mapping[str, Any]) -> list[dict[str, set[str]]]:
    """Per step taken: family -> the variant names that explain it (taken and alternatives)."""
    out = []
    for entry in attribution.get("explained") or []:
        names: dict[str, set[str]] = {entry["root_cause"]: {entry["variant"]}}
        for alt in entry.get("alternatives") or []:
            family, _, variant = str(alt).partition("/")
            names.setdefault(family, set()).add(variant)
        out.append(names)
    return out


def _pixel_findings(findings: Iterable[Any]) -> list[tuple[str, Mapping[str, Any]]]:
    out = []
    for f in findings:
        get = f.get if isinstance(f, Mapping) else lambda k, f=f: getattr(f, k, None)
        attribution = get("attribution") or {}
        if get("check") == PIXEL_MISMATCH and "deferred" not in attribution:  # (not diagnosed: not judged)
            out.append((str(get("key") or PIXEL_MISMATCH), attribution))
    return out


def infer_profile(findings: Iterable[Any]) -> EngineProfile:
    """The engine profile of a run's findings (Finding objects or their summaries)."""
    pixel = _pixel_findings(findings)
    support: dict[str, Counter] = {}
    for _, attribution in pixel:
        if attribution.get("explanation") not in (EXPLAINED, PARTLY_EXPLAINED):
            continue
        seen: dict[str, set[str]] = {}
        for step in _steps(attribution):
            family = next(iter(step))  # the family taken (its own bit-identical variants count)
            seen.setdefault(family, set()).update(step[family] - {BY_ELIMINATION})
        for family, names in seen.items():
            support.setdefault(family, Counter()).update(names)
    order = {c: i for i, c in enumerate(ROOT_CAUSE_IDS)}
    profile = EngineProfile()
    for family in sorted(support, key=lambda c: order.get(c, len(order))):
        if support[family]:
            profile.pipeline[family] = min(support[family], key=lambda v: (-support[family][v], v))
    for key, attribution in pixel:
        steps = _steps(attribution)
        fits = attribution.get("explanation") == EXPLAINED and all(
            any(profile.pipeline.get(family) in names for family, names in step.items()) for step in steps)
        (profile.explained if fits else profile.apart).append(key)
    return profile
