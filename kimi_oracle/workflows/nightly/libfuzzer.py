"""The atheris worker: libFuzzer runs per harness, their statistics and harness-level findings."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kimi_oracle.core.files import atomic_write_text
from kimi_oracle.oracle.kinds import CRASH, TIMEOUT
from kimi_oracle.workflows.nightly.common import _read_json, derive_seed
from kimi_oracle.workflows.nightly.processes import CappedLog, pump
from kimi_oracle.workflows.nightly.spec import WorkerSpec, _Status, _base_config


_COV = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_UNITS = re.compile(r"stat::number_of_executed_units: (\d+)")
_INITED = re.compile(r"#(\d+)\s+INITED")


def _libfuzzer_stats(log: str) -> dict[str, int]:
    """libFuzzer's counters from (part of) its output."""
    stats: dict[str, int] = {}
    for line in log.splitlines():
        _feed_stats(stats, line)
    return stats


def _feed_stats(stats: dict[str, int], line: str) -> None:
    m = _COV.search(line)
    if m:
        stats["execs"] = int(m.group(1))
        stats["cov"] = int(m.group(2))
        stats["ft"] = int(m.group(3))
        stats["corpus_entries"] = int(m.group(4))
    m = _UNITS.search(line)
    if m:
        stats["execs"] = int(m.group(1))
    m = _INITED.search(line)
    if m:
        stats["inited"] = int(m.group(1))  # runs spent replaying the starting corpus


@dataclass
class _Atheris:
    """One atheris worker's run: its spec, status and what its harnesses share."""

    spec: WorkerSpec
    status: _Status
    deadline: float
    dict_path: Path
    log_limit: int
    seen_findings: set[str] = field(default_factory=set)
    # interpreter start, imports and instrumentation before libFuzzer's clock starts
    overhead: float = 4.0


@dataclass
class _HarnessRun:
    """One harness' libFuzzer runs: its folders and counters."""

    name: str
    hdir: Path
    settings: Any
    env: dict[str, str]
    slice_end: float
    cov: dict[str, int] = field(default_factory=dict)
    execs_total: int = 0
    generated: int = 0  # inputs libFuzzer made, beyond its replays of the starting corpus
    reached: bool = False
    run_no: int = 0
    last_code: int | None = None

    @property
    def new_dir(self) -> Path:
        return self.hdir / "new"

    @property
    def start_dir(self) -> Path:
        return self.hdir / "start"

    @property
    def artifacts(self) -> Path:
        return self.hdir / "artifacts"


def _atheris_worker(spec: WorkerSpec, status: _Status) -> None:
    """libFuzzer over each harness in turn, each for its share of the budget (or --max-examples)."""
    from kimi_oracle.inputs import corpus as corpus_mod

    work = Path(spec.work)
    harnesses = list(spec.harnesses)
    run = _Atheris(spec, status, deadline=time.monotonic() + spec.budget_s, dict_path=work / "png_jpeg.dict",
                   log_limit=int(spec.log_limit_mb * 2**20))
    data = status.data
    data.update(restarts=0, harness_crashes=0, duplicates=0, rejected=0, coverage={}, execs=0)
    per = data.setdefault("per_harness", {})
    for name in harnesses:
        per[name] = {"status": "not run", "note": "not started", "examples": 0, "execs": 0}
    atomic_write_text(run.dict_path, corpus_mod.dictionary_text())
    t0 = time.monotonic()
    reached: dict[str, bool] = {}
    for position, name in enumerate(harnesses):
        h = _start_harness(run, name, work / name, slice_end=t0 + spec.budget_s * (position + 1) / len(harnesses))
        reached[name] = False
        per[name]["note"] = "no time left in its share of the budget"
        try:
            _fuzz_harness(run, h)
        finally:
            _end_harness(run, h)
        reached[name] = h.reached
    data["stopped"] = "examples" if spec.max_examples is not None and all(reached.values()) else "budget"


