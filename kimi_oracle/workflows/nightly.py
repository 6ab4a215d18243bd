"""The nightly campaign runner: a time budget (or an example count) shared among fuzzing engines,
crash-proof workers, persistent corpus and example database, and a summary CI can parse and
people can read.

Process layout (each box survives the death of the one below it):

    kimi-oracle nightly (this module, no candidate code)        writes summary.json/.md, junit.xml
      └─ worker subprocess per engine job (own session)         `python -m kimi_oracle.workflows.nightly --worker`
           ├─ hypothesis: one fuzzing.fuzz(...) run             reference in-process
           └─ atheris: libFuzzer subprocess per harness         restarted after a harness-level crash
                └─ executor subprocess (sandbox.IsolatedCandidate): the candidate; its segfault,
                   abort, OOM kill or hang becomes a `crash` / `timeout` finding with its input.

A worker keeps its counters in `work/<worker>/status.json` (atomic), so a worker killed at the
budget's end or by Ctrl-C still contributes what it ran; the summary is always written.

One run per output folder: `OUT/.nightly.lock` (an flock held for the whole run, naming the
owner's pid) refuses a second run on the same `--out`; a lock left by a run that died is taken
over, and the summary says so. SIGINT and SIGTERM stop the workers (each also dies with the
runner, PR_SET_PDEATHSIG) and still write the summary (`stopped: interrupted`, exit 130/143).
Worker output (the candidate's prints included) goes through a pipe into `worker.log`, and
libFuzzer's into `libfuzzer-N.log`, each capped at `log_limit_mb` (the tail is kept). A full
disk ends the run with one line naming what was already written.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from kimi_oracle.core import interrupts
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import DEFAULT_CASE_TIMEOUT_S, fresh_seed
from kimi_oracle.core.errors import (EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED,
                                     KimiOracleError)
from kimi_oracle.core.files import atomic_write_text, utc_now, versions, write_json
from kimi_oracle.core.text import safe_text
from kimi_oracle.oracle.checks import CRASH, FINDING_KINDS, INVARIANCE, TIMEOUT
from kimi_oracle.workflows import nightly_planner
from kimi_oracle.results.report import (
    JUnitCase,
    junit_cases_for,
    root_cause_junit,
    root_cause_markdown,
    root_cause_rows,
    write_junit,
)

SUMMARY_SCHEMA = "kimi-oracle.nightly-summary"
SUMMARY_SCHEMA_VERSION = 1
ENGINES = ("hypothesis", "atheris")
LOCK_NAME = ".nightly.lock"
DEFAULT_LOG_LIMIT_MB = 8


class OutInUseError(KimiOracleError):
    """`--out` is in use by another nightly run (its lock is held)."""


class DiskFullError(KimiOracleError):
    """A write failed (a full disk, most often): the run ends with one line naming what was
    already written."""


class UnknownCheckError(KimiOracleError):
    """A finding folder names a check the oracle does not define (`checks.FINDING_KINDS`): the
    campaign reports it as a harness error instead of guessing a kind for it."""


def atheris_available() -> bool:
    """True when atheris can be imported (the `fuzz` extra)."""
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class CampaignOptions:
    """Everything `kimi-oracle nightly` takes."""

    out: Path
    budget_s: float = 1800.0
    candidate: str = "reference"
    profile: str | None = None  # None with no config_path: the default profile
    config_path: Path | None = None
    corpus: Path | None = None
    db: Path | None = None
    engines: tuple[str, ...] = ENGINES
    engines_explicit: bool = False
    shard: tuple[int, int] = (1, 1)
    jobs: int = 1
    case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S
    tolerance: str = "exact"
    seed: int | None = None
    vary_config: bool = True
    max_findings: int = 100
    memory_limit_mb: int | None = None
    harnesses: tuple[str, ...] = ("structured", "decoder")
    # Stop each worker after this many examples (atheris: per harness, libFuzzer's -runs); the
    # budget then only bounds a run that cannot get there.
    max_examples: int | None = None
    shrink: bool = True  # hypothesis shrinks its findings; atheris minimizes crash inputs
    log_limit_mb: float = DEFAULT_LOG_LIMIT_MB  # each worker's log (and libFuzzer's) keeps its last MiB
    # --planner SPEC: validated before any worker starts, fuzzed after them (workflows.nightly_planner)
    planner: str | None = None
    planner_sizes: int = 200_000

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.corpus = Path(self.corpus) if self.corpus else self.out / "corpus"
        self.db = Path(self.db) if self.db else self.out / "hypothesis-db"
        unknown = [e for e in self.engines if e not in ENGINES]
        if unknown or not self.engines:
            raise ValueError(f"unknown engine {unknown[0] if unknown else '(none)'!r}; expected {', '.join(ENGINES)}")
        if self.jobs < 1:
            raise ValueError("--jobs must be at least 1")
        if self.max_examples is not None and self.max_examples < 1:
            raise ValueError("--max-examples must be at least 1")
        if not self.log_limit_mb > 0:
            raise ValueError("--log-limit must be positive")


@dataclass
class CampaignResult:
    """The summary written to disk, and the exit code."""

    summary: dict[str, Any]
    exit_code: int
    out: Path

    @property
    def findings(self) -> list[dict[str, Any]]:
        """The summary's findings."""
        return self.summary["findings"]


