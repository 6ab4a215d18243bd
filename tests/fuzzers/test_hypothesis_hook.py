"""What the fuzzer relies on in hypothesis (public API, behaviour of one pinned version range):
a choice list round-trips through `choices_to_bytes`; a database entry under the test's
secondary key is replayed by the reuse phase and then shrunk (one under the primary key counts as
shrunk already); settings applied over `@seed` put the database back. pyproject pins the
hypothesis range; these tests fail on an upgrade that breaks any of it, instead of letting
shrinking silently stop."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, Verbosity, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase, choices_from_bytes, choices_to_bytes

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz


class _OneEntry(ExampleDatabase):
    """Holds one value under keys ending with `suffix`; records what hypothesis fetched."""

    def __init__(self, value: bytes, suffix: bytes):
        super().__init__()
        self.value, self.suffix, self.fetched = value, suffix, []

    def save(self, key, value):
        pass

    def fetch(self, key):
        self.fetched.append(key)
        if key.endswith(self.suffix):
            yield self.value

    def delete(self, key, value):
        pass

    def move(self, src, dest, value):
        pass


@st.composite
def _pairs(draw):
    return [(draw(st.integers(0, 1000)), draw(st.integers(0, 1000))) for _ in range(draw(st.integers(1, 3)))]


def _shrink(database) -> list:
    calls: list = []

    @settings(database=database, phases=[Phase.reuse, Phase.shrink], max_examples=1000, deadline=None,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=False)
    @hypothesis_seed(0)  # settings applied over @seed: the database is ours again
    @given(_pairs())
    def body(pairs):
        calls.append(pairs)
        if any(a > 500 for a, _ in pairs):
            raise ValueError("fails while some first value is over 500")

    with pytest.raises(ValueError):
        body()
    return calls


def test_choice_lists_round_trip_through_bytes():
    choices = [3, 900, 261, 0, 2**32 - 1, 1]
    assert choices_from_bytes(choices_to_bytes(choices)) == tuple(choices)


def test_a_secondary_key_entry_is_replayed_then_shrunk():
    recorded = choices_to_bytes([3, 900, 261, 759, 367, 814, 707])
    db = _OneEntry(recorded, b".secondary")
    calls = _shrink(db)
    assert calls[0] == [(900, 261), (759, 367), (814, 707)]  # replayed first, as recorded
    # The smallest failing case by hand: one pair, the first value just over 500, the second 0.
    assert calls[-1] == [(501, 0)]
    assert db.fetched  # the database given over @seed was used


def test_a_primary_key_entry_counts_as_shrunk_already():
    # Why the fuzzer seeds the secondary key: hypothesis replays a primary entry and stops.
    recorded = choices_to_bytes([3, 900, 261, 759, 367, 814, 707])
    db = _OneEntry(recorded, b"")  # every key, the primary one first
    calls = _shrink(db)
    assert calls[-1] == [(900, 261), (759, 367), (814, 707)]


def test_fuzz_runs_exactly_the_examples_asked_for():
    run = fuzz("reference", PreprocessConfig.k3_small(), FuzzOptions(examples=25, seed=3, invariance=False))
    assert run.findings == [] and run.examples == 25
    assert run.calls == 25 - run.rejected - run.skipped_hanging
