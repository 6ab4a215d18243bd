"""Issue 33 item 2: the gate spends its budget on correctness. The invariance stage checks drawn
batches after its fixed ones (by count with --fuzz-examples, so the verdict does not depend on the
machine), the timing keeps to its share, and the report says how the budget was spent."""

from __future__ import annotations

import time
from types import SimpleNamespace

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.pipelines import reference
from kimi_oracle.workflows.gate import invariance
from kimi_oracle.workflows.gate.budget import PERF_SHARE, Budget
from kimi_oracle.workflows.gate.options import Stage
from kimi_oracle.workflows.gate.report import budget_shares


def _batch_dependent(images, config):
    """The reference, except that in a batch of two or more every value of the last image is 1e-3
    higher: one by one it is exact, batched it is not."""
    out = reference.preprocess(images, config)
    if len(images) > 1:
        last = int(out.grid_thws[-1].prod())
        out.pixel_values[-last:] += 1e-3
    return out


def _ctx(candidate, fuzz_examples):
    config = PreprocessConfig.profile("k3-small")
    return SimpleNamespace(
        new=candidate, old=None, relative=False, seed=5, config=config, hung=set(), findings=[],
        observations={"new": [], "old": []},
        options=SimpleNamespace(profile="k3-small", fuzz_examples=fuzz_examples),
        budget=Budget(60.0, time.monotonic()), overhead=lambda t0, t1: 0.0)


def test_drawn_batches_come_by_count_and_are_checked():
    # --fuzz-examples 24: exactly 24 / INVARIANCE_EVERY (4) = 6 drawn batches, each of two or
    # more images; the batch-dependent candidate fails every one of them.
    ctx = _ctx(_batch_dependent, 24)
    stage = Stage(invariance.NAME)
    drawn = invariance._drawn_batches(ctx, stage, deadline=time.monotonic() + 600)
    assert drawn == 6
    failing = [f for f in ctx.findings if f["check"] == "invariance"]
    assert len(failing) == 6 and all(len(f["images"]) >= 2 for f in failing)
    assert {o["input"].split("/")[0] for o in ctx.observations["new"]} == {"invariance:drawn"}
    # the reference itself passes them all
    ctx = _ctx(reference.preprocess, 24)
    assert invariance._drawn_batches(ctx, Stage(invariance.NAME), deadline=time.monotonic() + 600) == 6
    assert ctx.findings == []


def test_the_timing_keeps_to_its_share_and_the_report_says_where_the_budget_went():
    budget = Budget(120.0, time.monotonic() - 100.0, with_baseline=True)  # 20 s left
    assert budget.timing_s() <= 20.0
    budget = Budget(120.0, time.monotonic() - 10.0, with_baseline=True)  # 110 s left
    assert budget.timing_s() == PERF_SHARE * 120.0 <= 0.25 * 120.0
    stages = []
    for name, seconds in (("goldens", 6.0), ("fuzz", 60.0), ("invariance", 24.0), ("performance", 30.0)):
        stage = Stage(name)
        stage.elapsed_s = seconds
        stages.append(stage)
    shares = budget_shares(stages, 120.0)
    assert shares["stages_s"] == {"goldens": 6.0, "fuzz": 60.0, "invariance": 24.0, "performance": 30.0}
    assert shares["correctness_share_of_budget"] == 0.75 and shares["timing_share_of_budget"] == 0.25


def test_findings_written_in_the_background_keep_their_place_and_a_failed_write_is_told(tmp_path, monkeypatch):
    # GateContext.write_later: the fuzz stage's finding folders are written while the next stages
    # run; writes_done waits for them all, fills in their entries where they were begun (before a
    # later stage's entry) and removes the one whose write failed, naming its stage.
    import threading

    from kimi_oracle.results import report as report_module
    from kimi_oracle.workflows.gate.context import GateContext
    from kimi_oracle.workflows.gate.options import GateOptions

    monkeypatch.setattr(report_module, "finding_summary", lambda f: {"id": f, "path": f"/{f}"})
    ctx = GateContext("eager", "eager", GateOptions(budget_s=60.0), tmp_path)
    release = threading.Event()
    written = []

    def write(name, fail=False):
        def run():
            release.wait(30)  # (held until every write was begun: they are in the background)
            if fail:
                raise OSError("disk full")
            written.append(name)
        return run

    ctx.write_later("fuzz", "new", "a", write("a"))
    ctx.write_later("fuzz", "old", "b", write("b", fail=True))
    ctx.write_later("fuzz", "new", "c", write("c"))
    ctx.findings.append({"stage": "corpus", "id": "later"})
    assert written == []
    release.set()
    failed = ctx.writes_done()
    assert written == ["a", "c"]
    assert [e.get("id") for e in ctx.findings] == ["a", "c", "later"] and ctx.findings[0]["stage"] == "fuzz"
    assert ctx.baseline_findings == []
    assert failed == [("fuzz", "fuzz: a finding could not be written: OSError: disk full")]
    assert ctx.writes_done() == []  # nothing left
