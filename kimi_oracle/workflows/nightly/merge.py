"""`kimi-oracle merge`: one report from the outputs of any number of nightly shards.

Each input folder is what `kimi-oracle nightly --out DIR` leaves (or an earlier merge's output):
`summary.json`, `findings/<id>/`, and, when present, `corpus/<harness>/` and `hypothesis-db/`.
Every input is untrusted and checked before anything is written: its summary must be a readable
nightly summary of a schema version this code reads, of the same candidate, profile, config and
tolerance as the first (unless `allow_mixed`), and every finding folder must pass the checks
`kimi-oracle repro` makes (case.json validated, each stored input's SHA-256). A failed check is
an `InputError` naming the file (exit 2), and nothing is written.

The merged findings are de-duplicated by their key (`oracle.grouping.finding_key`, as case.json
records it): one folder per key, the smallest reproducer (fewest bytes of stored input, then
fewest pixels) kept, the hits of every shard added up. The corpora are unioned and de-duplicated
by content (libFuzzer's own SHA-1 names), then minimized by libFuzzer's own `-merge=1` under
atheris (`libfuzzer.minimize_corpus`: the reference on both sides, so no candidate code runs; the
union is kept, and the notes say why, where it cannot run; `minimize=False` skips it); the
hypothesis databases are unioned by key folder and de-duplicated by content hash, the names
hypothesis itself gives them.

The output is built in a hidden folder beside `out` and renamed into place, so that `out` is
either absent, or the old output, or the whole new one; an existing non-empty `out` is replaced
only when `replace` is given, and the summary's notes say it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kimi_oracle.core.errors import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, InputError, KimiOracleError
from kimi_oracle.core.files import load_json, read_file, utc_now, versions
from kimi_oracle.oracle.kinds import FINDING_KINDS, PROJECT_KINDS
from kimi_oracle.results.aggregation import root_cause_rows
from kimi_oracle.results.case_file import load_case_image, read_case
from kimi_oracle.results.scenario_report import SCENARIO_FILE, read_scenario
from kimi_oracle.workflows.nightly.common import (
    ENGINES, SUMMARY_SCHEMA, SUMMARY_SCHEMA_VERSION, CampaignResult, UnknownCheckError,
)
from kimi_oracle.workflows.nightly.summary import finding_entry, write_summary

# A merged summary is a nightly summary plus `shards` (per-shard provenance) and `merged`.
MERGED_SCHEMA_VERSION = SUMMARY_SCHEMA_VERSION + 1
READABLE_VERSIONS = (SUMMARY_SCHEMA_VERSION, MERGED_SCHEMA_VERSION)
# What makes two shards one campaign: a shard differing in one of these is refused.
SAME_CAMPAIGN = ("candidate", "profile", "config", "tolerance")
DB_NAME = "hypothesis-db"
CORPUS_NAME = "corpus"


class OutNotEmptyError(KimiOracleError):
    """`--out` already holds files: replaced only when asked to."""


@dataclass
class _Found:
    """One finding folder of a shard, checked: its summary entry and its size as a reproducer."""

    entry: dict[str, Any]
    folder: Path
    size: tuple[int, int, str]  # (bytes of stored input, pixels, id): smaller is the better reproducer


@dataclass
class Shard:
    """One input folder: its summary and its checked findings."""

    directory: Path
    summary: dict[str, Any]
    findings: list[_Found] = field(default_factory=list)

    @property
    def summary_path(self) -> Path:
        """The shard's summary.json."""
        return self.directory / "summary.json"


def read_shard(directory: Path) -> Shard:
    """The shard in `directory`, every file checked; InputError naming the file otherwise."""
    directory = Path(directory)
    path = directory / "summary.json"
    if not directory.is_dir():
        raise InputError("not a folder (give the --out folder of a nightly run)", source=str(directory))
    summary = load_json(path)  # (a truncated or hostile JSON file: InputError naming it)
    if not isinstance(summary, dict) or summary.get("schema") != SUMMARY_SCHEMA:
        raise InputError(f"not a kimi-oracle nightly summary (schema is not {SUMMARY_SCHEMA!r})", source=str(path))
    version = summary.get("schema_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise InputError(f"summary schema version {version!r}; this kimi-oracle merges versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))}", source=str(path))
    for key in ("candidate", "findings", "errors", "engines"):
        if key not in summary:
            raise InputError(f"summary has no {key!r} (cut short?)", source=str(path))
    if not isinstance(summary["findings"], list) or not isinstance(summary["errors"], list):
        raise InputError("summary's 'findings' and 'errors' must be lists", source=str(path))
    shard = Shard(directory, summary)
    shard.findings = _shard_findings(shard)
    return shard


