"""Hypothesis strategies: built once (not per draw), and still weighted the way the fuzzer needs."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.inputs.strategies import case_params, configs, fuzz_cases


def _draw_cases(strategy, n: int, at_seed: int = 3) -> list:
    out: list = []

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(at_seed)
    @given(strategy)
    def collect(case):
        out.append(case)

    collect()
    return out


def test_the_same_arguments_give_the_same_strategy_object():
    base = PreprocessConfig.k3()
    assert fuzz_cases(base, max_side=48) is fuzz_cases(base, max_side=48)
    assert fuzz_cases(base, max_side=48, modes=["RGB", "P"]) is fuzz_cases(base, max_side=48, modes=("RGB", "P"))
    assert configs(base) is configs(base)
    assert case_params(base) is case_params(base)


def test_drawing_builds_no_new_composite_strategies(monkeypatch):
    # Decorating a function with @st.composite inspects its source (the cost that dominated fuzz
    # runs); drawing cases must not do it per example.
    strategy = fuzz_cases(PreprocessConfig.k3(), max_side=48)
    decorated = []
    real = st.composite

    def counting(f):
        decorated.append(f)
        return real(f)

    monkeypatch.setattr(st, "composite", counting)
    cases = _draw_cases(strategy, 60)
    assert len(cases) == 60
    assert decorated == []


def test_drawn_cases_keep_their_weights():
    base = PreprocessConfig.k3()
    cases = _draw_cases(fuzz_cases(base, max_side=48), 300)
    modes = Counter(p.mode for c in cases for p in c.images)
    # RGBA and palette images (special resize paths) are drawn more often than the rare modes
    # (RGB, the simplest choice, is over-represented by hypothesis' own bias towards it).
    rare = max(modes[m] for m in ("I", "F", "LAB", "PA", "I;16B"))
    assert modes["RGBA"] > 1.5 * rare and modes["P"] > 1.5 * rare
    stages = Counter(c.config.transparent_bg_fill_stage for c in cases)
    # The profile's own fill stage gets about half of the draws.
    assert stages[base.transparent_bg_fill_stage] >= 0.35 * len(cases)
    resampled = sum(
        1 for c in cases
        if (lambda p: (p.new_w, p.new_h) != (c.images[0].width, c.images[0].height))(
            plan(c.images[0].width, c.images[0].height, c.config))
    )
    # Many first images resample (small budgets, and a budget forced below their patch count).
    assert resampled >= 0.25 * len(cases)


class _Scripted:
    """A stand-in FuzzedDataProvider: its integers are `values` (then each range's minimum)."""

    def __init__(self, values):
        self.values = list(values)

    def ConsumeBool(self):  # noqa: N802 - atheris' name
        return False

    def ConsumeIntInRange(self, lo, hi):  # noqa: N802
        return self.values.pop(0) if self.values else lo


def test_both_engines_reach_the_pass_order_sizes():
    # The atheris harness once lacked the pass-order sizes that the strategies had: both now draw
    # threshold sizes from one list, and that list holds the sizes where Pillow's pass order flips.
    from hypothesis import find

    from kimi_oracle.fuzzers.harnesses import structured_case
    from kimi_oracle.inputs.draw import SIZE_CLASS_ORDER, config_thresholds
    from kimi_oracle.inputs.generators import pass_order_sizes, vary_config
    from kimi_oracle.inputs.strategies import sizes

    # A 4-patch budget (one the fuzzers draw) puts the boundary below the default 64-pixel side.
    cfg = vary_config(PreprocessConfig.k3_small(), in_patch_limit=4)
    wanted = set(pass_order_sizes(cfg, count=9, max_side=64))
    assert wanted
    thresholds = config_thresholds(cfg, 64)
    for size in sorted(wanted):
        # one image, the last size class (the threshold sizes), the size's index
        fdp = _Scripted([1, len(SIZE_CLASS_ORDER) - 1, thresholds.index(size)])
        case, _ = structured_case(b"", cfg, vary=False, fdp=fdp)
        assert (case.images[0].width, case.images[0].height) == size
    for size in sorted(wanted)[:3]:
        assert find(sizes(cfg, max_side=64), lambda s, size=size: s == size,
                    settings=settings(max_examples=5000, database=None, phases=[Phase.generate])) == size
