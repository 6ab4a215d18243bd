"""The `--known` TOML file: read and validated key by key (`read_known`), written (`write_known`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from kimi_oracle.core.errors import AssumptionError, InputError
from kimi_oracle.core.files import atomic_write_text, load_toml
from kimi_oracle.oracle.kinds import FINDING_KINDS, PIXEL_MISMATCH
from kimi_oracle.workflows.known.sides import METRICS, Margin, Side

KNOWN_SCHEMA = "kimi-oracle.known"
KNOWN_SCHEMA_VERSION = 1


class KnownFileError(InputError):
    """A `--known` file that cannot be read or does not follow the schema (exit 2)."""


# Only root causes of pixel differences can be known: a crash, timeout, grid, feature-length,
# shape/dtype, invariance or accepts_invalid finding is never accepted by a file (`--write-known`
# leaves them out; a file naming one is refused, naming the entry).
NEVER_KNOWN = tuple(k for k in FINDING_KINDS if k != PIXEL_MISMATCH)


def never_known_kind(root_cause: str) -> str | None:
    """The finding kind a row or entry name is a key of (`crash(ValueError: ...)` or the older
    `crash[RGB](ValueError)` -> `crash`),
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
    # usage errors and refusals start without it (tests/cli/test_cli_startup.py).
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
