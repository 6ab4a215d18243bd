"""The campaign summary: findings collected, summary.json, summary.md and junit.xml."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.files import atomic_write_text, utc_now, versions, write_json
from kimi_oracle.core.text import safe_text
from kimi_oracle.oracle.kinds import FINDING_KINDS as _RUN_KINDS
from kimi_oracle.oracle.kinds import INVARIANCE, PROJECT_KINDS

# The kinds a campaign files: the candidate's, then those against the project (`--oracle gpu`).
FINDING_KINDS = tuple(_RUN_KINDS) + tuple(PROJECT_KINDS)
from kimi_oracle.workflows import nightly_engine, nightly_planner, nightly_video
from kimi_oracle.results.report import (
    JUnitCase, junit_cases_for, root_cause_junit, root_cause_markdown, root_cause_rows, write_junit,
)
from kimi_oracle.workflows.nightly.common import (
    CampaignOptions, ENGINES, SUMMARY_SCHEMA, SUMMARY_SCHEMA_VERSION, UnknownCheckError, _count_db, _read_json,
)
from kimi_oracle.workflows.nightly.processes import _Worker, last_line


def finding_entry(path: Path, engine: str | None = None) -> dict[str, Any] | None:
    """The summary's entry for the finding folder `path` (None when it holds no case.json yet).

    Its `kind` is its check, one of `checks.FINDING_KINDS`; a check the oracle does not define
    raises UnknownCheckError (never filed under some other kind)."""
    case = _read_json(path / "case.json")
    if not case:
        return None
    check = str(case.get("check"))
    if check not in FINDING_KINDS:
        raise UnknownCheckError(f"finding {path} names check {check!r}, which the oracle does not define "
                                f"(known: {', '.join(FINDING_KINDS)})")
    detail = check
    if check == INVARIANCE:
        inv = case.get("invariance") or {}
        detail = f"invariance:{inv.get('kind')}" if inv.get("kind") else check
    return {
        "id": case.get("id", path.name),
        "engine": case.get("engine") or engine or "unknown",
        "kind": check,
        "check": detail,
        "path": str(path),
        "message": case.get("message", ""),
        # grouping.finding_key: `signature` in harness findings, `group` in fuzz() findings
        "signature": case.get("signature") or case.get("group"),
        "key": case.get("key") or case.get("group") or case.get("signature") or check,
        # the diagnosis (oracle.diagnosis.finding_diagnosis), as case.json holds it
        "root_causes": list(case.get("root_causes") or []),
        "max_levels": case.get("max_levels"),
        "mean_levels": case.get("mean_levels"),
        "residual_max_levels": case.get("residual_max_levels"),
        "residual_mean_levels": case.get("residual_mean_levels"),
        "max_levels_seen": case.get("max_levels_seen"),
        "hits": case.get("hits") or 1,
        "attribution": case.get("attribution"),
    }


def collect_findings(out: Path, reported: Sequence[tuple[str, dict[str, Any]]], existing: set[str],
                     errors: list[str]) -> dict[str, dict[str, Any]]:
    """The campaign's findings by id: those the workers reported (`(engine, status entry)` pairs),
    then folders under `out/findings` that a worker wrote but could not report (killed), except
    `existing` ones (there before the run). A folder naming an unknown check adds to `errors`."""
    findings: dict[str, dict[str, Any]] = {}
    bad: set[str] = set()

    def add(path: Path, engine: str | None, signature: str | None = None) -> None:
        if path.name in bad:
            return
        try:
            entry = finding_entry(path, engine)
        except UnknownCheckError as exc:
            bad.add(path.name)
            errors.append(str(exc))
            return
        if entry is not None:
            entry["signature"] = entry.get("signature") or signature
            findings.setdefault(entry["id"], entry)

    for engine, f in reported:
        if f.get("path"):
            add(Path(f["path"]), engine, f.get("signature"))
    root = out / "findings"
    if root.is_dir():
        for path in sorted(root.iterdir()):
            if path.is_dir() and not path.name.startswith(".") and path.name not in existing \
                    and path.name not in findings:
                add(path, None)
    return findings


def _summarize(opts: CampaignOptions, *, config: PreprocessConfig | None, engines: list[str],
               workers: list[_Worker], engine_info: dict[str, Any], errors: list[str], stopped: str, seed: int,
               started_wall: str, started: float, existing: set[str], corpus_before: dict[str, int],
               db_before: int) -> dict[str, Any]:
    """The summary object of a campaign: the workers' status files merged per engine, the
    findings collected, the counts; `errors` and `engine_info` are added to in place."""
    reported: list[tuple[str, dict[str, Any]]] = []
    # "examples" when every worker ran its --max-examples; "budget" otherwise (or "interrupted").
    reached = bool(workers) and opts.max_examples is not None
    for engine in engines:
        engine_info.setdefault(engine, {"status": "ran", "workers": 0, "examples": 0, "budget_s": 0.0})
    for w in workers:
        st = _read_json(w.status_path)
        _merge_worker(engine_info[w.engine], w, st, errors, stopped)
        if st.get("stopped") == "interrupted":
            stopped = "interrupted"
        if st.get("stopped") != "examples" or w.killed:
            reached = False
        reported += [(w.engine, f) for f in st.get("findings", [])]
    if reached and stopped == "budget":
        stopped = "examples"
    findings = collect_findings(opts.out, reported, existing, errors)
    for engine, info in engine_info.items():
        _finish_engine(engine, info, findings, errors, stopped)
    _corpus_and_database(opts, engine_info, corpus_before, db_before)
    ordered = sorted(findings.values(), key=lambda f: (FINDING_KINDS.index(f["kind"]), f["id"]))
    counts = {k: 0 for k in _RUN_KINDS}  # (a project kind listed only when a finding has it)
    for f in ordered:
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    elapsed = time.monotonic() - started
    return {
        "schema": SUMMARY_SCHEMA,
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "command": "nightly",
        "candidate": opts.candidate,
        "profile": config.name if config is not None else (opts.profile or str(opts.config_path)),
        "config": config.to_hf_json() if config is not None else None,
        "max_examples": opts.max_examples,
        "tolerance": opts.tolerance,
        "start_time": started_wall,
        "end_time": utc_now(),
        "elapsed_s": round(elapsed, 3),
        "budget_s": opts.budget_s,
        "stopped": stopped,
        "shard": {"index": opts.shard[0], "count": opts.shard[1]},
        "jobs": opts.jobs,
        "case_timeout_s": opts.case_timeout_s,
        "seed": seed,
        "corpus_dir": str(opts.corpus),
        "db_dir": str(opts.db),
        "engines": {e: engine_info[e] for e in (*ENGINES, *[k for k in engine_info if k not in ENGINES]) if e in engine_info},
        "root_causes": root_cause_rows(ordered),
        "findings": ordered,
        "counts": counts,
        "errors": errors,
        "versions": versions(),
    }


def _merge_worker(info: dict[str, Any], w: _Worker, st: dict[str, Any], errors: list[str], stopped: str) -> None:
    """One worker's status `st` into its engine's `info`; its harness error (if any) into `errors`."""
    _merge_counters(info, w, st)
    if st.get("error"):
        errors.append(f"{w.engine} worker {w.index}: {st['error']}")
        info["status"] = "error"
    elif w.returncode not in (0, None) and not w.killed and stopped != "interrupted":
        # (Ctrl-C may reach a worker before it has written anything: not a harness error.)
        said = last_line(w.log_path)
        errors.append(f"{w.engine} worker {w.index} exited with {w.returncode}"
                      f"{'' if st else ' without a status'}: {said or 'no output'} (log: {w.log_path})")
        info["status"] = "error"
    if w.killed:
        info["killed_workers"] = info.get("killed_workers", 0) + 1


def _merge_counters(info: dict[str, Any], w: _Worker, st: dict[str, Any]) -> None:
    """A worker's counters, harnesses, dropped log bytes, coverage and behaviours into `info`."""
    info["workers"] = info.get("workers", 0) + 1
    info["budget_s"] = round(info.get("budget_s", 0.0) + w.budget_s, 3)
    info["examples"] = info.get("examples", 0) + int(st.get("examples", 0))
    for key in ("calls", "rejected", "restarts", "duplicates", "candidate_crashes",
                "candidate_timeouts", "harness_crashes", "skipped_hanging", "execs"):
        if key in st:
            info[key] = info.get(key, 0) + int(st[key])
    if isinstance(st.get("cpu"), dict):  # (a hypothesis worker's `fuzz` CPU split: fuzzing.cpu_report)
        info.setdefault("cpu", []).append({"worker": w.index, **st["cpu"]})
    for name, h in (st.get("per_harness") or {}).items():
        # Per harness: inputs judged (`examples`), libFuzzer's executions (`execs`, which
        # count inputs skipped past the deadline too), and whether it ran at all.
        merged_h = info.setdefault("harnesses", {}).setdefault(name, {"status": "not run", "examples": 0,
                                                                     "execs": 0})
        for key in ("examples", "execs", "skipped_past_deadline", "rejected", "duplicates"):
            merged_h[key] = merged_h.get(key, 0) + int(h.get(key, 0))
        if h.get("status") == "ran" or merged_h["status"] != "ran" and h.get("status"):
            merged_h["status"] = h.get("status")
        if h.get("note") and merged_h["status"] != "ran":
            merged_h["note"] = h["note"]
    if w.log is not None and w.log.dropped:
        info.setdefault("log_dropped_bytes", {})[str(w.log_path)] = w.log.dropped
    cov = st.get("coverage") or {}
    if cov:
        merged = info.setdefault("coverage", {})
        for k, v in cov.items():
            if isinstance(v, dict):
                sub = merged.setdefault(k, {})
                for kk, vv in v.items():
                    sub[kk] = max(sub.get(kk, 0), vv) if isinstance(vv, (int, float)) else vv
            elif isinstance(v, (int, float)):
                merged[k] = max(merged.get(k, 0), v)
    behaviours = set(info.get("_behaviours", [])) | set(st.get("behaviours", []))
    info["_behaviours"] = sorted(behaviours)


