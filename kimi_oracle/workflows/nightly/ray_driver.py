"""The driver of `kimi-oracle nightly --ray`: it places the workers (`ray_runner.RayWorker`),
drains what they send, is the one writer of `--out`, `--corpus` and `--db`, and writes the
summary as the local runner does (`runner._summarize`, the same schema, exit codes, JUnit)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kimi_oracle.core import interrupts
from kimi_oracle.core.files import atomic_write_bytes, fsync_dir, utc_now, write_json
from kimi_oracle.core.specs import absolute_spec
from kimi_oracle.workflows.nightly.common import CampaignOptions, CampaignResult, UnknownCheckError, _count_db
from kimi_oracle.workflows.nightly.processes import _Worker
from kimi_oracle.workflows.nightly.ray_runner import (
    POLL_S, RayUnavailableError, connect, default_gpus, import_ray, ray_worker_class, runtime_env_for, snapshot,
)
from kimi_oracle.workflows.nightly.runner import OutLock, _Campaign, _exit_code, _prepare, plan_jobs
from kimi_oracle.workflows.nightly.summary import _summarize, finding_entry, write_summary


@dataclass
class _Placed:
    """One worker on the cluster: its actor, its run's object ref, where it runs, what it returned."""

    worker: _Worker
    actor: Any
    ref: Any
    where: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: str | None = None


