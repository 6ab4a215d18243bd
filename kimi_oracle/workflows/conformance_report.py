"""`conformance.md`: the conformance report (workflows.conformance) for a person to read."""

from __future__ import annotations

from typing import Any


def _levels(value: Any) -> str:
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return "-"


def _cell(text: Any) -> str:
    return str(text if text is not None else "-").replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: per engine and version, its parts, root cause x mode class with
    levels, request-layer and planner findings with their explanations, and a repro per finding."""
    opts = report.get("options") or {}
    out = ["# Engine conformance", "",
           f"Made by `{report.get('command', 'kimi-oracle conformance')}` on {report.get('started', '?')} "
           f"({opts.get('examples')} image examples, {opts.get('planner_sizes')} planner sizes, "
           f"{opts.get('scenarios')} request scenarios a part, seed {opts.get('seed')}).", ""]
    versions = report.get("versions") or {}
    if versions:
        out += ["Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), ""]
    for entry in report.get("engines") or []:
        out += _engine(entry)
    if report.get("out"):  # repro folders named relative to the report's own folder
        prefix = str(report["out"]).rstrip("/") + "/"
        out = [line.replace("`" + prefix, "`") for line in out]  # (only where a path starts)
        out.insert(3, f"Repro folders and logs are named relative to `{report['out']}`; replay one with "
                      "`kimi-oracle repro FOLDER`.")
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
    rows = p.get("root_causes") or []
    if rows:
        out += [f"**{p['part']}**, root cause x mode class:", "",
                "| root cause | mode class | max levels | mean levels | hits | repro |", "|---|---|---|---|---|---|"]
        for r in rows:
            out.append(f"| {_cell(r.get('root_cause'))} | {_cell(r.get('mode_class'))} | {_levels(r.get('max_levels'))} | "
                       f"{_levels(r.get('mean_levels'))} | {r.get('hits', '-')} | `{r.get('repro') or '-'}` |")
        out.append("")
    findings = [f for f in p.get("findings") or [] if p["part"] != "image-fuzz" or not rows]
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
