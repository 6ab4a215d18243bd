"""`conformance.md`: the conformance report (workflows.conformance) for a person to read."""

from __future__ import annotations

from typing import Any

from kimi_oracle.workflows.conformance_summary import (ERROR, EVIDENCE, FAILURE, PIXEL, levels_text, modes_text,
                                                       summarize)


def cell_text(cell: Any, kind: str) -> str:
    """`7.84e+03 lv · RGB, P` (pixels), `29 ex · RGB` (crashes, findings), `error` (did not run)."""
    if kind == ERROR:
        return "error"
    unit = "cases" if kind == EVIDENCE else "ex"
    levels = f"{levels_text(cell.max_levels)} lv" if kind == PIXEL else f"{cell.hits} {unit}"
    modes = modes_text(cell.modes)
    return f"{levels}" + (f" · {modes}" if modes else "")


def nothing_found(summary: dict[str, Any]) -> str | None:
    """The sentence for a matrix without rows (None when it has rows: errors are rows)."""
    return None if summary["rows"] else ("No engine path differs from the reference by one level or more, "
                                         "crashes or refuses.")


def sub_level_lines(summary: dict[str, Any]) -> list[str]:
    """The rows under one level, collapsed: one line per engine path."""
    sub = summary["sub_level"]
    if not sub:
        return []
    out = ["Under one level (float rounding, or an unexplained residue under one level), collapsed:"]
    for col, causes in sub.items():
        out.append(f"- {col}: " + "; ".join(f"{cause} ({len(cell.modes)} mode classes, at most "
                                            f"{levels_text(cell.max_levels)} levels)" for cause, cell in causes.items()))
    return out + [""]


