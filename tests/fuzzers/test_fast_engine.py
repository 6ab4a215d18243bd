"""The fast fuzzing engine: seeded draws decide every example, hypothesis replays and shrinks the
recorded choices, counts are exact, budgets include shrinking (injected clocks, never timing)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, Verbosity, given, settings

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers import fuzzing, search
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, _seed_database, fuzz
from kimi_oracle.inputs.draw import (TILE_SIDES, ChoiceSource, DrawOptions,
                                     RandomSource, ReplayError, derive,
                                     draw_fuzz_case, is_tile_example)
from kimi_oracle.inputs.strategies import recorded_fuzz_cases
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.checks import Verdict
from kimi_oracle.pipelines import reference

K3 = PreprocessConfig.k3()


def _replayed_by_hypothesis(choices, base, options):
    """The first case hypothesis draws from `recorded_fuzz_cases` when its database holds `choices`."""
    seen = []

    @settings(database=_seed_database(choices), phases=[Phase.reuse], max_examples=1, deadline=None,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)
    @given(recorded_fuzz_cases(base, options))
    def body(drawn):
        seen.append(drawn)
        raise ValueError("failing, so that the reuse phase keeps it")

    with pytest.raises(ValueError):
        body()
    return seen[0]


@pytest.mark.parametrize("options", [DrawOptions(), DrawOptions(tiles=True, max_side=40)], ids=["default", "tiles"])
def test_a_recorded_choice_list_is_the_hypothesis_choice_sequence(options):
    base = PreprocessConfig.k3_small()
    for i in range(6):
        source = RandomSource(derive(7, i), (i % 2,) if options.tiles else ())
        case = draw_fuzz_case(source, base, options)
        replayed, choices = _replayed_by_hypothesis(source.choices, base, options)
        assert replayed == case
        assert list(choices) == source.choices
        # ... and the plain replay source reads the same list back.
        again = ChoiceSource(source.choices)
        assert draw_fuzz_case(again, base, options) == case and again.exhausted


def test_a_choice_list_of_other_options_is_refused():
    source = RandomSource(derive(1, 0))
    draw_fuzz_case(source, K3, DrawOptions(max_side=64))
    with pytest.raises(ReplayError):
        draw_fuzz_case(ChoiceSource(source.choices[:3]), K3, DrawOptions(max_side=64))


def test_tile_examples_are_an_exact_share_with_tile_sides():
    assert [is_tile_example(i, 0.25) for i in range(8)] == [False, False, False, True] * 2
    assert not any(is_tile_example(i, 0.0) for i in range(100))
    options = DrawOptions(tiles=True)
    for i in range(12):
        tile = is_tile_example(i, 0.25)
        case = draw_fuzz_case(RandomSource(derive(3, i), (int(tile),)), K3, options)
        sides = {s for p in case.images for s in p.size}
        if tile:
            assert len(case.images) == 1 and sides <= set(TILE_SIDES)
            # built in memory: no request container (encoding a 4-Mpx frame costs up to a second)
            request = case.images[0].to_dict()
            assert not {"container", "frames", "orientation", "icc", "dpi"} & set(request), request
        else:
            assert max(sides) <= 4 * options.max_side  # the ratio class reaches ~4x max_side


class _Recorder:
    """Collects the cases the search draws (shrinking draws through hypothesis, not through here)."""

    def __init__(self, monkeypatch):
        self.cases = []
        def spy(source, base, options):
            case = draw_fuzz_case(source, base, options)
            self.cases.append(case)
            return case

        monkeypatch.setattr(search, "draw_fuzz_case", spy)


def _wide_fails(images, config):
    """The reference, except that a batch holding an image 20 or more pixels wide gets wrong grids."""
    out = reference.preprocess(images, config)
    if any(img.width >= 20 for img in images):
        out.grid_thws = out.grid_thws + 1
    return out


def test_examples_depend_only_on_seed_and_index(monkeypatch):
    # The gate runs NEW and OLD with one seed and count and compares what they found on the same
    # cases: what a candidate does (here: fail, and be shrunk) must not change the cases drawn.
    options = dict(examples=24, seed=5, max_side=32, invariance=False)
    clean = _Recorder(monkeypatch)
    fuzz("reference", PreprocessConfig.k3_small(), FuzzOptions(**options))
    failing = _Recorder(monkeypatch)
    run = fuzz(Candidate("wide", _wide_fails), PreprocessConfig.k3_small(), FuzzOptions(**options))
    assert run.findings and run.shrink_calls > 0
    assert len(clean.cases) == len(failing.cases) == 24
    assert clean.cases == failing.cases
    # Another seed draws other cases.
    other = _Recorder(monkeypatch)
    fuzz("reference", PreprocessConfig.k3_small(), FuzzOptions(**{**options, "seed": 6}))
    assert other.cases != clean.cases


def test_examples_are_exact_and_shrinking_is_counted_apart():
    run = fuzz(Candidate("wide", _wide_fails), PreprocessConfig.k3_small(),
               FuzzOptions(examples=40, seed=2, max_side=40, invariance=False))
    assert run.examples == 40 and run.replayed == 0
    judged = run.examples - run.rejected - run.skipped_hanging
    assert run.shrink_calls > 0 and run.calls == judged + run.shrink_calls
    [finding] = run.findings
    # The minimal failing case by hand: one RGB image exactly 20 pixels wide.
    assert finding.check == "grid_mismatch"
    assert len(finding.images) == 1 and finding.images[0].width == 20 and finding.images[0].mode == "RGB"


def test_invariances_run_on_every_fourth_example(monkeypatch):
    flags = []

    def fake_evaluate(candidate, images, config, tolerance, *, invariance, call=None, expected=None, same_as=None, steps=None,
                      brief=False):
        flags.append(invariance)
        return Verdict(None, "ok", {})

    monkeypatch.setattr(search, "evaluate", fake_evaluate)
    fuzz("reference", K3, FuzzOptions(examples=10, seed=1))
    assert flags == [i % 4 == 0 for i in range(10)]
    flags.clear()
    fuzz("reference", K3, FuzzOptions(examples=5, seed=1, invariance_every=1))
    assert flags == [True] * 5
    flags.clear()
    fuzz("reference", K3, FuzzOptions(examples=5, seed=1, invariance=False))
    assert flags == [False] * 5


def test_tile_share_reaches_the_search(monkeypatch):
    sizes = []

    def fake_evaluate(candidate, images, config, tolerance, *, invariance, call=None, expected=None, same_as=None, steps=None,
                      brief=False):
        sizes.append([img.size for img in images])
        return Verdict(None, "ok", {})

    monkeypatch.setattr(search, "evaluate", fake_evaluate)
    monkeypatch.setattr(fuzzing.FuzzCase, "make_images", lambda case: [_Size(p.size) for p in case.images])
    fuzz("reference", K3, FuzzOptions(examples=20, seed=3, tile_share=0.1))
    tiles = [i for i, batch in enumerate(sizes) if len(batch) == 1 and set(batch[0]) <= set(TILE_SIDES)]
    assert tiles == [9, 19]


class _Size:
    """Stands in for an image where only the size is read (mode_class is never asked: no hang)."""

    def __init__(self, size):
        self.size = size


class _CallClock:
    """Time that advances only when the candidate is called: 10 ms a call."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def ticking(self, candidate):
        """`candidate`, costing 10 ms of this clock a call."""
        def slow(images, config):
            self.now += 0.01
            return candidate(images, config)
        return slow


