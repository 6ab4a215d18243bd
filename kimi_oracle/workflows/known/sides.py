"""Rows of one side of a gate: the verdict names, the margin, `Side` and `aggregate`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kimi_oracle.core.errors import InputError
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.oracle.kinds import PIXEL_MISMATCH
from kimi_oracle.results.report import cause_entries, cause_levels

# Verdicts of a row, in report order (failing ones first).
NEW, WORSE, KNOWN, IMPROVED = "new", "worse", "known", "improved"
VERDICTS = (NEW, WORSE, KNOWN, IMPROVED)

# `--margin`: a metric of NEW is worse when it exceeds OLD's (or the known limit) by more than
# this share plus an absolute slack (below), so that float noise and one-level rounding changes
# of a shared cause never fail a gate.
DEFAULT_MARGIN_PCT = 25.0
MAX_MARGIN_PCT = 1000.0  # `--margin` is a finite percentage from 0 to this (docs/gate.md)
SLACK = {"max_levels": 1.0, "mean_levels": 0.25, "share": 0.01}
METRICS = ("max_levels", "mean_levels", "share")


@dataclass
class Margin:
    """How much larger a metric may grow before it is `worse` (relative, plus `SLACK`)."""

    relative: float = DEFAULT_MARGIN_PCT / 100.0

    def __post_init__(self) -> None:
        # (a NaN or infinite margin would make every `worse` comparison false: a silent pass)
        if isinstance(self.relative, bool) or not isinstance(self.relative, (int, float)) \
                or not 0.0 <= float(self.relative) <= MAX_MARGIN_PCT / 100.0:
            raise InputError(f"margin {self.relative!r}: must be a finite share from 0 to {MAX_MARGIN_PCT / 100.0:g}")

    def exceeds(self, metric: str, value: float | None, limit: float | None) -> bool:
        """True when `value` is beyond `limit` by more than the margin (None: nothing to compare)."""
        if value is None or limit is None:
            return False
        return value > limit * (1.0 + self.relative) + SLACK[metric]





@dataclass
class Side:
    """One side (NEW or OLD) of a row: its metrics over the inputs it appeared on."""

    check: str
    max_levels: float | None = None
    mean_levels: float | None = None
    share: float | None = None
    inputs: set[str] = field(default_factory=set)
    stages: set[str] = field(default_factory=set)
    message: str = ""
    _means: list[float] = field(default_factory=list, repr=False)
    # input -> (max levels, mean levels, share) this row saw on it (pixel rows)
    per_input: dict[str, tuple[float | None, float | None, float | None]] = field(default_factory=dict, repr=False)
    # per observation: the variants of this row's family that explained it (taken or bit-identical)
    variant_sets: list[set[str]] = field(default_factory=list, repr=False)
    # the changes from OLD's output that this row's family names (`workflows.gate.changes`)
    changes: list[Mapping[str, Any]] = field(default_factory=list, repr=False)

    def change(self) -> dict[str, Any] | None:
        """The row's `change` (gate-report.json): the family, the variant (with its measured
        parameters) and where and by how much of its largest change, the other variants seen."""
        if not self.changes:
            return None
        worst = max(self.changes, key=lambda c: _number((c.get("levels") or {}).get("max")) or 0.0)
        return {"family": worst.get("family"), "variant": worst.get("variant"), "where": worst.get("where"),
                "levels": worst.get("levels"), "exact": bool(worst.get("exact")),
                "variants": sorted({str(c.get("name")) for c in self.changes}), "inputs": len(self.changes)}

    def restricted(self, inputs: set[str]) -> "Side":
        """The same row over `inputs` only (pixel rows)."""
        out = Side(check=self.check, message=self.message, stages=set(self.stages),
                   variant_sets=[set(v) for v in self.variant_sets])
        for i in sorted(inputs & set(self.per_input)):
            top, mean, share = self.per_input[i]
            out.inputs.add(i)
            out.per_input[i] = (top, mean, share)
            if top is not None:
                out.max_levels = max(out.max_levels or 0.0, top)
            if mean is not None:
                out._means.append(mean)
                out.mean_levels = sum(out._means) / len(out._means)
            if share is not None:
                out.share = max(out.share or 0.0, share)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the `old`/`new` object of a report row)."""
        return {"max_levels": _round(self.max_levels), "mean_levels": _round(self.mean_levels),
                "share": _round(self.share, 6), "inputs": len(self.inputs)}


