"""One draw (issue 24, item 2): the fuzz engine, the atheris harness and the planner fuzz draw
their cases through `inputs.draw`, so the same integers give the same case in every engine, and
no module under `kimi_oracle/fuzzers/` keeps a configuration or size draw of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers import planner_fuzz
from kimi_oracle.fuzzers.harnesses import PyFuzzedDataProvider, structured_case
from kimi_oracle.inputs.draw import (SIZE_CLASS_ORDER, ChoiceSource, DrawOptions, GeneratorSource, ProviderSource,
                                     RandomSource, config_thresholds, derive, draw_fuzz_case)
from kimi_oracle.inputs.plan_draw import draw_plan_config, draw_plan_sizes

K3 = PreprocessConfig.k3()
FUZZERS = Path(__file__).resolve().parents[2] / "kimi_oracle" / "fuzzers"


class Ranges:
    """Wraps a source and records each integer it returned with its range."""

    def __init__(self, source):
        self.source = source
        self.drawn: list[tuple[int, int, int]] = []

    def integer(self, lo, hi):
        value = self.source.integer(lo, hi)
        if lo != hi:
            self.drawn.append((lo, hi, value))
        return value

    def sub(self, function, *args):
        return function(self, *args)

    @property
    def values(self) -> list[int]:
        return [v for _, _, v in self.drawn]


class Lowest:
    """Every integer at its range's minimum (what an exhausted provider gives)."""

    def integer(self, lo, hi):
        return lo

    def sub(self, function, *args):
        return function(self, *args)


def provider_bytes(drawn, front: bytes = b"") -> bytes:
    """Bytes from which a FuzzedDataProvider's ConsumeIntInRange returns the `drawn` integers in
    order (LLVM's rule, by hand: an integer takes as many bytes from the END of the data as its
    range needs, the last byte being the most significant) after `front` is consumed from the front."""
    stream = b""
    for lo, hi, value in drawn:
        width = ((hi - lo).bit_length() + 7) // 8
        stream += (value - lo).to_bytes(width, "big")
    return front + stream[::-1]


def test_the_provider_encoding_reads_back():
    # The encoder above, checked on the provider itself with hand-picked ranges.
    data = provider_bytes([(0, 3, 2), (1, 300, 299), (0, 2**32 - 1, 123456789)], front=b"\x01")
    fdp = PyFuzzedDataProvider(data)
    assert fdp.ConsumeBool() is True
    assert [fdp.ConsumeIntInRange(0, 3), fdp.ConsumeIntInRange(1, 300), fdp.ConsumeIntInRange(0, 2**32 - 1)] \
        == [2, 299, 123456789]
    assert fdp.remaining_bytes() == 0


@pytest.mark.parametrize("profile", ["k3", "k3-small"])
def test_the_harness_and_the_fuzz_engine_draw_the_same_case_from_the_same_integers(profile):
    base = PreprocessConfig.profile(profile)
    options = DrawOptions()
    kinds = set()
    for i in range(150):
        recorded = Ranges(RandomSource(derive(7, i)))
        case = draw_fuzz_case(recorded, base, options)
        invariance = i % 2 == 1
        data = provider_bytes(recorded.drawn, front=bytes([invariance]))
        drawn, flag = structured_case(data, base)
        assert (drawn, flag) == (case, invariance), i
        assert draw_fuzz_case(ChoiceSource(recorded.values), base, options) == case
        kinds.update((p.mode, p.alpha) for p in case.images)
    assert len(kinds) > 15  # the cases compared are varied ones, not one simple case again and again


