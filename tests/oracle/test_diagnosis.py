"""Diagnosis: the catalogue of named deviations, and the attribution of pixel differences.

Expected root causes come from what each candidate was planted to do (`Mutant.root_causes` in
tests/mutants/planted.py, the eager path's documented divergences), never from running the
attribution.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from mutants.planted import BY_NAME, MUTANTS

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.inputs.generators import MODES, CaseParams, alpha_patterns_for, make_image, vary_config
from kimi_oracle.oracle import diagnosis
from kimi_oracle.oracle.checks import levels_of
from kimi_oracle.oracle.diagnosis import CATALOGUE, attribute, level_summary
from kimi_oracle.oracle.diagnosis.catalogue import ANY_LEVELS, ONE_LEVEL_OR_MORE, UNDER_ONE_LEVEL
from kimi_oracle.pipelines import eager, reference
from kimi_oracle.pipelines.reference import CHECKPOINT, Steps

K3 = PreprocessConfig.k3()  # chessboard 8, grey 180, fill after the resize
# 61x45 has 4 x 3 = 12 floored patches: a budget of 6 makes it resample (to 43x31).
K3_RESIZING = dataclasses.replace(K3, in_patch_limit=6)
CLIP = dataclasses.replace(K3, image_mean=(0.48145466, 0.4578275, 0.40821073),
                           image_std=(0.26862954, 0.26130258, 0.27577711))

# The ids of issue 16 (the request: before every step) and of issue 10, in their order; issue 16's
# flatten-white sits after fill-stage and before transparency-key (exact ties go by this order),
# issue 25's alpha-dropped after transparency-key (a keyed image's key ignored is the
# same output as its alpha dropped: the more specific id wins the tie).
# The catalogue must hold them in this order; tests over every root cause iterate over the
# catalogue's own ids (`diagnosis.ROOT_CAUSE_IDS`), so a new root cause needs no edit here.
ISSUE_IDS = ["exif-orientation", "animation-frame", "decoder", "normalize-float", "resample-float", "alpha-straight",
             "palette-bicubic", "convert-before-resize", "fill-stage", "flatten-white", "transparency-key", "alpha-dropped",
             "composite-rounding", "background", "pad", "patch-order", "unexplained"]


def image(mode="RGB", w=61, h=45, alpha="opaque", content="noise", seed=1):
    return make_image(CaseParams(w, h, mode, alpha, content, seed))


def run(images, config, steps=CHECKPOINT):
    return reference.preprocess(images, config, steps=steps)


def per_image_differs(a: PreprocessResult, b: PreprocessResult) -> list[bool]:
    offsets = a.patch_offsets()
    return [not torch.equal(a.pixel_values[lo:hi], b.pixel_values[lo:hi]) for lo, hi in zip(offsets, offsets[1:])]


# ---------------------------------------------------------------------------------------------
# the reference as steps


def _same_but_new(fn):
    # An equal function that is not the checkpoint's object: forces the step-by-step path.
    return lambda *args: fn(*args)


BY_PARTS = Steps(
    resample=_same_but_new(reference.pillow_resample),
    convert=_same_but_new(reference.fill_conversion),
    background=_same_but_new(reference.background),
    composite=_same_but_new(reference.blend),
    pad=_same_but_new(reference.pad_bottom_right),
    patchify=_same_but_new(reference.patches_chw),
)


@pytest.mark.parametrize("stage", ["after_resize", "before_resize"])
@pytest.mark.parametrize("mode", MODES)
def test_steps_taken_apart_give_the_checkpoints_bytes(mode, stage):
    # The fused fast path (Pillow's own resize, table patchify) and the step-by-step path that
    # variants plug into agree bit for bit on every mode and alpha pattern.
    config = dataclasses.replace(K3_RESIZING, transparent_bg_fill_stage=stage)
    images = [image(mode, 61, 45, alpha, seed=i) for i, alpha in enumerate(alpha_patterns_for(mode))]
    images.append(image(mode, 5, 3))  # not resampled
    want = run(images, config)
    got = run(images, config, BY_PARTS)
    assert torch.equal(got.pixel_values, want.pixel_values)
    assert torch.equal(got.grid_thws, want.grid_thws)


def test_steps_taken_apart_without_background():
    images = [image(m, 61, 45, "opaque", seed=3) for m in MODES]
    config = dataclasses.replace(PreprocessConfig.k25(), in_patch_limit=6)
    assert torch.equal(run(images, config, BY_PARTS).pixel_values, run(images, config).pixel_values)


# ---------------------------------------------------------------------------------------------
# the catalogue


def test_catalogue_ids_are_the_issues():
    assert list(diagnosis.ROOT_CAUSE_IDS) == [c.id for c in CATALOGUE] + [diagnosis.UNEXPLAINED]
    assert [i for i in diagnosis.ROOT_CAUSE_IDS if i in ISSUE_IDS] == ISSUE_IDS  # all of them, in order
    assert len(set(diagnosis.ROOT_CAUSE_IDS)) == len(diagnosis.ROOT_CAUSE_IDS)


@pytest.mark.parametrize("root_cause", diagnosis.ROOT_CAUSE_IDS)
def test_every_id_has_a_one_sentence_meaning(root_cause):
    text = diagnosis.meaning(root_cause)
    assert text and "\n" not in text and not text.endswith(".")


# For each root cause: an input on which each of its variants must change the output, and the
# configs, from the catalogue entry itself (`RootCause.suitable`: chosen from what the step does,
# a resize for the resample, alpha for the composite...), so a new root cause needs no edit here.
def _suitable_cases(cause):
    s = cause.suitable
    images = [make_image(CaseParams(**fields)) for fields in s.images]
    configs = [vary_config(PreprocessConfig.profile(s.profile), **c) for c in s.configs]
    return [(cause.id, v.name, images, config) for config in configs for v in cause.variants(config)]


VARIANT_CASES = [case for cause in CATALOGUE if cause.suitable is not None for case in _suitable_cases(cause)]
LEVEL_RULES = {ONE_LEVEL_OR_MORE, UNDER_ONE_LEVEL, ANY_LEVELS}


def test_suitable_inputs_cover_the_catalogue():
    missing = [c.id for c in CATALOGUE if c.suitable is None or not c.suitable.images or not c.suitable.configs]
    assert not missing, f"root causes without a suitable input: {missing}"
    for cause in CATALOGUE:
        assert cause.suitable.levels in LEVEL_RULES, cause.id
        assert any(c == cause.id for c, *_ in VARIANT_CASES), f"{cause.id}: no variant under its suitable configs"


@pytest.mark.parametrize("cause_id, variant, images, config", VARIANT_CASES,
                         ids=[f"{c}:{v}:{cfg.transparent_bg_config.pattern}" for c, v, _, cfg in VARIANT_CASES])
def test_variant_differs_from_the_reference(cause_id, variant, images, config):
    suitable = diagnosis.BY_ID[cause_id].suitable
    want = run(images, config)
    got = run(images, config, diagnosis.steps_for(config, [(cause_id, variant)]))
    assert got.grid_thws.tolist() == want.grid_thws.tolist()
    differs = per_image_differs(want, got)
    if suitable.each_image:
        assert all(differs), f"{variant}: same output for modes {[m.mode for m, d in zip(images, differs) if not d]}"
    else:
        assert any(differs)
    levels = level_summary(want, got, config)
    if suitable.levels == UNDER_ONE_LEVEL:
        assert 0 < levels.max_levels < 1
    elif suitable.levels == ONE_LEVEL_OR_MORE:
        # one level or more (torch's uint8 path is a port of Pillow's: one level apart, which
        # the float32 levels measure as 0.99999994)
        assert levels.max_levels > 1 - 1e-6


def test_normalize_float_matches_a_plain_torch_formula():
    # The engine's formula written out here (eager.py's): the x*scale+bias variant is it.
    cfg = CLIP
    u8 = np.random.default_rng(0).integers(0, 256, (28, 28, 3), dtype=np.uint8)
    x = torch.from_numpy(u8.transpose(2, 0, 1).copy()).float()
    mean = torch.tensor(cfg.image_mean).view(3, 1, 1)
    std = torch.tensor(cfg.image_std).view(3, 1, 1)
    want = (x * (1.0 / (255.0 * std)) + (-mean / std)).permute(1, 2, 0).reshape(1, 2, 14, 2, 14, 3)
    want = want.permute(0, 1, 3, 5, 2, 4).reshape(4, 3, 14, 14)
    got = run([u8], cfg, diagnosis.steps_for(cfg, [("normalize-float", "x*scale+bias")])).pixel_values
    assert torch.equal(got, want)


# Request-shaped images (files with EXIF, animations, JPEG, transparency in a file).
REQUEST_TOUCH_CASES = [CaseParams(50, 30, container="png", orientation=6), CaseParams(40, 30, "P", container="gif", frames=3),
                       CaseParams(45, 31, container="jpeg", orientation=1), CaseParams(40, 40, "RGBA", "gradient",
                                                                                       container="webp", frames=2)]


def _touch_cases():
    for mode in MODES:
        for alpha in alpha_patterns_for(mode)[:3]:
            for w, h in ((61, 45), (28, 28)):
                yield mode, alpha, w, h


@pytest.mark.parametrize("config", [K3_RESIZING, dataclasses.replace(K3_RESIZING, transparent_bg_fill_stage="before_resize"),
                                    dataclasses.replace(PreprocessConfig.k25(), in_patch_limit=6)],
                         ids=["k3-after", "k3-before", "k25"])
def test_touches_is_false_only_where_no_variant_changes_the_image(config):
    # Attribution skips an image a root cause does not touch: that must never hide a change.
    # Checked on top of the checkpoint and of a few other variants already applied.
    bases = [CHECKPOINT,
             diagnosis.steps_for(config, [("pad", "pad-background"), ("resample-float", "torch-bicubic-antialias"),
                                          ("transparency-key", "key-honoured")])]
    checked = 0
    cases = [CaseParams(w, h, mode, alpha, "noise", 5) for mode, alpha, w, h in _touch_cases()] + REQUEST_TOUCH_CASES
    for params in cases:
        img = make_image(params)
        p = plan(img.width, img.height, config)
        for base in bases:
            want = reference.preprocess_image(img, config, steps=base)[0]
            for cause in CATALOGUE:
                if cause.touches(img, p, config, base):
                    continue
                for variant in cause.variants(config):
                    trial = variant.apply(base)
                    if trial.prepared(img) is img and trial.replace(prepare=()) == base.replace(prepare=()):
                        continue  # a request step that leaves this image as it is: nothing else changed
                    got = reference.preprocess_image(img, config, steps=trial)[0]
                    assert torch.equal(got, want), f"{cause.id}:{variant.name} changes {mode} {alpha} {w}x{h}"
                    checked += 1
    assert checked > 100


# ---------------------------------------------------------------------------------------------
# attribution on planted candidates


# Each planted pixel mutant names the input on which its deviation shows (its own, and only its
# own): `Mutant.case` in tests/mutants/planted.py, next to the mutant.
PLANTED = [m.name for m in MUTANTS if m.root_causes]


def test_every_planted_pixel_deviation_has_a_case():
    assert [m.name for m in MUTANTS if m.root_causes and m.case is None] == []
    assert all(set(m.root_causes) <= set(diagnosis.ROOT_CAUSE_IDS) for m in MUTANTS)
    assert any(len(m.root_causes) >= 2 for m in MUTANTS)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mutant_gets_its_own_root_causes(name):
    mutant = BY_NAME[name]
    params, config = mutant.case
    images = [make_image(p) for p in params]
    out = mutant(images, config)
    result = attribute(images, config, out)
    assert set(result.root_causes) == set(mutant.root_causes), result.explained
    assert result.fully_explained and result.residual_max_levels == 0
    assert result.differing > 0 and result.max_levels > 0
    if all(diagnosis.BY_ID[c].suitable.levels == UNDER_ONE_LEVEL for c in mutant.root_causes):
        assert result.max_levels < 1


@pytest.mark.parametrize("mode, also", [
    # What NoAntialias does besides dropping the antialias (planted.py `_torch_resize`): it
    # converts every mode to RGB / RGBA first and resizes the RGBA straight.
    ("P", {"palette-bicubic"}),
    ("RGBA", {"alpha-straight"}),
    ("CMYK", {"convert-before-resize"}),
])
def test_no_antialias_carries_its_id_on_other_modes(mode, also):
    images = [image(mode, alpha="random" if mode == "RGBA" else "opaque")]
    result = attribute(images, K3_RESIZING, BY_NAME["no_antialias"](images, K3_RESIZING))
    assert set(result.root_causes) == {"resample-float"} | also
    assert result.fully_explained


# The engine model's divergences (issue 12's facts of SGLang 0.5.23, docs/spec.md "Engine model:
# sglang-0.5.23"): float antialiased bicubic, straight alpha, P/1 bicubic, every other mode
# converted to RGB(A) before the resize, the fill always after the resize, addcmul normalization
# with float64-computed constants; an RGB image's transparency key is ignored, as the checkpoint
# does (the earlier model composited it: `transparency-key`).
EAGER_CASES = [
    ("P", "opaque", K3_RESIZING, {"palette-bicubic", "resample-float", "normalize-float"}),
    ("P", "opaque", K3, {"normalize-float"}),  # not resampled: only the normalization differs
    ("RGBA", "random", K3_RESIZING, {"alpha-straight", "resample-float", "normalize-float"}),
    ("CMYK", "opaque", K3_RESIZING, {"convert-before-resize", "resample-float", "normalize-float"}),
    ("I;16", "opaque", K3_RESIZING, {"convert-before-resize", "resample-float", "normalize-float"}),
    ("RGB", "opaque", K3_RESIZING, {"resample-float", "normalize-float"}),
    ("RGB", "opaque", K3, {"normalize-float"}),
    ("RGB", "key", K3, {"normalize-float"}),
    ("RGB", "opaque", dataclasses.replace(CLIP, in_patch_limit=6), {"resample-float", "normalize-float"}),
    ("RGBA", "random", dataclasses.replace(K3_RESIZING, transparent_bg_fill_stage="before_resize"),
     {"fill-stage", "alpha-straight", "resample-float", "normalize-float"}),
]


@pytest.mark.parametrize("mode, alpha, config, want", EAGER_CASES,
                         ids=[f"{m}-{a}-limit{c.in_patch_limit}-{c.fill_stage}{'-clip' if c.image_std != K3.image_std else ''}"
                              for m, a, c, _ in EAGER_CASES])
def test_eager_root_causes(mode, alpha, config, want):
    images = [image(mode, alpha=alpha) if config.in_patch_limit == 6 else image(mode, 28, 28, alpha)]
    result = attribute(images, config, eager.preprocess(images, config, device="cpu"))
    assert set(result.root_causes) == want, result.explained
    assert result.fully_explained
    if want == {"normalize-float"}:
        assert result.root_causes == ("normalize-float",) and result.max_levels < 1
    else:
        assert result.max_levels >= 1


def test_eager_palette_is_far_off_and_its_sub_level_part_is_named():
    # Random palette colours on noise: bicubic averages of neighbours against NEAREST's single
    # pick differ by a large part of the range somewhere among the 43 x 31 x 3 values.
    images = [image("P", content="noise")]
    result = attribute(images, K3_RESIZING, eager.preprocess(images, K3_RESIZING, device="cpu"))
    assert result.max_levels >= 100
    assert [e.root_cause for e in result.explained][-1] == "normalize-float"


# ---------------------------------------------------------------------------------------------
# the rule: unexplained, residuals, the margin


def _shifted(result: PreprocessResult, config: PreprocessConfig, levels: float, rows: slice) -> PreprocessResult:
    # Values moved by `levels` levels (a change no variant makes), in the given patch rows.
    lut = reference.normalization_lut(config).astype(np.float64)
    slope = torch.from_numpy((lut[:, 255] - lut[:, 0]) / 255.0).view(1, 3, 1, 1)
    values = result.pixel_values.clone().double()
    values[rows] += levels * slope
    return PreprocessResult(values.float(), result.grid_thws)


def test_identical_candidate_has_no_root_cause():
    images = [image("RGBA", alpha="random")]
    result = attribute(images, K3_RESIZING, run(images, K3_RESIZING))
    assert result.root_causes == () and result.differing == 0 and result.max_levels == 0


def test_a_difference_no_variant_makes_is_unexplained():
    # every other patch moved by 3 levels: no table of levels (a level maps to two values there),
    # no pad, no order of the patches makes that
    images = [image("RGB", 30, 30)]
    out = _shifted(run(images, K3), K3, 3.0, slice(0, None, 2))
    result = attribute(images, K3, out)
    assert result.root_causes == ("unexplained",)
    assert result.explained == ()
    assert result.max_levels == pytest.approx(3.0, abs=1e-3)
    assert result.residual_max_levels == result.max_levels
    assert result.residual_differing == result.differing


def test_residual_is_what_the_root_causes_leave():
    images = [image("P")]
    planted = BY_NAME["palette_bicubic"](images, K3_RESIZING)
    # Seven levels more on 2 patch rows (2 x 3 x 14 x 14 values): not a catalogue deviation.
    out = _shifted(planted, K3_RESIZING, 7.0, slice(0, 2))
    result = attribute(images, K3_RESIZING, out)
    assert result.root_causes == ("palette-bicubic",)
    assert not result.fully_explained
    assert result.residual_differing == 2 * 3 * 14 * 14
    assert result.residual_max_levels == pytest.approx(7.0, abs=1e-3)
    assert result.residual_mean_levels == pytest.approx(7.0, abs=1e-3)
    assert result.max_levels > 7


@pytest.mark.parametrize("other_share, taken", [(4.0, False), (2.0, True)])
def test_a_swap_must_remove_a_quarter_of_what_is_left(other_share, taken):
    # The padding on the top-left (explained by `pad`), plus a shift of the values that the
    # padding bug leaves equal (explained by nothing): the two parts add up. With the shift
    # worth 4x the padding part, the pad swap would leave 80 % of the total: not taken. Worth
    # 2x, it leaves 67 %: taken, and the shift is the residual. (docs/diagnosis.md)
    images = [image("RGB", 30, 30)]
    ref = run(images, K3)
    planted = BY_NAME["pad_top_left"](images, K3)
    pad_part = float(np.abs(levels_of(planted.pixel_values, K3) - levels_of(ref.pixel_values, K3)).sum())
    same = planted.pixel_values == ref.pixel_values
    n = int(same.sum())
    lut = reference.normalization_lut(K3).astype(np.float64)
    slope = torch.from_numpy((lut[:, 255] - lut[:, 0]) / 255.0).view(1, 3, 1, 1).expand_as(same)
    # Downwards: away from every other padding value a variant could put there.
    shift = -other_share * pad_part / n
    values = planted.pixel_values.double()
    values[same] += shift * slope[same]
    out = PreprocessResult(values.float(), planted.grid_thws)
    result = attribute(images, K3, out)
    if taken:
        assert result.root_causes == ("pad",)
        assert result.residual_differing == n
        assert result.residual_mean_levels == pytest.approx(-shift, rel=1e-4)
    else:
        assert result.root_causes == ("unexplained",)
        assert result.differing == result.residual_differing


def test_several_images_and_one_image():
    images = [image("RGBA", alpha="random"), image("RGB", 28, 28)]
    out = BY_NAME["straight_alpha"](images, K3_RESIZING)
    expected = run(images, K3_RESIZING)
    whole = attribute(images, K3_RESIZING, out, expected=expected)
    assert whole.root_causes == ("alpha-straight",) and whole.images == (0, 1)
    assert whole.per_image == (("alpha-straight",), ())
    assert {e.image for e in whole.explained} == {0}
    assert attribute(images, K3_RESIZING, out, image=1).root_causes == ()
    first = attribute(images, K3_RESIZING, out, image=0)
    assert first.root_causes == ("alpha-straight",) and first.images == (0,)
    # Given the reference's result, the attribution skips that run and finds the same.
    again = attribute(images, K3_RESIZING, out)
    assert again.root_causes == whole.root_causes and again.runs == whole.runs + len(images)


def test_result_as_json_and_budget():
    images = [image("RGBA", alpha="random")]
    out = eager.preprocess(images, K3_RESIZING, device="cpu")
    result = attribute(images, K3_RESIZING, (out.pixel_values.numpy(), out.grid_thws.numpy()))
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["root_causes"] == list(result.root_causes)
    assert data["fully_explained"] is True and data["complete"] is True
    assert [e["root_cause"] for e in data["explained"]] == [e.root_cause for e in result.explained]
    cut = attribute(images, K3_RESIZING, out, max_runs=5)
    assert cut.runs == 5 and not cut.complete


def test_wrong_shape_is_a_typed_error():
    images = [image("RGB", 28, 28)]
    out = run(images, K3)
    with pytest.raises(CandidateError):
        attribute(images, K3, PreprocessResult(out.pixel_values[:-1], out.grid_thws))


def test_bfloat16_candidate_is_compared_after_rounding():
    # A candidate returning bfloat16 (the `bf16` tolerance): the rounding is not a root cause;
    # what differs after rounding both sides is.
    images = [image("RGBA", alpha="random")]
    ref = run(images, K3_RESIZING)
    exact = attribute(images, K3_RESIZING, PreprocessResult(ref.pixel_values.to(torch.bfloat16), ref.grid_thws))
    assert exact.root_causes == () and exact.differing == 0
    planted = BY_NAME["straight_alpha"](images, K3_RESIZING)
    result = attribute(images, K3_RESIZING, PreprocessResult(planted.pixel_values.to(torch.bfloat16), planted.grid_thws))
    assert result.root_causes == ("alpha-straight",) and result.fully_explained
