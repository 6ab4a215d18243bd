"""The worker subprocess: its entry point and the hypothesis worker."""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from kimi_oracle.core import interrupts
from kimi_oracle.core.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, KimiOracleError
from kimi_oracle.workflows.nightly.common import _os_error, derive_seed
from kimi_oracle.workflows.nightly.libfuzzer import _atheris_worker
from kimi_oracle.workflows.nightly.spec import WorkerSpec, _Status, _base_config


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _finding_folders(out: Path) -> set[str]:
    root = Path(out) / "findings"
    try:
        return {p.name for p in root.iterdir() if (p / "case.json").is_file()}
    except OSError:
        return set()


def worker_main(spec_path: str) -> int:
    """Entry of a worker subprocess."""
    spec = WorkerSpec.read(Path(spec_path))
    # SIGINT (the runner stopping it) and SIGTERM: recorded and raised, checked again at every
    # example (fuzz() re-raises a swallowed one); and the worker ends when the runner does.
    interrupts.install()
    interrupts.die_with_parent(signal.SIGTERM)
    if spec.runner_pid and os.getppid() != spec.runner_pid:
        return EXIT_INTERRUPTED  # the runner ended before this worker started
    out = Path(spec.out)
    before = _finding_folders(out)
    status = _Status(Path(spec.work) / "status.json", spec.engine)
    try:
        status.write(force=True)
        if spec.engine == "hypothesis":
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


def _hypothesis_worker(spec: WorkerSpec, status: _Status) -> None:
    """One `fuzz()` run for the worker's budget (or --max-examples). fuzz() itself searches on
    after each failure (new seeds, the groups found so far masked), replays the persistent
    database first and keys its findings with `grouping.finding_key`: its findings are reported
    as it wrote them."""
    from kimi_oracle.fuzzers.fuzzing import (NIGHTLY_PHOTO_EVERY, NIGHTLY_PHOTO_EXAMPLES, TILE_SHARE,
                                             FuzzOptions, fuzz)
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    config = _base_config(spec)
    deadline = time.monotonic() + spec.budget_s
    out = Path(spec.out)
    max_examples = spec.max_examples
    candidate = IsolatedCandidate(spec.candidate, timeout_s=spec.case_timeout_s,
                                  memory_limit_mb=spec.memory_limit_mb)
    candidate.start()
    # hypothesis writes a database entry to a temporary file and renames it into place: keep
    # that file on the database's filesystem so the rename is atomic (set after the executor's
    # fork server exists: its socket lives in the default temporary directory).
    import tempfile

    db_tmp = Path(spec.db).parent / f".{Path(spec.db).name}.tmp"
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
                              seed=derive_seed(spec.seed, spec.shard, spec.worker),
                              tolerance=spec.tolerance, vary_config=spec.vary_config,
                              shrink=spec.shrink, db_dir=Path(spec.db), tile_share=TILE_SHARE,
                              photo_examples=NIGHTLY_PHOTO_EXAMPLES, photo_every=NIGHTLY_PHOTO_EVERY,
                              oracle=_oracle(spec))
        run = fuzz(candidate, config, options, out_dir=out, on_example=live)
        for finding in run.findings:
            data["findings"].append({"id": finding.id, "path": str(finding.path), "kind": finding.check,
                                     "signature": finding.extra.get("group")})
        data["cpu"] = dict(run.cpu)  # this worker's CPU per example, the fuzzing process' and its candidate's
        live(run)
        if run.stopped == "interrupted":
            raise KeyboardInterrupt
        data["stopped"] = "examples" if max_examples is not None and run.examples >= max_examples else "budget"
    finally:
        data["coverage"] = {"behaviours": len(candidate.behaviours)}
        candidate.close()
        status.write(force=True)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kimi_oracle.workflows.nightly --worker SPEC.json` (used by the runner only)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--worker":
        return worker_main(args[1])
    print("usage: python -m kimi_oracle.workflows.nightly --worker SPEC.json (internal); use `kimi-oracle nightly`",
          file=sys.stderr)
    return EXIT_ERROR


def _oracle(spec: WorkerSpec) -> Any:
    """The worker's `FuzzOptions.oracle` (None: the reference's expected results)."""
    if spec.oracle != "gpu":
        return None
    from kimi_oracle.oracle.gpu_oracle import GpuOracle

    return GpuOracle(check_share=spec.oracle_check_share, seed=derive_seed(spec.seed, spec.shard, spec.worker))
