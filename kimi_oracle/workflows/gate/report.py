"""The gate's report: the JSON report dict (schema `kimi-oracle.gate-report`) and its Markdown."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from kimi_oracle.core.files import atomic_write_text, utc_now, versions, write_json
from kimi_oracle.results.report import root_cause_markdown, root_cause_rows
from kimi_oracle.workflows.gate.context import GateContext
from kimi_oracle.workflows.gate.options import Stage
from kimi_oracle.workflows.known import row_reason, rows_markdown, write_known

SCHEMA = "kimi-oracle.gate-report"
SCHEMA_VERSION = 2  # 2: `rows` (root cause x mode class x {OLD, NEW}, with verdicts), `margin_pct`, `known`


def budget_shares(stages: list[Stage], budget: float) -> dict[str, Any]:
    """Seconds and shares of the budget per stage, and the correctness and timing shares."""
    from kimi_oracle.workflows.gate.timing import NAME as TIMING

    per = {s.name: round(float(s.elapsed_s or 0.0), 3) for s in stages}
    timing = per.get(TIMING, 0.0)
    correctness = sum(v for k, v in per.items() if k != TIMING)
    share = (lambda v: round(v / budget, 4) if budget else None)
    return {"stages_s": per, "stages_share_of_budget": {k: share(v) for k, v in per.items()},
            "correctness_share_of_budget": share(correctness), "timing_share_of_budget": share(timing)}


SIDE_ROWS_TITLE = "Each side against the reference (before the change was named; decides nothing)"


def what_changed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The changes from OLD that the failing rows name, one per variant (the report's first
    lines): `name`, `family`, `variant`, `where` (its largest change's), `levels`, `mode_classes`,
    `inputs`."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        change = r.get("change")
        if not r.get("fails") or not isinstance(change, dict):
            continue
        name = f"{change.get('family')}/{change.get('variant')}"
        entry = out.setdefault(name, {"name": name, "family": change.get("family"), "variant": change.get("variant"),
                                      "where": change.get("where"), "levels": change.get("levels"),
                                      "mode_classes": [], "inputs": 0})
        entry["mode_classes"].append(r.get("mode_class") or "-")
        entry["inputs"] += int(change.get("inputs") or 0)
    return list(out.values())


def _changed_lines(report: dict[str, Any]) -> list[str]:
    changes = report.get("what_changed") or []
    failing = [r for r in report.get("rows") or [] if r.get("fails")]
    if not report.get("baseline") or not failing:
        return []
    lines = ["## What changed from the baseline", ""]
    for c in changes:
        where = (c.get("where") or {}).get("summary") or "-"
        lines.append(f"- **`{c['name']}`** ({c['inputs']} input(s); mode classes {', '.join(c['mode_classes'])}): "
                     f"{where}")
    unnamed = [r for r in failing if not r.get("change")]
    if unnamed:
        lines.append(f"- {len(unnamed)} failing row(s) with no single step change from OLD that reproduces NEW: "
                     + ", ".join(f"`{r['root_cause']}` [{r['mode_class'] or '-'}]" for r in unnamed[:12]))
    lines.append("")
    return lines


def build(ctx: GateContext, stages: list[Stage], rows: list[dict[str, Any]], started: str, t0: float,
          budget: float, side_rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The report of a run that started at `started` (UTC) and `t0` (time.monotonic())."""
    elapsed = time.monotonic() - t0
    verdict, reasons = _verdict(ctx, stages, rows)
    # Wall-clock unions: the candidates' processes work while this one computes the reference
    # and draws the next example, so their times overlap; the overhead is the time in which
    # no candidate's process works, none is waited for and the reference does not run.
    in_candidates = ctx.at_work(reference=False)
    overhead = max(elapsed - ctx.at_work(), 0.0)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict,
        "stopped": "interrupted" if ctx.interrupted else "done",
        "reasons": reasons,
        "candidate": ctx.new.spec,
        "baseline": ctx.old.spec if ctx.old else None,
        "profile": ctx.options.profile,
        "config": ctx.config.to_hf_json(),
        "tolerance": ctx.options.tolerance,
        "perf_threshold_pct": ctx.options.perf_threshold_pct,
        "budget_s": budget,
        "fuzz_examples": ctx.options.fuzz_examples,
        "case_timeout_s": ctx.options.case_timeout_s,
        "memory_limit_mb": ctx.options.memory_limit_mb,
        "seed": ctx.seed,
        "started": started,
        "finished": utc_now(),
        "elapsed_s": round(elapsed, 3),
        "time": {  # in_candidate_s: NEW's and OLD's calls (a wall-clock union; overlaps in_reference_s)
            "in_candidate_s": round(in_candidates, 3),
            "in_reference_s": round(ctx.clock.reference_s, 3),
            "overhead_s": round(overhead, 3),
            "overhead_share_of_budget": round(overhead / budget, 4) if budget else None,
            # Time past the budget (set-up, reports, a stage finishing its last case).
            "over_budget_s": round(max(elapsed - budget, 0.0), 3),
            **budget_shares(stages, budget),  # how the budget was spent, per stage (issue 33)
        },
        "candidate_processes": {
            role: {"calls": c.calls, "restarts": c.restarts, "crashes": c.crashes, "timeouts": c.timeouts}
            for role, c in (("new", ctx.new), ("baseline", ctx.old)) if c is not None
        },
        # Root causes of the goldens' and the fuzz stage's findings, per mode class, worst first.
        "rows": rows,
        # each side's own rows against the reference (before the change was named; decide nothing)
        "what_changed": what_changed(rows), "side_rows": side_rows or [],
        "relative": ctx.relative,
        "margin_pct": ctx.options.margin_pct,
        "known": str(ctx.options.known_path) if ctx.options.known_path else None,
        "strict": ctx.options.strict,
        "root_causes": root_cause_rows([f for f in ctx.findings if f.get("stage") in ("goldens", "fuzz")]),
        "stages": {s.name: s.to_dict() for s in stages},
        "findings": ctx.findings,
        "baseline_findings": ctx.baseline_findings,
        "timing_ratios": _timing_rows(stages),
        "versions": versions(),
        "machine": _machine(),
    }


