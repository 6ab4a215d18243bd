import dataclasses

import pytest
from checkpoint_model import spec_plan

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError, PlanError
from kimi_oracle.core.geometry import plan

K25 = PreprocessConfig.k25()
K3 = PreprocessConfig.k3()


def as_tuple(p):
    return p.new_w, p.new_h, p.pad_w, p.pad_h, p.grid_thw, p.num_tokens


# Worked examples from the spec (§2), by hand.
@pytest.mark.parametrize(
    "size, config, expected",
    [
        ((1, 1), K25, (1, 1, 27, 27, (1, 2, 2), 1)),
        ((29, 29), K25, (29, 29, 27, 27, (1, 4, 4), 4)),
        ((640, 480), K25, (640, 480, 4, 24, (1, 36, 46), 414)),
        ((3000, 3000), K25, (1794, 1794, 26, 26, (1, 130, 130), 4225)),
        ((8000, 100), K25, (7168, 89, 0, 23, (1, 8, 512), 1024)),
        ((100000, 10), K25, (7167, 1, 1, 27, (1, 2, 512), 256)),
        ((3597, 3597), K3, (3597, 3597, 15, 15, (1, 258, 258), 16641)),
    ],
)
def test_spec_worked_examples(size, config, expected):
    assert as_tuple(plan(*size, config)) == expected


def interesting_sizes():
    sides = set(range(1, 60))
    for k in range(1, 520):
        for base in (14 * k, 28 * k):
            sides.update({base - 1, base, base + 1})
    sides.update({2**k + d for k in range(1, 14) for d in (-1, 0, 1)})
    sides.update({97, 101, 1009, 4093, 7919, 7168, 7169, 100000})
    sides = sorted(s for s in sides if s > 0)
    sizes = set()
    for i, w in enumerate(sides):
        sizes.add((w, sides[(i * 7) % len(sides)]))
        sizes.add((w, 1))
        sizes.add((1, w))
        sizes.add((w, w))
    sizes.update({(640, 480), (1920, 1080), (4032, 3024), (7680, 4320), (100000, 10), (10, 100000)})
    return sorted(sizes)


@pytest.mark.parametrize("config", [K25, K3, PreprocessConfig.k3_small()], ids=["k25", "k3", "k3-small"])
def test_plan_agrees_with_spec_formula_and_properties(config):
    for w, h in interesting_sizes():
        p = plan(w, h, config)
        expected = spec_plan(w, h, 14, 2, config.in_patch_limit, 512)
        assert as_tuple(p) == expected, (w, h)
        _, gh, gw = p.grid_thw
        assert gh % 2 == 0 and gw % 2 == 0
        assert 0 <= p.pad_w < 28 and 0 <= p.pad_h < 28
        assert p.num_tokens == gh * gw // 4
        assert p.new_w <= w and p.new_h <= h
        assert p.new_w <= 7168 and p.new_h <= 7168


def test_budget_boundary():
    # K2.5: 16384 floored patches. 1792 = 128 * 14 exactly fits the budget: no resize.
    assert plan(1792, 1792, K25).new_w == 1792
    # One patch more per side exceeds it: scaled down.
    p = plan(1806, 1806, K25)
    assert p.new_w < 1806 and p.new_w == int(1806 * (16384 / (129 * 129)) ** 0.5)
    # 1805 still floors to 128 patches: not resized although it is above 1792 px.
    assert plan(1805, 1805, K25).new_w == 1805


def test_fixed_output_tokens_replaces_tokens_not_grid():
    cfg = dataclasses.replace(K25, fixed_output_tokens=64)
    p = plan(640, 480, cfg)
    assert p.num_tokens == 64 and p.grid_thw == (1, 36, 46)


def test_side_assert_raises_plan_error():
    # Side cap 3 patches (not a multiple of merge 2): 43 px -> 2 merged * 2 = 4 > 3.
    cfg = dataclasses.replace(K25, patch_limit_on_one_side=3)
    with pytest.raises(AssertionError):
        spec_plan(43, 10, 14, 2, K25.in_patch_limit, 3)
    with pytest.raises(PlanError, match="side assert"):
        plan(43, 10, cfg)
    # With fixed_output_tokens the checkpoint skips the assert.
    assert plan(43, 10, dataclasses.replace(cfg, fixed_output_tokens=1)).grid_thw == (1, 2, 4)


@pytest.mark.parametrize("w, h", [(0, 10), (10, 0), (-1, 5), (1.5, 4), ("8", 8), (True, 3), (None, 2)])
def test_bad_sizes(w, h):
    with pytest.raises(InputError):
        plan(w, h, K25)
