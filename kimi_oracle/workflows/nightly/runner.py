"""The campaign runner: planning, the out lock, launching and waiting for workers, interrupts."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import fresh_seed
from kimi_oracle.core.errors import (
    EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, KimiOracleError,
)
from kimi_oracle.core.files import utc_now
from kimi_oracle.workflows import nightly_engine, nightly_planner, nightly_video
from kimi_oracle.workflows.nightly.common import (
    CampaignOptions, CampaignResult, DiskFullError, LOCK_NAME, OutInUseError, _count_db, _os_error,
    atheris_available, derive_seed,
)
from kimi_oracle.workflows.nightly.processes import CappedLog, _Worker, _close_log, _reap_group, _signal_group, pump
from kimi_oracle.workflows.nightly.spec import WorkerSpec
from kimi_oracle.workflows.nightly.summary import _summarize, write_summary


def plan_jobs(engines: Sequence[str], jobs: int, budget_s: float) -> list[list[tuple[str, float]]]:
    """Phases of concurrent (engine, budget) workers. With at least one job per engine every
    engine runs for the whole budget (jobs split among them); otherwise the engines take turns
    and share the budget equally."""
    engines = list(engines)
    if jobs >= len(engines):
        slots: list[tuple[str, float]] = []
        for i in range(jobs):
            slots.append((engines[i % len(engines)], budget_s))
        return [slots]
    phases = []
    per = budget_s / ((len(engines) + jobs - 1) // jobs)
    for start in range(0, len(engines), jobs):
        phases.append([(e, per) for e in engines[start : start + jobs]])
    return phases


def _repo_fuzz_dir() -> Path | None:
    here = Path(__file__).resolve().parents[3] / "fuzz"
    return here if here.is_dir() else None


def prepare_corpus(corpus: Path, harnesses: Sequence[str]) -> dict[str, int]:
    """Make sure each harness' corpus exists; an empty one is seeded (committed + generated)."""
    from kimi_oracle.inputs import corpus as corpus_mod

    counts = {}
    fuzz_dir = _repo_fuzz_dir()
    for name in harnesses:
        directory = corpus / name
        directory.mkdir(parents=True, exist_ok=True)
        if not corpus_mod.entries(directory):
            if fuzz_dir is not None and (fuzz_dir / "corpus" / name).is_dir():
                corpus_mod.merge(fuzz_dir / "corpus" / name, directory)
            seeds = corpus_mod.seed_files() if name == "decoder" else corpus_mod.structured_seeds()
            for data in seeds.values():
                corpus_mod.add_entry(directory, data)
        counts[name] = len(corpus_mod.entries(directory))
    return counts


class OutLock:
    """`OUT/.nightly.lock`: an exclusive flock held for the whole run, the owner's pid, host and
    start time inside. A second run on the same folder is refused (OutInUseError); the lock of a
    run that died (its flock is gone with its process) is taken over, and `taken_over` says whose."""

    def __init__(self, out: Path):
        self.path = Path(out) / LOCK_NAME
        self.fd: int | None = None
        self.taken_over: str | None = None

    def acquire(self) -> "OutLock":
        """Take the lock, or raise OutInUseError naming its owner."""
        import fcntl

        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                owner = self._owner(fd)
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutInUseError(
                        f"{self.path.parent} is in use by another nightly run ({self._describe(owner)}); "
                        f"wait for it to end or choose another --out") from None
                raise
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is None or (current.st_ino, current.st_dev) != (mine.st_ino, mine.st_dev):
                os.close(fd)  # the owner released (and removed) it while we waited: again
                continue
            break
        old = self._owner(fd)
        if old.get("pid"):
            self.taken_over = (f"took over the lock of an earlier run ({self._describe(old)}), which ended "
                               f"without releasing it")
        data = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": utc_now()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data + b"\n", 0)
        os.fsync(fd)
        self.fd = fd
        return self

    @staticmethod
    def _owner(fd: int) -> dict[str, Any]:
        try:
            data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _describe(owner: dict[str, Any]) -> str:
        if not owner:
            return "owner unknown"
        return f"pid {owner.get('pid')} on {owner.get('host')}, started {owner.get('started')}"

    def release(self) -> None:
        """Remove the lock file and drop the lock."""
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def run_campaign(opts: CampaignOptions, *, progress: Callable[[str], None] | None = None) -> CampaignResult:
    """Run the campaign; always writes summary.json, summary.md and junit.xml under opts.out.

    OutInUseError (nothing written) when another run holds opts.out; DiskFullError (one line
    naming what was written) when the summary cannot be written."""
    say = progress or (lambda _msg: None)
    opts.out.mkdir(parents=True, exist_ok=True)
    lock = OutLock(opts.out).acquire()
    try:
        if lock.taken_over:
            say(lock.taken_over)
        return _run_locked(opts, say, [lock.taken_over] if lock.taken_over else [])
    finally:
        lock.release()


