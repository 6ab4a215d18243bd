"""The defaults every command shares, each defined once: the case and start timeouts, a run's seed."""

from __future__ import annotations

import random

# How long one call of a candidate (one case) may take before it is a `timeout` finding; the
# CLI's `--case-timeout` default is this figure, written as a duration (`DEFAULT_CASE_TIMEOUT`).
DEFAULT_CASE_TIMEOUT_S = 30.0
DEFAULT_CASE_TIMEOUT = f"{DEFAULT_CASE_TIMEOUT_S:g}s"

# The longest a candidate's process may take to start and load it (less when a run's budget is
# shorter: a candidate whose import hangs never outlasts the budget).
START_TIMEOUT_S = 120.0


def start_timeout(budget_s: float | None) -> float:
    """How long a process that loads a candidate, planner or engine may take to start:
    START_TIMEOUT_S, or the run's budget when that is shorter (None: no budget)."""
    return START_TIMEOUT_S if budget_s is None else min(START_TIMEOUT_S, budget_s)

# Seeds are 32-bit: `inputs.draw.derive(seed, i)` shifts the seed above the example index.
SEED_BITS = 32


def fresh_seed() -> int:
    """The seed of a run that names none: 32 bits from the operating system's random source
    (never the clock: two runs started in the same second draw different examples). Every run
    records the seed it used, so that `--seed` repeats it."""
    return random.SystemRandom().getrandbits(SEED_BITS)


__all__ = ["DEFAULT_CASE_TIMEOUT", "DEFAULT_CASE_TIMEOUT_S", "SEED_BITS", "START_TIMEOUT_S", "fresh_seed",
           "start_timeout"]