def _shard_findings(shard: Shard) -> list[_Found]:
    """The finding folders a shard's summary lists, each checked as `repro` checks it."""
    found = []
    for item in shard.summary["findings"]:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise InputError("a finding entry without an id", source=str(shard.summary_path))
        folder = _finding_folder(shard.directory, item)
        case_json = folder / "case.json"
        if not folder.is_dir() or os.sep in item["id"] or item["id"].startswith("."):
            raise InputError(f"summary lists finding {item['id']!r} but {folder} is not its folder",
                             source=str(shard.summary_path))
        if (folder / SCENARIO_FILE).is_file():  # the --engine stage's: checked as `repro` checks it
            read_scenario(folder)
            size = (_input_bytes(folder), 0, item["id"])
            found.append(_Found({**item, "key": item.get("key") or f"requests:{item.get('check')}"}, folder, size))
            continue
        case, _ = read_case(folder)
        pixels = 0
        for i, image in enumerate(case["images"]):
            img = load_case_image(folder, image, i)  # (its recorded SHA-256 checked)
            pixels += img.width * img.height if img is not None else 0
        try:
            entry = finding_entry(folder)
        except UnknownCheckError as exc:
            raise InputError(str(exc), source=str(case_json)) from None
        assert entry is not None  # (read_case read it)
        found.append(_Found(entry, folder, (_input_bytes(folder, case), pixels, entry["id"])))
    return found


def _finding_folder(directory: Path, item: dict[str, Any]) -> Path:
    """`findings/<id>`; the --engine stage keeps its findings under `engine/` (found by name)."""
    folder = directory / "findings" / item["id"]
    if item.get("engine") == "requests" and not folder.is_dir() and (directory / "engine").is_dir():
        for path in sorted((directory / "engine").rglob(item["id"])):
            if path.is_dir() and not path.is_symlink():
                return path
    return folder


def _input_bytes(folder: Path, case: dict[str, Any] | None = None) -> int:
    """Bytes of the stored inputs of a finding (every file, for a scenario finding)."""
    if case is None:
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    return sum((folder / e["file"]).stat().st_size for e in case["images"]
               if e.get("file") and (folder / e["file"]).is_file())


def check_same_campaign(shards: Sequence[Shard], allow_mixed: bool) -> list[str]:
    """InputError naming the first shard whose candidate, profile, config or tolerance differs
    from the first one's; with `allow_mixed`, notes saying what differs."""
    first = shards[0]
    notes = []
    for shard in shards[1:]:
        for key in SAME_CAMPAIGN:
            if shard.summary.get(key) != first.summary.get(key):
                what = (f"{key} {_short(shard.summary.get(key))} differs from {_short(first.summary.get(key))} "
                        f"of {first.summary_path}")
                if not allow_mixed:
                    raise InputError(f"a shard of another campaign: {what} (give --allow-mixed to merge anyway)",
                                     source=str(shard.summary_path))
                notes.append(f"mixed campaigns merged (--allow-mixed): {shard.summary_path}: {what}")
    return notes


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, dict) else "(a different config object)"
    return text if len(text) <= 120 else text[:117] + "..."


def dedupe_findings(shards: Sequence[Shard]) -> list[tuple[dict[str, Any], Path]]:
    """One (entry, folder) per finding key: the smallest reproducer, the hits of all added up,
    and `found_in` naming every shard folder and finding id of that key."""
    best: dict[str, _Found] = {}
    hits: dict[str, int] = {}
    seen: dict[str, list[dict[str, str]]] = {}
    for shard in shards:
        for f in shard.findings:
            key = str(f.entry.get("key"))
            hits[key] = hits.get(key, 0) + int(f.entry.get("hits") or 1)
            seen.setdefault(key, []).append({"shard": str(shard.directory), "id": f.entry["id"]})
            if key not in best or f.size < best[key].size:
                best[key] = f
    out = []
    for key, f in best.items():
        entry = {**f.entry, "hits": hits[key], "found_in": seen[key]}
        out.append((entry, f.folder))
    kinds = list(FINDING_KINDS) + list(PROJECT_KINDS)
    out.sort(key=lambda ef: (kinds.index(ef[0]["kind"]) if ef[0]["kind"] in kinds else len(kinds), ef[0]["id"]))
    return out


