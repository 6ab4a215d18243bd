"""The answer a conformance report opens with: root causes x engine paths, and the real defects.

`summarize(report)` reads a conformance report (`workflows.conformance`) into:

- `columns`: one per engine path that ran (`paddleformers 1.2.0 paddleformers`);
- `rows`: one per root cause at one level or more (a pixel family, `unexplained`), per crash or
  refusal (`crash`: its exception type and message signature, `oracle.grouping.failure_signature`,
  so one cause met on every mode class is one row and two refusals are two), and per other finding
  (planner, request, video: its check and field); each cell the worst level, the mode classes and
  the examples that hit it, sorted by severity: pixel rows by their worst level, then crashes and
  refusals, then the other findings by examples;
- `defects`: one per (column, row), what the engine does (the variants that reproduced it, or the
  family's meaning), what the checkpoint does (`DOC_ROWS`), where in the engine (the adapter's
  `STEP_MAP`, or for a crash the engine's own frame in its traceback), and the repro folder; a
  crash is a `refusal` when the engine's own code raised it (the traceback's innermost frame lies
  in the engine's tree), else a `crash` (a library under it failed);
- `sub_level`: per column, the rows under one level (float rounding, or an unexplained residue
  under one level), collapsed.

An engine that could not be loaded gets a column of its own, and it and every part that ended in a
harness error get the first row, `did not run`: the opening never reads as a clean pass.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_oracle.adapters.engines import STEP_MAP
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.oracle.diagnosis.batch_layout import describe
from kimi_oracle.oracle.diagnosis.catalogue import DOC_ROWS, MEANINGS
from kimi_oracle.oracle.kinds import CRASH, PIXEL_MISMATCH, TIMEOUT

# Row kinds, in severity order: parts that could not run (nothing is known there), pixels, crashes
# and refusals, other findings.
ERROR, PIXEL, FAILURE, OTHER = "error", "pixel", "crash", "finding"
# The golden cases a path does otherwise: evidence of the defects above (a matrix row, the last),
# not a defect of its own (no paragraph).
EVIDENCE = "evidence"
DID_NOT_RUN = "did not run (harness error or engine not loaded)"
_KINDS = (ERROR, PIXEL, FAILURE, OTHER, EVIDENCE)


@dataclass
class Cell:
    max_levels: float | None = None
    modes: set[str] = field(default_factory=set)
    hits: int = 0
    repro: str | None = None
    picture: str | None = None
    variants: set[str] = field(default_factory=set)
    message: str = ""
    best: float = -1.0

    def add(self, levels: Any, modes: Any, hits: Any, repro: Any, picture: Any = None) -> None:
        score = float(levels) if isinstance(levels, (int, float)) else 0.0
        if isinstance(levels, (int, float)):
            self.max_levels = max(self.max_levels or 0.0, float(levels))
        self.modes.update(m for m in (modes or []) if m and m != "-")
        self.hits += int(hits or 1)
        if repro and score > self.best:
            self.best, self.repro, self.picture = score, str(repro), (str(picture) if picture else None)


@dataclass
class Defect:
    column: str
    row: str
    kind: str
    cell: Cell
    does: str
    checkpoint: str
    where: str


def _column(entry: dict[str, Any], part: dict[str, Any]) -> str:
    return f"{entry['engine']} {entry.get('version') or '?'} `{part['spec'].split('@')[0]}`"


@functools.lru_cache(maxsize=None)
def _frames(finding_path: str | None) -> tuple[tuple[str, str, str, str], ...]:
    """(file, line, function, code) of each frame of a crash's traceback (its `stats.json`, read
    once: the row's label and its place both ask)."""
    if not finding_path:
        return ()
    try:
        stats = json.loads((Path(finding_path) / "stats.json").read_text("utf-8")).get("stats") or {}
    except (OSError, ValueError, AttributeError):
        return ()
    text = str(stats.get("traceback") or "")
    lines = text.splitlines()
    out = []
    for n, line in enumerate(lines):  # (Python's `line N, in f`; faulthandler's `line N in f`)
        m = re.match(r'\s*File "([^"]+)", line (\d+),? in (\S+)', line)
        if m:
            code = lines[n + 1].strip() if n + 1 < len(lines) and not lines[n + 1].lstrip().startswith("File ") else ""
            out.append((m.group(1), m.group(2), m.group(3), code))
    return tuple(out[::-1] if "most recent call first" in text else out)  # (innermost last)