def _start_harness(run: _Atheris, name: str, hdir: Path, slice_end: float) -> _HarnessRun:
    """The harness' folders, its starting corpus (this shard's share) and its settings."""
    from kimi_oracle.fuzzers.harnesses import HarnessSettings
    from kimi_oracle.inputs import corpus as corpus_mod

    spec = run.spec
    for d in (hdir / "new", hdir / "start", hdir / "artifacts"):
        d.mkdir(parents=True, exist_ok=True)
    persistent = Path(spec.corpus) / name
    for path in corpus_mod.shard_entries(corpus_mod.entries(persistent), spec.shard):
        try:
            os.link(path, hdir / "start" / path.name)
        except OSError:
            shutil.copyfile(path, hdir / "start" / path.name)
    settings = HarnessSettings(
        candidate=spec.candidate, profile=spec.profile, config_path=spec.config_path,
        tolerance=spec.tolerance, isolate=True, case_timeout_s=spec.case_timeout_s,
        shard=spec.shard, findings_dir=spec.out, status_path=str(hdir / "harness-status.json"),
        max_findings=spec.max_findings, vary_config=spec.vary_config,
        minimize_s=HarnessSettings.minimize_s if spec.shrink else 0.0,
        memory_limit_mb=spec.memory_limit_mb,
    )
    env = dict(os.environ)
    env.update(settings.to_env())
    return _HarnessRun(name, hdir, settings, env, slice_end)


def _fuzz_harness(run: _Atheris, h: _HarnessRun) -> None:
    """libFuzzer runs on one harness until its time (or example count) is used, restarted after
    a run that left new crash artifacts."""
    spec, data = run.spec, run.status.data
    while True:
        remaining = min(h.slice_end, run.deadline) - time.monotonic() - run.overhead
        if remaining < 1.0:
            break
        runs = None
        if spec.max_examples is not None:
            if h.generated >= int(spec.max_examples):
                h.reached = True
                break
            # -runs counts the replay of the starting corpus too: N inputs beyond it.
            corpus_files = sum(1 for d in (h.new_dir, h.start_dir) for p in d.iterdir() if p.is_file())
            runs = corpus_files + int(spec.max_examples) - h.generated
        h.env["KIMI_FUZZ_DEADLINE"] = repr(time.time() + (min(h.slice_end, run.deadline) - time.monotonic()))
        known_artifacts = {p.name for p in h.artifacts.iterdir()}
        launched = time.monotonic()
        code, stats = _libfuzzer_run(run, h, _libfuzzer_cmd(run, h, remaining, runs), remaining)
        h.last_code = code
        h.run_no += 1
        if code == 0 and runs is not None and stats.get("execs", 0) >= runs:
            h.reached = True
        if code == 0:
            run.overhead = max(1.0, time.monotonic() - launched - max(1, int(remaining)))
        new_artifacts = [p for p in h.artifacts.iterdir() if p.name not in known_artifacts]
        for art in new_artifacts:
            _harness_artifact_finding(spec, h.name, art, h.settings, data, run.seen_findings)
        run.status.write(force=True)
        if code == 0 or not new_artifacts:
            break
        data["restarts"] += 1


def _libfuzzer_cmd(run: _Atheris, h: _HarnessRun, remaining: float, runs: int | None) -> list[str]:
    """The command line of one libFuzzer run on harness `h`."""
    spec = run.spec
    cmd = [sys.executable, "-m", "kimi_oracle.fuzzers.atheris_entry", h.name, str(h.new_dir), str(h.start_dir),
           f"-max_total_time={max(1, int(remaining))}",
           f"-seed={derive_seed(spec.seed, spec.shard, spec.worker, h.run_no) % 2**31 or 1}",
           f"-artifact_prefix={h.artifacts}/",
           f"-timeout={int(4 * spec.case_timeout_s + 60)}",
           "-rss_limit_mb=8192", "-print_final_stats=1", "-close_fd_mask=0"]
    if runs is not None:
        cmd.append(f"-runs={runs}")
    if h.name == "decoder":
        cmd += [f"-dict={run.dict_path}"]
    return cmd + [f"-max_len={max_len(h.name)}"]


def max_len(name: str) -> int:
    """libFuzzer's -max_len for harness `name`: the decoder's files up to 64 KiB, the structured
    harness's choice strings 256 bytes (the nightly's runs and `minimize_corpus` alike)."""
    return 65536 if name == "decoder" else 256


# How long `minimize_corpus` may take per harness (libFuzzer runs every input of the union once).
MINIMIZE_TIMEOUT_S = 600.0


