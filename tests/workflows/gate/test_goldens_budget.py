"""The goldens stage without a baseline obeys the budget: a candidate wrong on every golden case
(which ran 175-464 s of a 60 s budget and 5.3 GB) is re-judged only within the stage's share,
attributes a sample per mode class, and still fails: the cases not re-judged fail as they are."""

from __future__ import annotations

import textwrap

from kimi_oracle.workflows.gate import Gate, GateOptions
from kimi_oracle.workflows.gate.goldens import GOLDEN_DIAGNOSE_PER_CLASS, GOLDEN_MIN_REJUDGED


def test_a_candidate_wrong_everywhere_is_judged_within_the_budget(tmp_path):
    (tmp_path / "plus_one.py").write_text(textwrap.dedent("""
        from kimi_oracle.core.result import PreprocessResult
        from kimi_oracle.pipelines.reference import preprocess as reference

        def preprocess(images, config):
            out = reference(images, config)
            return PreprocessResult(out.pixel_values + 1.0, out.grid_thws)
    """))
    # A budget of 0.5 s: the stage's 40 % is spent before the first re-judging (the golden run of
    # 470 cases alone takes longer on any machine), so only the guaranteed few are re-run.
    options = GateOptions(budget_s=0.5, seed=1, fuzz_examples=1, fuzz_shrink=False, photo_examples=0)
    report = Gate(f"{tmp_path / 'plus_one.py'}:preprocess", None, options, tmp_path / "out").run()
    goldens = report["stages"]["goldens"]
    assert goldens["status"] == "fail" and report["verdict"] == "fail"
    details = goldens["details"]
    assert details["failing_cases"] == 470
    assert details["not_rejudged_within_budget"] == 470 - GOLDEN_MIN_REJUDGED
    assert any("not re-judged" in r for r in report["reasons"])
    attributed = [c for c in details["cases"] if c["root_causes"]]
    per_class: dict[str, int] = {}
    for c in attributed:
        per_class[c["key"]] = per_class.get(c["key"], 0) + 1
    assert len(details["cases"]) == GOLDEN_MIN_REJUDGED
    assert all(n <= GOLDEN_DIAGNOSE_PER_CLASS for n in per_class.values())
