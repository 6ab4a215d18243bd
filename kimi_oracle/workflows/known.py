"""Known divergences: what a candidate is allowed to get wrong, from a baseline or from a file.

The gate judges a candidate root cause by root cause and mode class (`oracle.diagnosis` names
the causes of each pixel difference; `oracle.grouping` the mode class of the image at fault).
This module holds the rules, free of any candidate run, so that they can be tested on their own:

- `aggregate(observations)`: one row per (root cause, mode class) over the judged inputs of one
  side (NEW or OLD): the largest and the mean level difference the cause accounts for, the
  largest share of output values that differ, and the inputs it appeared on.
- `compare_rows(new, old, margin)`: each row's verdict, `new`, `worse`, `known` or `improved`
  (docs/gate.md states the rules).
- `KnownFile`: the `--known` TOML file (read by `core.files.load_toml`, validated key by key) and
  `write_known` for `--write-known`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kimi_oracle.core.errors import AssumptionError, InputError
from kimi_oracle.core.files import atomic_write_text, load_toml
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.oracle.kinds import ACCEPTS_INVALID, FINDING_KINDS, PIXEL_MISMATCH
from kimi_oracle.results.report import cause_entries, cause_levels

KNOWN_SCHEMA = "kimi-oracle.known"
KNOWN_SCHEMA_VERSION = 1

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


# ---------------------------------------------------------------------------------------------
# rows


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
        levels = cause_levels(o) if check == PIXEL_MISMATCH else {}
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
                    "why": why, "stages": stages,
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


def rows_markdown(rows: Sequence[Mapping[str, Any]], old_label: str = "OLD") -> list[str]:
    """The table every gate report opens with."""
    if not rows:
        return ["## Root causes × mode classes", "", "No divergence from the reference, on either side.", ""]
    out = ["## Root causes × mode classes", "",
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


# ---------------------------------------------------------------------------------------------
# the --known file


class KnownFileError(InputError):
    """A `--known` file that cannot be read or does not follow the schema (exit 2)."""


# Only root causes of pixel differences can be known: a crash, timeout, grid, feature-length,
# shape/dtype, invariance or accepts_invalid finding is never accepted by a file (`--write-known`
# leaves them out; a file naming one is refused, naming the entry).
NEVER_KNOWN = tuple(k for k in FINDING_KINDS if k != PIXEL_MISMATCH)


def never_known_kind(root_cause: str) -> str | None:
    """The finding kind a row or entry name is a key of (`crash[RGB](ValueError)` -> `crash`),
    when that kind can never be known; None for a pixel root cause."""
    for kind in NEVER_KNOWN:
        if root_cause == kind or root_cause.startswith((kind + "[", kind + "(", kind + "<")):
            return kind
    return None


_TOP_KEYS = {"schema", "schema_version", "candidate", "comment", "known"}
_ENTRY_KEYS = {"root_cause", "mode_class", "variant", "max_levels", "mean_levels", "share", "note"}


@dataclass
class KnownEntry:
    """One accepted divergence: a root cause (or a finding key) in a mode class (`*`: any),
    with limits (None: no limit on that metric)."""

    root_cause: str
    mode_class: str
    max_levels: float | None = None
    mean_levels: float | None = None
    share: float | None = None
    note: str = ""
    # The one variant of the root cause's step family accepted (docs/diagnosis.md: `family/variant`);
    # None: any. A row explained by another variant on some input is not accepted.
    variant: str | None = None

    def accepts_variants(self, side: Side) -> bool:
        """True when every observation of `side` was explained by this entry's variant (or it
        names none; observations whose attribution lists no variant of the family are not held
        against it)."""
        return self.variant is None or all(self.variant in vs for vs in side.variant_sets if vs)

    def covers(self, root_cause: str, mode_class: str) -> bool:
        """True when this entry is about that row."""
        return self.root_cause == root_cause and self.mode_class in ("*", mode_class)

    def beyond(self, side: Side, margin: Margin) -> list[str]:
        """The metrics of `side` beyond this entry's limits (plus the margin)."""
        return [m for m in METRICS if margin.exceeds(m, getattr(side, m), getattr(self, m))]

    def as_side(self) -> dict[str, Any]:
        """The limits in a row's `old` slot."""
        return {"max_levels": self.max_levels, "mean_levels": self.mean_levels, "share": self.share, "inputs": 0}


