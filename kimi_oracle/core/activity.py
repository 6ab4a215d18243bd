"""Wall-clock spans of work (a candidate's calls, the reference's runs) and the length of their union.

The gate's overhead is the time during which neither a candidate nor the reference is at work. Once
the fuzzing engine overlaps them (the candidate's process judges example i while this process
computes the reference and draws example i+1), adding their durations would count the same second
twice; the union of their spans does not. Spans are `time.monotonic()` readings, which on Linux
come from one system-wide clock: an executor process reports its own spans in the same time base.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from array import array
from typing import Callable, Iterator


class Activity:
    """Spans [start, end) of one kind of work, stored compactly (two float arrays)."""

    def __init__(self) -> None:
        # (spans may be added by one thread while another reads them: the gate's batch maker runs
        # the reference while the main thread measures the harness's time)
        self._lock = threading.Lock()
        self._starts = array("d")
        self._ends = array("d")
        self.count = 0
        self._longest = 0.0  # the longest span stored

    def add(self, start: float, end: float) -> None:
        """Record a span (ignored when empty or reversed). Touching or overlapping the previous
        span extends it, so that a long run of back-to-back calls stays one entry."""
        if end <= start:
            return
        with self._lock:
            self._add(start, end)

    def _add(self, start: float, end: float) -> None:
        self.count += 1
        if self._ends and start <= self._ends[-1] and start >= self._starts[-1]:
            self._ends[-1] = max(self._ends[-1], end)
            self._longest = max(self._longest, self._ends[-1] - self._starts[-1])
            return
        self._longest = max(self._longest, end - start)
        if self._starts and start < self._starts[-1]:
            # Reported late (an executor's span arrives with its answer, after the wait span this
            # process recorded): put in its place, near the end, so that the starts stay sorted.
            i = bisect.bisect_right(self._starts, start)
            self._starts.insert(i, start)
            self._ends.insert(i, end)
            return
        self._starts.append(start)
        self._ends.append(end)

    @contextlib.contextmanager
    def span(self) -> Iterator[None]:
        """Record the time the `with` block takes."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(t0, time.monotonic())

    def spans(self) -> list[tuple[float, float]]:
        """The recorded spans, by start."""
        with self._lock:
            return list(zip(self._starts, self._ends))

    def spans_within(self, lo: float, hi: float) -> list[tuple[float, float]]:
        """The recorded spans that overlap [lo, hi), clipped to it (by start); only the spans from
        lo minus the longest span on are read."""
        # (starts are kept sorted: a span that overlaps lo starts at lo - the longest span or later)
        with self._lock:
            first = bisect.bisect_left(self._starts, lo - self._longest)
            return [(max(a, lo), min(b, hi))
                    for a, b in zip(self._starts[first:], self._ends[first:]) if b > lo and a < hi]

    def seconds(self) -> float:
        """The length of the union of this activity's spans."""
        return union_seconds(self)


def union_seconds(*activities: Activity | None, window: tuple[float, float] | None = None) -> float:
    """Seconds covered by at least one span of `activities` (None entries are skipped), within
    `window` (start, end) when given."""
    if window is None:
        spans = sorted(s for a in activities if a is not None for s in a.spans())
    else:
        spans = sorted(s for a in activities if a is not None for s in a.spans_within(*window))
    total = 0.0
    cur_start = cur_end = None
    for start, end in spans:
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


class HarnessMeter:
    """The harness's seconds since `t0`: the clock's seconds less those `at_work(a, b)` counts
    within [a, b] (the union of the work's spans), read again and again without reading every
    span each time. The windows older than `lag` seconds are summed once (the union within
    adjacent windows adds up to the union within their span); the last `lag` seconds are read
    again at each reading, since a span may be recorded after it ends (an executor's arrives with
    its answer; one recorded later still counts as the harness's: the safe side)."""

    def __init__(self, at_work: Callable[[float, float], float], t0: float, lag: float):
        self.at_work, self.lag = at_work, lag
        self.checked = t0  # the windows up to here are summed in `harness_s`
        self.harness_s = 0.0

    def spent(self, now: float) -> float:
        """The harness's seconds from `t0` to `now`."""
        until = max(self.checked, now - self.lag)
        if until > self.checked:
            self.harness_s += (until - self.checked) - self.at_work(self.checked, until)
            self.checked = until
        return self.harness_s + (now - until) - self.at_work(until, now)


__all__ = ["Activity", "HarnessMeter", "union_seconds"]