def _round(v: float | None, digits: int = 4) -> float | None:
    return None if v is None else round(float(v), digits)


ABSENT = {"max_levels": None, "mean_levels": None, "share": None, "inputs": 0}


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def aggregate(observations: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Side]:
    """Rows of one side: (root cause, mode class) -> Side.

    An observation is one judged input that failed a check: `input` (an id shared by NEW and
    OLD), `stage`, `check`, `key` (`oracle.grouping.finding_key`), `root_causes`, `attribution`,
    `max_levels`, `mean_levels`, `share` (of the output values that differ) and `message`. A pixel
    difference counts under each of its root causes with the levels that cause accounts for
    (`results.report.cause_levels`); any other failure is its own row, named by its key."""
    rows: dict[tuple[str, str], Side] = {}
    for o in observations:
        check = str(o.get("check"))
        own = o.get("cause_levels")  # (set where the gate named the change: `gate.changes`)
        levels = (dict(own) if isinstance(own, Mapping) else cause_levels(o)) if check == PIXEL_MISMATCH else {}
        whole = (_number(o.get("max_levels")), _number(o.get("mean_levels")))
        entries = cause_entries(check, str(o.get("key") or check), o.get("root_causes"), levels, whole)
        # The share of values that differ is measured for the whole image: it is a cause's only
        # when no other cause accounts for a level or more on that input (float-rounding causes
        # riding along do not count); with two real causes neither gets it.
        real = [cause for cause, _, top, _ in entries if not is_sub_level(top or 0.0)]
        dominant = real[0] if len(real) == 1 else (entries[0][0] if len(entries) == 1 else None)
        for cause, mode, top, mean in entries:
            side = rows.setdefault((cause, mode), Side(check=check, message=str(o.get("message", ""))))
            side.inputs.add(str(o.get("input")))
            side.stages.add(str(o.get("stage", "")))
            change = o.get("change")
            if isinstance(change, Mapping) and change.get("exact") and cause in (change.get("families") or []):
                side.changes.append(change)
            if check == PIXEL_MISMATCH:
                if top is not None:
                    side.max_levels = max(side.max_levels or 0.0, float(top))
                if mean is not None:
                    side._means.append(float(mean))
                    side.mean_levels = sum(side._means) / len(side._means)
                share = _number(o.get("share")) if cause == dominant else None
                if share is not None:
                    side.share = max(side.share or 0.0, share)
                side.variant_sets.append(family_variants(o.get("attribution"), cause))
                prev = side.per_input.get(str(o.get("input")))
                cur = (None if top is None else float(top), None if mean is None else float(mean), share)
                side.per_input[str(o.get("input"))] = cur if prev is None else tuple(
                    a if b is None else b if a is None else max(a, b) for a, b in zip(prev, cur))  # type: ignore
    return rows


def family_variants(attribution: Any, family: str) -> set[str]:
    """The variants of `family` an attribution took, with their bit-identical alternatives."""
    out: set[str] = set()
    if not isinstance(attribution, Mapping):
        return out
    for entry in attribution.get("explained") or []:
        if not isinstance(entry, Mapping):
            continue
        if entry.get("root_cause") == family:
            out.add(str(entry.get("variant")))
        for alt in entry.get("alternatives") or []:
            fam, _, variant = str(alt).partition("/")
            if fam == family:
                out.add(variant)
    return out
