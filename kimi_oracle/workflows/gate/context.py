"""The state the gate's stages share (`GateContext`): options, candidates, observations, clocks."""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from kimi_oracle.core import interrupts
from kimi_oracle.core.activity import Activity, union_seconds
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.defaults import fresh_seed, start_timeout
from kimi_oracle.core.files import check_writable
from kimi_oracle.fuzzers.sandbox import IsolatedCandidate
from kimi_oracle.pipelines import reference
from kimi_oracle.workflows.gate.budget import Budget
from kimi_oracle.workflows.gate.options import GateOptions
from kimi_oracle.workflows.known import KnownFile, Margin, read_known


class ReferenceClock:
    """When the reference runs (spans of wall-clock time; the candidates' processes keep their own,
    `IsolatedCandidate.activity`): the overhead is the time none of them is at work."""

    def __init__(self) -> None:
        self.reference = Activity()

    @property
    def reference_s(self) -> float:
        return self.reference.seconds()

    def wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.reference.span():
                return func(*args, **kwargs)

        timed.__name__ = getattr(func, "__name__", "timed")
        timed.__doc__ = getattr(func, "__doc__", None)
        return timed

    @contextlib.contextmanager
    def reference_timed(self) -> Iterator[None]:
        """Count the reference's time wherever the oracle calls `reference.preprocess`."""
        original = reference.preprocess
        reference.preprocess = self.wrap(original)
        try:
            yield
        finally:
            reference.preprocess = original


class GateContext:
    """What every stage reads and adds to: the options, NEW and OLD, the observations and findings
    of each side, the clocks and the budget."""

    def __init__(self, new: str, baseline: str | None, options: GateOptions, out_dir: Path,
                 progress: Callable[[str], None] | None = None):
        self.options = options
        self.out_dir = Path(out_dir)
        self.progress = progress or (lambda message: None)
        self.clock = ReferenceClock()
        # Each candidate in its own executor process, started by run() before anything else: a
        # broken spec is a harness error (CandidateError, exit 2) and no report is written.
        # (a candidate whose import hangs is given the budget at most, never more)
        start = {"start_timeout_s": start_timeout(options.budget_s)}
        self.new = IsolatedCandidate(new, timeout_s=options.case_timeout_s, memory_limit_mb=options.memory_limit_mb,
                                     **start)
        self.old: IsolatedCandidate | None = None
        if baseline:
            self.old = IsolatedCandidate(baseline, timeout_s=options.case_timeout_s,
                                         memory_limit_mb=options.memory_limit_mb, **start)
        self.config = PreprocessConfig.profile(options.profile)
        # Read before anything starts: a bad file is a usage error (exit 2), never a verdict.
        self.known: KnownFile | None = read_known(options.known_path) if options.known_path else None
        # A path the run could not write is an error now, not after the whole run.
        if options.write_known_path is not None:
            check_writable(options.write_known_path, "--write-known")
        check_writable(self.out_dir, "--out", directory=True)
        self.margin = Margin(options.margin_pct / 100.0)
        # Relative verdict: rows against OLD and/or the known file instead of "any finding fails".
        self.relative = baseline is not None or self.known is not None
        self.observations: dict[str, list[dict[str, Any]]] = {"new": [], "old": []}
        self.findings: list[dict[str, Any]] = []
        self.baseline_findings: list[dict[str, Any]] = []  # OLD's, with a baseline
        self.seed = options.seed if options.seed is not None else fresh_seed()
        self.interrupted = False  # Ctrl-C or SIGTERM arrived: the running stage is an error
        self.hung: dict[str, str] = {}  # mode class -> golden case NEW timed out on
        self.engine_activity = Activity()  # the --engine stage's engine process at work (or waited for)
        # Finding folders written by one background thread (`write_later`): the fuzz stage's are
        # written while the next stages' candidates work, all of them before the timing stage and
        # the report (`writes_done`).
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._writes: list[tuple[dict[str, Any], str, Any, concurrent.futures.Future]] = []
        # from now until Gate.run() starts the clock again
        self.budget = Budget(options.budget_s, time.monotonic(), with_baseline=self.old is not None,
                             with_engine=options.engine is not None, with_video=options.media != "image")

    def candidate(self, side: str) -> IsolatedCandidate:
        """NEW (`side` "new") or OLD ("old")."""
        return self.new if side == "new" else self.old  # type: ignore[return-value]

    def findings_of(self, side: str) -> list[dict[str, Any]]:
        """The finding entries of NEW (`side` "new") or of OLD (the baseline's)."""
        return self.findings if side == "new" else self.baseline_findings

    def write_later(self, stage: str, side: str, finding: Any, write: Callable[[], Any]) -> None:
        """Write a finding's folder (`write()`, atomic) in the background; its entry takes its
        place among the side's findings now and is filled in when `writes_done` sees it written."""
        if self._writer is None:
            self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="finding-writer",
                                                                 initializer=interrupts.quiet_thread)
        entry: dict[str, Any] = {"stage": stage}  # its place among the side's findings, filled in once written
        self.findings_of(side).append(entry)
        self._writes.append((entry, side, finding, self._writer.submit(write)))

    def writes_done(self) -> list[tuple[str, str]]:
        """Wait for every folder `write_later` began (each is written whole or not at all) and fill
        in their entries (in the order begun; a failed write's is removed). Returns the failed
        writes as (stage, reason)."""
        from kimi_oracle.results.report import finding_summary

        failed: list[tuple[str, str]] = []
        # (each write leaves the list only once settled: an interrupt while waiting leaves the rest
        # to the next call, which the report's own makes with the signals held)
        while self._writes:
            entry, side, finding, done = self._writes[0]
            try:
                done.result()
                summary = finding_summary(finding)
            except Exception as exc:  # noqa: BLE001 - the stage is told; the other writes go on
                entries = self.findings_of(side)
                del entries[next(k for k, e in enumerate(entries) if e is entry)]
                stage = entry["stage"]
                failed.append((stage, f"{stage}: a finding could not be written: {type(exc).__name__}: {exc}"))
            else:
                entry.update(summary)
            self._writes.pop(0)
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        return failed

    def start(self) -> None:
        """Start both executors (CandidateError when a spec cannot be loaded)."""
        try:
            self.new.start()
            if self.old is not None:
                self.old.start()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop both executors, then wait for the findings begun (`writes_done`; a library
        caller's: `Gate.close` has settled its own, telling their stages of a failure)."""
        try:
            self.new.close()
            if self.old is not None:
                self.old.close()
        finally:
            self.writes_done()

    def at_work(self, window: tuple[float, float] | None = None, reference: bool = True) -> float:
        """Wall-clock seconds (within `window`) in which a candidate's process worked or was
        waited for, or (with `reference`) the reference ran: the union of their spans."""
        return union_seconds(self.new.activity, self.old.activity if self.old is not None else None,
                             self.clock.reference if reference else None, self.engine_activity, window=window)

    def overhead(self, t0: float, t1: float) -> float:
        """The harness's time within [t0, t1]: the seconds in which no candidate's process worked
        or was waited for and the reference did not run."""
        return (t1 - t0) - self.at_work(window=(t0, t1))