@dataclass
class KnownFile:
    """The accepted divergences of a candidate (`gate --known FILE`)."""

    entries: list[KnownEntry] = field(default_factory=list)
    candidate: str | None = None
    path: Path | None = None

    def match(self, root_cause: str, mode_class: str) -> KnownEntry | None:
        """The entry for this row: the exact mode class first, then `*`."""
        exact = [e for e in self.entries if e.root_cause == root_cause and e.mode_class == mode_class]
        if exact:
            return exact[0]
        return next((e for e in self.entries if e.covers(root_cause, mode_class)), None)


def _bad(path: Path, key: str, problem: str) -> KnownFileError:
    return KnownFileError(f"{key}: {problem} (schema: docs/gate.md, 'The --known file')", source=str(path))


def _limit(path: Path, where: str, name: str, value: Any, upper: float | None = None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise _bad(path, f"{where}.{name}", f"must be a finite number, got {value!r}")
    if value < 0 or (upper is not None and value > upper):
        bound = f"between 0 and {upper:g}" if upper is not None else ">= 0"
        raise _bad(path, f"{where}.{name}", f"must be {bound}, got {value!r}")
    return float(value)


def _check_variant(path: Path, where: str, root_cause: str, variant: Any) -> None:
    """A known entry's `variant`: a string naming a variant of the root cause's step family."""
    if not isinstance(variant, str) or not variant.strip():
        raise _bad(path, f"{where}.variant", f"must be a non-empty string, got {variant!r}")
    # The catalogue needs torch: imported only when a file names a variant, so that the CLI's
    # usage errors and refusals start without it (tests/test_cli_startup.py).
    from kimi_oracle.oracle.diagnosis import parse_assumption

    try:
        parse_assumption(f"{root_cause}={variant}")
    except AssumptionError as exc:
        raise _bad(path, f"{where}.variant", str(exc).replace("--assume ", "")) from None


def read_known(path: str | Path) -> KnownFile:
    """Read and validate a `--known` file; `KnownFileError` names the first bad key."""
    path = Path(path)
    try:
        data = load_toml(path)  # a regular file, capped, nesting bounded, numbers finite
    except InputError as exc:
        raise KnownFileError(exc.reason, source=str(path)) from None
    for key in data:
        if key not in _TOP_KEYS:
            raise _bad(path, key, f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})")
    if "schema" in data and data["schema"] != KNOWN_SCHEMA:
        raise _bad(path, "schema", f"must be {KNOWN_SCHEMA!r}, got {data['schema']!r}")
    if data.get("schema_version") != KNOWN_SCHEMA_VERSION:
        raise _bad(path, "schema_version", f"must be {KNOWN_SCHEMA_VERSION}, got {data.get('schema_version')!r}")
    for name in ("candidate", "comment"):
        if name in data and not isinstance(data[name], str):
            raise _bad(path, name, "must be a string")
    items = data.get("known", [])
    if not isinstance(items, list):
        raise _bad(path, "known", "must be an array of tables ([[known]])")
    out = KnownFile(candidate=data.get("candidate"), path=path)
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(items):
        where = f"known[{i}]"
        if not isinstance(item, dict):
            raise _bad(path, where, "must be a table")
        for key in item:
            if key not in _ENTRY_KEYS:
                raise _bad(path, f"{where}.{key}", f"unknown key (allowed: {', '.join(sorted(_ENTRY_KEYS))})")
        for name in ("root_cause", "mode_class"):
            if name not in item:
                raise _bad(path, f"{where}.{name}", "missing (use mode_class = \"*\" for every mode class)"
                           if name == "mode_class" else "missing")
            if not isinstance(item[name], str) or (name == "root_cause" and not item[name].strip()):
                raise _bad(path, f"{where}.{name}", f"must be a non-empty string, got {item[name]!r}"
                           if name == "root_cause" else f"must be a string, got {item[name]!r}")
        if "note" in item and not isinstance(item["note"], str):
            raise _bad(path, f"{where}.note", "must be a string")
        kind = never_known_kind(item["root_cause"])
        if kind is not None:
            raise _bad(path, f"{where}.root_cause", f"{item['root_cause']!r} is a {kind} finding: only root "
                       "causes of pixel differences can be known (never crash, timeout, grid_mismatch, "
                       "feature_length, shape_dtype, invariance or accepts_invalid)")
        if "variant" in item:
            _check_variant(path, where, item["root_cause"], item["variant"])
        ident = (item["root_cause"], item["mode_class"])
        if ident in seen:
            raise _bad(path, where, f"root cause {ident[0]!r} in mode class {ident[1]!r} is listed twice")
        seen.add(ident)
        out.entries.append(KnownEntry(
            root_cause=item["root_cause"], mode_class=item["mode_class"],
            max_levels=_limit(path, where, "max_levels", item.get("max_levels")),
            mean_levels=_limit(path, where, "mean_levels", item.get("mean_levels")),
            share=_limit(path, where, "share", item.get("share"), upper=1.0),
            note=item.get("note", ""), variant=item.get("variant")))
    return out