def _verdict(ctx: GateContext, stages: list[Stage], rows: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The verdict (pass, fail, error) and its reasons, the failing rows' first."""
    reasons = [r for s in stages for r in s.reasons]
    if ctx.relative:
        reasons = [row_reason(r) for r in rows if r["fails"]] + reasons
    if ctx.interrupted:
        reasons.insert(0, "the gate was interrupted (SIGINT/SIGTERM): stages that did not run to their end "
                          "cannot pass")
    if ctx.interrupted or any(s.status == "error" for s in stages):
        verdict = "error"
    elif any(s.status == "fail" for s in stages):
        verdict = "fail"
    else:
        verdict = "pass"
    return verdict, reasons


def write(ctx: GateContext, report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """gate-report.json and gate-report.md (and, with --write-known, NEW's rows as a known file: a
    failure to write it makes the verdict `error`)."""
    if ctx.options.write_known_path is not None and not ctx.interrupted:
        try:
            path = write_known(ctx.options.write_known_path, rows, ctx.new.spec,
                               note=f"gate seed {ctx.seed}, profile {ctx.options.profile}")
            report["wrote_known"] = str(path)
        except OSError as exc:  # the reports are still written; the run is an error
            report["verdict"] = "error"
            report["reasons"].insert(0, f"--write-known {ctx.options.write_known_path}: cannot write: "
                                        f"{exc.strerror or exc}")
    write_json(ctx.out_dir / "gate-report.json", report)
    atomic_write_text(ctx.out_dir / "gate-report.md", render_markdown(report))


def _timing_rows(stages: list[Stage]) -> list[dict[str, Any]]:
    """The timing stage's rows (none without one)."""
    for s in stages:
        if s.name == "performance":
            return list(s.details.get("inputs", []))
    return []


def _machine() -> dict[str, Any]:
    """The machine the gate ran on (for the report)."""
    info: dict[str, Any] = {"platform": platform.platform(), "processor": platform.processor(),
                            "cpu_count": os.cpu_count(), "python": platform.python_version()}
    try:
        import torch

        info["cuda"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception:  # pragma: no cover - torch is a dependency
        info["cuda"] = None
    return info


def render_markdown(report: dict[str, Any]) -> str:
    """The human-readable report."""
    icon = {"pass": "PASS", "fail": "FAIL", "skipped": "skipped", "error": "ERROR"}
    lines = [f"# kimi-oracle gate: {report['verdict'].upper()}", "", *_changed_lines(report)]
    lines += [
        f"- candidate: `{report['candidate']}`" + (f", baseline: `{report['baseline']}`" if report["baseline"] else ""),
        *([f"- **interrupted** (SIGINT/SIGTERM): the verdict is ERROR, whatever ran before"]
          if report.get("stopped") == "interrupted" else []),
        f"- profile: {report['profile']}, tolerance: {report['tolerance']}, budget: {report['budget_s']:.0f}s, "
        f"seed: {report['seed']}",
        f"- ran {report['elapsed_s']:.1f}s: {report['time']['in_candidate_s']:.1f}s in the candidates' processes, "
        f"{report['time']['in_reference_s']:.1f}s in the reference (the two overlap), "
        f"{report['time']['overhead_s']:.1f}s overhead "
        f"({100 * (report['time']['overhead_share_of_budget'] or 0):.1f}% of the budget: time in which neither "
        f"works, spent by the fuzzing engine, root-cause attribution, image generation, comparisons, reports); "
        f"{report['time']['over_budget_s']:.1f}s past the budget",
        f"- the budget spent: {100 * (report['time'].get('correctness_share_of_budget') or 0):.1f}% on correctness "
        f"(goldens, planner, fuzz, corpus, invariance, engine), "
        f"{100 * (report['time'].get('timing_share_of_budget') or 0):.1f}% on the A/B timing; per stage: "
        + ", ".join(f"{k} {v:.1f}s" for k, v in (report['time'].get('stages_s') or {}).items()),
        "",
    ]
    if report.get("relative"):
        lines.append("- verdict by root cause and mode class against "
                     + (f"the baseline `{report['baseline']}`" if report["baseline"] else "")
                     + (" and " if report["baseline"] and report.get("known") else "")
                     + (f"the known divergences in `{report['known']}`" if report.get("known") else "")
                     + f", margin {report['margin_pct']:g}% (docs/gate.md)")
        lines.append("")
    lines += rows_markdown(report.get("rows") or [],
                           "OLD" if report["baseline"] else "known limits" if report.get("known") else "OLD (none)")
    if report.get("side_rows"):
        lines += rows_markdown(report["side_rows"], "OLD", title=SIDE_ROWS_TITLE)
    if report.get("root_causes"):
        lines += root_cause_markdown(report["root_causes"])
    lines += [
        "## Stages",
        "",
        "| stage | status | time | summary |",
        "|---|---|---|---|",
    ]
    for s in report["stages"].values():
        lines.append(f"| {s['name']} | {icon.get(s['status'], s['status'])} | {s['elapsed_s']:.1f}s | {s['summary']} |")
    if report["reasons"]:
        lines += ["", "## Why it failed", ""]
        lines += [f"- {r}" for r in report["reasons"][:60]]
        if len(report["reasons"]) > 60:
            lines.append(f"- ... {len(report['reasons']) - 60} more in gate-report.json")
    if report["timing_ratios"]:
        lines += ["", "## A/B timing (NEW / OLD, median of interleaved pairs)", "",
                  "| input | ratio | noise | NEW median | OLD median | rounds |", "|---|---|---|---|---|---|"]
        for r in report["timing_ratios"]:
            lines.append(f"| {r['input']} | {r['ratio']:.3f} | ±{r['noise']:.3f} | {r['new_median_s'] * 1e3:.1f} ms | "
                         f"{r['old_median_s'] * 1e3:.1f} ms | {r['rounds']}{' (retried)' if r['retried'] else ''} |")
    fuzz_findings = [f for f in report["findings"] if f.get("stage") == "fuzz" and f.get("path")]
    if fuzz_findings:
        lines += ["", "## Findings (replay with `kimi-oracle repro DIR`)", ""]
        lines += [f"- `{f['path']}`: {f['check']}: {f['message']}" for f in fuzz_findings[:30]]
    lines += ["", f"Versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v), ""]
    return "\n".join(lines)
