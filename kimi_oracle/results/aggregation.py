"""Aggregation of findings into rows by root cause x mode class, and what each cause means."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.oracle.kinds import CHECK_MEANINGS, PIXEL_MISMATCH
from kimi_oracle.results.explanation import explanation_fields, float_rounding
from kimi_oracle.results.finding import Finding



def finding_summary(f: Finding | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON entry of one finding in a run summary (fuzz, check, nightly, gate)."""
    if not isinstance(f, Finding):
        return dict(f)
    return {
        "id": f.id,
        "check": f.check,
        "kind": f.kind,
        "key": f.key,
        "group": f.extra.get("group") or f.key,
        "message": f.message,
        "root_causes": list(f.root_causes),
        **explanation_fields(f.attribution),
        "max_levels": f.max_levels,
        "mean_levels": f.mean_levels,
        "residual_max_levels": f.residual_max_levels,
        "residual_mean_levels": f.residual_mean_levels,
        "max_levels_seen": f.max_levels_seen if f.max_levels_seen is not None else f.max_levels,
        "hits": f.hits,
        "mode_classes": list(f.extra.get("mode_classes") or []),  # (those the run's examples of it hit)
        "example": f.example,
        "path": str(f.path) if f.path else None,
        "images": list(f.params),
        "sources": list(f.sources),
    }


