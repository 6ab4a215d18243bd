"""The fuzz engine's time accounting: budget shares, the overhead allowance, when the search stops."""

from __future__ import annotations

from kimi_oracle.core.activity import HarnessMeter
from kimi_oracle.fuzzers.options import OVERHEAD_CHECK_S, OVERHEAD_LAG_S, SEARCH_SHARE


class _Budget:
    """The engine's budget stages (mixed into `fuzzers.search._Engine`)."""

    def diagnosis_spent(self) -> bool:
        """fuzz() under a budget: whether the diagnoses have had their share of it."""
        return not self.eager_diagnosis and self.publisher.spent(self.budget)

    def search_over(self, next_cost: float = 0.0, in_flight: float = 0.0) -> bool:
        """Under a budget, the search ends when nothing waits to be shrunk and the next example
        (as long as the longest of its kind so far, tile-crossing or not) would end past the
        budget; else when what is left of it is (1 - SEARCH_SHARE) of it, or twice what
        diagnosing the waiting groups' first cases took (shrinking, then publishing, needs at
        least that). `in_flight`: what the example begun and not judged yet will take (counted
        as spent already)."""
        if self.budget is None:
            return False
        left = self.start + self.budget - self.clock() - in_flight
        if not self.records and not (self.partner is not None and self.partner.records):
            return left <= 0 or next_cost > left + 1e-6  # (1 µs: sums of float clock readings)
        shrinking = (1 - SEARCH_SHARE) * self.budget if self.options.shrink else 0.0
        return left <= max(shrinking, self.publishing()) or next_cost > left + 1e-6

    def publishing(self) -> float:
        """What publishing the waiting groups will take: fuzz(), their count times the expected
        time of one; fuzz_pair, twice what diagnosing their first cases took (`waiting`)."""
        if not self.eager_diagnosis:
            return len(self.first_cases) * self.publisher.estimate() + self.publisher.backlog()
        return 2 * self.waiting()

    def waiting(self) -> float:
        """What diagnosing the waiting groups' first cases took (the partner's too): publishing
        them takes about as long again."""
        waiting = sum(r.cost for r in self.first_cases.values())
        if self.partner is not None:  # fuzz_pair: the baseline's groups are published too (those
            # this side has as well as they were met: `_settle_pair`)
            waiting += sum(r.cost for g, r in self.partner.first_cases.items() if g not in self.records)
        return waiting

    def overhead_spent(self) -> bool:
        """Under `FuzzOptions.overhead_s`: whether the search has spent its part of the harness's
        allowance (measured every OVERHEAD_CHECK_S of the clock); then the run's budget shrinks to
        the search's time plus settling's."""
        options = self.options
        if options.overhead_s is None or options.at_work is None:
            return False
        now = self.clock()
        if now < self.next_overhead_check:
            return False
        self.next_overhead_check = now + OVERHEAD_CHECK_S
        if self.harness is None:
            self.harness = HarnessMeter(options.at_work, self.start, OVERHEAD_LAG_S)
        spent = self.harness.spent(now)
        if self.run.examples < options.overhead_min_examples:
            return False
        elapsed = now - self.start
        # What settling will add (mostly the harness's: hypothesis, the reference, diagnoses):
        # the share of the run it gets under a budget, or publishing the waiting groups.
        settling = max(elapsed * (1 - SEARCH_SHARE) / SEARCH_SHARE if options.shrink else 0.0, self.publishing())
        if spent + settling < options.overhead_s:
            return False
        took = elapsed + settling
        self.budget = took if self.budget is None else min(self.budget, took)
        if self.partner is not None:
            self.partner.budget = self.budget
        return True

    def over(self, fraction: float) -> bool:
        return self.budget is not None and self.clock() - self.start >= self.budget * fraction

    def round_over(self) -> bool:
        """keep_searching=False: the search stops like one hypothesis round after its first
        failure: once at least 10 examples ran and twice as many as when the latest new group was
        met (at most 1000 more than the first group's); at once when shrinking is off."""
        if not self.options.shrink:
            return True
        first = min(r.example for r in self.records.values())
        examples = self.run.examples
        return examples >= 10 and examples >= min(first + 1000, 2 * self.last_new)
