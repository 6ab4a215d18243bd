"""Hypothesis shrinking of one failure group's case, and how a shrink ends."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kimi_oracle.core.errors import KimiOracleError
from kimi_oracle.fuzzers.cases import _Record
from kimi_oracle.fuzzers.options import (COSTLY_FAILURES, MAX_COSTLY_SHRINK_STEPS, MAX_LARGE_SHRINK_STEPS,
                                         SHRINK_MAX_EXAMPLES)
from kimi_oracle.fuzzers.peel import after_suffix
from kimi_oracle.inputs.generators import FuzzCase
from kimi_oracle.inputs.strategies import recorded_fuzz_cases
from kimi_oracle.oracle.checks import TIMEOUT
from kimi_oracle.oracle.grouping import failure_type, mode_class


def _seed_database(choices: Sequence[int]) -> Any:
    """A database holding one recorded choice sequence under hypothesis' secondary key: the reuse
    phase replays it as a failure not shrunk yet (entries under the primary key count as shrunk
    already and are not shrunk again), and the shrink phase shrinks it. Saves nothing."""
    from hypothesis.database import ExampleDatabase, choices_to_bytes

    blob = choices_to_bytes(list(choices))

    class SeedOnly(ExampleDatabase):
        def save(self, key: bytes, value: bytes) -> None:
            pass

        def fetch(self, key: bytes):  # type: ignore[override]
            if key.endswith(b".secondary"):
                yield blob

        def delete(self, key: bytes, value: bytes) -> None:
            pass

        def move(self, src: bytes, dest: bytes, value: bytes) -> None:
            pass

    return SeedOnly()


class _Stop(BaseException):
    """Ends a hypothesis shrink at once (BaseException: hypothesis neither catches nor shrinks it)."""


class _HarnessAbort(BaseException):
    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class _Failed(Exception):
    """Raised inside the hypothesis shrink for the group being shrunk."""


def _only_our_failures(exc: BaseException) -> bool:
    if isinstance(exc, _Failed):
        return True
    inner = getattr(exc, "exceptions", None)
    if inner:
        return all(_only_our_failures(e) for e in inner)
    # hypothesis' Flaky* errors wrap ours when the candidate is not deterministic
    if type(exc).__name__.startswith("Flaky"):
        return True
    return False


def _hypothesis_gave_up(exc: BaseException) -> bool:
    """Whether a shrink ended on hypothesis' own verdict about the test (Unsatisfiable when its
    replays were all rejected, Flaky* when the candidate answered differently, a health check)
    rather than on an error of the harness: then the group's case so far stands."""
    from hypothesis.errors import HypothesisException

    # (a TypeError among them, InvalidArgument or InvalidDefinition, is a bug of ours: raised)
    return isinstance(exc, HypothesisException) and not isinstance(exc, TypeError)


def _find_harness(exc: BaseException) -> BaseException | None:
    if isinstance(exc, KimiOracleError):
        return exc
    if isinstance(exc, _HarnessAbort):
        return exc.error
    for e in getattr(exc, "exceptions", None) or ():
        found = _find_harness(e)
        if found is not None:
            return found
    return None


class _Shrinking:
    """The engine's shrink stage (mixed into `fuzzers.search._Engine`)."""

    def shrink(self, group: str, deadline: float | None) -> None:
        """Shrink a group's case with hypothesis (reuse + shrink phases over its recorded choices);
        its smallest failing case so far is kept when the deadline or the costly-step cap ends it."""
        from hypothesis import HealthCheck, Phase, Verbosity, given, reject
        from hypothesis import seed as hypothesis_seed
        from hypothesis import settings

        record = self.records[group]
        hangs_judged = record.verdict.check == TIMEOUT  # each of its steps may be a hanging mode class
        costly = {"steps": 0}
        clock = self.clock
        step = {"cost": record.cost_to_judge}  # the last step's time: the next one's estimate

        def body(drawn: tuple[FuzzCase, tuple[int, ...]]) -> None:
            case, choices = drawn
            began = clock()
            if deadline is not None and began + step["cost"] > deadline:
                raise _Stop()
            if _large(case):
                # A real photo's step costs seconds (the candidate's 146 MiB answer, two full
                # comparisons): a few of them, then only smaller cases are tried.
                costly["large"] = costly.get("large", 0) + 1
                if costly["large"] > MAX_LARGE_SHRINK_STEPS:
                    reject()
            try:
                judged = self.judge(case, record.invariance, shrinking=True, hangs_judged=hangs_judged,
                                    after=record.after)
            finally:
                step["cost"] = clock() - began
            if judged is None:
                reject()
            images, verdict = judged
            if verdict.ok or self.group_of(verdict, images) + after_suffix(record.after) != group:
                return  # another group's failure is not this group's shrink step
            if (len(choices), choices) <= (len(self.records[group].choices), self.records[group].choices):
                self.records[group] = _Record(case, tuple(choices), verdict, record.example, record.invariance,
                                              shrunk=True, after=record.after, peeled_from=record.peeled_from)
            if verdict.check == TIMEOUT and len(images) == 1:
                self.hanging.add(mode_class(images[0]))
            if failure_type(verdict.stats).split("[")[0] in COSTLY_FAILURES:
                # Each step of shrinking a hang waits the whole case timeout, each death restarts
                # the candidate's process: keep the smallest case so far after a few steps.
                costly["steps"] += 1
                if costly["steps"] >= MAX_COSTLY_SHRINK_STEPS:
                    raise _Stop()
            raise _Failed(verdict.message)

        test = settings(
            max_examples=SHRINK_MAX_EXAMPLES,
            deadline=None,
            database=_seed_database(record.choices),
            phases=[Phase.reuse, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            print_blob=False,
            report_multiple_bugs=False,
        )(hypothesis_seed(self.run.seed)(given(recorded_fuzz_cases(self.config, self.draw_options))(body)))
        # (@seed switches the database off; the settings applied over it put ours back.)
        _run_shrink(test)


def _large(case: FuzzCase) -> bool:
    """Whether a case holds an image over FINDING_LARGE_PIXELS (a real-photo size)."""
    from kimi_oracle.oracle.diagnosis.findings import FINDING_LARGE_PIXELS

    return any(int(p.width) * int(p.height) > FINDING_LARGE_PIXELS for p in case.images)


def _run_shrink(test: Callable[[], None]) -> None:
    """Run a shrink's hypothesis test: a stop, our failure, hypothesis giving up or finding the
    candidate flaky end it quietly; a harness error is raised as a _HarnessAbort."""
    try:
        test()
    except (_Stop, _Failed):
        pass
    except BaseException as exc:
        if isinstance(exc, (_HarnessAbort, KeyboardInterrupt)):
            raise
        harness = _find_harness(exc)
        if harness is not None:
            raise _HarnessAbort(harness) from None
        if not _only_our_failures(exc) and not _hypothesis_gave_up(exc):
            raise
        # (hypothesis gave up or found the candidate flaky: the smallest case so far is kept)