@dataclass
class _Campaign:
    """What the runner gathers during a campaign, for its summary."""

    started_wall: str
    started: float
    seed: int
    engines: list[str]
    db_before: int
    errors: list[str] = field(default_factory=list)
    engine_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: str = "budget"
    existing: set[str] = field(default_factory=set)
    corpus_before: dict[str, int] = field(default_factory=dict)
    workers: list[_Worker] = field(default_factory=list)
    config: PreprocessConfig | None = None
    planner_info: dict[str, Any] | None = None
    request_info: dict[str, Any] | None = None  # the --engine stage's summary (workflows.nightly_engine)
    video_info: dict[str, Any] | None = None  # the --media video|both stage's (workflows.nightly_video)


def _run_locked(opts: CampaignOptions, say: Callable[[str], None], notes: list[str]) -> CampaignResult:
    run = _Campaign(started_wall=utc_now(), started=time.monotonic(),
                    seed=opts.seed if opts.seed is not None else fresh_seed(), engines=list(opts.engines),
                    db_before=_count_db(opts.db))
    workers = run.workers
    try:
        work = _prepare(opts, run)
        _run_phases(opts, run, work, say)
        _after_workers(opts, run)
    except KeyboardInterrupt:
        run.stopped = "interrupted"
        say("interrupted: stopping workers and writing the summary")
        _interrupt([w for w in workers if w.proc is not None and w.returncode is None], opts)
    except OSError as exc:  # a full disk (or an unwritable --out) while preparing or launching
        run.errors.append(f"cannot write under {opts.out}: {_os_error(exc)}")
        _interrupt([w for w in workers if w.proc is not None and w.returncode is None], opts)
    except BaseException:  # an unexpected error of the runner itself: no worker outlives it
        for w in workers:
            _signal_group(w, signal.SIGKILL)
            if w.proc is not None:
                w.proc.wait()
        raise
    # Held back from here on: a signal now still yields a complete summary that says so.
    with interrupts.held() as pending:
        for w in workers:
            _reap_group(w)
            _close_log(w)
        if pending():
            run.stopped = "interrupted"
        summary = _summarize(opts, config=run.config, engines=run.engines, workers=workers,
                             engine_info=run.engine_info, errors=run.errors, stopped=run.stopped, seed=run.seed,
                             started_wall=run.started_wall, started=run.started, existing=run.existing,
                             corpus_before=run.corpus_before, db_before=run.db_before)
        summary["notes"] = notes + summary.get("notes", [])
        if run.planner_info is not None:
            summary["planner"] = run.planner_info
        if run.video_info is not None:
            summary["video"] = run.video_info
        if run.request_info is not None:
            summary["request_engine"] = run.request_info
            summary["findings"] += nightly_engine.finding_entries(run.request_info)
        code = _exit_code(summary, run.stopped, run.planner_info)
        summary["exit_code"] = code
        try:
            write_summary(opts.out, summary)
        except OSError as exc:
            raise DiskFullError(_not_written(opts.out, exc, summary)) from None
    return CampaignResult(summary, code, opts.out)