def test_a_budget_ends_within_five_percent_shrinking_included():
    clock = _CallClock()
    slow_wide_fails = clock.ticking(_wide_fails)

    shrink_began = []

    def on_example(run):
        if run.shrink_calls == 1 and not shrink_began:
            shrink_began.append(clock.now - 0.01)

    budget = 3.0
    run = fuzz(Candidate("wide", slow_wide_fails), PreprocessConfig.k3_small(),
               FuzzOptions(budget_s=budget, seed=2, max_side=40, invariance=False, clock=clock),
               on_example=on_example)
    assert run.stopped == "budget" and run.findings and run.shrink_calls > 0
    # The search stopped at its share of the budget once a failure waited to be shrunk (the
    # example in flight then finishes; 1e-9: the fake clock sums 0.01 steps) ...
    assert budget * fuzzing.SEARCH_SHARE - 1e-9 <= shrink_began[0] <= budget * fuzzing.SEARCH_SHARE + 0.01
    # ... and what shrinking left went back to the search: the run ends at its budget.
    assert budget * 0.95 <= run.elapsed_s <= budget * 1.05
    assert run.calls == run.examples + run.shrink_calls
    assert run.search_s == pytest.approx(run.elapsed_s - 0.01 * run.shrink_calls, abs=1e-6)