def merge_shards(directories: Sequence[Path], out: Path, *, allow_mixed: bool = False,
                 replace: bool = False, minimize: bool = True) -> CampaignResult:
    """Merge the shard folders into `out` (see the module's text); the merged summary and its
    exit code: 2 when a shard had harness errors, 1 findings, 0 nothing found."""
    started = time.monotonic()
    out = Path(out)
    if not directories:
        raise InputError("give at least one shard folder")
    for d in directories:
        if Path(d).resolve() == out.resolve():
            raise InputError("the output folder is one of the inputs; choose another --out", source=str(out))
    notes = _check_out(out, replace)
    shards = [read_shard(Path(d)) for d in directories]
    notes += check_same_campaign(shards, allow_mixed)
    findings = dedupe_findings(shards)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.merge-", dir=out.parent))
    try:
        for entry, folder in findings:
            shutil.copytree(folder, stage / "findings" / entry["id"], symlinks=False)
            entry["path"] = str(out / "findings" / entry["id"])
        corpus_counts = _union_corpora(shards, stage / CORPUS_NAME)
        minimized = _minimize_corpora(shards, stage, corpus_counts, notes) if minimize else {}
        if corpus_counts and not minimize:
            notes.append("the merged corpus is the union of the shards' corpora, de-duplicated by content "
                         "(SHA-1), not minimized (--no-minimize)")
        db_count = _union_databases(shards, stage / DB_NAME)
        summary = _merged_summary(shards, [e for e, _ in findings], out, corpus_counts, db_count, notes, minimized)
        summary["elapsed_s"] = round(time.monotonic() - started, 3)
        write_summary(stage, summary)
        _swap_into_place(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return CampaignResult(summary, summary["exit_code"], out)


def _check_out(out: Path, replace: bool) -> list[str]:
    """Notes on replacing `out`; OutNotEmptyError when it holds files and `replace` is not given."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", source=str(out))
    if out.is_dir() and any(out.iterdir()):
        if not replace:
            raise OutNotEmptyError(f"{out} is not empty; give --replace to replace it with the merged report")
        return [f"replaced the earlier contents of {out} (--replace)"]
    return []


def _swap_into_place(stage: Path, out: Path) -> None:
    """Rename the built folder to `out`: the old `out` (if any) is moved aside first, and removed
    only once the new one is in place."""
    old = None
    if out.is_dir():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.rename(out, old)
    try:
        os.rename(stage, out)
    except OSError:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _union_corpora(shards: Sequence[Shard], target: Path) -> dict[str, int]:
    """Every shard's `corpus/<harness>/` into `target/<harness>/`, de-duplicated by content."""
    from kimi_oracle.inputs import corpus as corpus_mod

    counts: dict[str, int] = {}
    for shard in shards:
        root = shard.directory / CORPUS_NAME
        if not root.is_dir():
            continue
        for harness in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            corpus_mod.merge(harness, target / harness.name)
            counts[harness.name] = len(corpus_mod.entries(target / harness.name))
    return counts


def _minimize_corpora(shards: Sequence[Shard], stage: Path, union: dict[str, int],
                      notes: list[str]) -> dict[str, int]:
    """libFuzzer's own -merge=1 over each harness's unioned corpus in `stage` (`libfuzzer.
    minimize_corpus`: the reference on both sides, no candidate code); the entries each keeps.
    Where it cannot run (atheris missing, a failure, its time) the union stays, said in `notes`."""
    from kimi_oracle.fuzzers import HARNESSES
    from kimi_oracle.workflows.nightly.libfuzzer import minimize_corpus

    kept: dict[str, int] = {}
    first = shards[0].summary
    work = stage / ".libfuzzer"
    try:
        for name, count in union.items():
            if name not in HARNESSES:
                notes.append(f"corpus/{name}: no harness of that name, its union kept as it is")
                continue
            after, why = minimize_corpus(name, stage / CORPUS_NAME / name, work / name,
                                         config=first.get("config"), profile=first.get("profile"))
            if why:
                notes.append(why)  # (the union kept: not in `kept`, so not reported minimized)
            else:
                kept[name] = after
                notes.append(f"corpus/{name}: {count} inputs in the shards' union, {after} kept by "
                             "libFuzzer's -merge=1 (the same coverage of Pillow's code)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return kept


def _union_databases(shards: Sequence[Shard], target: Path) -> int:
    """Every shard's hypothesis database (`<key hash>/<value hash>` files) into `target`; each
    value stored under the hash of its content, as hypothesis names it. The entries in `target`."""
    from kimi_oracle.core.files import atomic_write_bytes

    target.mkdir(parents=True, exist_ok=True)
    for shard in shards:
        root = shard.directory / DB_NAME
        if not root.is_dir():
            continue
        for key_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()
                              and not p.name.startswith(".")):
            for value in sorted(p for p in key_dir.iterdir() if p.is_file() and not p.is_symlink()
                                and not p.name.startswith(".")):
                data = read_file(value, max_bytes=16 << 20)
                dest = target / key_dir.name / hashlib.sha384(data).hexdigest()[:16]
                if not dest.exists():
                    dest.parent.mkdir(exist_ok=True)
                    atomic_write_bytes(dest, data)
    return sum(1 for p in target.rglob("*") if p.is_file() and not p.name.startswith("."))


def _merged_summary(shards: Sequence[Shard], findings: list[dict[str, Any]], out: Path,
                    corpus_counts: dict[str, int], db_count: int, notes: list[str],
                    minimized: dict[str, int] | None = None) -> dict[str, Any]:
    """The merged summary object (schema MERGED_SCHEMA_VERSION), its exit code set."""
    first = shards[0].summary
    errors = [f"{s.directory}: {e}" for s in shards for e in s.summary["errors"]]
    engines = _merged_engines(shards, findings)
    minimized = minimized or {}
    if corpus_counts and "atheris" in engines:
        # (`union`: the shards' inputs de-duplicated; `after`: what -merge=1 kept of them)
        engines["atheris"]["corpus"] = {
            k: {"before": 0, "union": v, "after": minimized.get(k, v), "added": minimized.get(k, v),
                "minimized": k in minimized}
            for k, v in corpus_counts.items()}
    if "hypothesis" in engines:
        engines["hypothesis"]["database"] = {"path": str(out / DB_NAME), "entries_before": 0, "entries_after": db_count}
    stops = {s.summary.get("stopped") for s in shards}
    counts = {k: 0 for k in FINDING_KINDS}  # (a project kind listed only when a finding has it)
    for f in findings:
        if f["kind"] in counts or f["kind"] in PROJECT_KINDS:
            counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    summary = {
        "schema": SUMMARY_SCHEMA, "schema_version": MERGED_SCHEMA_VERSION, "command": "merge",
        **{k: first.get(k) for k in ("candidate", "profile", "config", "max_examples", "tolerance")},
        "start_time": min(str(s.summary.get("start_time", "")) for s in shards),
        "end_time": utc_now(), "elapsed_s": 0.0,
        "budget_s": sum(float(s.summary.get("budget_s") or 0.0) for s in shards),
        "stopped": "interrupted" if "interrupted" in stops else (stops.pop() if len(stops) == 1 else "mixed"),
        "shard": {"index": None, "count": len(shards)},
        "jobs": sum(int(s.summary.get("jobs") or 0) for s in shards),
        "seed": first.get("seed"), "corpus_dir": str(out / CORPUS_NAME), "db_dir": str(out / DB_NAME),
        "engines": engines, "root_causes": root_cause_rows(findings), "findings": findings, "counts": counts,
        "errors": errors, "notes": notes, "versions": versions(),
        "shards": [_provenance(s) for s in shards],
    }
    summary["exit_code"] = EXIT_ERROR if errors else EXIT_FINDINGS if findings else EXIT_OK
    return summary


def _provenance(shard: Shard) -> dict[str, Any]:
    """Where a shard came from: its folder, its summary's SHA-256, and what its summary says."""
    s = shard.summary
    digest = hashlib.sha256(shard.summary_path.read_bytes()).hexdigest()
    return {"dir": str(shard.directory), "summary_sha256": digest, "schema_version": s.get("schema_version"),
            "command": s.get("command"), "candidate": s.get("candidate"), "profile": s.get("profile"),
            "shard": s.get("shard"), "seed": s.get("seed"), "start_time": s.get("start_time"),
            "end_time": s.get("end_time"), "elapsed_s": s.get("elapsed_s"), "stopped": s.get("stopped"),
            "exit_code": s.get("exit_code"), "findings": len(s["findings"]), "errors": len(s["errors"]),
            "host": (s.get("versions") or {}).get("host")}


def _merged_engines(shards: Sequence[Shard], findings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per engine: the shards' counters added up, its status (`ran` if it ran anywhere)."""
    merged: dict[str, dict[str, Any]] = {}
    for shard in shards:
        for name, info in (shard.summary.get("engines") or {}).items():
            if not isinstance(info, dict):
                continue
            m = merged.setdefault(name, {"status": info.get("status"), "workers": 0, "examples": 0, "budget_s": 0.0})
            if info.get("status") == "ran" or m["status"] != "ran" and info.get("status") == "error":
                m["status"] = info.get("status")
            for key, value in info.items():
                if key in ("findings", "status") or isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                m[key] = round(m.get(key, 0) + value, 3)
            for row in info.get("cpu") or []:  # (each worker's CPU split, with the shard it ran in)
                if isinstance(row, dict):
                    m.setdefault("cpu", []).append({"shard": str(shard.directory), **row})
            for key in ("coverage",):
                if isinstance(info.get(key), dict):
                    cov = m.setdefault(key, {})
                    for k, v in info[key].items():
                        if isinstance(v, (int, float)) and not isinstance(v, bool):
                            cov[k] = max(cov.get(k, 0), v)
    for name, m in merged.items():
        m["findings"] = sum(1 for f in findings if f.get("engine") == name)
        m.setdefault("coverage", None)
    order = [*ENGINES, *sorted(k for k in merged if k not in ENGINES)]
    return {k: merged[k] for k in order if k in merged}