def _after_workers(opts: CampaignOptions, run: _Campaign) -> None:
    """The stages after the workers, each within what is left of the budget: --planner, --media
    video|both, --engine (a KeyboardInterrupt of the engine stage goes on up)."""
    kept = opts.budget_s - nightly_engine.worker_budget(opts.budget_s, opts.engine)  # (the engine stage's)
    if opts.planner is not None and not run.errors and run.config is not None:
        left = max(opts.budget_s - kept - (time.monotonic() - run.started), opts.case_timeout_s)
        run.planner_info = nightly_planner.run(opts.planner, opts.planner_sizes, run.config, run.seed,
                                               opts.vary_config, opts.out, opts.case_timeout_s, left)
    if opts.media != "image" and not run.errors and run.config is not None:
        left = max(opts.budget_s - kept - (time.monotonic() - run.started), 60.0)
        try:
            run.video_info = nightly_video.run(opts.candidate, opts.media, run.config, opts.video_examples,
                                               run.seed, opts.tolerance, opts.out, left)
        except KimiOracleError as exc:  # no video rules, or a candidate that takes no chunks
            run.errors.append(f"video: {exc}")
    if opts.engine is not None and not run.errors and run.config is not None:
        left = opts.budget_s - (time.monotonic() - run.started)
        try:
            run.request_info = nightly_engine.run(opts.engine, run.config, opts.out, opts.engine_scenarios,
                                                 run.seed, opts.tolerance, opts.case_timeout_s, opts.memory_limit_mb,
                                                 left)
        except KimiOracleError as exc:  # the engine cannot be loaded or made: said in the summary
            run.errors.append(f"engine {opts.engine}: {exc}")
        if nightly_engine.interrupted(run.request_info):
            raise KeyboardInterrupt


def _prepare(opts: CampaignOptions, run: _Campaign) -> Path:
    """Folders, engines available, the configuration, the planner spec and the corpus, before
    any worker starts; what is wrong goes into `run.errors`. Returns the work folder."""
    work = opts.out / "work"
    work.mkdir(exist_ok=True)
    findings_root = opts.out / "findings"
    findings_root.mkdir(exist_ok=True)
    run.existing = {p.name for p in findings_root.iterdir() if p.is_dir()}
    if "atheris" in run.engines and not atheris_available():
        run.engines.remove("atheris")
        note = "atheris is not installed (pip install 'kimi-oracle[fuzz]')"
        run.engine_info["atheris"] = {"status": "unavailable", "note": note, "examples": 0}
        if opts.engines_explicit:
            run.errors.append(note)
    try:
        run.config = PreprocessConfig.resolve(opts.profile, opts.config_path)
    except KimiOracleError as exc:
        run.errors.append(f"configuration: {exc}")
    if opts.planner is not None and not run.errors:
        try:  # before the campaign: a misspelt --planner is an error now, not after it
            nightly_planner.validate(opts.planner, opts.budget_s)
        except KimiOracleError as exc:
            run.errors.append(f"planner: {exc}")
    if "atheris" in run.engines:
        run.corpus_before = prepare_corpus(opts.corpus, opts.harnesses)
    opts.db.mkdir(parents=True, exist_ok=True)
    return work


def _run_phases(opts: CampaignOptions, run: _Campaign, work: Path, say: Callable[[str], None]) -> None:
    """Launch the planned workers phase by phase, each phase waited for."""
    budget_s = (nightly_engine.worker_budget(opts.budget_s, opts.engine)  # (less the --engine stage's share
                - nightly_video.kept_s(opts.budget_s, opts.media))  # and the video stage's)
    phases = plan_jobs(run.engines, opts.jobs, budget_s) if run.engines and not run.errors else []
    index = 0
    for phase in phases:
        batch = []
        for engine, budget in phase:
            w = _launch(opts, engine, budget, index, run.seed, work)
            run.workers.append(w)
            say(f"worker {index}: {engine} for {budget:.0f} s (pid {w.proc.pid if w.proc else '?'})")
            batch.append(w)
            index += 1
        _wait(batch, opts)


def _exit_code(summary: dict[str, Any], stopped: str, planner_info: dict[str, Any] | None) -> int:
    """130/143 interrupted, 2 harness errors, 1 findings (or a failed planner), else 0."""
    if stopped == "interrupted":
        return EXIT_TERMINATED if _terminated() else EXIT_INTERRUPTED
    if summary["errors"]:
        return EXIT_ERROR
    if summary["findings"] or nightly_planner.failed(planner_info) or nightly_video.failed(summary.get("video")):
        return EXIT_FINDINGS
    return EXIT_OK