def test_a_budget_without_findings_searches_to_its_end():
    clock = _CallClock()
    slow_reference = clock.ticking(reference.preprocess)

    run = fuzz(Candidate("ref", slow_reference), PreprocessConfig.k3_small(),
               FuzzOptions(budget_s=1.0, seed=2, max_side=24, invariance=False, clock=clock))
    assert run.stopped == "budget" and not run.findings
    # No example starts that would end past the budget (as long as the longest so far: 10 ms).
    assert 0.99 - 1e-9 <= run.elapsed_s <= 1.0 + 1e-9 and 99 <= run.examples == run.calls <= 100


@pytest.mark.parametrize("at_work_share", [0.0, 0.5])
def test_an_overhead_allowance_ends_the_search_and_shortens_the_run(at_work_share):
    # FuzzOptions.overhead_s (the gate's lockstep run): the harness's time, measured every
    # OVERHEAD_CHECK_S by `at_work` (here: a fixed share of each window at work), plus what
    # settling will take (a quarter of the search's time, SEARCH_SHARE 0.8), ends the search at
    # the first check where it reaches the allowance; the run then ends when settling has had it.
    clock = _CallClock()
    slow_wide_fails = clock.ticking(_wide_fails)

    windows = []

    def at_work(a, b):
        windows.append((a, b))
        return at_work_share * (b - a)

    allowance = 1.0
    run = fuzz(Candidate("wide", slow_wide_fails), PreprocessConfig.k3_small(),
               FuzzOptions(budget_s=100.0, seed=2, max_side=40, invariance=False, clock=clock,
                           overhead_s=allowance, at_work=at_work))
    assert run.stopped == "overhead" and run.findings
    # By hand: spent = (1 - share) * t and settling = t / 4, so the search may end from
    # t = allowance / (1 - share + 1/4) on: 0.8 s (share 0) or 1.33 s (share 0.5), at the
    # first check after that (checks are OVERHEAD_CHECK_S apart, the clock moves 10 ms a call).
    threshold = allowance / (1 - at_work_share + 0.25)
    search_end = windows[-1][1]
    assert threshold - 1e-9 <= search_end <= threshold + fuzzing.OVERHEAD_CHECK_S + 0.02
    # each check reads the window since OVERHEAD_LAG_S before it (spans arrive with the answers),
    # and what lies before that only once
    assert windows[0][0] == 0.0 and all(a <= b <= search_end for a, b in windows)
    assert all(b - a <= fuzzing.OVERHEAD_LAG_S + fuzzing.OVERHEAD_CHECK_S + 0.02 for a, b in windows)
    # the run's budget became the search's time plus a quarter of it (settling), not 100 s
    assert run.elapsed_s <= 1.25 * search_end + 0.05


def test_work_reported_late_is_still_credited_to_the_allowance():
    # An executor's span is recorded when its answer arrives, after the window it lies in may
    # have been measured: each check reads the last OVERHEAD_LAG_S again. Here half of the time is
    # at work, but a span shows only 0.5 s after it happened: were windows read once, as they
    # end, none of it would be credited and the search would end at 1.6 s, as with no work.
    clock = _CallClock()
    slow_wide_fails = clock.ticking(_wide_fails)

    ends = []

    def at_work(a, b):  # half of [a, b] at work, of what is 0.5 s old by now
        ends.append(b)
        visible = min(b, clock.now - 0.5)
        return 0.5 * max(0.0, visible - a)

    run = fuzz(Candidate("wide", slow_wide_fails), PreprocessConfig.k3_small(),
               FuzzOptions(budget_s=100.0, seed=2, max_side=40, invariance=False, clock=clock,
                           overhead_s=2.0, at_work=at_work))
    assert run.stopped == "overhead"
    # By hand: spent = 0.5 t + 0.25 (the last 0.5 s, not yet credited), settling t / 4: the
    # search may end from t = 7/3 s on (from 1.6 s, 2 / 1.25, without the lag).
    assert 7 / 3 - 1e-9 <= ends[-1] <= 7 / 3 + fuzzing.OVERHEAD_CHECK_S + 0.02


def test_an_overhead_allowance_keeps_a_floor_of_examples():
    # An allowance spent before the search began (the goldens took it) still leaves the floor.
    clock = _CallClock()
    slow_wide_fails = clock.ticking(_wide_fails)

    run = fuzz(Candidate("wide", slow_wide_fails), PreprocessConfig.k3_small(),
               FuzzOptions(budget_s=100.0, seed=2, max_side=40, invariance=False, clock=clock, overhead_s=0.0,
                           at_work=lambda a, b: 0.0, overhead_min_examples=150))
    assert run.stopped == "overhead" and 150 <= run.examples <= 150 + 26  # (the next check: 0.25 s, 25 calls)


