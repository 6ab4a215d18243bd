"""One aggregation by root cause x mode class (issue 24, item 3): the report's root-cause table
(`results.report.root_cause_rows`) and the gate's verdict rows (`workflows.known.aggregate`)
count the same failures under the same rows, with the same levels (`report.cause_entries`)."""

from __future__ import annotations

from kimi_oracle.results.report import cause_entries, root_cause_rows
from kimi_oracle.workflows.known import aggregate


def _failure(check, key, causes=(), *, max_levels=None, mean_levels=None, attribution=None, input="i1"):
    # One dict that is both a finding summary (report) and an observation (gate).
    return {"input": input, "stage": "fuzz", "check": check, "key": key, "root_causes": list(causes),
            "attribution": attribution, "max_levels": max_levels, "mean_levels": mean_levels,
            "max_levels_seen": max_levels, "share": 0.5, "message": "m", "hits": 1}


TWO_CAUSES = {"max_levels": 200.0, "mean_levels": 50.0, "explained": [
    {"root_cause": "patch-order", "image": 0, "residual_max_levels": 0.5, "residual_mean_levels": 0.01},
    {"root_cause": "normalize-float", "image": 0, "residual_max_levels": 0.0, "residual_mean_levels": 0.0}]}

FAILURES = [
    _failure("pixel_mismatch", "pixel_mismatch[RGB]<levels>", ["patch-order", "normalize-float"],
             max_levels=200.0, mean_levels=50.0, attribution=TWO_CAUSES),
    _failure("pixel_mismatch", "pixel_mismatch[P+alpha]<levels>", ["fill-stage"], max_levels=12.0, mean_levels=2.0,
             input="i2"),
    _failure("pixel_mismatch", "pixel_mismatch[RGBA+alpha]<sub-level>", [], max_levels=0.4, mean_levels=0.1,
             input="i3"),
    _failure("crash", "crash[RGB](ValueError)", input="i4"),
    # a crash that names causes anyway (a hand-written case.json): counted under its key
    _failure("crash", "crash[L](ZeroDivisionError)", ["patch-order"], input="i5"),
]


def test_cause_entries_by_hand():
    levels = {"patch-order": (199.5, 49.99), "normalize-float": (0.5, 0.01)}
    entries = cause_entries("pixel_mismatch", "pixel_mismatch[RGB]<levels>", ["patch-order", "normalize-float"],
                            levels, (200.0, 50.0))
    assert entries == [("patch-order", "RGB", 199.5, 49.99), ("normalize-float", "RGB", 0.5, 0.01)]
    # a cause without levels of its own gets the whole difference; no cause: the key
    assert cause_entries("pixel_mismatch", "pixel_mismatch[P]<levels>", ["fill-stage"], {}, (12.0, 2.0)) \
        == [("fill-stage", "P", 12.0, 2.0)]
    assert cause_entries("pixel_mismatch", "pixel_mismatch[P]<levels>", [], {}, (12.0, 2.0)) \
        == [("pixel_mismatch[P]<levels>", "P", 12.0, 2.0)]
    assert cause_entries("crash", "crash[L](ZeroDivisionError)", ["patch-order"], {}, (None, None)) \
        == [("crash[L](ZeroDivisionError)", "L", None, None)]
    assert cause_entries("grid_mismatch", None, None, {}, (None, None)) == [("grid_mismatch", "", None, None)]


def test_the_report_and_the_gate_count_the_same_rows():
    report_rows = {(r["root_cause"], r["mode_class"]): r for r in root_cause_rows(FAILURES)}
    gate_rows = aggregate(FAILURES)
    # by hand: two causes of the RGB difference, the P one, the cause-less sub-level one, two crashes
    assert set(report_rows) == set(gate_rows) == {
        ("patch-order", "RGB"), ("normalize-float", "RGB"), ("fill-stage", "P+alpha"),
        ("pixel_mismatch[RGBA+alpha]<sub-level>", "RGBA+alpha"), ("crash[RGB](ValueError)", "RGB"),
        ("crash[L](ZeroDivisionError)", "L")}
    for key, row in report_rows.items():
        assert row["max_levels"] == gate_rows[key].max_levels, key
    # patch-order accounts for 200 - 0.5 levels of the RGB difference, normalize-float for the rest
    assert report_rows[("patch-order", "RGB")]["max_levels"] == 199.5
    assert report_rows[("normalize-float", "RGB")]["max_levels"] == 0.5