class _Sink:
    """The driver's writes: finding folders (one per key, the smallest), database and corpus files."""

    def __init__(self, opts: CampaignOptions):
        self.opts = opts
        self.root = opts.out / "findings"
        self.by_key: dict[str, tuple[int, str]] = {}  # key -> (input bytes, finding id)
        self.candidate = absolute_spec(opts.candidate)
        self.received = {"finding": 0, "db": 0, "corpus": 0}

    def take(self, items: list[tuple[str, str, Any]]) -> None:
        """Write what a worker sent (each item on disk, atomically, before the next is looked at)."""
        for kind, name, payload in items:
            self.received[kind] = self.received.get(kind, 0) + 1
            if kind == "finding":
                self._finding(name, payload)
            else:
                base = self.opts.db if kind == "db" else self.opts.corpus
                target = base / name
                if ".." in Path(name).parts or Path(name).is_absolute() or target.exists():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(target, payload)

    def _finding(self, name: str, files: dict[str, bytes]) -> None:
        if "/" in name or name.startswith(".") or any("/" in f or f.startswith(".") for f in files):
            return
        stage = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=self.root))
        try:
            for fname, data in files.items():
                (stage / fname).write_bytes(data)
            case = json.loads(files.get("case.json", b"{}"))
            case["candidate"] = self.candidate  # (as the driver was given it, not the worker's copy)
            (stage / "case.json").write_text(json.dumps(case, indent=2))
            entry = finding_entry(stage)
            size = sum(len(files.get(str(e.get("file")), b"")) for e in case.get("images") or [])
            key = str(entry["key"]) if entry else name
            held = self.by_key.get(key)
            if held is not None and held[1] != name and held[0] <= size:
                return  # the same finding (by key), no smaller: the one on disk is kept
            self._publish(stage, name)
            if held is not None and held[1] != name:
                shutil.rmtree(self.root / held[1], ignore_errors=True)
            self.by_key[key] = (size, name)
        except (ValueError, UnknownCheckError):
            pass  # (collect_findings reports an unknown check of a folder it finds)
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _publish(self, stage: Path, name: str) -> None:
        final = self.root / name
        if final.exists():  # the worker rewrote it (hits, diagnosis): the new one replaces it
            old = self.root / f".{name}.old"
            os.rename(final, old)
            os.rename(stage, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(stage, final)
        fsync_dir(self.root)


def run_ray_campaign(opts: CampaignOptions, address: str, gpus_per_worker: float | None = None, *,
                     progress: Callable[[str], None] | None = None) -> CampaignResult:
    """The campaign with its workers on the Ray cluster at `address` (`auto`: join or start one)."""
    ray = import_ray()
    say = progress or (lambda _msg: None)
    opts.out.mkdir(parents=True, exist_ok=True)
    lock = OutLock(opts.out).acquire()
    # A caller already connected to Ray (a notebook, a benchmark) keeps its connection.
    owned = not ray.is_initialized()
    try:
        env, spec = runtime_env_for(opts.candidate)
        if not owned and env:
            raise RayUnavailableError(f"Ray is already connected in this process: a candidate file ({opts.candidate}) "
                                      f"reaches the workers only through the job's runtime_env {env}")
        joined = connect(ray, address, opts.jobs, env) if owned else "the Ray connection of the caller"
        say(f"ray: {joined}")
        gpus = default_gpus(opts.candidate) if gpus_per_worker is None else gpus_per_worker
        try:
            return _run(ray, opts, spec, gpus, say, joined)
        finally:
            if owned:
                ray.shutdown()
    finally:
        lock.release()


def _run(ray: Any, opts: CampaignOptions, spec: str, gpus: float,
         say: Callable[[str], None], joined: str) -> CampaignResult:
    from kimi_oracle.core.defaults import fresh_seed

    run = _Campaign(started_wall=utc_now(), started=time.monotonic(),
                    seed=opts.seed if opts.seed is not None else fresh_seed(), engines=list(opts.engines),
                    db_before=_count_db(opts.db))
    work = _prepare(opts, run)
    sink = _Sink(opts)
    placed: list[_Placed] = []
    try:
        shared = (ray.put(snapshot(opts.db)), ray.put(snapshot(opts.corpus)))
        phases = plan_jobs(run.engines, opts.jobs, opts.budget_s) if run.engines and not run.errors else []
        for phase in phases:
            batch = [_place(ray, opts, spec, gpus, engine, budget, len(placed) + i, run.seed, work, shared)
                     for i, (engine, budget) in enumerate(phase)]
            placed += batch
            for p in batch:
                say(f"worker {p.worker.index}: {p.worker.engine} on node {p.where.get('node', '?')[:12]} "
                    f"({p.where.get('host')}, pid {p.where.get('pid')})")
            _drive(ray, batch, sink, opts)
    except KeyboardInterrupt:
        run.stopped = "interrupted"
        say("interrupted: stopping the workers and writing the summary")
        for p in placed:
            if p.result is None:
                _drain(ray, p, sink)  # (what was already made is kept)
                ray.kill(p.actor, no_restart=True)
                p.error = p.error or "interrupted"
    with interrupts.held() as pending:
        if pending():
            run.stopped = "interrupted"
        return _finish(opts, run, placed, sink, joined)


def _place(ray: Any, opts: CampaignOptions, spec: str, gpus: float, engine: str,
           budget: float, index: int, seed: int, work: Path, shared: tuple[Any, Any]) -> _Placed:
    from kimi_oracle.workflows.nightly.common import derive_seed
    from kimi_oracle.workflows.nightly.spec import WorkerSpec

    wdir = work / f"w{index}-{engine}"
    shutil.rmtree(wdir, ignore_errors=True)
    wdir.mkdir(parents=True)
    worker_spec = WorkerSpec(
        engine=engine, worker=index, budget_s=budget, candidate=spec, profile=opts.profile,
        config_path=str(opts.config_path) if opts.config_path else None, tolerance=opts.tolerance,
        case_timeout_s=opts.case_timeout_s, memory_limit_mb=opts.memory_limit_mb, vary_config=opts.vary_config,
        shard=tuple(opts.shard), seed=derive_seed(seed, opts.shard, index), max_findings=opts.max_findings,
        harnesses=tuple(opts.harnesses), max_examples=opts.max_examples, shrink=opts.shrink,
        log_limit_mb=opts.log_limit_mb, out="-", work="-")
    worker_spec.write(wdir / "spec.json")
    w = _Worker(index, engine, budget, wdir / "spec.json", wdir / "status.json", wdir / "worker.log")
    w.deadline = time.monotonic() + budget
    actor = ray_worker_class(ray, gpus).remote(worker_spec.to_dict(), shared[0], shared[1])
    where = ray.get(actor.where.remote())
    return _Placed(w, actor, actor.run.remote(), where)


def _drain(ray: Any, p: _Placed, sink: _Sink) -> bool:
    """Take what the worker made since the last drain; False when its actor is gone."""
    try:
        sink.take(ray.get(p.actor.drain.remote(), timeout=60))
        return True
    except Exception as exc:  # noqa: BLE001 - RayActorError, a lost node, a timeout: the worker is gone
        p.error = p.error or f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return False


def _drive(ray: Any, batch: list[_Placed], sink: _Sink, opts: CampaignOptions) -> None:
    """Drain every worker every POLL_S until each has ended (or died, or overrun its budget)."""
    from kimi_oracle.workflows.nightly.runner import _grace

    live = list(batch)
    while live:
        interrupts.raise_if_requested()
        ray.wait([p.ref for p in live], num_returns=1, timeout=POLL_S)
        for p in list(live):
            alive = _drain(ray, p, sink)
            ready, _ = ray.wait([p.ref], timeout=0)
            if ready:
                try:
                    p.result = ray.get(p.ref)
                    _drain(ray, p, sink)
                except Exception as exc:  # noqa: BLE001 - the actor died (ray.kill, SIGKILL, its node)
                    p.error = p.error or f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            elif not alive:
                ray.kill(p.actor, no_restart=True)
            elif time.monotonic() > p.worker.deadline + _grace(opts):
                p.error = "overran its budget and was stopped"
                ray.kill(p.actor, no_restart=True)
            else:
                continue
            if p.result is not None:
                try:
                    p.actor.close.remote()
                except Exception:  # noqa: BLE001
                    pass
            live.remove(p)


def _finish(opts: CampaignOptions, run: _Campaign, placed: list[_Placed], sink: _Sink, joined: str) -> CampaignResult:
    """Each worker's status and log under OUT/work, the summary (with the `ray` section) written."""
    dead = []
    for p in placed:
        w = p.worker
        if p.result is not None:
            status = json.loads(p.result["status"] or b"{}")
            status["findings"] = []  # (its own folders: the driver's copies under OUT/findings count)
            write_json(w.status_path, status)
            atomic_write_bytes(w.log_path, p.result["log"])
            w.returncode = p.result["returncode"]
        else:
            w.killed = True
            where = p.where
            if run.stopped != "interrupted":
                dead.append(f"{w.engine} worker {w.index} on node {where.get('node')} ({where.get('host')}, "
                            f"pid {where.get('pid')}) died: {p.error}; what it sent before is kept")
    run.errors += dead
    summary = _summarize(opts, config=run.config, engines=run.engines, workers=[p.worker for p in placed],
                         engine_info=run.engine_info, errors=run.errors, stopped=run.stopped, seed=run.seed,
                         started_wall=run.started_wall, started=run.started, existing=run.existing,
                         corpus_before=run.corpus_before, db_before=run.db_before)
    summary["ray"] = {"cluster": joined, "received": sink.received,
                      "workers": [{"worker": p.worker.index, "engine": p.worker.engine, **p.where,
                                   "ended": "ran" if p.result is not None else "died", "error": p.error}
                                  for p in placed]}
    code = _exit_code(summary, run.stopped, None)
    summary["exit_code"] = code
    write_summary(opts.out, summary)
    return CampaignResult(summary, code, opts.out)
