"""core.activity: spans of work and the length of their union (the gate's overhead), by hand."""

from kimi_oracle.core.activity import Activity, union_seconds


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