def test_fuzz_pair_shrinks_only_the_baselines_groups_new_has_not():
    # OLD's groups that NEW has too are published as they were met (NEW's shrunk case is judged
    # on OLD in the gate); a group of OLD's alone is shrunk.
    options = FuzzOptions(examples=30, seed=4, max_side=32, invariance=False, record_outcomes=True)
    wide, ref = Candidate("wide", _wide_fails), Candidate("ref", reference.preprocess)
    run_new, run_old = fuzzing.fuzz_pair(wide, wide, PreprocessConfig.k3_small(), options)
    assert run_new.findings and run_new.shrink_calls > 0
    assert [f.key for f in run_old.findings] == [f.key for f in run_new.findings]
    assert run_old.shrink_calls == 0
    for f in run_old.findings:  # the first case: the widest image is 20 pixels or more, unshrunk
        assert f.example == run_old.first_found[f.check] and max(img.width for img in f.images) >= 20
    assert any(max(img.width for img in f.images) == 20 for f in run_new.findings)  # NEW's shrunk
    run_new, run_old = fuzzing.fuzz_pair(ref, wide, PreprocessConfig.k3_small(), options)
    assert not run_new.findings and run_old.findings and run_old.shrink_calls > 0


def test_stop_early_ends_like_one_hypothesis_round():
    # keep_searching=False: after the first failure the search runs until twice the example
    # number of the latest new group (at least 10 examples), then shrinks.
    run = fuzz(Candidate("wide", _wide_fails), PreprocessConfig.k3_small(),
               FuzzOptions(examples=300, seed=2, max_side=40, invariance=False, keep_searching=False))
    first = run.first_found["grid_mismatch"]
    assert run.examples == max(10, 2 * first)


def test_fuzz_pair_judges_both_sides_on_the_same_examples_made_once(monkeypatch):
    # The gate's lockstep fuzzing: each example is drawn and made once and judged on both sides;
    # OLD's outcomes are those of a run of its own (same seed and count), and so are its findings.
    made = []
    real_make = fuzzing.FuzzCase.make_images
    monkeypatch.setattr(fuzzing.FuzzCase, "make_images", lambda case: made.append(1) or real_make(case))
    options = FuzzOptions(examples=30, seed=4, max_side=32, invariance=False, record_outcomes=True, shrink=False)
    new, old = Candidate("wide", _wide_fails), Candidate("ref", reference.preprocess)
    run_new, run_old = fuzzing.fuzz_pair(new, old, PreprocessConfig.k3_small(), options)
    # once per example (two runs would make 60), plus the findings' fresh images (a group's first
    # case when met, and its simplest case when published)
    assert 30 <= len(made) <= 30 + 2 * (len(run_new.findings) + len(run_old.findings)) < 60
    assert run_new.examples == run_old.examples == 30
    assert sorted(run_new.outcomes) == sorted(run_old.outcomes) == list(range(30))
    assert run_new.findings and not run_old.findings
    alone = fuzz(old, PreprocessConfig.k3_small(), options)
    assert alone.outcomes == run_old.outcomes
    alone_new = fuzz(new, PreprocessConfig.k3_small(), options)
    assert alone_new.outcomes == run_new.outcomes
    assert [f.key for f in alone_new.findings] == [f.key for f in run_new.findings]


def test_evaluate_reuses_a_verdict_only_for_the_same_bytes(monkeypatch):
    from PIL import Image

    from kimi_oracle.oracle import judge

    images = [Image.new("RGB", (30, 20), (9, 80, 200))]
    expected = reference.preprocess(images, K3)
    shifted = lambda imgs, cfg: type(expected)(expected.pixel_values + 0.5, expected.grid_thws.clone())
    first = judge.evaluate(Candidate("a", shifted), images, K3, invariance=False, expected=expected)
    assert first.check == "pixel_mismatch"
    compares = []
    real = judge.compare
    monkeypatch.setattr(judge, "compare", lambda *a, **k: compares.append(1) or real(*a, **k))
    again = judge.evaluate(Candidate("b", shifted), images, K3, invariance=False, expected=expected, same_as=first)
    assert not compares and again == first and again.stats is not first.stats
    other = judge.evaluate(Candidate("c", lambda imgs, cfg: expected), images, K3, invariance=False,
                           expected=expected, same_as=first)
    assert compares == [1] and other.ok
    judge.evaluate(Candidate("d", shifted), images, K3, invariance=True, expected=expected, same_as=first)
    assert compares == [1, 1]  # invariances asked: judged in full