def minimize_corpus(name: str, corpus: Path, work: Path, config: Mapping[str, Any] | None = None,
                    profile: str | None = None, timeout_s: float = MINIMIZE_TIMEOUT_S) -> tuple[int, str]:
    """libFuzzer's own `-merge=1` over harness `name`'s corpus folder: `corpus` is replaced by the
    inputs that keep its coverage of Pillow's instrumented code (what the nightly's harnesses
    measure). The harness runs the reference on both sides in this process's children, so no
    candidate code runs and nothing is a finding; `work` holds its config, control file and log.
    Returns (entries in `corpus` after, "" when minimized, else why it was kept as it is)."""
    from kimi_oracle.core.interrupts import kill_group
    from kimi_oracle.fuzzers.harnesses import HarnessSettings

    before = sum(1 for p in corpus.iterdir() if p.is_file())
    if before == 0:
        return 0, ""
    work.mkdir(parents=True, exist_ok=True)
    config_path = None
    if config:
        config_path = work / "config.json"
        atomic_write_text(config_path, json.dumps(dict(config)))
    settings = HarnessSettings(candidate="reference", profile=None if config_path else profile,
                               config_path=str(config_path) if config_path else None, isolate=False,
                               findings_dir=None, minimize_s=0.0)
    out = work / f"{name}.min"
    out.mkdir()
    cmd = [sys.executable, "-m", "kimi_oracle.fuzzers.atheris_entry", name, "-merge=1",
           f"-merge_control_file={work / (name + '.control')}", f"-max_len={max_len(name)}", "-rss_limit_mb=8192",
           "-timeout=120", str(out), str(corpus)]
    log_path = work / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **settings.to_env()}, start_new_session=True)
        code: int | None = None
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:  # (its time, or an interrupt): the merge and its children
                kill_group(proc.pid)
                proc.wait()
    if code is None:
        return before, f"libFuzzer's -merge=1 on {name} took over {timeout_s:.0f} s: the union kept"
    after = sorted(p for p in out.iterdir() if p.is_file())
    if code != 0 or not after:
        tail = log_path.read_bytes()[-300:].decode("utf-8", "replace").strip().splitlines()
        return before, (f"libFuzzer's -merge=1 on {name} exited {code} with {len(after)} inputs "
                        f"({tail[-1] if tail else 'no output'}): the union kept")
    for path in [p for p in corpus.iterdir() if p.is_file()]:
        path.unlink()
    for path in after:
        os.replace(path, corpus / path.name)
    return len(after), ""


def _libfuzzer_run(run: _Atheris, h: _HarnessRun, cmd: list[str], remaining: float) -> tuple[int, dict[str, int]]:
    """One libFuzzer run, waited for (stopped with SIGINT past its time, or on Ctrl-C); its
    counters go into `h` and the worker's status whatever happens. Returns (exit code, stats)."""
    stats: dict[str, int] = {}
    # libFuzzer's output, and the candidate's (its executor inherits it), through a
    # pipe into a log that keeps its tail; the counters are read from every line.
    log = CappedLog(h.hdir / f"libfuzzer-{h.run_no}.log", run.log_limit,
                    on_line=lambda line, st=stats: _feed_stats(st, line))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=h.env)
    reader = pump(proc.stdout, log)
    run.status.data["per_harness"][h.name].update(status="started", note="")
    try:
        code = proc.wait(timeout=remaining + 2 * run.spec.case_timeout_s + 30)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    finally:
        reader.join(15.0)
        h.execs_total += stats.get("execs", 0)
        h.generated += max(0, stats.get("execs", 0) - stats.get("inited", 0))
        for k in ("cov", "ft", "corpus_entries"):
            if k in stats:
                h.cov[k] = max(h.cov.get(k, 0), stats[k])
        _collect_harness(run.spec, h.name, h.hdir, run.status.data, h.execs_total, h.cov, run.seen_findings)
        run.status.write(force=True)
    return code, stats


def _end_harness(run: _Atheris, h: _HarnessRun) -> None:
    """New corpus entries into the persistent corpus; the harness' last counters and status."""
    from kimi_oracle.inputs import corpus as corpus_mod

    data = run.status.data
    added = corpus_mod.merge(h.new_dir, Path(run.spec.corpus) / h.name)
    data.setdefault("corpus_added", {})[h.name] = added
    _collect_harness(run.spec, h.name, h.hdir, data, h.execs_total, h.cov, run.seen_findings)
    entry = data["per_harness"][h.name]
    if entry["examples"] > 0:
        entry["status"], entry["note"] = "ran", ""
    elif h.run_no:
        entry["status"] = "not run"
        entry["note"] = (f"libFuzzer exited with {h.last_code} before judging any input "
                         f"(see {h.hdir / 'libfuzzer-0.log'})")
    run.status.write(force=True)


