"""core.activity: spans of work and the length of their union (the gate's overhead), by hand."""

from kimi_oracle.core.activity import Activity, HarnessMeter, union_seconds


def test_union_of_overlapping_and_disjoint_spans():
    a, b = Activity(), Activity()
    a.add(0.0, 2.0)
    a.add(5.0, 6.0)
    b.add(1.0, 3.0)   # overlaps a's first span: [0, 3]
    b.add(5.5, 7.0)   # overlaps a's second: [5, 7]
    b.add(10.0, 10.5)
    assert union_seconds(a, b) == 3.0 + 2.0 + 0.5
    assert a.seconds() == 3.0 and b.seconds() == 2.0 + 1.5 + 0.5
    assert union_seconds(a, None) == 3.0
    assert union_seconds() == 0.0
    # within a window: [2.5, 6.0] holds [2.5, 3] and [5, 6]
    assert union_seconds(a, b, window=(2.5, 6.0)) == 0.5 + 1.0


def test_back_to_back_spans_merge_and_empty_ones_are_ignored():
    a = Activity()
    a.add(0.0, 1.0)
    a.add(1.0, 2.0)  # touches: one entry
    a.add(1.5, 1.8)  # inside: one entry still
    a.add(3.0, 3.0)  # empty
    a.add(4.0, 3.5)  # reversed
    assert a.spans() == [(0.0, 2.0)]
    assert a.count == 3 and a.seconds() == 2.0


def test_spans_recorded_out_of_order_still_union_correctly():
    a = Activity()
    a.add(4.0, 5.0)
    a.add(0.0, 1.0)  # an executor's span may be reported after a later local one
    a.add(0.5, 4.5)
    assert a.seconds() == 5.0


def _covered_cells(spans, lo, hi):
    """Integer cells [k, k+1) inside [lo, hi) covered by a span: an independent count for spans
    with integer ends."""
    return sum(1 for k in range(lo, hi) if any(a <= k and k + 1 <= b for a, b in spans))


def test_a_window_reads_the_spans_it_overlaps_whatever_their_order_and_length():
    import random

    rng = random.Random(7)
    for ordered in (True, False):
        spans = []
        t = 0
        for _ in range(200):
            t += rng.randint(0, 5)
            spans.append((t, t + rng.choice([1, 2, 3, 40])))  # a few long spans among short ones
        if not ordered:
            rng.shuffle(spans)
        a = Activity()
        for s in spans:
            a.add(float(s[0]), float(s[1]))
        end = max(b for _, b in spans) + 2
        for _ in range(50):
            lo = rng.randint(0, end)
            hi = rng.randint(lo, end)
            assert union_seconds(a, window=(lo, hi)) == _covered_cells(spans, lo, hi), (ordered, lo, hi)
        # adjacent windows add up to the window they cover (the fuzz engine sums them)
        cuts = sorted(rng.sample(range(1, end), 10))
        bounds = [0, *cuts, end]
        parts = sum(union_seconds(a, window=(x, y)) for x, y in zip(bounds, bounds[1:]))
        assert parts == union_seconds(a, window=(0, end)) == a.seconds()


def test_harness_meter_reads_what_the_whole_window_gives_with_spans_reported_late():
    # The harness's time from t0 = 0: the clock less the union of the work's spans. The meter
    # sums windows older than `lag` once; a span reported after it ended (an executor's, with its
    # answer) still counts when it falls within the last `lag` seconds of the reading.
    a, b = Activity(), Activity()
    window_reads = []

    def at_work(lo, hi):
        window_reads.append((lo, hi))
        return union_seconds(a, b, window=(lo, hi))

    meter = HarnessMeter(at_work, 0.0, lag=2.0)
    a.add(0.5, 1.5)
    assert meter.spent(1.0) == 0.5  # [0, 0.5) free, [0.5, 1.0) at work
    b.add(1.0, 3.0)
    assert meter.spent(4.0) == 4.0 - (3.0 - 0.5)  # the union [0.5, 3.0) at work
    a.add(3.5, 4.5)  # reported at 5.0, after its end
    b.add(2.5, 3.8)  # late, and overlapping both
    assert meter.spent(5.0) == 5.0 - (3.0 - 0.5) - (4.5 - 3.0)
    assert meter.spent(9.0) == 9.0 - (4.5 - 0.5)
    # No reading goes back over windows already summed: the windows read start in order.
    starts = [lo for lo, _ in window_reads]
    assert starts == sorted(starts) and starts[-1] == 9.0 - 2.0