@pytest.mark.parametrize("keep_searching", [True, False])
def test_a_findings_example_number_is_the_one_it_was_met_at(keep_searching):
    # The search runs one example ahead: the number a finding carries (and first_found) must be
    # the failing example's own, 1-based, not the next one's (found by review).
    def off_by_half(images, config):
        out = reference.preprocess(images, config)
        return type(out)(out.pixel_values + 0.5, out.grid_thws)

    run = fuzz(Candidate("half", off_by_half), PreprocessConfig.k3_small(),
               FuzzOptions(examples=3, seed=1, max_side=24, invariance=False, shrink=False,
                           keep_searching=keep_searching, split_by_mode=False))
    assert run.first_found == {"pixel_mismatch": 1}
    assert [f.example for f in run.findings] == [1]


def test_the_baselines_groups_met_on_a_tile_crossing_example_are_shrunk_all_the_same():
    # `_settle_pair` keeps (does not shrink) OLD's groups that NEW has too, except one OLD met on a
    # tile-crossing example: judging NEW on that unshrunk case would attribute up to 4 Mpx.
    from types import SimpleNamespace

    from kimi_oracle.fuzzers.fuzzing import _Record, _settle_pair

    def record(tile):
        return _Record(case=None, choices=(), verdict=None, example=1, invariance=False, tile=tile)

    calls = {}

    def engine(name, records, first_cases):
        def settle(shrink=True, until=None, keep=()):
            calls[name] = set(keep)
        return SimpleNamespace(records=records, first_cases=first_cases, budget=None, settle=settle)

    new = engine("new", {"a": record(False), "b": record(False), "c": record(False)}, {})
    old = engine("old", {"a": record(False), "b": record(False), "d": record(False)},
                 {"a": record(False), "b": record(True)})  # OLD met b on a tile-crossing example
    _settle_pair(new, old, shrink=True)
    assert calls == {"new": set(), "old": {"a"}}


def test_the_search_judges_briefly_and_records_whole_verdicts(monkeypatch):
    # A candidate one level off (K3: std 0.5) on every value of its first image, in-process: each
    # example's verdict is brief in the search; what a group records is the whole comparison.
    import torch

    from kimi_oracle.oracle import judge

    def one_level_off(images, config):
        out = reference.preprocess(images, config)
        rows = int(out.grid_thws[0].prod())
        pixels = out.pixel_values.clone()
        pixels[:rows] += torch.tensor(1.0 / 127.5, dtype=torch.float32)
        return type(out)(pixels, out.grid_thws)

    briefs = []
    real = judge.compare

    def counting(*args, **kwargs):
        verdict = real(*args, **kwargs)
        briefs.append(bool(verdict.stats.get("brief")))
        return verdict

    monkeypatch.setattr(judge, "compare", counting)
    run = fuzz(Candidate("one_level_off", one_level_off), K3,
               FuzzOptions(examples=12, seed=3, shrink=False, diagnosis_share=None, vary_config=False))
    assert run.findings and sum(briefs) >= 10  # every generated example failed, briefly judged
    for finding in run.findings:
        assert finding.check == "pixel_mismatch"
        assert "brief" not in finding.stats
        # Hand count: every value of image 0 (its patch rows x 3 x 14 x 14) is 1 level off, the
        # other images' equal.
        t, h, w = finding.stats["per_image"][0]["grid_thw"]
        ones = t * h * w * 3 * 14 * 14
        assert finding.stats["histogram"]["1"] == finding.stats["differing"] == ones
        assert finding.stats["histogram"]["equal"] == finding.stats["values"] - ones
        worst = finding.stats["worst"]
        assert worst["image"] == 0 and {"patch", "channel", "resized_xy", "ulp_diff"} <= set(worst)
        assert worst["level_diff"] == pytest.approx(1.0)


def test_the_lockstep_partner_records_whole_verdicts_too():
    # fuzz_pair: OLD's verdict copies NEW's (brief) stats where their outputs are the same; what
    # OLD records is completed from its own results all the same.
    import torch

    from kimi_oracle.fuzzers.fuzzing import fuzz_pair

    def one_level_off(images, config):
        out = reference.preprocess(images, config)
        return type(out)(out.pixel_values + torch.tensor(1.0 / 127.5, dtype=torch.float32), out.grid_thws)

    new, old = fuzz_pair(Candidate("new", one_level_off), Candidate("old", one_level_off), K3,
                         FuzzOptions(examples=8, seed=3, shrink=False, diagnosis_share=None, vary_config=False))
    assert new.findings and old.findings
    for finding in new.findings + old.findings:
        assert "brief" not in finding.stats and finding.stats["histogram"]["1"] == finding.stats["values"]