def _finish_engine(engine: str, info: dict[str, Any], findings: dict[str, dict[str, Any]], errors: list[str],
                   stopped: str) -> None:
    """An engine's status, harness notes, coverage and finding count, once every worker is merged."""
    if info.get("status") == "ran" and not info.get("workers"):
        info["status"] = "not run"  # (an error before the campaign: nothing was launched)
    elif info.get("status") == "ran" and not info.get("examples") and stopped != "interrupted":
        # An engine that judged no input found nothing because it looked at nothing: an error.
        info["status"] = "judged nothing"
        errors.append(f"{engine}: its worker(s) judged no input in {info.get('budget_s', 0):.0f} s: "
                      "nothing was checked (see its log and the harness notes)")
    for name, h in (info.get("harnesses") or {}).items():
        if h["status"] != "ran" and stopped != "interrupted" and info.get("status") == "ran":
            info.setdefault("notes", []).append(f"the {name} harness did not run: {h.get('note', 'no input judged')}")
    behaviours = info.pop("_behaviours", None)
    if behaviours:
        info.setdefault("coverage", {})["behaviours"] = len(behaviours)
    info.setdefault("coverage", None if not behaviours else info.get("coverage"))
    info["findings"] = sum(1 for f in findings.values() if f["engine"] == engine)