def _collect_harness(spec: WorkerSpec | Mapping[str, Any], name: str, hdir: Path, data: dict[str, Any], execs: int,
                     cov: dict[str, int], seen: set[str]) -> None:
    """The harness' counters into the worker's status. `examples` are the inputs the harness
    judged: its own count once it has skipped inputs past the deadline (it writes that count at
    its first skip, and judges nothing after), else libFuzzer's executions (the harness writes
    its count at most once a second, and libFuzzer exits without a last write)."""
    out = WorkerSpec.coerce(spec).out
    hs = _read_json(hdir / "harness-status.json")
    counters = hs.get("counters", {})
    per = data.setdefault("per_harness", {})
    skipped = int(counters.get("skipped", 0))
    judged = int(counters.get("examples", 0)) if skipped else max(execs, int(counters.get("examples", 0)))
    entry = per.setdefault(name, {"status": "not run", "note": ""})
    entry.update({"examples": judged, "execs": execs, "skipped_past_deadline": max(execs - judged, 0) if skipped else 0,
                  "rejected": int(counters.get("rejected", 0)), "duplicates": int(counters.get("duplicates", 0)),
                  "coverage": dict(cov)})
    data["examples"] = sum(v.get("examples", 0) for v in per.values())
    data["execs"] = sum(v.get("execs", 0) for v in per.values())
    data["rejected"] = sum(v.get("rejected", 0) for v in per.values())
    data["duplicates"] = sum(v.get("duplicates", 0) for v in per.values())
    data["coverage"] = {h: v["coverage"] for h, v in per.items() if "coverage" in v}
    behaviours = set(data.get("behaviours", [])) | set(hs.get("behaviours", []))
    data["behaviours"] = sorted(behaviours)
    for fid in hs.get("finding_ids", []):
        if fid not in seen:
            seen.add(fid)
            data["findings"].append({"id": fid, "path": str(Path(out) / "findings" / fid)})


def _harness_artifact_finding(spec: WorkerSpec, name: str, art: Path, settings: Any, data: dict[str, Any],
                              seen: set[str]) -> None:
    """A libFuzzer artifact means the harness process itself died or hung (not the candidate,
    which runs in the executor): replay it in a subprocess to see how, and file a finding."""
    prefix = art.name.split("-", 1)[0]
    if prefix not in ("crash", "timeout", "oom", "leak"):
        return
    raw = art.read_bytes()
    env = dict(os.environ)
    env.update(dataclasses.replace(settings, findings_dir=None, status_path=None).to_env())
    limit = 4 * spec.case_timeout_s + 60
    try:
        proc = subprocess.run([sys.executable, "-m", "kimi_oracle.fuzzers.atheris_entry", name, "--replay", str(art)],
                              capture_output=True, timeout=limit, env=env)
        how = f"replay exit {proc.returncode}"
        tail = (proc.stdout + proc.stderr).decode(errors="replace")[-4000:]
    except subprocess.TimeoutExpired as exc:
        how = f"replay hung for {limit:.0f} s"
        tail = ((exc.stdout or b"") + (exc.stderr or b"")).decode(errors="replace")[-4000:]
    kind = TIMEOUT if prefix == "timeout" else CRASH  # libFuzzer's artifact prefix -> our check
    message = f"the {name} harness process itself {'hung' if kind == TIMEOUT else 'died'} on this input " \
              f"(libFuzzer {prefix}; {how})"
    path = write_harness_finding(Path(spec.out), name, raw, kind, message, tail, spec, settings)
    data["harness_crashes"] = data.get("harness_crashes", 0) + 1
    if path.name not in seen:
        seen.add(path.name)
        data["findings"].append({"id": path.name, "path": str(path)})


def write_harness_finding(out: Path, name: str, raw: bytes, kind: str, message: str, detail: str,
                          spec: WorkerSpec | Mapping[str, Any], settings: Any) -> Path:
    """A finding for an input that killed the harness process (no verdict, maybe no image).
    `spec` may be the worker's spec or a dict of its keys."""
    from kimi_oracle.fuzzers.harnesses import FUZZ_INPUT_FILE, fuzz_input_record
    from kimi_oracle.results.report import Finding, write_finding

    spec = WorkerSpec.coerce(spec)
    config = _base_config(spec)
    images: list[Any] = []
    params: list[Any] = []
    if name == "structured":
        from kimi_oracle.fuzzers.harnesses import structured_case

        try:
            case, _ = structured_case(raw, config, shard=spec.shard)
            config = case.config
            images = case.make_images()
            params = [p.to_dict() for p in case.images]
        except Exception:
            images, params = [], []
    # Without images the raw input's digest names the finding (report.Finding.id).
    finding = Finding(check=kind, message=message, candidate=spec.candidate, config=config, images=images,
                      params=params, tolerance=spec.tolerance, engine="atheris",
                      stats={"exception": message, "traceback": detail}, raw_inputs=[] if images else [raw],
                      extra={"fuzz_input": fuzz_input_record(name, raw), "harness_level": True})
    return write_finding(out, finding, extra_files={FUZZ_INPUT_FILE: raw})
