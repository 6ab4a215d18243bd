"""How the gate shares its budget among the stages, and its overhead allowance (`Budget`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

# The planner stage's share of the budget at most (its check stops there with what it judged).
PLANNER_SHARE = 0.2
# Shares of the budget: the timing (with a baseline) at most PERF_SHARE (issue 33: at most 25 %,
# the correctness stages at least 70 %); fuzzing gets what the goldens leave, less the timing's
# share and INVARIANCE_SHARE kept for the invariance stage, which runs after it and takes what
# is left before the timing's share (its drawn batches: `gate.invariance`). 24 %: the stage ends
# the measurement under way at its deadline (25.0 % measured with a 25 % share).
PERF_SHARE = 0.24
INVARIANCE_SHARE = 0.05
# Kept for the engine stage (`--engine`), which runs after the invariances and before the timing.
ENGINE_SHARE = 0.2
VIDEO_SHARE = 0.2  # the video stage (--media video|both): NEW's and OLD's forked runs together
# With a baseline, the fuzz stage's budget: NEW and OLD fuzzed in lockstep (one draw, one image
# and one reference run per example, both candidates at work on it at once) get this share; the
# rest goes to judging every failing input on the other side (an attribution per differing output).
FUZZ_PAIR_SHARE = 0.35
# The harness's own time (the wall-clock time in which no candidate's process works and the
# reference does not run: generating inputs, comparing, diagnosing, shrinking, writing) that the
# gate aims at, as a share of its budget (the target is at most 20 %). With a baseline the fuzz
# stage is held to what is left of it after the goldens, minus LATER_OVERHEAD_SHARE kept for the
# stages after it; of that, FUZZ_OVERHEAD_PAIR goes to the lockstep run (its search ends when
# spent: `FuzzOptions.overhead_s`), the rest to judging the findings' inputs on both sides
# (estimated, not bounded) and then the differing examples (bounded).
OVERHEAD_AIM = 0.185
# The invariance stage's drawn batches stop once their own harness time (drawing, comparing,
# the calls' transfers) reaches this share of the budget: they add candidate time at a bounded
# harness cost (the README's gate here: their harness time is ~13 % of the stage's time).
INVARIANCE_OVERHEAD_SHARE = 0.065
# What the timing stage's own work takes (comparing every timed output with the reference, the
# transfers; 2-2.6 s of a 2-minute gate here) and the reports: not bounded, kept back.
TIMING_OVERHEAD_SHARE = 0.02
# Kept back from the fuzz stage's allowance for the stages after it: the invariances' allowance
# and the timing's share (the corpus and engine stages, and writes no candidate's work overlaps,
# are in no allowance).
LATER_OVERHEAD_SHARE = INVARIANCE_OVERHEAD_SHARE + TIMING_OVERHEAD_SHARE
FUZZ_OVERHEAD_PAIR = 0.7
# The lockstep search runs at least this many examples whatever the allowance (a few seconds;
# docs/measurements.md): goldens that used the whole allowance never leave the fuzz stage
# without examples.
OVERHEAD_MIN_EXAMPLES = 500
# What writing one side's finding takes (diff image, PNG inputs, JSON, fsync; the figure it rests
# on: docs/measurements.md), kept back from the fuzz stage's allowance for each differing example
# judged on both sides.
WRITE_ESTIMATE_S = 0.015


@dataclass
class Budget:
    """The gate's budget of `total_s` seconds from `t0` (time.monotonic()), and its shares: the
    timing's (with a baseline), the invariances', the fuzz stage's and its overhead allowance."""

    total_s: float
    t0: float
    with_baseline: bool = False
    with_engine: bool = False
    with_video: bool = False  # `--media video|both`: VIDEO_SHARE kept from the fuzz, invariance, engine stages

    def _video_s(self) -> float:
        return VIDEO_SHARE * self.total_s if self.with_video else 0.0

    def video_s(self) -> float:
        """The video stage's time: what is left less the timing's share, at most VIDEO_SHARE."""
        return min(max(self.left_s() - self.perf_s(), 0.0), self._video_s())

    def elapsed_s(self) -> float:
        """Seconds since the gate started."""
        return time.monotonic() - self.t0

    def left_s(self) -> float:
        """What is left of the whole budget (the timing stage, last, gets it)."""
        return max(self.total_s - self.elapsed_s(), 0.0)

    def perf_s(self) -> float:
        """The timing stage's share (none without a baseline)."""
        return PERF_SHARE * self.total_s if self.with_baseline else 0.0

    def fuzz_s(self) -> float:
        """The fuzz stage's budget: what is left less the timing's and the invariances' shares."""
        return (self.total_s - self.elapsed_s() - self.perf_s() - INVARIANCE_SHARE * self.total_s
                - (ENGINE_SHARE * self.total_s if self.with_engine else 0.0) - self._video_s())

    def invariance_s(self) -> float:
        """The invariance stage's time: what is left less the timing's share and the engine's
        (`--engine`: its stage runs after this one)."""
        return max(self.left_s() - self.perf_s() - (ENGINE_SHARE * self.total_s if self.with_engine else 0.0)
                   - self._video_s(), 0.0)

    def invariance_overhead_s(self) -> float:
        """The harness time the invariance stage's drawn batches may take (INVARIANCE_OVERHEAD_SHARE
        of the budget)."""
        return INVARIANCE_OVERHEAD_SHARE * self.total_s

    def timing_s(self) -> float:
        """The timing stage's time: what is left, at most the timing's share."""
        return min(self.left_s(), self.perf_s())

    def engine_s(self) -> float:
        """The engine stage's time: what is left less the timing's share (its ENGINE_SHARE was kept
        from the fuzz stage)."""
        return max(self.left_s() - self.perf_s() - self._video_s(), 0.0)

    def fuzz_overhead_s(self, overhead_so_far_s: float) -> float:
        """The harness time left for fuzzing, given the harness time spent so far (OVERHEAD_AIM
        less LATER_OVERHEAD_SHARE of the budget, less what was spent)."""
        return max((OVERHEAD_AIM - LATER_OVERHEAD_SHARE) * self.total_s - overhead_so_far_s, 0.0)

    @staticmethod
    def pair_s(fuzz_budget_s: float) -> float:
        """The lockstep run's part of the fuzz stage's budget."""
        return fuzz_budget_s * FUZZ_PAIR_SHARE

    @staticmethod
    def pair_overhead_s(allowance_s: float) -> float:
        """The lockstep search's part of the fuzz stage's overhead allowance."""
        return FUZZ_OVERHEAD_PAIR * allowance_s

    @staticmethod
    def writes_s(inputs: int) -> float:
        """What writing both sides' findings of `inputs` inputs is expected to take."""
        return WRITE_ESTIMATE_S * 2 * inputs