def matrix_lines(summary: dict[str, Any]) -> list[str]:
    """Root causes (rows, by severity) x engine paths (columns): worst level (`lv`) or examples
    (`ex`, crashes and other findings) and mode classes; `error` where a part could not run."""
    columns = summary["columns"]
    out = ["## Root causes x engines"]
    if nothing_found(summary):
        return out + [str(nothing_found(summary)), ""]
    out += ["| root cause | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, cells, kind in summary["rows"]:
        out.append(f"| {_cell(name)} | " + " | ".join(_cell(cell_text(cells[c], kind)) if c in cells else "-"
                                                     for c in columns) + " |")
    return out + [""]


def defect_list(summary: dict[str, Any]) -> list[str]:
    """The real defects, one line per root cause (by severity), each engine path's defect linked
    to its paragraph, worst first."""
    defects = summary["defects"]
    out = [f"## Real defects ({len(defects)}), by root cause"]
    by_row: dict[str, list[tuple[int, Any]]] = {}
    for n, d in enumerate(defects, 1):
        by_row.setdefault(d.row, []).append((n, d))
    for k, (row, found) in enumerate(by_row.items(), 1):
        links = ", ".join(f"[{d.column} {cell_text(d.cell, d.kind).split(' · ')[0]}](#defect-{n})" for n, d in found)
        out.append(f"{k}. **{_cell(row)}**: {links}")
    return out + [""]


def defect_label(d: Any) -> str:
    """`pixels, up to 255 levels, 12 examples` / `crash or refusal, 29 examples` / `did not run`."""
    if d.kind == ERROR:
        return "did not run"
    if d.kind == PIXEL:
        return f"pixels, up to {levels_text(d.cell.max_levels)} levels, {d.cell.hits} examples"
    return f"{'crash or refusal' if d.kind == FAILURE else 'finding'}, {d.cell.hits} examples"


def defect_paragraphs(summary: dict[str, Any]) -> list[str]:
    """One paragraph per real defect."""
    out: list[str] = []
    for n, d in enumerate(summary["defects"], 1):
        out += [f'<a id="defect-{n}"></a>', f"### {n}. {d.column}: {_cell(d.row)}", "",
                f"{defect_label(d)}, mode classes {modes_text(d.cell.modes, 40) or '-'}. "
                f"**The engine:** {_cell(d.does.rstrip('. '))}. **The checkpoint:** {_cell(d.checkpoint.rstrip('. '))}. "
                f"**Where:** {_cell(d.where)}. **Repro:** `{d.cell.repro or '-'}`.", ""]
    return out


def _cell(text: Any) -> str:
    return str(text if text is not None else "-").replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: first the answer (root causes x engine paths, sorted by severity,
    sub-level rows collapsed; the list of real defects), then one paragraph per defect (what the
    engine does, what the checkpoint does, where in the engine, levels, repro), then per engine and
    version its parts, root cause x mode class with levels, other findings, a repro per finding."""
    opts = report.get("options") or {}
    summary = summarize(report)
    out = ["# Engine conformance"] + matrix_lines(summary) + defect_list(summary) + sub_level_lines(summary)
    out += [f"Made by `{report.get('command', 'kimi-oracle conformance')}` on {report.get('started', '?')} "
            f"({opts.get('examples')} image examples, {opts.get('planner_sizes')} planner sizes, "
            f"{opts.get('scenarios')} request scenarios a part, seed {opts.get('seed')}).", ""]
    out += defect_paragraphs(summary)
    if report.get("out"):
        out += [f"Repro folders and logs are named relative to `{report['out']}`; replay one with "
                "`kimi-oracle repro FOLDER`.", ""]
    versions = report.get("versions") or {}
    if versions:
        out += ["Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), ""]
    for entry in report.get("engines") or []:
        out += _engine(entry)
    if report.get("out"):  # repro folders named relative to the report's own folder
        prefix = str(report["out"]).rstrip("/") + "/"
        out = [line.replace("`" + prefix, "`") for line in out]  # (only where a path starts)
    if "exit_code" in report:
        out += [f"Exit code: {report['exit_code']} (0 nothing found, 1 findings, 2 an engine or part could "
                "not run)", ""]
    return "\n".join(out).rstrip() + "\n"


def _engine(entry: dict[str, Any]) -> list[str]:
    out = [f"## {entry['engine']} {entry.get('version') or '(version unknown)'}", ""]
    if entry.get("error"):
        return out + [f"Not loaded: {entry['error']}", ""]
    if entry.get("loads_from") is None:
        return out + ["No path of this engine is adapted yet: nothing was loaded or run. Its paths: " + "; ".join(
            f"`{n['path']}` {n['role']} ({n['function']} in {n['file']})" for n in entry.get("not_adapted") or []), ""]
    out += [f"Loaded from `{entry.get('loads_from')}` ({entry.get('origin')}); "
            f"the adapter knows {', '.join(entry.get('known_versions') or []) or '-'}.", ""]
    parts = entry.get("parts") or []
    if parts:
        out += ["| part | path | profile | status | what it found | time |", "|---|---|---|---|---|---|"]
        for p in parts:
            out.append(f"| {p['part']} | `{p['spec']}` | {p.get('profile') or '-'} | {p['status']} | "
                       f"{_cell(p.get('summary'))} | {p['elapsed_s']:.1f} s |")
        out.append("")
    for p in parts:
        out += _part_details(p)
    if entry.get("not_adapted"):
        out += ["Paths not adapted yet (not run): " + "; ".join(
            f"`{n['path']}` {n['role']} ({n['function']} in {n['file']})" for n in entry["not_adapted"]), ""]
    return out


def _part_details(p: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if p["status"] == "error":
        out += [f"**{p['part']}** did not complete (exit {p['exit_code']}): {_cell(p.get('last_line'))} "
                f"(log: `{p['log']}`)", ""]
    if p.get("pipeline_summary") or p.get("pipeline"):
        pipe = p.get("pipeline_summary") or "; ".join(f"{k}: {v}" for k, v in (p.get("pipeline") or {}).items())
        out += [f"**{p['part']}**, inferred pipeline: {_cell(pipe)}", ""]
    every = p.get("root_causes") or []
    rows = [r for r in every if not r.get("float_rounding_only")]
    collapsed = len(every) - len(rows)
    if collapsed:
        out += [f"**{p['part']}**: {collapsed} sub-level row(s) collapsed (float rounding only, see the matrix).", ""]
    if rows:
        out += [f"**{p['part']}**, root cause x mode class:", "",
                "| root cause | mode class | max levels | mean levels | hits | repro |", "|---|---|---|---|---|---|"]
        for r in rows:
            out.append(f"| {_cell(r.get('root_cause'))} | {_cell(r.get('mode_class'))} | {levels_text(r.get('max_levels'))} | "
                       f"{levels_text(r.get('mean_levels'))} | {r.get('hits', '-')} | `{r.get('repro') or '-'}` |")
        out.append("")
    findings = [f for f in p.get("findings") or [] if p["part"] != "image-fuzz" or not every]
    if findings:
        out += [f"**{p['part']}**, findings:", ""]
        for f in findings:
            causes = ", ".join(f.get("root_causes") or []) or None
            explained = f" — {causes} ({f.get('explanation')})" if causes else ""
            where = f"; repro: `{f['path']}`" if f.get("path") else ""
            out.append(f"- `{_cell(f.get('key') or f.get('check'))}`: {_cell(f.get('message'))}{explained}{where}")
        out.append("")
    return out


__all__ = ["render_markdown"]