def _crash_row(key: str, finding_path: str | None, root: str | None) -> str:
    """`refusal: TYPE: MESSAGE` when the engine's own code raised it on purpose (the innermost frame
    lies in its tree and is a `raise`), `timeout: ...` for a call that never answered, else
    `crash: ...` (a library under it failed, an engine bug, or nothing tells)."""
    if key.startswith(TIMEOUT):
        return f"timeout: {key}"
    inner = key[key.find("(") + 1:-1] if key.startswith(CRASH + "(") else key
    frames = _frames(finding_path)
    own = bool(frames and root and frames[-1][0].startswith(root.rstrip("/") + "/")
               and frames[-1][3].startswith("raise"))
    return f"{'refusal' if own else 'crash'}: {inner}"


def engine_frame(finding_path: str | None, root: str | None) -> str | None:
    """`file.py:LINE function: code` of the innermost frame of a crash's traceback that lies in the
    engine's tree (`root`), read from the finding's `stats.json`; None when there is none."""
    if not root:
        return None
    found = None
    for file, line, function, code in _frames(finding_path):
        if file.startswith(root.rstrip("/") + "/"):
            found = f"{file[len(root.rstrip('/')) + 1:]}:{line} {function}" + (f": `{code}`" if code else "")
    return found


def _part_rows(entry: dict[str, Any], part: dict[str, Any], rows: dict, sub: dict, kinds: dict) -> None:
    col = _column(entry, part)
    findings = part.get("findings") or []
    if part["part"] in ("image-fuzz", "image-corpus") and part.get("root_causes"):
        for r in part["root_causes"]:
            cause = str(r.get("root_cause"))
            sub_level = r.get("check") == PIXEL_MISMATCH and isinstance(r.get("max_levels"), (int, float)) \
                and is_sub_level(r["max_levels"])
            if r.get("float_rounding_only") or sub_level:  # (under one level: one line per engine)
                sub.setdefault(col, {}).setdefault(cause, Cell()).add(r.get("max_levels"), [r.get("mode_class")],
                                                                       r.get("hits"), r.get("repro"))
                continue
            own = [f for f in findings if f.get("key") == cause or cause in (f.get("root_causes") or [])]
            repro = own[0].get("path") if own else r.get("repro")
            name, kind = ((_crash_row(cause, repro, entry.get("loads_from")), FAILURE)
                          if r.get("check") in (CRASH, TIMEOUT) else (cause, PIXEL))
            if r.get("check") not in (PIXEL_MISMATCH, CRASH, TIMEOUT):
                name, kind = cause, OTHER
            cell = rows.setdefault(name, {}).setdefault(col, Cell())
            kinds[name] = kind
            modes = [r.get("mode_class")] + [m for f in own if kind == FAILURE for m in f.get("mode_classes") or []]
            cell.add(r.get("max_levels"), modes, r.get("hits"), r.get("repro"), r.get("picture"))
            cell.variants.update(v for f in own for v in f.get("variants") or [] if v.split("/")[0] == cause)
            if kind != PIXEL:
                cell.message = str((own[0].get("message") if own else None) or r.get("message") or "")
        return
    if part["part"] == "image-goldens":
        differing = part.get("differing_by_mode") or {}
        if differing:  # (recorded golden cases the path does otherwise; their repro is the part's folder)
            name = "image-goldens: golden cases differ"
            kinds[name] = EVIDENCE
            rows.setdefault(name, {}).setdefault(col, Cell()).add(None, list(differing), sum(differing.values()),
                                                                   part.get("out"))
        return
    for f in findings:
        check = str(f.get("check") or "")
        if check in (CRASH, TIMEOUT):
            name, kind = _crash_row(str(f.get("key") or check), f.get("path"), entry.get("loads_from")), FAILURE
        else:
            causes = [c for c in f.get("root_causes") or [] if c]
            field_name = f" {f['field']}" if f.get("field") else ""
            name, kind = (f"{part['part']}: {', '.join(causes) if causes else check + field_name}", OTHER)
        cell = rows.setdefault(name, {}).setdefault(col, Cell())
        kinds[name] = kind
        cell.add(f.get("max_levels") if check == PIXEL_MISMATCH else None, f.get("mode_classes"), f.get("hits"),
                 f.get("path"))
        cell.message = cell.message or str(f.get("message") or "")


