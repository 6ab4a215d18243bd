"""The oracle's checks, their order, the tolerance policies and the location report."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.inputs.generators import CaseParams, make_image
from kimi_oracle.oracle.checks import Tolerance, ToleranceError, check_invariance, compare, invariance_plan
from kimi_oracle.oracle.checks.invariance import check_invariance_lockstep
from kimi_oracle.pipelines import reference

CFG = PreprocessConfig.k3_small()


def _images():
    # 90x60 under a 16-patch budget: 6*4 = 24 floored patches -> resampled to 73x48.
    return [make_image(CaseParams(90, 60, "RGBA", "gradient", "noise", seed=1)),
            make_image(CaseParams(20, 30, "RGB", content="gradient", seed=2))]


@pytest.fixture(scope="module")
def expected():
    return reference.preprocess(_images(), CFG)


def _clone(r: PreprocessResult) -> PreprocessResult:
    return PreprocessResult(r.pixel_values.clone(), r.grid_thws.clone())


def _lut_value(level: int, channel: int = 0) -> float:
    return float(reference.normalization_lut(CFG)[channel, level])


def test_identical_results_pass(expected):
    v = compare(expected, _clone(expected), CFG, sizes=[i.size for i in _images()])
    assert v.ok and v.check is None
    assert v.stats["differing"] == 0 and v.stats["max_level_diff"] == 0


def test_grid_mismatch_is_named_first_even_when_everything_else_is_wrong(expected):
    bad = PreprocessResult(expected.pixel_values[:-3].double(), expected.grid_thws.clone().to(torch.int32))
    bad.grid_thws[1, 2] += 2
    v = compare(expected, bad, CFG)
    assert v.check == "grid_mismatch"
    assert v.stats["mismatched"][0]["image"] == 1
    assert "image 1" in v.message


def test_grid_count_and_shape(expected):
    assert compare(expected, (expected.pixel_values, expected.grid_thws[:1]), CFG).check == "grid_mismatch"
    assert compare(expected, (expected.pixel_values, expected.grid_thws.reshape(-1)), CFG).check == "grid_mismatch"


def test_feature_length_before_shape(expected):
    v = compare(expected, (expected.pixel_values[:-1].double(), expected.grid_thws), CFG)
    assert v.check == "feature_length"
    n = expected.pixel_values.shape[0]
    assert v.stats == {**v.stats, "advertised_rows": n, "produced_rows": n - 1}


@pytest.mark.parametrize("change", ["float64", "channels_last", "grid_int32"])
def test_shape_dtype(expected, change):
    pv, grids = expected.pixel_values, expected.grid_thws
    if change == "float64":
        pv = pv.double()
    elif change == "channels_last":
        pv = pv.permute(0, 2, 3, 1).contiguous()
    else:
        grids = grids.to(torch.int32)
    v = compare(expected, (pv, grids), CFG)
    assert v.check == "shape_dtype"


def test_exact_and_levels_policies(expected):
    act = _clone(expected)
    # Find a value at level 100 in channel 0 and move it to level 101, then 102.
    target = _lut_value(100)
    idx = (expected.pixel_values[:, 0] == target).nonzero()[0].tolist()
    row, py, px = idx
    act.pixel_values[row, 0, py, px] = _lut_value(101)
    assert compare(expected, act, CFG).check == "pixel_mismatch"
    assert compare(expected, act, CFG, "levels:0").check == "pixel_mismatch"
    v1 = compare(expected, act, CFG, "levels:1")
    assert v1.ok and v1.stats["differing"] == 1 and v1.stats["max_level_diff"] == pytest.approx(1.0)
    act.pixel_values[row, 0, py, px] = _lut_value(102)
    v = compare(expected, act, CFG, "levels:1")
    assert v.check == "pixel_mismatch"
    assert v.stats["max_level_diff"] == pytest.approx(2.0)
    assert v.stats["worst"]["expected_level"] == pytest.approx(100)
    assert v.stats["worst"]["actual_level"] == pytest.approx(102)


def test_one_ulp_fails_exact_only(expected):
    act = _clone(expected)
    flat = act.pixel_values.view(-1).view(torch.int32)
    flat[5] += 1
    v = compare(expected, act, CFG)
    assert v.check == "pixel_mismatch" and v.stats["max_ulp"] == 1
    assert compare(expected, act, CFG, "levels:0").ok


def test_negative_zero_is_a_bitwise_difference():
    cfg = dataclasses.replace(CFG, image_mean=(0.0, 0.0, 0.0), image_std=(1.0, 1.0, 1.0))
    img = make_image(CaseParams(14, 14, "RGB", content="flat", seed=0))
    exp = reference.preprocess([img], cfg)
    act = _clone(exp)
    zeros = act.pixel_values == 0.0  # the padding is level 0 = +0.0
    assert zeros.any()
    act.pixel_values[zeros] = -0.0
    assert compare(exp, act, cfg).check == "pixel_mismatch"
    assert compare(exp, act, cfg, "levels:0").ok


def test_nan_fails_every_policy(expected):
    act = _clone(expected)
    act.pixel_values[0, 1, 2, 3] = float("nan")
    for policy in ("exact", "levels:255", "bf16"):
        v = compare(expected, act, CFG, policy)
        assert v.check == "pixel_mismatch", policy
        assert v.stats["non_finite"] == 1


def _bf16_truncate(x: torch.Tensor) -> torch.Tensor:
    bits = x.contiguous().view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32)


def test_bf16_policy(expected):
    rne = expected.pixel_values.to(torch.bfloat16)
    assert compare(expected, (rne, expected.grid_thws), CFG, "bf16").ok
    assert compare(expected, (rne.float(), expected.grid_thws), CFG, "bf16").ok
    # bf16 output is a dtype error under the exact policy, a value error when widened back.
    assert compare(expected, (rne, expected.grid_thws), CFG).check == "shape_dtype"
    assert compare(expected, (rne.float(), expected.grid_thws), CFG).check == "pixel_mismatch"
    # Truncation instead of round-to-nearest-even differs somewhere.
    trunc = _bf16_truncate(expected.pixel_values)
    assert not torch.equal(trunc, rne.float())
    assert compare(expected, (trunc, expected.grid_thws), CFG, "bf16").check == "pixel_mismatch"


def test_tolerance_parsing():
    assert str(Tolerance.parse("levels:3")) == "levels:3"
    assert Tolerance.parse("levels:0.5").levels == 0.5
    assert str(Tolerance.parse(" EXACT ")) == "exact"
    for bad in ("levels:", "levels:-1", "levels:x", "fuzzy", "levels:nan"):
        with pytest.raises(ToleranceError):
            Tolerance.parse(bad)


def test_location_maps_back_to_the_original_image(expected):
    images = _images()
    act = _clone(expected)
    # Image 0 (90x60) is resized to 73x48: change resized pixel (x=40, y=20), channel B.
    gw = int(expected.grid_thws[0, 2])
    x, y, p = 40, 20, CFG.patch_size
    row = (y // p) * gw + x // p
    act.pixel_values[row, 2, y % p, x % p] += 0.5
    v = compare(expected, act, CFG, sizes=[i.size for i in images])
    loc = v.stats["worst"]
    assert loc["image"] == 0 and loc["patch"] == row and loc["channel"] == "B"
    assert loc["resized_xy"] == [x, y] and loc["in_padding"] is False
    (x0, x1), (y0, y1) = loc["original_xy_range"]
    # The centre of resized pixel 40 maps to (40.5 * 90 / 73) in the original.
    assert x0 <= 40.5 * 90 / 73 <= x1 + 1 and y0 <= 20.5 * 60 / 48 <= y1 + 1
    assert x1 - x0 <= 6 and y1 - y0 <= 6
    assert "from original" in v.message


def test_location_in_the_padding(expected):
    images = _images()
    act = _clone(expected)
    # Image 1 is 20x30, padded to 28x56: pixel (25, 40) is padding.
    start = int(expected.grid_thws[0].prod())
    gw = int(expected.grid_thws[1, 2])
    x, y, p = 25, 40, CFG.patch_size
    act.pixel_values[start + (y // p) * gw + x // p, 0, y % p, x % p] = _lut_value(200)
    v = compare(expected, act, CFG, sizes=[i.size for i in images])
    assert v.stats["worst"]["image"] == 1 and v.stats["worst"]["in_padding"] is True
    assert v.stats["per_image"][0]["failing"] == 0 and v.stats["per_image"][1]["failing"] == 1
    assert "padding" in v.message


# ---------------------------------------------------------------------------------------------
# invariances


def _ref(batch):
    return reference.preprocess(batch, CFG)


def _three():
    return [make_image(CaseParams(w, h, "RGB", content="noise", seed=s)) for w, h, s in ((30, 20, 1), (70, 70, 2), (5, 50, 3))]


def test_reference_is_invariant():
    assert check_invariance(_ref, _three()).ok


def test_invariance_plan_is_complete():
    kinds = [k for k, _ in invariance_plan(3)]
    assert kinds.count("batch_vs_single") == 3 and kinds.count("subset") == 3
    assert "determinism" in kinds and "permutation" in kinds
    assert [k for k, _ in invariance_plan(1)] == ["determinism"]


def test_permutation_bug():
    def sorted_by_area(batch):
        # Processes images largest first and forgets to restore the order.
        order = sorted(range(len(batch)), key=lambda i: -batch[i].width * batch[i].height)
        return _ref([batch[i] for i in order])

    images = sorted(_three(), key=lambda im: -im.width * im.height)  # already sorted: full batch is right
    v = check_invariance(sorted_by_area, images)
    assert v.check == "invariance" and v.stats["kind"] in ("subset", "permutation")


def _local_positions(batch):
    out = _ref(batch)
    grids = out.grid_thws.clone()
    # The first image's grid is looked up by a position that is only right for full batches.
    if len(batch) < 3:
        grids[0] = torch.tensor([1, 2, 2])
    return PreprocessResult(out.pixel_values, grids)


def test_local_grid_table_bug():
    v = check_invariance(_local_positions, _three())
    assert v.check == "invariance" and v.stats["kind"] == "batch_vs_single"


def test_nondeterminism():
    calls = []

    def flaky(batch):
        out = _ref(batch)
        calls.append(1)
        if len(calls) % 2 == 0:
            out.pixel_values.view(-1)[0] += 1.0
        return out

    v = check_invariance(flaky, _three())
    assert v.check == "invariance" and v.stats["kind"] == "determinism"


class _Logged:
    """A candidate in "another process": its call is begun on `start` and answered on `result`,
    both logged, so that the order of starts and answers can be read back."""

    def __init__(self, name, fn, log):
        self.name, self.fn, self.log = name, fn, log

    def start(self, batch):
        self.log.append(("start", self.name, len(batch)))
        fn, log, name = self.fn, self.log, self.name

        class Call:
            def result(self):
                log.append(("answer", name, len(batch)))
                return fn(batch)

            def wait(self):  # (an executor's call: its answer waited for without raising)
                log.append(("waited", name, len(batch)))

        return Call()


def test_lockstep_invariance_gives_each_candidates_own_verdict():
    def raising(batch):
        if len(batch) == 1:
            raise KeyError("one image")
        return _ref(batch)

    log = []
    images = _three()
    good, bad, crash = (_Logged("good", _ref, log), _Logged("bad", _local_positions, log),
                        _Logged("crash", raising, log))
    outcomes = check_invariance_lockstep([good.start, bad.start, crash.start], images, captured=(KeyError,))
    assert outcomes[0].ok and outcomes[0].message == check_invariance(_ref, images).message
    alone = check_invariance(_local_positions, images)
    assert (outcomes[1].check, outcomes[1].stats["kind"], outcomes[1].message) == (
        alone.check, alone.stats["kind"], alone.message)
    assert isinstance(outcomes[2], KeyError)
    plan = [len(images)] + [len(idx) for _, idx in invariance_plan(len(images))]
    starts = [e for e in log if e[:2] == ("start", "good")]
    assert [n for _, _, n in starts] == plan  # every call of the plan, once
    # Each candidate's next call is begun before any answer of the step before is compared:
    # the first answers come only after all three first calls were started.
    first_answer = next(k for k, e in enumerate(log) if e[0] == "answer")
    assert {e[1] for e in log[:first_answer]} == {"good", "bad", "crash"}
    # The failing candidates stop: "bad" fails its first single image (its third call: the next
    # one is begun before that answer is compared); "crash" raises there, which is known before
    # its next call would begin.
    assert len([e for e in log if e[:2] == ("start", "bad")]) == 4
    assert len([e for e in log if e[:2] == ("start", "crash")]) == 3
    # The call "bad" began past its failure is waited for before the check returns (not by the
    # next request to that candidate); no other call is.
    assert [e for e in log if e[0] == "waited"] == [("waited", "bad", 1)] and log[-1][0] == "waited"
    assert log[-2] == ("answer", "good", len(images))  # the last answer: the plan's last call


def test_same_output_and_digest_mean_bit_identical():
    # checks.same_output and checks.update_digest: the gate's "the same output" and a fuzz run's
    # outcome digest. Bit-identical means the bytes: -0.0 is not 0.0, a NaN equals its own payload.
    import hashlib

    from kimi_oracle.oracle.checks import same_output, update_digest

    grids = torch.tensor([[1, 1, 2]])

    def result(values):
        return PreprocessResult(torch.tensor(values, dtype=torch.float32).reshape(2, 1, 1, 1), grids.clone())

    def digest(r):
        h = hashlib.sha256()
        update_digest(h, r)
        return h.hexdigest()

    nan = float("nan")
    pairs = [([0.5, 1.0], [0.5, 1.0], True), ([0.0, 1.0], [-0.0, 1.0], False), ([nan, 1.0], [nan, 1.0], True),
             ([0.5, 1.0], [0.5, 1.5], False)]
    for a, b, same in pairs:
        assert same_output(result(a), result(b)) is same
        assert (digest(result(a)) == digest(result(b))) is same
    other_grid = PreprocessResult(result([0.5, 1.0]).pixel_values, torch.tensor([[1, 2, 1]]))
    assert not same_output(result([0.5, 1.0]), other_grid)
    as_bf16 = PreprocessResult(result([0.5, 1.0]).pixel_values.to(torch.bfloat16), grids.clone())
    assert not same_output(result([0.5, 1.0]), as_bf16) and same_output(as_bf16, as_bf16)
    assert not same_output(result([0.5, 1.0]), None)


def _second_image_off_by_three_levels(expected):
    # The second image's first value, in channel 0 (a level of the gradient): 3 levels up, and
    # one value of the first image 1 level up (the second image is the worse one).
    act = _clone(expected)
    first_rows = int(expected.grid_thws[0].prod())
    level = round((float(expected.pixel_values[first_rows, 0, 0, 0]) + 1.0) * 127.5)
    act.pixel_values[first_rows, 0, 0, 0] = _lut_value(level + 3 if level < 252 else level - 3)
    level0 = round((float(expected.pixel_values[0, 0, 0, 0]) + 1.0) * 127.5)
    act.pixel_values[0, 0, 0, 0] = _lut_value(level0 + 1 if level0 < 255 else level0 - 1)
    return act


def test_a_brief_verdict_stops_at_its_group_and_full_verdict_completes_it(expected):
    from kimi_oracle.oracle.checks import full_verdict
    from kimi_oracle.oracle.grouping import finding_key

    act = _second_image_off_by_three_levels(expected)
    images = _images()
    sizes = [i.size for i in images]
    brief = compare(expected, act, CFG, sizes=sizes, brief=True)
    whole = compare(expected, act, CFG, sizes=sizes)
    assert brief.check == whole.check == "pixel_mismatch"
    # Hand count: two values differ, the worst (3 levels) in image 1.
    assert brief.stats["differing"] == brief.stats["failing"] == 2
    assert brief.stats["max_level_diff"] == pytest.approx(3.0)
    assert brief.stats["worst"] == {"image": 1} and brief.stats["brief"] is True
    assert "histogram" not in brief.stats and "max_ulp" not in brief.stats
    assert finding_key(brief.check, brief.stats, images) == finding_key(whole.check, whole.stats, images)
    completed = full_verdict(brief, CFG, "exact", sizes)
    assert completed.to_dict() == whole.to_dict()
    assert completed.stats["histogram"]["1"] == 1 and completed.stats["histogram"]["3-5"] == 1
    assert full_verdict(whole, CFG, "exact", sizes) is whole


def test_a_brief_verdict_that_passes_is_the_whole_verdict(expected):
    act = _clone(expected)
    flat = act.pixel_values.view(-1).view(torch.int32)
    flat[5] += 1  # one ulp: differs, passes levels:0
    sizes = [i.size for i in _images()]
    brief = compare(expected, act, CFG, "levels:0", sizes=sizes, brief=True)
    assert brief.ok and brief.stats["max_ulp"] == 1
    assert brief.to_dict() == compare(expected, act, CFG, "levels:0", sizes=sizes).to_dict()