def _terminated() -> bool:
    # SIGTERM seen by the handler, or waiting while signals are held.
    return interrupts.exit_code() == EXIT_TERMINATED or signal.SIGTERM in signal.sigpending()


def _not_written(out: Path, exc: OSError, summary: dict[str, Any]) -> str:
    """The one line a failed summary write ends with: why, and what is on disk already."""
    written = [str(out / name) for name in getattr(exc, "kimi_written", [])]
    ids = [f["id"] for f in summary.get("findings", [])]
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    already = f"{len(ids)} finding folder(s) under {out / 'findings'}" + (f" ({shown})" if ids else "")
    if written:
        already += ", " + ", ".join(written)
    return f"cannot write the nightly summary under {out}: {_os_error(exc)}; already written: {already}"


def _launch(opts: CampaignOptions, engine: str, budget: float, index: int, seed: int, work: Path) -> _Worker:
    wdir = work / f"w{index}-{engine}"
    if wdir.exists():
        shutil.rmtree(wdir, ignore_errors=True)
    wdir.mkdir(parents=True)
    spec = WorkerSpec(
        engine=engine, worker=index, budget_s=budget, candidate=opts.candidate, profile=opts.profile,
        config_path=str(opts.config_path) if opts.config_path else None, tolerance=opts.tolerance,
        case_timeout_s=opts.case_timeout_s, memory_limit_mb=opts.memory_limit_mb, vary_config=opts.vary_config,
        shard=tuple(opts.shard), seed=derive_seed(seed, opts.shard, index), out=str(opts.out),
        corpus=str(opts.corpus), db=str(opts.db), work=str(wdir), max_findings=opts.max_findings,
        harnesses=tuple(opts.harnesses), max_examples=opts.max_examples, shrink=opts.shrink,
        log_limit_mb=opts.log_limit_mb, runner_pid=os.getpid(), oracle=opts.oracle,
        oracle_check_share=opts.oracle_check_share,
    )
    w = _Worker(index, engine, budget, wdir / "spec.json", wdir / "status.json", wdir / "worker.log")
    spec.write(w.spec_path)
    env = dict(os.environ)
    # Through a pipe, so that the log keeps only its tail however much the candidate prints.
    w.log = CappedLog(w.log_path, int(opts.log_limit_mb * 2**20))
    w.proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle.workflows.nightly", "--worker", str(w.spec_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                              start_new_session=True)
    w.pump = pump(w.proc.stdout, w.log)
    w.deadline = time.monotonic() + budget
    return w


def _grace(opts: CampaignOptions) -> float:
    # One example may call the candidate a few times, each up to the case timeout.
    return 2 * opts.case_timeout_s + 20.0


def _wait(batch: list[_Worker], opts: CampaignOptions) -> None:
    while True:
        # A signal whose exception was swallowed (a gc callback) is not lost.
        interrupts.raise_if_requested()
        alive = [w for w in batch if w.returncode is None]
        if not alive:
            return
        now = time.monotonic()
        for w in alive:
            code = w.proc.poll() if w.proc else -1
            if code is not None:
                w.returncode = code
                _reap_group(w)
            elif now > w.deadline + _grace(opts):
                w.killed = True
                _signal_group(w, signal.SIGINT)
                try:
                    w.returncode = w.proc.wait(10)
                except subprocess.TimeoutExpired:
                    _signal_group(w, signal.SIGKILL)
                    w.returncode = w.proc.wait()
                _reap_group(w)
        time.sleep(0.2)


def _interrupt(alive: list[_Worker], opts: CampaignOptions) -> None:
    for w in alive:
        _signal_group(w, signal.SIGINT)
    deadline = time.monotonic() + 15.0
    for w in alive:
        try:
            w.returncode = w.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.killed = True
            _signal_group(w, signal.SIGKILL)
            w.returncode = w.proc.wait()
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            w.killed = True
            _signal_group(w, signal.SIGKILL)
            w.returncode = w.proc.wait()
