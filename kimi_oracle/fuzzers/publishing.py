"""A fuzz run's publishing off its search path: diagnoses remembered, findings written in the
background, and where the run's time went.

- `DiagnosisStore`: the diagnosis of a case, kept next to the run's database folder
  (`<db_dir>-diagnoses/<digest>.json`: the database's own folder holds only hypothesis' entries,
  which the nightly summary counts) under a digest of everything it depends on (the case's
  recorded choices and the run's namespace, the candidate's result and the expectation, the
  source of the code that diagnoses); a later run that meets the same case reads it back.
- `Writer`: finding folders written by one background thread, in order; `close()` waits for
  all of them and raises the first error (nothing is lost silently).
- `RunTimes`: the `time` of `fuzz --json`: wall-clock seconds of the candidate's calls, the
  reference's runs, the diagnoses, the shrinking and the writing (they overlap: the candidate
  works in its own process while the reference runs), and `harness`: the time none of them
  covers (drawing and making the images, hypothesis, the comparisons).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from kimi_oracle.core.activity import Activity, union_seconds
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.files import read_file, write_json
from kimi_oracle.oracle.checks import PIXEL_MISMATCH, Verdict, update_digest

__all__ = ["DIAGNOSIS_FIELDS", "TIME_KEYS", "DiagnosisStore", "Publisher", "RunTimes", "Writer", "code_digest",
           "result_digest"]

# The fields of a finding that its diagnosis sets (oracle.diagnosis.finding_diagnosis).
DIAGNOSIS_FIELDS = ("root_causes", "max_levels", "mean_levels", "residual_max_levels", "residual_mean_levels",
                    "attribution")
# The keys of `fuzz --json`'s `time`, in order.
TIME_KEYS = ("candidate", "reference", "diagnosis", "shrinking", "writing", "harness")
# Largest stored diagnosis read back (a bigger file is not one this code wrote).
_MAX_STORED_BYTES = 4 * 2**20
# What publishing one group is expected to take before the first has been published.
PUBLISH_ESTIMATE_S = 0.05


def result_digest(result: Any) -> str:
    """A digest of a result's grids and pixel values ("-" for none)."""
    if result is None:
        return "-"
    h = hashlib.sha256()
    update_digest(h, result)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the source of the code a diagnosis depends on (the oracle and the pipelines):
    a stored diagnosis of another version of that code is never reused."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for folder in ("oracle", "pipelines"):
        for path in sorted((root / folder).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


class DiagnosisStore:
    """Diagnoses of cases kept next to a database folder (one JSON file each)."""

    def __init__(self, db_dir: str | Path):
        db = Path(db_dir)
        self.folder = db.with_name(db.name + "-diagnoses")

    @staticmethod
    def key(namespace: bytes, choices: tuple[int, ...], digests: tuple[str, ...]) -> str:
        """The digest a case's diagnosis is stored under."""
        h = hashlib.sha256()
        h.update(code_digest().encode())
        h.update(namespace)
        h.update(json.dumps([list(choices), list(digests)]).encode())
        return h.hexdigest()[:40]

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored diagnosis fields, or None (absent, unreadable or not of this shape)."""
        path = self.folder / f"{key}.json"
        try:  # (a regular file, capped: a FIFO or a /dev/zero link is passed over unread)
            data = json.loads(read_file(path, max_bytes=_MAX_STORED_BYTES).decode("utf-8"))
        except (InputError, ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("fields"), dict):
            return None
        fields = data["fields"]
        if set(fields) != set(DIAGNOSIS_FIELDS) or not isinstance(fields["root_causes"], list):
            return None
        if not all(isinstance(c, str) for c in fields["root_causes"]):
            return None
        return fields

    def put(self, key: str, fields: Mapping[str, Any]) -> None:
        """Keep a diagnosis (atomically; a failure to keep it loses nothing but the reuse)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_json(self.folder / f"{key}.json", {"key": key, "fields": {k: fields[k] for k in DIAGNOSIS_FIELDS}})
        except (OSError, TypeError, ValueError):
            pass


class Writer:
    """Finding folders written by one background thread (or in the caller's, `background=False`)."""

    def __init__(self, activity: Activity, background: bool = True):
        self.activity = activity
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kimi-writer") if background else None
        self.futures: list[Future] = []
        self.lock = threading.Lock()

    def _timed(self, write: Callable[..., Any], *args: Any) -> Any:
        with self.activity.span():
            return write(*args)

    def submit(self, write: Callable[..., Any], *args: Any) -> None:
        """Write now (no background) or queue it; an error is raised at once or by `close()`."""
        if self.pool is None:
            self._timed(write, *args)
            return
        with self.lock:
            self.futures.append(self.pool.submit(self._timed, write, *args))

    def pending(self) -> int:
        """Folders queued and not written yet."""
        with self.lock:
            return sum(1 for future in self.futures if not future.done())

    def close(self) -> None:
        """Wait for every queued write; the first error is raised (after all have ended)."""
        if self.pool is None:
            return
        error: BaseException | None = None
        for future in self.futures:
            exc = future.exception()
            if exc is not None and error is None:
                error = exc
        self.futures.clear()
        self.pool.shutdown(wait=True)
        if error is not None:
            raise error


class RunTimes:
    """Spans of a run's parts (`time.monotonic`), and the `time` document from them."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.reference = Activity()
        self.diagnosis = Activity()
        self.shrinking = Activity()
        self.writing = Activity()

    @contextlib.contextmanager
    def reference_timed(self, module: Any) -> Iterator[None]:
        """Count the time of `module.preprocess` (the reference) while the block runs."""
        original = module.preprocess

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.reference.span():
                return original(*args, **kwargs)

        module.preprocess = timed
        try:
            yield
        finally:
            module.preprocess = original

    def to_dict(self, candidate_activity: Activity | None) -> dict[str, float | None]:
        """Seconds per part; `candidate` None when the candidate keeps no spans (a callable run
        in this process: its time is then inside `harness`)."""
        end = time.monotonic()
        window = (self.start, end)
        parts = (self.reference, self.diagnosis, self.shrinking, self.writing)
        out: dict[str, float | None] = {
            "candidate": None if candidate_activity is None
            else round(union_seconds(candidate_activity, window=window), 3),
            "reference": round(union_seconds(self.reference, window=window), 3),
            "diagnosis": round(union_seconds(self.diagnosis, window=window), 3),
            "shrinking": round(union_seconds(self.shrinking, window=window), 3),
            "writing": round(union_seconds(self.writing, window=window), 3),
        }
        covered = union_seconds(*parts, candidate_activity, window=window)
        out["harness"] = round(max(0.0, (end - self.start) - covered), 3)
        return out


Diagnose = Callable[..., dict]


class Publisher:
    """One fuzz() run's publishing: diagnoses (a stored one reused, new ones within `share` of the
    budget), folder writes (background or in line), and the time each part took. `clock` is the
    budget's (injectable) clock."""

    def __init__(self, clock: Callable[[], float], db_dir: str | Path | None, share: float | None,
                 background: bool = False):
        self.clock, self.share = clock, share
        self.times = RunTimes()
        self.writer = Writer(self.times.writing, background=background)
        self.store = DiagnosisStore(db_dir) if db_dir else None
        self.diagnosis_s = 0.0  # the clock's time spent diagnosing
        self.costs: list[float] = []  # the clock's time each group's publishing took (writes queued)

    def _write_mean(self) -> float:
        writing = self.times.writing
        return writing.seconds() / writing.count if writing.count else 0.0

    def estimate(self) -> float:
        """What publishing one group is expected to take: the mean so far (PUBLISH_ESTIMATE_S
        before the first) and the mean time writing a folder (in the background or not, it
        takes its time before the run ends)."""
        mean = sum(self.costs) / len(self.costs) if self.costs else PUBLISH_ESTIMATE_S
        return mean + self._write_mean()

    def backlog(self) -> float:
        """What writing the folders queued and not written yet is expected to take."""
        pending = self.writer.pending()
        return pending * self._write_mean() if pending else 0.0

    def spent(self, budget: float | None) -> bool:
        """Whether the diagnoses have had their share of `budget` (never without either)."""
        return budget is not None and self.share is not None and self.diagnosis_s >= self.share * budget

    @staticmethod
    def _holds(known: Mapping[str, Any], verdict: Verdict, images: list, config: Any) -> bool:
        from kimi_oracle.oracle.diagnosis import diagnosis_holds
        from kimi_oracle.oracle.grouping import image_at_fault

        if verdict.expected is None or verdict.actual is None or not images:
            return False
        index = min(image_at_fault(verdict.stats), len(images) - 1)
        return diagnosis_holds(known, images, config, verdict.actual, verdict.expected, index)

    def diagnose(self, verdict: Verdict, images: list, config: Any, case_key: tuple[bytes, tuple[int, ...]],
                 budget: float | None, diagnose: Diagnose) -> dict[str, Any]:
        """The diagnosis fields of a finding: the store's for the same case (`case_key`: the run's
        namespace and the case's recorded choices) and result, else `diagnose`'s while the share
        lasts, else its levels only with the attribution deferred."""
        key = None
        if self.store is not None and verdict.check == PIXEL_MISMATCH and case_key[1]:
            key = DiagnosisStore.key(case_key[0], case_key[1],
                                     (result_digest(verdict.actual), result_digest(verdict.expected)))
            known = self.store.get(key)
            # A stored diagnosis is a hint anyone may have written: used only once its levels and
            # its variants' residual are measured again on this result (else diagnosed anew).
            if known is not None and self._holds(known, verdict, images, config):
                return known
        if verdict.check == PIXEL_MISMATCH and self.spent(budget):
            fields = diagnose(str(verdict.check), verdict.stats, images, config)  # the levels only
            fields["attribution"] = {"deferred": f"the run's diagnosis time ({self.share or 0.0:.0%} of its "
                                                 "budget) was spent: `kimi-oracle repro` diagnoses this finding"}
            return fields
        began = self.clock()
        with self.times.diagnosis.span():
            fields = diagnose(str(verdict.check), verdict.stats, images, config,
                              expected=verdict.expected, actual=verdict.actual)
        self.diagnosis_s += self.clock() - began
        if key is not None and self.store is not None:
            self.store.put(key, fields)
        return fields
