"""Every bug its own finding (issue 41, item 4): once a group's finding is explained, its causes
are applied to the reference and the search goes on there, so that each further cause is found,
shrunk and reported with its own minimal case.

The candidate (tests/mutants/torchvision_like.py: `torchvision_white_pad`) stacks three steps
written from torch's behaviour: torch's uint8 antialiased bicubic resize, a padding of 255 and
the float normalization (x/255 - mean)/std. Its shrunk 1x1 case shows the padding only (a 1x1
image is never resized); the resize and the normalization are met only on larger cases.
"""

from __future__ import annotations

import dataclasses
import json

from mutants.torchvision_like import torchvision_white_pad

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import plan
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, _Engine, fuzz, replay_case
from kimi_oracle.inputs.cases import FuzzCase
from kimi_oracle.inputs.params import CaseParams
from kimi_oracle.oracle.candidates import Candidate

OPTIONS = dict(examples=12, seed=3, invariance=False, max_images=1, max_side=40, modes=("RGB", "RGBA", "L", "P"))
PAD = "pad/pad-white"
RESIZE = "resample-float/uint8-aa"
NORMALIZE = "normalize-float/(x/255-mean)/std"


def _explained(finding):
    att = finding.attribution or {}
    return list(att.get("variants") or []) if att.get("explanation") == "explained" else []


def _candidate():
    return Candidate("torchvision_white_pad", torchvision_white_pad)


def test_three_stacked_causes_are_each_their_own_finding(tmp_path):
    run = fuzz(_candidate(), PreprocessConfig.k25(), FuzzOptions(**OPTIONS), out_dir=tmp_path)
    pixel = [f for f in run.findings if f.check == "pixel_mismatch"]
    # each cause named alone by a finding of its own (its own minimal case)
    alone = {tuple(_explained(f)) for f in pixel}
    assert {(PAD,), (RESIZE,), (NORMALIZE,)} <= alone, [(f.key, _explained(f)) for f in pixel]
    assert run.summary()["pipeline"] == {"pad": "pad-white", "resample-float": "uint8-aa",
                                         "normalize-float": "(x/255-mean)/std"}
    keys = {f.key for f in run.findings}
    peeled = [f for f in pixel if f.extra.get("after")]
    assert peeled
    for f in peeled:
        after = f.extra["after"]
        # judged against the reference with the causes of the group it was peeled from applied
        assert f.extra["peeled_from"] in keys and f.key.endswith("{after " + "+".join(after) + "}")
        assert f.message.startswith("with " + ", ".join(after) + " applied to the reference")
        assert not set(after) & set(_explained(f))
        # its case.json replays against that same reference: the same residual, not the padding's
        case = json.loads((f.path / "case.json").read_text())
        assert case["assume"] == after and case["after"] == after
        verdict, _, _, notes = replay_case(case, f.path, _candidate())
        assert not verdict.ok and verdict.stats["max_level_diff"] == f.stats["max_level_diff"]
        assert any(", ".join(after) in n for n in notes)
    # the resize is named on a case the resize reaches (the 1x1 padding case never is resized)
    resize = next(f for f in peeled if _explained(f) == [RESIZE])
    assert resize.extra["after"] == [PAD] and max(p["width"] for p in resize.params) > 1
    # the normalization, once both are applied, below a level (float rounding)
    norm = next(f for f in peeled if _explained(f) == [NORMALIZE])
    assert norm.extra["after"] == [PAD, RESIZE] and norm.max_levels < 1


def test_without_peeling_the_resize_stays_masked():
    run = fuzz(_candidate(), PreprocessConfig.k25(), FuzzOptions(**OPTIONS, peel=False))
    pixel = [f for f in run.findings if f.check == "pixel_mismatch"]
    assert pixel and not any(f.extra.get("after") for f in pixel)
    assert not any(_explained(f) == [RESIZE] for f in pixel)


def test_a_later_example_of_a_published_group_is_judged_with_its_causes_applied():
    # a budget's later search: an example of an already published group (the padding's, met
    # on a 1x1 case) is judged again with that group's causes applied; what still differs (on a
    # resized image: the uint8 resize) is recorded under the peeled group, with those causes
    engine = _Engine(_candidate(), PreprocessConfig.k25(), FuzzOptions(**OPTIONS), None, None)
    group = "pixel_mismatch[L]<levels>"
    # 37x29 under a budget of one patch: resized
    config = dataclasses.replace(engine.config, in_patch_limit=1)
    assert plan(37, 29, config).new_w < 37
    case = FuzzCase(config, (CaseParams(37, 29, "L", "opaque", "noise", 5),))
    images, verdict = engine.judge(case, False)
    assert not verdict.ok and engine.group_of(verdict, images) == group
    engine.published.add(group)
    engine.note(case, (1, 2, 3), images, verdict, False)
    assert engine.records == {}  # (not peeled: counted in its published group, nothing new)
    engine.peeled[group] = (("pad", "pad-white"),)
    engine.note(case, (1, 2, 3), images, verdict, False)
    derived = group.replace("<levels>", "<sub-level>") + "{after pad/pad-white}"
    assert list(engine.records) == [derived]
    record = engine.records[derived]
    assert record.after == (("pad", "pad-white"),) and record.peeled_from == group
    assert 0 < record.verdict.stats["max_level_diff"] < 2  # the resize's rounding, not the padding's 255


def test_the_gate_pair_does_not_peel():
    options = dataclasses.replace(FuzzOptions(**OPTIONS))
    from kimi_oracle.fuzzers.fuzzing import fuzz_pair
    from mutants.torchvision_like import torchvision_like

    new, old = fuzz_pair(_candidate(), Candidate("torchvision_like", torchvision_like), PreprocessConfig.k25(),
                         dataclasses.replace(options, examples=10))
    assert not any(f.extra.get("after") for f in new.findings + old.findings)


def _verdict(expected, actual):
    import torch

    from kimi_oracle.core.result import PreprocessResult
    from kimi_oracle.oracle.checks import Verdict

    def result(values):
        return PreprocessResult(torch.tensor(values, dtype=torch.float32).reshape(1, 1, 1, -1),
                                torch.tensor([[1, 1, 1]]))

    e, a = torch.tensor(expected, dtype=torch.float32), torch.tensor(actual, dtype=torch.float32)
    return Verdict("pixel_mismatch", "", {"mean_level_diff": float((e - a).abs().mean()) * 255},
                   result(expected), result(actual))


def test_causes_that_move_most_values_they_change_away_are_not_peeled():
    from kimi_oracle.fuzzers.peel import closer

    got = [0.7, 0.7, 0.7, 0.7, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    before = _verdict([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], got)
    # A clip at 0.7 of every value: 4 values right, 6 wrong by 0.3 (totals 1.2 -> 1.8: farther).
    assert not closer(before, _verdict([0.7] * 10, got))
    # A clip that makes 4 right and moves 1 of the 5 it changes away: 4.0*0.3 - 0.1 less in all,
    # but 4 of 5 (80 %) moved towards the candidate is under 9 of 10.
    assert not closer(before, _verdict([0.7, 0.7, 0.7, 0.7, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0], got))
    # A cause that moves every value it changes towards the candidate (two of four only part way).
    assert closer(before, _verdict([0.7, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], got))
    # One it does not reach leaves the reference as it was.
    assert closer(before, _verdict([1.0] * 10, got))
