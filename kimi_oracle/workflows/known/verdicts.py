"""Each row's verdict against a baseline or a known file (`compare_rows`), and its Markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.oracle.kinds import ACCEPTS_INVALID, PIXEL_MISMATCH
from kimi_oracle.workflows.known.sides import ABSENT, IMPROVED, KNOWN, METRICS, NEW, VERDICTS, WORSE, Margin, Side

if TYPE_CHECKING:
    from kimi_oracle.workflows.known.known_file import KnownFile


def _confounded(new: Mapping[tuple[str, str], Side], new_causes: set[str]) -> dict[str, set[str]]:
    """Input -> the causes NEW has there that OLD has nowhere (each accounting for a level or more
    on that input): where they act, the attribution of the other causes is not comparable."""
    out: dict[str, set[str]] = {}
    for (cause, _mode), side in new.items():
        if cause not in new_causes:
            continue
        for i, (top, _mean, _share) in side.per_input.items():
            if not is_sub_level(top or 0.0):
                out.setdefault(i, set()).add(cause)
    return out


def _order(row: Mapping[str, Any]) -> tuple:
    side = row["new"] if row["new"]["inputs"] else row["old"]
    return (not row["fails"], VERDICTS.index(row["verdict"]), row["check"] != PIXEL_MISMATCH,
            -(side["max_levels"] or 0.0), row["root_cause"], row["mode_class"])


def compare_rows(new: Mapping[tuple[str, str], Side], old: Mapping[tuple[str, str], Side] | None,
                 margin: Margin, *, known: "KnownFile | None" = None, strict: bool = False) -> list[dict[str, Any]]:
    """Each row's verdict (docs/gate.md):

    - with a baseline (`old` given): a pixel root cause NEW has and OLD has not is `new`; a shared
      one whose max levels, mean levels or share grew beyond the margin is `worse`; one that fell
      beyond the margin, or that NEW lost, is `improved`; else `known`. Any other failure (grid,
      feature length, shape/dtype, crash, timeout, invariance, accepts_invalid) is `known` only
      when OLD failed the same way on every input NEW did (`improved` when NEW's inputs are fewer);
      else `new`.
    - without one (`old` None): every row of NEW is `new` (the absolute verdict).
    - with a known file: a row the file accepts, within its limits plus the margin, is `known`;
      beyond them `worse`; file entries NEW no longer shows are `improved`. With a baseline too,
      a row the baseline would fail but the file accepts is `known`.

    `accepts_invalid` rows, and `new` pixel rows under one level (float rounding only), are
    reported but fail only under `strict` (in the relative modes; without a baseline or a known
    file every row fails, as every finding does)."""
    out: list[dict[str, Any]] = []
    keys = list(new) + [k for k in (old or {}) if k not in new]
    confounded = _systematic_confounding(new, old, known)
    for key in keys:
        n, o = new.get(key), (old or {}).get(key)
        check = (n or o).check  # type: ignore[union-attr]
        if old is not None:
            verdict, why = _baseline_verdict(n, o, margin)
            verdict, why = _unconfounded_verdict(key, n, o, margin, confounded, verdict, why)
        else:
            verdict, why = NEW, "no baseline: every divergence fails"
        # (a file never accepts a failure other than a pixel difference, whatever it names)
        entry = known.match(*key) if known is not None and check == PIXEL_MISMATCH else None
        if entry is not None and n is not None and not entry.accepts_variants(n):
            shown = sorted({v for vs in n.variant_sets for v in vs}) or ["none"]
            why = (f"the known file accepts {entry.root_cause} only as variant {entry.variant!r}; NEW shows "
                   f"{', '.join(shown)}") if old is None else f"{why}; not the known file's variant {entry.variant!r}"
            entry = None
        old_dict = o.to_dict() if o is not None else dict(ABSENT)
        if known is not None and old is None:
            verdict, why = _known_file_verdict(n, entry, margin, verdict, why)
            if entry is not None:
                old_dict = entry.as_side()
        elif entry is not None and n is not None and verdict in (NEW, WORSE) and not entry.beyond(n, margin):
            verdict, why = KNOWN, f"{why}; accepted by the known file"
        fails = verdict in (NEW, WORSE) and (check != ACCEPTS_INVALID or strict)
        if (fails and not strict and verdict == NEW and (old is not None or known is not None)
                and check == PIXEL_MISMATCH and n is not None and n.max_levels is not None and is_sub_level(n.max_levels)):
            fails = False  # float rounding only (under one level): reported, fails under --strict
            why += "; float rounding only (under one level): fails only with --strict"
        stages = sorted((n.stages if n is not None else set()) | (o.stages if o is not None else set()))
        out.append({"root_cause": key[0], "mode_class": key[1], "check": check, "old": old_dict,
                    "new": n.to_dict() if n is not None else dict(ABSENT), "verdict": verdict, "fails": fails,
                    "why": why, "stages": stages, "change": n.change() if n is not None else None,
                    "message": (n or o).message})  # type: ignore[union-attr]
    if known is not None and old is None:
        out.extend(_gone_known_rows(new, known))
    out.sort(key=_order)
    return out


def _systematic_confounding(new: Mapping[tuple[str, str], Side], old: Mapping[tuple[str, str], Side] | None,
                            known: "KnownFile | None") -> dict[str, set[str]]:
    """Input -> the systematic new root causes acting there (none without a baseline, or with a known file)."""
    if old is None:
        return {}
    # A systematic new root cause: `new` (a level or more; OLD does not show it there) in two
    # mode classes or more. On the inputs where it acts, the other causes' levels are split
    # with it by the attribution and cannot be compared with OLD's (docs/gate.md).
    classes: dict[str, int] = {}
    for (c, m), side in new.items():
        if side.check == PIXEL_MISMATCH and not is_sub_level(side.max_levels or 0.0) and (c, m) not in old:
            classes[c] = classes.get(c, 0) + 1
    # (Not with a known file: it may accept the systematic cause itself, and nothing would
    # then fail for the causes it excused.)
    if known is not None:
        return {}
    return _confounded(new, {c for c, k in classes.items() if k >= 2})


def _unconfounded_verdict(key: tuple[str, str], n: Side | None, o: Side | None, margin: Margin,
                          confounded: Mapping[str, set[str]], verdict: str, why: str) -> tuple[str, str]:
    """A failing pixel row judged again on the inputs where no systematic new cause acts (not
    judged at all when it shows only where one does)."""
    if verdict in (NEW, WORSE) and n is not None and n.check == PIXEL_MISMATCH and confounded \
            and key[0] not in {c for cs in confounded.values() for c in cs}:
        clear = {i for i in n.inputs if i not in confounded}
        by = sorted({c for i in n.inputs if i in confounded for c in confounded[i]})
        if not clear:
            verdict, why = KNOWN, (f"seen only on inputs where {', '.join(by)} (new) also acts: not "
                                   "comparable there, so not judged")
        elif len(clear) < len(n.inputs):
            again, why2 = _baseline_verdict(n.restricted(clear), o, margin)
            if again not in (NEW, WORSE):
                verdict, why = again, f"{why2} on the {len(clear)} input(s) where no new cause acts"
    return verdict, why


def _known_file_verdict(n: Side | None, entry: Any, margin: Margin, verdict: str, why: str) -> tuple[str, str]:
    """A row judged against the known file alone (no baseline): gone, within its limits or beyond."""
    if n is None:
        return IMPROVED, "gone"
    if entry is not None:
        beyond = entry.beyond(n, margin)
        if beyond:
            return WORSE, f"beyond the known limits ({', '.join(beyond)})"
        return KNOWN, "within the known limits"
    # (not in the known file and no baseline: stays `new`)
    return verdict, why


def _gone_known_rows(new: Mapping[tuple[str, str], Side], known: "KnownFile") -> list[dict[str, Any]]:
    """An `improved` row for each known file entry NEW no longer shows."""
    return [{"root_cause": entry.root_cause, "mode_class": entry.mode_class, "check": PIXEL_MISMATCH,
             "old": entry.as_side(), "new": dict(ABSENT), "verdict": IMPROVED, "fails": False,
             "why": "in the known file, not shown by NEW", "stages": [], "message": entry.note}
            for entry in known.entries if not any(entry.covers(*k) for k in new)]


def _baseline_verdict(n: Side | None, o: Side | None, margin: Margin) -> tuple[str, str]:
    if n is None:
        return IMPROVED, "gone"
    if n.check != PIXEL_MISMATCH:
        if o is None:
            return NEW, "OLD never failed this way"
        missing = n.inputs - o.inputs
        if missing:
            return NEW, f"OLD does not fail this way on {len(missing)} of NEW's {len(n.inputs)} input(s)"
        if len(n.inputs) < len(o.inputs):
            return IMPROVED, f"on {len(n.inputs)} input(s), OLD on {len(o.inputs)}"
        return KNOWN, "OLD fails the same way on the same inputs"
    if o is None:
        return NEW, "OLD does not have this root cause in this mode class"
    # The mean over inputs is the one metric that can grow by losing inputs: where NEW no longer
    # shows the cause on some of OLD's inputs, its mean is compared with OLD's on the inputs NEW
    # still shows it on (a maximum or a share only falls when inputs are lost).
    common = o.inputs & n.inputs
    o_mean = o.restricted(common).mean_levels if common and common != o.inputs and o.per_input else o.mean_levels
    worse_mean = margin.exceeds("mean_levels", n.mean_levels, o_mean)
    grew = [m for m in METRICS
            if (worse_mean if m == "mean_levels" else margin.exceeds(m, getattr(n, m), getattr(o, m)))]
    if grew:
        return WORSE, "grew beyond the margin: " + ", ".join(grew)
    fell = [m for m in METRICS if margin.exceeds(m, getattr(o, m), getattr(n, m))]
    if fell:
        return IMPROVED, "fell beyond the margin: " + ", ".join(fell)
    if all(getattr(n, m) == getattr(o, m) for m in METRICS):
        return KNOWN, "the same as OLD"
    return KNOWN, "within the margin of OLD"


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}%" if pct else f"{v:.3g}"


def describe_side(side: Mapping[str, Any]) -> str:
    """`max 3 / mean 0.5 levels, 12.0% of values, 4 inputs` (or `-`)."""
    if not side.get("inputs") and side.get("max_levels") is None:
        return "-"
    text = f"max {_fmt(side.get('max_levels'))} / mean {_fmt(side.get('mean_levels'))} levels"
    if side.get("share") is not None:
        text += f", {_fmt(side['share'], pct=True)} of values"
    if side.get("inputs"):
        text += f", {side['inputs']} input(s)"
    return text


def row_reason(row: Mapping[str, Any]) -> str:
    """The line the gate's reasons give a failing row."""
    label = f"`{row['root_cause']}`" + (f" [{row['mode_class']}]" if row["mode_class"] else "")
    return (f"{row['verdict']}: {label}: {row['why']} (NEW {describe_side(row['new'])}; "
            f"OLD {describe_side(row['old'])})")


def rows_markdown(rows: Sequence[Mapping[str, Any]], old_label: str = "OLD",
                  title: str = "Root causes × mode classes") -> list[str]:
    """The table every gate report opens with (`title`: its heading)."""
    if not rows:
        return [f"## {title}", "", "No divergence from the reference, on either side.", ""]
    out = [f"## {title}", "",
           f"| verdict | root cause | mode class | {old_label} (max / mean levels, share) | "
           "NEW (max / mean levels, share) | why |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        verdict = f"**{r['verdict'].upper()}**" if r["fails"] else r["verdict"]
        why = str(r["why"]).replace("|", "\\|")
        out.append(f"| {verdict} | `{r['root_cause']}` | {r['mode_class'] or '-'} | {describe_side(r['old'])} | "
                   f"{describe_side(r['new'])} | {why} |")
    out.append("")
    return out