def _toml_str(s: str) -> str:
    """A TOML basic string: quotes, backslashes, control characters and DEL escaped; every other
    character as itself (the file is UTF-8). A lone surrogate cannot be written: U+FFFD."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif code < 0x20 or code == 0x7F:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\u{code:04X}"))
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\uFFFD")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _ceil(v: float) -> float:
    """Rounded up to 4 significant digits: a limit written from a run still holds for that run."""
    if v <= 0:
        return 0.0
    digits = 3 - int(math.floor(math.log10(v)))
    scale = 10.0 ** digits
    return math.ceil(v * scale) / scale


def known_toml(rows: Sequence[Mapping[str, Any]], candidate: str, *, note: str = "") -> str:
    """A `--known` file accepting NEW's rows as they are now (limits = what this run measured)."""
    lines = [
        "# kimi-oracle known divergences (docs/gate.md, 'The --known file').",
        "# Written by `kimi-oracle gate --write-known`: review every entry before relying on it.",
        f"schema = {_toml_str(KNOWN_SCHEMA)}",
        f"schema_version = {KNOWN_SCHEMA_VERSION}",
        f"candidate = {_toml_str(candidate)}",
    ]
    if note:
        lines.append(f"comment = {_toml_str(note)}")
    left_out = sum(1 for r in rows if r["new"].get("inputs") and r.get("check") != PIXEL_MISMATCH)
    if left_out:
        lines.append(f"# {left_out} row(s) left out: only pixel root causes can be known (never crash, timeout, "
                     "grid, feature length, shape, invariance or accepts_invalid findings)")
    for r in rows:
        side = r["new"]
        if not side.get("inputs") or r.get("check") != PIXEL_MISMATCH:
            continue
        lines += ["", "[[known]]", f"root_cause = {_toml_str(r['root_cause'])}",
                  f"mode_class = {_toml_str(r['mode_class'])}"]
        for name in METRICS:
            v = side.get(name)
            if v is not None:
                lines.append(f"{name} = {_ceil(float(v))!r}")
        lines.append(f"note = {_toml_str(str(r.get('message', ''))[:200])}")
    return "\n".join(lines) + "\n"


def write_known(path: str | Path, rows: Sequence[Mapping[str, Any]], candidate: str, *, note: str = "") -> Path:
    """Write `known_toml` atomically (nothing half-written)."""
    return atomic_write_text(Path(path), known_toml(rows, candidate, note=note))
