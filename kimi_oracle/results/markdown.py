"""Markdown and plain-text reports: a finding's lines and report.md, a run's summary, the root-cause table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.oracle.kinds import INVARIANCE
from kimi_oracle.results.aggregation import cause_meaning, root_cause_rows
from kimi_oracle.results.explanation import explanation_line
from kimi_oracle.results.finding import Finding



def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def finding_lines(finding: Finding | Mapping[str, Any]) -> list[str]:
    """Plain-text lines describing a finding (used by Markdown, console and JUnit messages)."""
    if isinstance(finding, Finding):
        case = finding.case_dict()
        stats = finding.stats
    else:
        case = dict(finding)
        stats = case.get("stats", {})
    lines = [f"{case.get('group') or case['check']}: {case['message']}"]
    lines.append(f"candidate {case['candidate']} vs reference, tolerance {case['tolerance']}, "
                 f"profile {case.get('profile')}")
    from kimi_oracle.inputs.generators import CaseParams, config_label

    try:
        lines.append("config: " + config_label(PreprocessConfig.from_hf_json(case["config"])))
    except Exception:
        pass
    for img in case.get("images", []):
        params = img.get("params")
        label = CaseParams.from_dict(params).describe() if params else f"{img['size'][0]}x{img['size'][1]} {img['mode']}"
        src = f" ({img['source']})" if img.get("source") else ""
        lines.append(f"image {img['index']}: {label}{src}")
    if stats:
        if "max_level_diff" in stats:
            lines.append(
                f"values differing: {stats.get('differing')} of {stats.get('values')} "
                f"({100.0 * stats.get('share_differing', 0):.3g}%), failing the policy: {stats.get('failing')}; "
                f"max {_fmt(stats.get('max_level_diff'))} levels, mean {_fmt(stats.get('mean_level_diff'))}"
                + (f", max {stats['max_ulp']} ulp" if stats.get("max_ulp") is not None else "")
            )
            diagnosis = explanation_line(case.get("attribution"))
            if diagnosis:
                lines.append(diagnosis)
            hist = stats.get("histogram")
            if hist:
                lines.append("level differences: " + ", ".join(f"{k}: {v}" for k, v in hist.items() if v))
            if stats.get("worst"):
                from kimi_oracle.oracle.checks import describe_location

                lines.append("worst: " + describe_location(stats["worst"]))
            for row in stats.get("per_image", []):
                if row.get("failing"):
                    lines.append(f"  image {row['image']} grid {tuple(row['grid_thw'])}: {row['failing']} failing, "
                                 f"max {_fmt(row['max_level_diff'])} levels")
        if "mismatched" in stats:
            for m in stats["mismatched"]:
                size = f" ({m['size'][0]}x{m['size'][1]})" if m.get("size") else ""
                lines.append(f"  image {m['image']}{size}: grid {tuple(m['actual'])}, expected {tuple(m['expected'])}")
        if "exception" in stats:
            lines.append(f"exception: {stats['exception']}")
        if "kind" in stats and case["check"] == INVARIANCE:
            lines.append(f"invariance: {stats['kind']} on images {stats.get('indices')} of a batch of {stats.get('batch_size')}")
    return lines


def finding_markdown(finding: Finding, *, directory: Path | None = None, has_diff: bool = False) -> str:
    """The finding's report.md."""
    case = finding.case_dict()
    out = [f"# {finding.extra.get('group') or finding.check}: {finding.id}", "", finding.message, ""]
    out += ["| | |", "|---|---|"]
    out.append(f"| candidate | `{finding.candidate}` |")
    out.append(f"| tolerance | `{finding.tolerance}` |")
    out.append(f"| engine | {finding.engine} (seed {finding.seed}, example {finding.example}) |")
    from kimi_oracle.inputs.generators import config_label

    out.append(f"| config | {finding.config.name}: {config_label(finding.config)} |")
    out.append(f"| versions | " + ", ".join(f"{k} {v}" for k, v in case["versions"].items() if v) + " |")
    out.append("")
    out.append("## Details")
    out.append("")
    out += [f"- {line}" for line in finding_lines(finding)[1:]]
    tb = finding.stats.get("traceback")
    if tb:
        out += ["", "```", tb.rstrip(), "```"]
    if has_diff:
        out += ["", "![expected | actual | amplified difference](diff.png)"]
    where = str(directory) if directory else "<finding dir>"
    out += ["", "## Reproduce", "", "```", f"kimi-oracle repro {where}", "```", ""]
    out += ["The config as the checkpoint's `preprocessor_config.json` keys:", "", "```json",
            json.dumps(finding.config.to_hf_json(), indent=2), "```", ""]
    return "\n".join(out)


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """Markdown for a run summary (as built by `fuzzing.FuzzRun.summary()`)."""
    out = [f"# kimi-oracle {summary.get('command', 'fuzz')}: candidate `{summary.get('candidate')}`", ""]
    out.append(f"- profile: {summary.get('profile')}; tolerance {summary.get('tolerance')}; "
               f"seed {summary.get('seed')}; config variation {'on' if summary.get('vary_config') else 'off'}")
    out.append(f"- examples: {summary.get('examples')} ({summary.get('rejected', 0)} rejected) in "
               f"{summary.get('elapsed_s', 0):.1f} s")
    findings = summary.get("findings", [])
    out.append(f"- findings: {len(findings)}")
    out.append("")
    out += root_cause_markdown(summary.get("root_causes") or root_cause_rows(findings))
    if findings:
        out += ["| id | check | message | found after |", "|---|---|---|---|"]
        for f in findings:
            msg = str(f.get("message", "")).replace("|", "\\|")
            out.append(f"| [{f['id']}]({f.get('path', '')}) | {f['check']} | {msg} | {f.get('example')} |")
        out.append("")
    return "\n".join(out)



def _levels(v: Any) -> str:
    return "-" if v is None else f"{v:.3g}"


def root_cause_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The root-cause table (Markdown lines): real differences first, then float rounding only."""
    real = [r for r in rows if not r["float_rounding_only"]]
    noise = [r for r in rows if r["float_rounding_only"]]
    out: list[str] = []
    head = ["| root cause | meaning | mode class | max levels | mean levels | examples | repro | picture |",
            "|---|---|---|---|---|---|---|---|"]

    def line(r: Mapping[str, Any]) -> str:
        repro = f"[{Path(r['repro']).name}]({r['repro']})" if r.get("repro") else "-"
        pic = f"![diff]({r['picture']})" if r.get("picture") else "-"
        meaning = cause_meaning(r["root_cause"]).replace("|", "\\|")
        return (f"| `{r['root_cause']}` | {meaning} | {r['mode_class'] or '-'} | {_levels(r['max_levels'])} | "
                f"{_levels(r['mean_levels'])} | {r['hits']} | {repro} | {pic} |")

    if real:
        out += ["## Root causes", ""] + head + [line(r) for r in real] + [""]
    if noise:
        out += ["## Float rounding only (under one level)", ""] + head + [line(r) for r in noise] + [""]
    if not rows:
        out += ["## Root causes", "", "No finding.", ""]
    return out