# ---------------------------------------------------------------------------------------------
# planning


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


def derive_seed(base: int, shard: tuple[int, int], worker: int, iteration: int = 0) -> int:
    """Distinct, reproducible seeds per shard, worker and iteration."""
    return (int(base) * 1_000_003 + shard[0] * 7_919 + worker * 104_729 + iteration * 15_485_863) % (2**32)


def _repo_fuzz_dir() -> Path | None:
    here = Path(__file__).resolve().parents[2] / "fuzz"
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


def _count_db(db: Path) -> int:
    if not db.is_dir():
        return 0
    return sum(1 for p in db.rglob("*") if p.is_file() and not p.name.startswith("."))


# ---------------------------------------------------------------------------------------------
# capped logs


class CappedLog:
    """A log file that never grows past `limit` bytes: when it would, the older part is dropped
    (a marker line says how much) and the newest `limit / 2` bytes are kept. `on_line` (if
    given) sees every complete line, dropped ones included (libFuzzer statistics)."""

    def __init__(self, path: Path, limit: int, on_line: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.limit = max(int(limit), 4096)
        self.on_line = on_line
        self.dropped = 0
        self.size = 0
        self._marker = 0  # bytes of the marker line at the file's start
        self._partial = b""
        self._fh = open(self.path, "w+b")

    def write(self, data: bytes) -> None:
        """Append `data`; keep the tail when the file would pass the limit."""
        if not data:
            return
        if self.on_line is not None:
            self._lines(data)
        self._fh.write(data)
        self.size += len(data)
        if self.size > self.limit:
            self._truncate()

    def _lines(self, data: bytes) -> None:
        buf = self._partial + data
        *lines, self._partial = buf.split(b"\n")
        if len(self._partial) > 1 << 16:  # a "line" without end: judged in pieces
            lines.append(self._partial)
            self._partial = b""
        for line in lines:
            self.on_line(line.decode("utf-8", "replace"))

    def _truncate(self) -> None:
        keep = self.limit // 2
        self._fh.flush()
        self._fh.seek(self.size - keep)
        tail = self._fh.read(keep)
        cut = tail.find(b"\n")
        if 0 <= cut < 4096:
            tail = tail[cut + 1 :]  # start at a line
        self.dropped += self.size - self._marker - len(tail)  # the log's own bytes, not its marker's
        marker = (f"[kimi-oracle: {self.dropped} earlier bytes of this log were dropped; it keeps the newest "
                  f"{self.limit / 2**20:g} MiB at most]\n").encode()
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(marker + tail)
        self._fh.flush()
        self.size = len(marker) + len(tail)
        self._marker = len(marker)

    def close(self) -> None:
        """Flush, hand the last partial line to `on_line`, and close."""
        if self.on_line is not None and self._partial:
            self.on_line(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        try:
            self._fh.close()
        except OSError:
            pass


def pump(stream: Any, log: CappedLog) -> threading.Thread:
    """A thread copying `stream` (a pipe) into `log` until the pipe closes, then closing both."""
    def run() -> None:
        # SIGINT/SIGTERM go to the main thread only (it may hold them back while it writes a report).
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
            pass
        try:
            while True:
                chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
                if not chunk:
                    break
                try:
                    log.write(chunk)
                except OSError:
                    pass  # a full disk: keep draining, so that the writer never blocks
        except (OSError, ValueError):
            pass
        finally:
            log.close()
            try:
                stream.close()
            except OSError:
                pass

    thread = threading.Thread(target=run, name=f"log:{log.path.name}", daemon=True)
    thread.start()
    return thread


def last_line(path: Path, limit: int = 4096) -> str:
    """The last non-empty line of a (log) file, at most `limit` bytes read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


# ---------------------------------------------------------------------------------------------
# one run per output folder


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


# ---------------------------------------------------------------------------------------------
# the parent


@dataclass
class _Worker:
    index: int
    engine: str
    budget_s: float
    spec_path: Path
    status_path: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    deadline: float = 0.0
    killed: bool = False
    returncode: int | None = None
    log: CappedLog | None = None
    pump: threading.Thread | None = None


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


def _run_locked(opts: CampaignOptions, say: Callable[[str], None], notes: list[str]) -> CampaignResult:
    started_wall = utc_now()
    started = time.monotonic()
    out = opts.out
    errors: list[str] = []
    engine_info: dict[str, dict[str, Any]] = {}
    stopped = "budget"
    seed = opts.seed if opts.seed is not None else fresh_seed()
    engines = list(opts.engines)
    findings_root = out / "findings"
    existing: set[str] = set()
    corpus_before: dict[str, int] = {}
    db_before = _count_db(opts.db)
    workers: list[_Worker] = []
    config: PreprocessConfig | None = None
    planner_info: dict[str, Any] | None = None
    try:
        work = out / "work"
        work.mkdir(exist_ok=True)
        findings_root.mkdir(exist_ok=True)
        existing = {p.name for p in findings_root.iterdir() if p.is_dir()}
        if "atheris" in engines and not atheris_available():
            engines.remove("atheris")
            note = "atheris is not installed (pip install 'kimi-oracle[fuzz]')"
            engine_info["atheris"] = {"status": "unavailable", "note": note, "examples": 0}
            if opts.engines_explicit:
                errors.append(note)
        try:
            config = PreprocessConfig.resolve(opts.profile, opts.config_path)
        except KimiOracleError as exc:
            errors.append(f"configuration: {exc}")
        if opts.planner is not None and not errors:
            try:  # before the campaign: a misspelt --planner is an error now, not after it
                nightly_planner.validate(opts.planner, opts.budget_s)
            except KimiOracleError as exc:
                errors.append(f"planner: {exc}")
        if "atheris" in engines:
            corpus_before = prepare_corpus(opts.corpus, opts.harnesses)
        opts.db.mkdir(parents=True, exist_ok=True)
        phases = plan_jobs(engines, opts.jobs, opts.budget_s) if engines and not errors else []
        index = 0
        for phase in phases:
            batch = []
            for engine, budget in phase:
                w = _launch(opts, engine, budget, index, seed, work)
                workers.append(w)
                say(f"worker {index}: {engine} for {budget:.0f} s (pid {w.proc.pid if w.proc else '?'})")
                batch.append(w)
                index += 1
            _wait(batch, opts)
        if opts.planner is not None and not errors and config is not None:
            left = max(opts.budget_s - (time.monotonic() - started), opts.case_timeout_s)
            planner_info = nightly_planner.run(opts.planner, opts.planner_sizes, config, seed, opts.vary_config, out,
                                               opts.case_timeout_s, left)
    except KeyboardInterrupt:
        stopped = "interrupted"
        say("interrupted: stopping workers and writing the summary")
        _interrupt([w for w in workers if w.proc is not None and w.returncode is None], opts)
    except OSError as exc:  # a full disk (or an unwritable --out) while preparing or launching
        errors.append(f"cannot write under {out}: {_os_error(exc)}")
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
            stopped = "interrupted"
        summary = _summarize(opts, config, engines, workers, engine_info, errors, stopped, seed, started_wall,
                             started, existing, corpus_before, db_before)
        summary["notes"] = notes + summary.get("notes", [])
        if planner_info is not None:
            summary["planner"] = planner_info
        if stopped == "interrupted":
            code = EXIT_TERMINATED if _terminated() else EXIT_INTERRUPTED
        elif summary["errors"]:
            code = EXIT_ERROR
        elif summary["findings"] or nightly_planner.failed(planner_info):
            code = EXIT_FINDINGS
        else:
            code = EXIT_OK
        summary["exit_code"] = code
        try:
            write_summary(out, summary)
        except OSError as exc:
            raise DiskFullError(_not_written(out, exc, summary)) from None
    return CampaignResult(summary, code, out)


def _terminated() -> bool:
    # SIGTERM seen by the handler, or waiting while signals are held.
    return interrupts.exit_code() == EXIT_TERMINATED or signal.SIGTERM in signal.sigpending()


def _os_error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    what = f" writing {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{f' ({name})' if name else ''}{what}"


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
    spec = {
        "engine": engine,
        "worker": index,
        "budget_s": budget,
        "candidate": opts.candidate,
        "profile": opts.profile,
        "config_path": str(opts.config_path) if opts.config_path else None,
        "tolerance": opts.tolerance,
        "case_timeout_s": opts.case_timeout_s,
        "memory_limit_mb": opts.memory_limit_mb,
        "vary_config": opts.vary_config,
        "shard": list(opts.shard),
        "seed": derive_seed(seed, opts.shard, index),
        "out": str(opts.out),
        "corpus": str(opts.corpus),
        "db": str(opts.db),
        "work": str(wdir),
        "max_findings": opts.max_findings,
        "harnesses": list(opts.harnesses),
        "max_examples": opts.max_examples,
        "shrink": opts.shrink,
        "log_limit_mb": opts.log_limit_mb,
        "runner_pid": os.getpid(),
    }
    w = _Worker(index, engine, budget, wdir / "spec.json", wdir / "status.json", wdir / "worker.log")
    write_json(w.spec_path, spec)
    env = dict(os.environ)
    # Through a pipe, so that the log keeps only its tail however much the candidate prints.
    w.log = CappedLog(w.log_path, int(opts.log_limit_mb * 2**20))
    w.proc = subprocess.Popen([sys.executable, "-m", "kimi_oracle.workflows.nightly", "--worker", str(w.spec_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                              start_new_session=True)
    w.pump = pump(w.proc.stdout, w.log)
    w.deadline = time.monotonic() + budget
    return w


def _close_log(w: _Worker) -> None:
    # The pipe closes once every process of the worker's session is gone (_reap_group).
    if w.pump is not None:
        w.pump.join(10.0)


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


def _signal_group(w: _Worker, sig: int) -> None:
    if w.proc is None:
        return
    try:
        os.killpg(w.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_group(w: _Worker) -> None:
    # Leftovers of a finished worker (an executor spinning in a hung candidate, the fork
    # server) live in its session: end them.
    if w.proc is None:
        return
    if w.proc.poll() is None:
        return
    if w.returncode is None:
        w.returncode = w.proc.returncode
    _signal_group(w, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# summary


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


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


def _summarize(opts: CampaignOptions, config: PreprocessConfig | None, engines: list[str], workers: list[_Worker],
               engine_info: dict[str, Any], errors: list[str], stopped: str, seed: int, started_wall: str,
               started: float, existing: set[str], corpus_before: dict[str, int], db_before: int) -> dict[str, Any]:
    from kimi_oracle.inputs import corpus as corpus_mod

    reported: list[tuple[str, dict[str, Any]]] = []
    # "examples" when every worker ran its --max-examples; "budget" otherwise (or "interrupted").
    reached = bool(workers) and opts.max_examples is not None
    for engine in engines:
        engine_info.setdefault(engine, {"status": "ran", "workers": 0, "examples": 0, "budget_s": 0.0})
    for w in workers:
        st = _read_json(w.status_path)
        info = engine_info[w.engine]
        info["workers"] = info.get("workers", 0) + 1
        info["budget_s"] = round(info.get("budget_s", 0.0) + w.budget_s, 3)
        info["examples"] = info.get("examples", 0) + int(st.get("examples", 0))
        for key in ("calls", "rejected", "restarts", "duplicates", "candidate_crashes",
                    "candidate_timeouts", "harness_crashes", "skipped_hanging", "execs"):
            if key in st:
                info[key] = info.get(key, 0) + int(st[key])
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
        if st.get("error"):
            errors.append(f"{w.engine} worker {w.index}: {st['error']}")
            info["status"] = "error"
        elif w.returncode not in (0, None) and not w.killed and stopped != "interrupted":
            # (Ctrl-C may reach a worker before it has written anything: not a harness error.)
            said = last_line(w.log_path)
            errors.append(f"{w.engine} worker {w.index} exited with {w.returncode}"
                          f"{'' if st else ' without a status'}: {said or 'no output'} (log: {w.log_path})")
            info["status"] = "error"
        if st.get("stopped") == "interrupted":
            stopped = "interrupted"
        if st.get("stopped") != "examples" or w.killed:
            reached = False
        if w.killed:
            info["killed_workers"] = info.get("killed_workers", 0) + 1
        reported += [(w.engine, f) for f in st.get("findings", [])]
    if reached and stopped == "budget":
        stopped = "examples"
    findings = collect_findings(opts.out, reported, existing, errors)
    for engine, info in engine_info.items():
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
    if "atheris" in engine_info and corpus_before:
        after = {name: len(corpus_mod.entries(opts.corpus / name)) for name in corpus_before}
        engine_info["atheris"]["corpus"] = {
            name: {"before": corpus_before[name], "after": after[name], "added": after[name] - corpus_before[name]}
            for name in corpus_before
        }
    if "hypothesis" in engine_info:
        engine_info["hypothesis"]["database"] = {"path": str(opts.db), "entries_before": db_before,
                                                 "entries_after": _count_db(opts.db)}
    ordered = sorted(findings.values(), key=lambda f: (FINDING_KINDS.index(f["kind"]), f["id"]))
    counts = {k: 0 for k in FINDING_KINDS}
    for f in ordered:
        counts[f["kind"]] += 1
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
    out.append(f"- profile {summary['profile']}, tolerance {summary['tolerance']}, shard "
               f"{shard.get('index')}/{shard.get('count')}, {summary['jobs']} job(s), seed {summary['seed']}")
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
    if summary.get("planner"):
        out += ["", "## Planner", ""] + [f"- {safe_text(line)}" for line in summary["planner"].get("lines") or []]
    if summary["errors"]:
        out += ["", "## Harness errors", ""] + [f"- {e}" for e in summary["errors"]]
    notes = list(summary.get("notes") or []) + [n for info in summary["engines"].values() for n in info.get("notes", [])]
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    out.append("")
    return "\n".join(out)


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
    cases += junit_cases_for([{**f, "check": f["kind"]} for f in summary["findings"]], FINDING_KINDS,
                            classname="kimi-oracle.nightly")
    cases += nightly_planner.junit_cases(summary.get("planner"))
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


# ---------------------------------------------------------------------------------------------
# workers


class _Status:
    def __init__(self, path: Path, engine: str):
        self.path = path
        self.data: dict[str, Any] = {"engine": engine, "examples": 0, "findings": [], "error": None, "stopped": None}
        self._last = 0.0

    def write(self, force: bool = False) -> None:
        if force or time.monotonic() - self._last > 1.0:
            self._last = time.monotonic()
            write_json(self.path, self.data)


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _finding_folders(out: Path) -> set[str]:
    root = Path(out) / "findings"
    try:
        return {p.name for p in root.iterdir() if (p / "case.json").is_file()}
    except OSError:
        return set()


def worker_main(spec_path: str) -> int:
    """Entry of a worker subprocess."""
    spec = _read_json(Path(spec_path))
    # SIGINT (the runner stopping it) and SIGTERM: recorded and raised, checked again at every
    # example (fuzz() re-raises a swallowed one); and the worker ends when the runner does.
    interrupts.install()
    from kimi_oracle.fuzzers.sandbox import die_with_parent

    die_with_parent(signal.SIGTERM)
    if spec.get("runner_pid") and os.getppid() != spec["runner_pid"]:
        return EXIT_INTERRUPTED  # the runner ended before this worker started
    out = Path(spec["out"])
    before = _finding_folders(out)
    status = _Status(Path(spec["work"]) / "status.json", spec["engine"])
    try:
        status.write(force=True)
        if spec["engine"] == "hypothesis":
            _hypothesis_worker(spec, status)
        else:
            _atheris_worker(spec, status)
        status.data["stopped"] = status.data.get("stopped") or "budget"
    except KeyboardInterrupt:
        status.data["stopped"] = "interrupted"
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            return _worker_error(status, exc)
        written = sorted(_finding_folders(out) - before)
        line = (f"disk full: {_os_error(exc)}; already written: {len(written)} finding folder(s) under "
                f"{out / 'findings'}" + (f" ({', '.join(written[:5])}{' ...' if len(written) > 5 else ''})"
                                         if written else ""))
        return _worker_error(status, line)
    except Exception as exc:  # harness errors: reported, exit 2
        return _worker_error(status, exc)
    try:
        status.write(force=True)
    except OSError as exc:
        print(f"error: cannot write {status.path}: {_os_error(exc)}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    return EXIT_OK


def _worker_error(status: "_Status", exc: BaseException | str) -> int:
    """Record a harness error in the status (and, as one line, in the log: the status may be
    unwritable too); exit 2."""
    import traceback

    if isinstance(exc, str):
        text = exc
    elif isinstance(exc, KimiOracleError):
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}"
    status.data["error"] = text
    print(f"error: {text.splitlines()[0] if text else text}", file=sys.stderr, flush=True)
    try:
        status.write(force=True)
    except OSError:
        pass
    return EXIT_ERROR


def _base_config(spec: dict[str, Any]) -> PreprocessConfig:
    return PreprocessConfig.resolve(spec.get("profile"), spec.get("config_path"))


def _hypothesis_worker(spec: dict[str, Any], status: _Status) -> None:
    """One `fuzz()` run for the worker's budget (or --max-examples). fuzz() itself searches on
    after each failure (new seeds, the groups found so far masked), replays the persistent
    database first and keys its findings with `grouping.finding_key`: its findings are reported
    as it wrote them."""
    from kimi_oracle.fuzzers.fuzzing import TILE_SHARE, FuzzOptions, fuzz
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    config = _base_config(spec)
    deadline = time.monotonic() + float(spec["budget_s"])
    out = Path(spec["out"])
    max_examples = spec.get("max_examples")
    candidate = IsolatedCandidate(spec["candidate"], timeout_s=float(spec["case_timeout_s"]),
                                  memory_limit_mb=spec.get("memory_limit_mb"))
    candidate.start()
    # hypothesis writes a database entry to a temporary file and renames it into place: keep
    # that file on the database's filesystem so the rename is atomic (set after the executor's
    # fork server exists: its socket lives in the default temporary directory).
    import tempfile

    db_tmp = Path(spec["db"]).parent / f".{Path(spec['db']).name}.tmp"
    db_tmp.mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = str(db_tmp)
    data = status.data
    data.update(calls=0, rejected=0, restarts=0)

    def live(run: Any) -> None:
        # Examples judged: a case of a mode class the candidate already hung on is not run.
        data["examples"] = run.examples - run.skipped_hanging
        data["skipped_hanging"] = run.skipped_hanging
        data["calls"] = run.calls
        data["rejected"] = run.rejected
        data["restarts"] = candidate.restarts
        data["candidate_crashes"] = candidate.crashes
        data["candidate_timeouts"] = candidate.timeouts
        data["behaviours"] = sorted("|".join(b) for b in candidate.behaviours)
        status.write()

    try:
        # A fuzz budget covers shrinking and publishing: fuzz() ends within what is left of ours.
        options = FuzzOptions(examples=max_examples, budget_s=max(deadline - time.monotonic(), 0.0),
                              seed=derive_seed(spec["seed"], tuple(spec["shard"]), spec["worker"]),
                              tolerance=spec["tolerance"], vary_config=bool(spec["vary_config"]),
                              shrink=bool(spec.get("shrink", True)), db_dir=Path(spec["db"]), tile_share=TILE_SHARE)
        run = fuzz(candidate, config, options, out_dir=out, on_example=live)
        for finding in run.findings:
            data["findings"].append({"id": finding.id, "path": str(finding.path), "kind": finding.check,
                                     "signature": finding.extra.get("group")})
        live(run)
        if run.stopped == "interrupted":
            raise KeyboardInterrupt
        data["stopped"] = "examples" if max_examples is not None and run.examples >= max_examples else "budget"
    finally:
        data["coverage"] = {"behaviours": len(candidate.behaviours)}
        candidate.close()
        status.write(force=True)


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


def _atheris_worker(spec: dict[str, Any], status: _Status) -> None:
    from kimi_oracle.fuzzers.harnesses import HarnessSettings
    from kimi_oracle.inputs import corpus as corpus_mod

    work = Path(spec["work"])
    harnesses = list(spec["harnesses"])
    shard = tuple(spec["shard"])
    deadline = time.monotonic() + float(spec["budget_s"])
    log_limit = int(float(spec.get("log_limit_mb") or DEFAULT_LOG_LIMIT_MB) * 2**20)
    data = status.data
    data.update(restarts=0, harness_crashes=0, duplicates=0, rejected=0, coverage={}, execs=0)
    per = data.setdefault("per_harness", {})
    for name in harnesses:
        per[name] = {"status": "not run", "note": "not started", "examples": 0, "execs": 0}
    dict_path = work / "png_jpeg.dict"
    atomic_write_text(dict_path, corpus_mod.dictionary_text())
    seen_findings: set[str] = set()
    t0 = time.monotonic()
    total = float(spec["budget_s"])
    max_examples = spec.get("max_examples")
    reached: dict[str, bool] = {}
    overhead = 4.0  # interpreter start, imports and instrumentation before libFuzzer's clock starts
    for position, name in enumerate(harnesses):
        slice_end = t0 + total * (position + 1) / len(harnesses)
        hdir = work / name
        new_dir = hdir / "new"
        start_dir = hdir / "start"
        artifacts = hdir / "artifacts"
        for d in (new_dir, start_dir, artifacts):
            d.mkdir(parents=True, exist_ok=True)
        persistent = Path(spec["corpus"]) / name
        for path in corpus_mod.shard_entries(corpus_mod.entries(persistent), shard):
            try:
                os.link(path, start_dir / path.name)
            except OSError:
                shutil.copyfile(path, start_dir / path.name)
        settings = HarnessSettings(
            candidate=spec["candidate"], profile=spec["profile"], config_path=spec.get("config_path"),
            tolerance=spec["tolerance"], isolate=True, case_timeout_s=float(spec["case_timeout_s"]),
            shard=shard, findings_dir=spec["out"], status_path=str(hdir / "harness-status.json"),
            max_findings=int(spec["max_findings"]), vary_config=bool(spec["vary_config"]),
            minimize_s=HarnessSettings.minimize_s if spec.get("shrink", True) else 0.0,
            memory_limit_mb=spec.get("memory_limit_mb"),
        )
        env = dict(os.environ)
        env.update(settings.to_env())
        cov: dict[str, int] = {}
        execs_total = 0
        generated = 0  # inputs libFuzzer made, beyond its replays of the starting corpus
        reached[name] = False
        run_no = 0
        last_code: int | None = None
        per[name]["note"] = "no time left in its share of the budget"
        try:
            while True:
                remaining = min(slice_end, deadline) - time.monotonic() - overhead
                if remaining < 1.0:
                    break
                runs = None
                if max_examples is not None:
                    if generated >= int(max_examples):
                        reached[name] = True
                        break
                    # -runs counts the replay of the starting corpus too: N inputs beyond it.
                    corpus_files = sum(1 for d in (new_dir, start_dir) for p in d.iterdir() if p.is_file())
                    runs = corpus_files + int(max_examples) - generated
                log_path = hdir / f"libfuzzer-{run_no}.log"
                env["KIMI_FUZZ_DEADLINE"] = repr(time.time() + (min(slice_end, deadline) - time.monotonic()))
                known_artifacts = {p.name for p in artifacts.iterdir()}
                cmd = [sys.executable, "-m", "kimi_oracle.fuzzers.atheris_entry", name, str(new_dir), str(start_dir),
                       f"-max_total_time={max(1, int(remaining))}",
                       f"-seed={derive_seed(spec['seed'], shard, spec['worker'], run_no) % 2**31 or 1}",
                       f"-artifact_prefix={artifacts}/",
                       f"-timeout={int(4 * float(spec['case_timeout_s']) + 60)}",
                       "-rss_limit_mb=8192", "-print_final_stats=1", "-close_fd_mask=0"]
                if runs is not None:
                    cmd.append(f"-runs={runs}")
                if name == "decoder":
                    cmd += [f"-dict={dict_path}", "-max_len=65536"]
                else:
                    cmd += ["-max_len=256"]
                launched = time.monotonic()
                stats: dict[str, int] = {}
                # libFuzzer's output, and the candidate's (its executor inherits it), through a
                # pipe into a log that keeps its tail; the counters are read from every line.
                log = CappedLog(log_path, log_limit, on_line=lambda line, st=stats: _feed_stats(st, line))
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env)
                reader = pump(proc.stdout, log)
                per[name].update(status="started", note="")
                try:
                    code = proc.wait(timeout=remaining + 2 * float(spec["case_timeout_s"]) + 30)
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
                    execs_total += stats.get("execs", 0)
                    generated += max(0, stats.get("execs", 0) - stats.get("inited", 0))
                    for k in ("cov", "ft", "corpus_entries"):
                        if k in stats:
                            cov[k] = max(cov.get(k, 0), stats[k])
                    _collect_harness(spec, name, hdir, data, execs_total, cov, seen_findings)
                    status.write(force=True)
                last_code = code
                run_no += 1
                if code == 0 and runs is not None and stats.get("execs", 0) >= runs:
                    reached[name] = True
                if code == 0:
                    overhead = max(1.0, time.monotonic() - launched - max(1, int(remaining)))
                new_artifacts = [p for p in artifacts.iterdir() if p.name not in known_artifacts]
                for art in new_artifacts:
                    _harness_artifact_finding(spec, name, art, settings, data, seen_findings)
                status.write(force=True)
                if code == 0 or not new_artifacts:
                    break
                data["restarts"] += 1
        finally:
            added = corpus_mod.merge(new_dir, persistent)
            data.setdefault("corpus_added", {})[name] = added
            _collect_harness(spec, name, hdir, data, execs_total, cov, seen_findings)
            h = per[name]
            if h["examples"] > 0:
                h["status"], h["note"] = "ran", ""
            elif run_no:
                h["status"] = "not run"
                h["note"] = (f"libFuzzer exited with {last_code} before judging any input "
                             f"(see {hdir / 'libfuzzer-0.log'})")
            status.write(force=True)
    data["stopped"] = "examples" if max_examples is not None and all(reached.values()) else "budget"


def _collect_harness(spec: dict[str, Any], name: str, hdir: Path, data: dict[str, Any], execs: int,
                     cov: dict[str, int], seen: set[str]) -> None:
    """The harness' counters into the worker's status. `examples` are the inputs the harness
    judged: its own count once it has skipped inputs past the deadline (it writes that count at
    its first skip, and judges nothing after), else libFuzzer's executions (the harness writes
    its count at most once a second, and libFuzzer exits without a last write)."""
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
            data["findings"].append({"id": fid, "path": str(Path(spec["out"]) / "findings" / fid)})


def _harness_artifact_finding(spec: dict[str, Any], name: str, art: Path, settings: Any, data: dict[str, Any],
                              seen: set[str]) -> None:
    """A libFuzzer artifact means the harness process itself died or hung (not the candidate,
    which runs in the executor): replay it in a subprocess to see how, and file a finding."""
    prefix = art.name.split("-", 1)[0]
    if prefix not in ("crash", "timeout", "oom", "leak"):
        return
    raw = art.read_bytes()
    env = dict(os.environ)
    env.update(dataclasses.replace(settings, findings_dir=None, status_path=None).to_env())
    limit = 4 * float(spec["case_timeout_s"]) + 60
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
    path = write_harness_finding(Path(spec["out"]), name, raw, kind, message, tail, spec, settings)
    data["harness_crashes"] = data.get("harness_crashes", 0) + 1
    if path.name not in seen:
        seen.add(path.name)
        data["findings"].append({"id": path.name, "path": str(path)})


def write_harness_finding(out: Path, name: str, raw: bytes, kind: str, message: str, detail: str,
                          spec: dict[str, Any], settings: Any) -> Path:
    """A finding for an input that killed the harness process (no verdict, maybe no image)."""
    from kimi_oracle.fuzzers.harnesses import FUZZ_INPUT_FILE, fuzz_input_record
    from kimi_oracle.results.report import Finding, write_finding

    config = _base_config(spec)
    images: list[Any] = []
    params: list[Any] = []
    if name == "structured":
        from kimi_oracle.fuzzers.harnesses import structured_case

        try:
            case, _ = structured_case(raw, config, shard=tuple(spec["shard"]))
            config = case.config
            images = case.make_images()
            params = [p.to_dict() for p in case.images]
        except Exception:
            images, params = [], []
    # Without images the raw input's digest names the finding (report.Finding.id).
    finding = Finding(check=kind, message=message, candidate=spec["candidate"], config=config, images=images,
                      params=params, tolerance=spec["tolerance"], engine="atheris",
                      stats={"exception": message, "traceback": detail}, raw_inputs=[] if images else [raw],
                      extra={"fuzz_input": fuzz_input_record(name, raw), "harness_level": True})
    return write_finding(out, finding, extra_files={FUZZ_INPUT_FILE: raw})


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kimi_oracle.workflows.nightly --worker SPEC.json` (used by the runner only)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--worker":
        return worker_main(args[1])
    print("usage: python -m kimi_oracle.workflows.nightly --worker SPEC.json (internal); use `kimi-oracle nightly`",
          file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