def root_cause_rows(findings: Iterable[Finding | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (root cause, mode class) over pixel findings, worst first: the largest and mean
    levels, how many examples hit it, whether it is float rounding only (under one level), and
    one repro folder with its picture. Other findings (grids, crashes, ...) get one row per key.
    A row is float rounding only when a normalization variant reproduces its findings
    (`explanation.float_rounding`): an unexplained sub-level difference is a row of its own."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for f in findings:
        e = finding_summary(f)
        if isinstance(f, Finding):
            e["attribution"] = f.attribution
        whole = e.get("max_levels_seen") if e.get("max_levels_seen") is not None else e.get("max_levels")
        for cause, mode, top, mean in cause_entries(e["check"], e.get("key"), e.get("root_causes"), cause_levels(f),
                                                    (whole, e.get("mean_levels"))):
            row = rows.setdefault((cause, mode), {
                "root_cause": cause, "mode_class": mode, "check": e["check"], "message": e.get("message", ""),
                "max_levels": None,
                "mean_levels": None, "hits": 0, "findings": 0, "float_rounding_only": True,
                "repro": None, "picture": None, "_best": -1.0, "_means": []})
            row["hits"] += int(e.get("hits") or 1)
            row["findings"] += 1
            if isinstance(top, (int, float)):
                row["max_levels"] = max(row["max_levels"] or 0.0, float(top))
                if not float_rounding(cause, top, e):
                    row["float_rounding_only"] = False
            else:
                row["float_rounding_only"] = e["check"] == PIXEL_MISMATCH and row["float_rounding_only"]
            if isinstance(mean, (int, float)):
                row["_means"].append(float(mean))
            if e["check"] != PIXEL_MISMATCH:
                row["float_rounding_only"] = False
            score = float(top) if isinstance(top, (int, float)) else 0.0
            if e.get("path") and score > row["_best"]:
                row["_best"] = score
                row["repro"] = e["path"]
                picture = Path(e["path"]) / "diff.png"
                row["picture"] = str(picture) if picture.is_file() else None
    out = []
    for row in rows.values():
        means = row.pop("_means")
        row.pop("_best")
        row["mean_levels"] = sum(means) / len(means) if means else None
        out.append(row)
    out.sort(key=lambda r: (r["float_rounding_only"], r["check"] != PIXEL_MISMATCH, -(r["max_levels"] or 0.0),
                            r["root_cause"], r["mode_class"]))
    return out


def cause_entries(check: str, key: str | None, root_causes: Sequence[str] | None,
                  levels: Mapping[str, tuple[Any, Any]], whole: tuple[Any, Any]) -> list[tuple[str, str, Any, Any]]:
    """The rows a failure counts under, the one rule of both tables (this module's
    `root_cause_rows` and the gate's `workflows.known.aggregate`): (root cause, mode class,
    max levels, mean levels). A pixel difference counts under each of its root causes with the
    levels that cause accounts for (`levels`, from `cause_levels`; `whole` for a cause without
    its own); any other failure, or a pixel difference without a cause, under its key (or its
    check when it has none). The mode class is the key's (`grouping.key_mode_class`)."""
    from kimi_oracle.oracle.grouping import key_mode_class

    key = key or check
    causes = list(root_causes or []) if check == PIXEL_MISMATCH else []
    mode = key_mode_class(key)
    return [(cause, mode, *levels.get(cause, whole)) for cause in causes or [key]]


def cause_levels(f: Finding | Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """The levels each root cause of a finding accounts for: how far the largest and the mean
    unexplained difference fell when the attribution applied it (docs/diagnosis.md). A cause
    that only removes float rounding accounts for less than one level even when it shares a
    finding with a 200-level one. The first cause is scaled to the run's largest difference."""
    attribution = f.attribution if isinstance(f, Finding) else f.get("attribution")
    if not isinstance(attribution, Mapping) or not attribution.get("explained"):
        return {}
    seen = f.max_levels_seen if isinstance(f, Finding) else f.get("max_levels_seen")
    out: dict[str, tuple[float, float]] = {}
    by_image: dict[Any, list[Mapping[str, Any]]] = {}
    for entry in attribution["explained"]:
        by_image.setdefault(entry.get("image"), []).append(entry)
    for entries in by_image.values():
        prev_max = float(attribution.get("max_levels") or 0.0)
        prev_mean = float(attribution.get("mean_levels") or 0.0)
        drops = []
        for entry in entries:
            rest_max = entry.get("residual_max_levels")
            rest_mean = entry.get("residual_mean_levels")
            rest_max = prev_max if rest_max is None else float(rest_max)
            rest_mean = prev_mean if rest_mean is None else float(rest_mean)
            drops.append([max(0.0, prev_max - rest_max), max(0.0, prev_mean - rest_mean)])
            prev_max, prev_mean = rest_max, rest_mean
        # A cause taken as the first of a pair (an enabling step such as palette-bicubic) lowers
        # the largest difference only together with the next: it shares that step's drop.
        for i in range(len(drops) - 2, -1, -1):
            if drops[i][0] == 0.0 and drops[i + 1][0] > 0.0:
                drops[i] = [drops[i + 1][0], max(drops[i][1], drops[i + 1][1])]
        if drops and isinstance(seen, (int, float)):
            scale = float(seen) / float(attribution.get("max_levels") or seen or 1.0)
            if scale > 1.0:  # the run saw a larger difference for this key than the shrunk case
                for d in drops:
                    if not is_sub_level(d[0]):
                        d[0] *= scale
        for entry, (top, mean) in zip(entries, drops):
            old = out.get(entry["root_cause"], (0.0, 0.0))
            # The largest change a cause accounts for is at least its mean change: a variant that
            # lowers the mean by 74 levels and the largest difference by only 64 (another value
            # is now the largest) changed some value by 74 or more. So the max is never below
            # the mean (rows read "max 63.75, mean 74.2" before).
            out[entry["root_cause"]] = (max(old[0], top, mean), max(old[1], mean))
    return out


def cause_meaning(root_cause: str) -> str:
    """The one-sentence meaning of a root-cause id (or of a check, for other findings)."""
    from kimi_oracle.oracle.diagnosis import MEANINGS

    if root_cause in MEANINGS:
        return MEANINGS[root_cause]
    check = root_cause.split("[")[0]
    if check in CHECK_MEANINGS:
        return CHECK_MEANINGS[check]
    return f"the oracle's {check} check failed"