def test_the_harness_draws_the_fuzz_engines_weighting_and_bias():
    # The small-budget weighting and the fill-stage bias of `draw._config` reach the harness. By
    # hand from k3's lists (generators.config_choices: 8 budgets of at most 16 patches, 8 larger;
    # 3 fill stages): two thirds of the drawn budgets are at most 16 patches (1/3 from the whole
    # tiny list, 1/3 from its tail) where a uniform pick gives 1/2, and the forced resample only
    # lowers a budget, so at least 2/3 of the cases end with one; the base's fill stage gets half
    # of the draws where a uniform pick gives 1/3. An exhausted provider is the simplest case.
    empty, _ = structured_case(b"", K3)
    assert empty == draw_fuzz_case(Lowest(), K3)
    assert empty.config.fill_stage == K3.fill_stage and empty.config.in_patch_limit == 16
    rng = np.random.default_rng(1)
    configs = [structured_case(rng.integers(0, 256, 120, dtype=np.uint8).tobytes(), K3)[0].config
               for _ in range(800)]
    small = sum(c.in_patch_limit <= 16 for c in configs) / len(configs)
    base_stage = sum(c.fill_stage == K3.fill_stage for c in configs) / len(configs)
    assert small > 0.6, small
    assert 0.43 < base_stage < 0.57, base_stage


def test_the_harness_reaches_every_threshold_size():
    # The threshold class of the one draw holds the pass-order sizes: the harness reaches each by
    # its integers (one image, the last size class, the size's index).
    cfg = PreprocessConfig.k3_small()
    thresholds = config_thresholds(cfg, 64)
    for index in (0, len(thresholds) // 2, len(thresholds) - 1):
        drawn = [(1, 3, 1), (0, len(SIZE_CLASS_ORDER) - 1, len(SIZE_CLASS_ORDER) - 1),
                 (0, len(thresholds) - 1, index)]
        case, _ = structured_case(provider_bytes(drawn, front=b"\0"), cfg, vary=False)
        assert (case.images[0].width, case.images[0].height) == thresholds[index]


def test_the_planner_fuzz_draws_from_its_integers_alone():
    recorded = Ranges(GeneratorSource(np.random.default_rng([3, 0x91A7])))
    first = list(planner_fuzz.cases(K3, 700, seed=3, source=recorded))
    assert first == list(planner_fuzz.cases(K3, 700, seed=3))  # the default source is that generator
    assert first == list(planner_fuzz.cases(K3, 700, seed=3, source=ChoiceSource(recorded.values)))
    assert len({cfg for _, _, cfg, _ in first}) > 5
    assert len(first) == 700


def test_a_plan_draw_from_zeros_is_the_base():
    zeros = ChoiceSource([0] * 8)
    assert draw_plan_config(zeros, K3) is K3
    sizes = draw_plan_sizes(ChoiceSource([0] * 200), K3, 8)
    assert len(sizes) == 8 and all(w >= 1 and h >= 1 for w, h in sizes)


def test_generator_source_covers_its_range_and_checks_it():
    source = GeneratorSource(np.random.default_rng(0))
    seen = {source.integer(-1, 1) for _ in range(200)}
    assert seen == {-1, 0, 1}
    assert source.integer(5, 5) == 5
    with pytest.raises(ValueError):
        source.integer(0, 2**63)


def test_provider_source_takes_one_consume_per_integer():
    calls = []

    class Fdp:
        def ConsumeIntInRange(self, lo, hi):  # noqa: N802 - atheris' name
            calls.append((lo, hi))
            return hi

    source = ProviderSource(Fdp())
    assert [source.integer(0, 4), source.integer(2, 2), source.integer(-3, 9)] == [4, 2, 9]
    assert calls == [(0, 4), (-3, 9)]


# What a module with a draw of its own would use: the generators' lists of sizes and choices.
_DRAW_LISTS = {"config_choices", "special_sides", "tiny_sizes", "threshold_sizes", "ratio_long_side",
               "ratio_sizes", "budget_sizes", "side_cap_sizes", "alpha_patterns_for", "CHECKER_SQUARES"}


# The generators' lists live in these modules (generators.py re-exports them).
_GENERATOR_MODULES = {f"kimi_oracle.inputs.{m}" for m in ("generators", "sizes", "configs", "modes", "contents")}


def test_no_module_under_fuzzers_draws_a_config_or_size_of_its_own():
    offenders = []
    for path in sorted(FUZZERS.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module-level functions (a method such as `draw_options` draws nothing)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lstrip("_").startswith("draw"):
                offenders.append(f"{path.name}: defines {node.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "") in _GENERATOR_MODULES:
                offenders += [f"{path.name}: imports {a.name}" for a in node.names if a.name in _DRAW_LISTS]
    assert offenders == []