def _corpus_and_database(opts: CampaignOptions, engine_info: dict[str, Any], corpus_before: dict[str, int],
                         db_before: int) -> None:
    """The persistent corpus' and hypothesis database's sizes before and after, per engine."""
    from kimi_oracle.inputs import corpus as corpus_mod

    if "atheris" in engine_info and corpus_before:
        after = {name: len(corpus_mod.entries(opts.corpus / name)) for name in corpus_before}
        engine_info["atheris"]["corpus"] = {
            name: {"before": corpus_before[name], "after": after[name], "added": after[name] - corpus_before[name]}
            for name in corpus_before
        }
    if "hypothesis" in engine_info:
        engine_info["hypothesis"]["database"] = {"path": str(opts.db), "entries_before": db_before,
                                                 "entries_after": _count_db(opts.db)}


def coverage_text(cov: dict[str, Any] | None) -> str:
    """`behaviours 180; structured cov 466 ft 827` from an engine's coverage object."""
    if not cov:
        return "n/a"
    parts = []
    for key, value in cov.items():
        if isinstance(value, dict):
            if value:
                parts.append(f"{key} " + " ".join(f"{k} {v}" for k, v in value.items()))
        else:
            parts.append(f"{key} {value}")
    return "; ".join(parts) or "n/a"