def _severity(name: str, cells: dict[str, Cell], kinds: dict[str, str]) -> tuple:
    kind = kinds[name]
    worst = max((c.max_levels or 0.0) for c in cells.values())
    return (_KINDS.index(kind), -worst, -sum(c.hits for c in cells.values()), name)


def _does(row: str, kind: str, cell: Cell) -> str:
    if kind == PIXEL and cell.variants:
        told = [describe(v.split("/", 1)[-1]) or f"`{v}`" for v in sorted(cell.variants)]
        return "; ".join(dict.fromkeys(told))
    if kind == PIXEL:
        return MEANINGS.get(row, row)
    return (cell.message.split("\n")[0][:300]) or row


def _where(entry: dict[str, Any], col_path: str, row: str, kind: str, cell: Cell) -> str:
    if kind == ERROR:
        return f"log: `{cell.repro}`" if cell.repro else "the engine could not be loaded"
    if kind == FAILURE:
        frame = engine_frame(cell.repro, entry.get("loads_from"))
        if frame:
            return frame
    steps = STEP_MAP.get(col_path, {})
    return steps.get(row) or "not in the adapter's step map"


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The matrix, the real defects and the collapsed sub-level rows of a conformance report."""
    rows: dict[str, dict[str, Cell]] = {}
    sub: dict[str, dict[str, Cell]] = {}
    kinds: dict[str, str] = {}
    columns: list[str] = []
    owners: dict[str, tuple[dict[str, Any], str]] = {}
    for entry in report.get("engines") or []:
        if entry.get("error") or not entry.get("parts"):  # not loaded, or nothing of it ran: said so
            col = f"{entry.get('engine')} {entry.get('version') or ''} (not run)".replace("  ", " ")
            columns.append(col)
            owners[col] = (entry, str(entry.get("engine")))
            if entry.get("error") or entry.get("loads_from") is not None:
                kinds[DID_NOT_RUN] = ERROR
                rows.setdefault(DID_NOT_RUN, {})[col] = Cell(message=str(entry.get("error") or "no part ran"))
        for part in entry.get("parts") or []:
            col = _column(entry, part)
            if col not in columns:
                columns.append(col)
                owners[col] = (entry, part["spec"].split("@")[0])
            if part.get("status") == "error":
                kinds[DID_NOT_RUN] = ERROR
                cell = rows.setdefault(DID_NOT_RUN, {}).setdefault(col, Cell())
                cell.message = "; ".join(filter(None, [cell.message, f"{part['part']} (exit {part.get('exit_code')}): "
                                                        f"{part.get('summary') or part.get('last_line') or ''}"]))
                cell.repro = cell.repro or part.get("log")
            _part_rows(entry, part, rows, sub, kinds)
    order = sorted(rows, key=lambda n: _severity(n, rows[n], kinds))
    defects = []
    for name in order:
        for col in columns:
            cell = rows[name].get(col)
            if cell is None or kinds[name] == EVIDENCE:
                continue
            entry, path = owners[col]
            family = name if kinds[name] == PIXEL else ""
            checkpoint = DOC_ROWS[family][0] if family in DOC_ROWS else {
                FAILURE: "the checkpoint's processor returns rows for this input",
                ERROR: "(not judged: this part could not run; its log says why)"}.get(kinds[name], "the reference's value")
            defects.append(Defect(col, name, kinds[name], cell, _does(name, kinds[name], cell), checkpoint,
                                  _where(entry, path, name, kinds[name], cell)))
    rank = {n: k for k, n in enumerate(order)}  # per root cause, its worst engine path first
    defects.sort(key=lambda d: (rank[d.row], -(d.cell.max_levels or 0.0), -d.cell.hits))
    return {"columns": columns, "rows": [(n, rows[n], kinds[n]) for n in order], "defects": defects, "sub_level": sub}


def levels_text(value: Any) -> str:
    """`7.84e+03` / `255` / `-` (no number)."""
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return "-"


def modes_text(modes: set[str], most: int = 4) -> str:
    """`RGB, L, P +5` (at most `most` named)."""
    names = sorted(modes)
    return ", ".join(names[:most]) + (f" +{len(names) - most}" if len(names) > most else "")


__all__ = ["DID_NOT_RUN", "ERROR", "EVIDENCE", "FAILURE", "OTHER", "PIXEL", "Cell", "Defect", "engine_frame",
           "levels_text", "modes_text", "summarize"]
