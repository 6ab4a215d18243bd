"""The gate's rows name the change: NEW diagnosed against OLD on every input where they differ.

Each stage that has both sides' outputs on an input calls `observe_change` for NEW's observation:
`oracle.diagnosis.change.diagnose_change` says where NEW's output differs from OLD's and which
single step change (OLD's inferred pipeline plus one variant, fitted where the data determines
it) turns one into the other. `named_by_change` then rewrites NEW's observations for the rows:
where the change is exact, NEW's causes on that input are OLD's causes (with OLD's levels) plus
the change's family (with the change's levels), so a one-line defect yields rows of its one
family; the per-side rows (each side against the reference) stay in the report, below.
Rule: docs/gate.md ("The change").
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.oracle.checks import INVARIANCE, PIXEL_MISMATCH
from kimi_oracle.oracle.diagnosis.change import CHANGE_MAX_RUNS, diagnose_change
from kimi_oracle.results.report import cause_levels

# Inputs whose change the second tier (a search from OLD's inferred steps) diagnoses in one gate
# run; past it only the first tier runs (the search costs a finding's attribution).
MAX_STEP_CHANGES = 40


def observe_change(ctx: Any, new_obs: dict[str, Any] | None, images: Sequence[Any], config: PreprocessConfig,
                   new_out: Any, old_out: Any, index: int, old_obs: Mapping[str, Any] | None,
                   old_is_reference: bool = False) -> dict[str, Any] | None:
    """NEW's observation given its `change` (what turns OLD's output into NEW's on image `index`),
    when it is a pixel difference and both outputs are at hand; returns the change (or None)."""
    if new_obs is None or new_obs.get("check") != PIXEL_MISMATCH or new_out is None or old_out is None:
        return None
    spent = getattr(ctx, "step_changes", 0)
    old_attribution = None if old_obs is None else old_obs.get("attribution")
    change = diagnose_change(images, config, new_out, old_out, index=index, old_attribution=old_attribution,
                             old_is_reference=old_is_reference or old_obs is None,
                             max_runs=0 if spent >= MAX_STEP_CHANGES else CHANGE_MAX_RUNS)
    if change is not None and change.get("tier") == "steps":
        ctx.step_changes = spent + 1
    if change is not None:
        new_obs["change"] = change
    return change


def _levels(change: Mapping[str, Any]) -> tuple[float | None, float | None]:
    # (None where a value is not finite: the row then takes no level from it, as for any such value)
    levels = change.get("levels") or {}
    top, mean = levels.get("max"), levels.get("mean")
    return (float(top) if isinstance(top, (int, float)) else None,
            float(mean) if isinstance(mean, (int, float)) else None)


def named_by_change(new: Iterable[Mapping[str, Any]], old: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """NEW's observations with each exact change folded in: the root causes OLD has on that input
    and image (its levels), plus the change's families (the change's levels between the two
    outputs); `per_side_root_causes` keeps NEW's own. Observations without an exact change are
    NEW's own."""
    old_by = {(o.get("input"), o.get("stage")): o for o in old if o.get("check") == PIXEL_MISMATCH}
    new = consistent(new)
    out = []
    for o in new:
        change = o.get("change")
        if isinstance(change, Mapping) and change.get("exact") and o.get("check") == INVARIANCE:
            out.append({**o, "key": change.get("family"), "per_side_root_causes": [str(o.get("key"))]})
            continue
        if not isinstance(change, Mapping) or not change.get("exact") or o.get("check") != PIXEL_MISMATCH:
            out.append(dict(o))
            continue
        prior = old_by.get((o.get("input"), o.get("stage")))
        causes = [c for c in (prior.get("root_causes") or [] if prior else [])]
        levels = dict(cause_levels(prior)) if prior else {}
        if prior is not None:
            for c in causes:  # (a cause without its own levels: OLD's whole difference)
                levels.setdefault(c, (prior.get("max_levels"), prior.get("mean_levels")))
        top, mean = _levels(change)
        for family in change.get("families") or [change.get("family")]:
            was = levels.get(family)
            levels[family] = (top, mean) if not was or top is None or mean is None else (
                max(float(was[0] or 0.0), top), max(float(was[1] or 0.0), mean))
            if family not in causes:
                causes.append(family)
        before = prior.get("attribution") if prior else None
        explained = list(before.get("explained") or []) if isinstance(before, Mapping) else []
        explained.append({"root_cause": change.get("family"), "variant": change.get("variant"),
                          "image": (change.get("where") or {}).get("image")})
        out.append({**o, "root_causes": causes, "cause_levels": levels,
                    "attribution": {**(before if isinstance(before, Mapping) else {}), "explained": explained},
                    "per_side_root_causes": list(o.get("root_causes") or [])})
    return out


def consistent(observations: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The observations with each exact change that had bit-identical alternatives named after
    the alternative the most other inputs' changes name (a one-line defect changes one step on
    every input; on one input another step may give the same output)."""
    obs = [dict(o) for o in observations]
    counts: dict[str, int] = {}
    for o in obs:
        c = o.get("change")
        if isinstance(c, Mapping) and c.get("exact"):
            counts[str(c.get("name"))] = counts.get(str(c.get("name")), 0) + 1
    for o in obs:
        c = o.get("change")
        if not isinstance(c, Mapping) or not c.get("exact") or len(c.get("families") or []) != 1:
            continue
        options = [str(c.get("name"))] + [str(a) for a in c.get("alternatives") or []]
        best = max(options, key=lambda n: (counts.get(n, 0), n == c.get("name")))
        if best != c.get("name"):
            family, _, variant = best.partition("/")
            o["change"] = {**c, "family": family, "variant": variant, "name": best, "families": [family],
                           "chosen_among_alternatives": True}
    return obs