def summary_markdown(summary: dict[str, Any]) -> str:
    """summary.md: what ran, how much, and what was found."""
    out = [f"# kimi-oracle nightly: candidate `{summary['candidate']}`", ""]
    shard = summary.get("shard", {})
    where = (f"merged from {len(summary['shards'])} shard(s)" if summary.get("shards") is not None
             else f"shard {shard.get('index')}/{shard.get('count')}")
    out.append(f"- profile {summary['profile']}, tolerance {summary['tolerance']}, {where}, "
               f"{summary['jobs']} job(s), seed {summary['seed']}")
    limit = f", at most {summary['max_examples']} examples per worker" if summary.get("max_examples") else ""
    out.append(f"- {summary['start_time']} → {summary['end_time']} ({summary['elapsed_s']:.0f} s of a "
               f"{summary['budget_s']:.0f} s budget{limit}; stopped: {summary['stopped']})")
    out.append(f"- findings: **{len(summary['findings'])}**; exit code {summary.get('exit_code')}")
    out += [""] + root_cause_markdown(summary.get("root_causes") or root_cause_rows(summary["findings"]))
    out += ["## Engines", "", "| engine | status | examples | coverage | findings |", "|---|---|---|---|---|"]
    for name, info in summary["engines"].items():
        cov_text = coverage_text(info.get("coverage"))
        out.append(f"| {name} | {info.get('status')} | {info.get('examples', 0)} | {cov_text} | {info.get('findings', 0)} |")
    for name, info in summary["engines"].items():
        for harness, h in (info.get("harnesses") or {}).items():
            skipped = f", {h['skipped_past_deadline']} skipped past the deadline" if h.get("skipped_past_deadline") else ""
            note = f" ({h['note']})" if h.get("note") and h.get("status") != "ran" else ""
            out.append(f"- {name}/{harness}: {h.get('status')}{note}, {h.get('examples', 0)} inputs judged "
                       f"({h.get('execs', 0)} libFuzzer executions{skipped})")
    corpus = summary["engines"].get("atheris", {}).get("corpus")
    if corpus:
        out += ["", "Corpus: " + "; ".join(f"{k} {v['before']} → {v['after']} (+{v['added']})" for k, v in corpus.items())]
    db = summary["engines"].get("hypothesis", {}).get("database")
    if db:
        out.append(f"Hypothesis database: {db['entries_before']} → {db['entries_after']} entries ({db['path']})")
    if summary["findings"]:
        out += ["", "## Findings", "", "| kind | check | engine | message | directory |", "|---|---|---|---|---|"]
        for f in summary["findings"]:
            msg = str(f.get("message", "")).replace("|", "\\|").replace("\n", " ")[:200]
            out.append(f"| {f['kind']} | {f['check']} | {f['engine']} | {msg} | [{f['id']}]({f['path']}) |")
        out += ["", "Reproduce one: `kimi-oracle repro <directory>`."]
    out += _shards_markdown(summary.get("shards"))
    if summary.get("planner"):
        out += ["", "## Planner", ""] + [f"- {safe_text(line)}" for line in summary["planner"].get("lines") or []]
    if summary.get("video"):
        out += ["", "## Video", ""] + [f"- {safe_text(line)}" for line in summary["video"].get("lines") or []]
    out += nightly_engine.markdown(summary.get("request_engine"))
    if summary["errors"]:
        out += ["", "## Harness errors", ""] + [f"- {e}" for e in summary["errors"]]
    notes = list(summary.get("notes") or []) + [n for info in summary["engines"].values() for n in info.get("notes", [])]
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    out.append("")
    return "\n".join(out)


def _shards_markdown(shards: list[dict[str, Any]] | None) -> list[str]:
    """A merged summary's shards (`kimi-oracle merge`): where each came from and what it found."""
    if not shards:
        return []
    out = ["", "## Shards", "", "| folder | shard | seed | stopped | findings | errors | exit |", "|---|---|---|---|---|---|---|"]
    for s in shards:
        sh = s.get("shard") or {}
        out.append(f"| {s['dir']} | {sh.get('index')}/{sh.get('count')} | {s.get('seed')} | {s.get('stopped')} | "
                   f"{s.get('findings')} | {s.get('errors')} | {s.get('exit_code')} |")
    return out


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """summary.json, summary.md and junit.xml (atomic files). An OSError names, in its
    `kimi_written` attribute, the files written before it."""
    written: list[str] = []
    try:
        write_json(out / "summary.json", summary)
        written.append("summary.json")
        atomic_write_text(out / "summary.md", summary_markdown(summary))
        written.append("summary.md")
        _write_junit(out, summary)
    except OSError as exc:
        exc.kimi_written = written  # type: ignore[attr-defined]
        raise


def _write_junit(out: Path, summary: dict[str, Any]) -> None:
    cases = root_cause_junit(summary.get("root_causes") or [], "kimi-oracle.nightly")
    cases += junit_cases_for([{**f, "check": f["kind"]} for f in summary["findings"] if f.get("engine") != "requests"],
                            FINDING_KINDS, classname="kimi-oracle.nightly")  # (the --engine stage's: below)
    cases += nightly_planner.junit_cases(summary.get("planner"))
    cases += nightly_video.junit_cases(summary.get("video"))
    cases += nightly_engine.junit_cases(summary.get("request_engine"))
    for err in summary["errors"]:
        cases.append(JUnitCase("harness", "kimi-oracle.nightly", error=err, details=err))
    if summary.get("stopped") == "interrupted":
        cases.append(JUnitCase("interrupted", "kimi-oracle.nightly", error="the campaign was interrupted",
                               details="interrupted (SIGINT/SIGTERM): the checks above cover only what ran"))
    props = {"candidate": summary["candidate"], "profile": summary["profile"], "budget_s": summary["budget_s"],
             "stopped": summary["stopped"]}
    for name, info in summary["engines"].items():
        props[f"{name}.examples"] = info.get("examples", 0)
    write_junit(out / "junit.xml", "kimi-oracle nightly", cases, time=float(summary["elapsed_s"]), properties=props)
