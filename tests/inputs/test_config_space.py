"""The configuration space the fuzzers draw (issue 12, item 3): patch size, merge size, fixed token
count and mean/std vary by default, and candidates that hard-code them are caught within 300
examples; the k3-p16m1 profile's goldens pin a non-default patch and merge size."""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from checkpoint_model import spec_plan, spec_preprocess
from mutants.config_mutants import CANDIDATE_MUTANTS, PLANNER_MUTANT, tokens_from_grid_plan

from kimi_oracle.core.config import PROFILES, PreprocessConfig
from kimi_oracle.fuzzers import planner_fuzz
from kimi_oracle.fuzzers.fuzzing import FuzzOptions, fuzz
from kimi_oracle.inputs.draw import ChoiceSource, DrawOptions, RandomSource, derive, draw_config, draw_fuzz_case
from kimi_oracle.inputs import generators
from kimi_oracle.inputs.generators import CaseParams, config_choices, make_image
from kimi_oracle.oracle.candidates import Candidate
from kimi_oracle.oracle.planner import Planner, check_sizes
from kimi_oracle.pipelines.reference import preprocess as reference
from kimi_oracle.workflows import golden

K3 = PreprocessConfig.k3()
CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))  # OpenAI CLIP's constants
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
FAST = dict(split_by_mode=False, keep_searching=False)
MUTANT_FILE = Path(__file__).resolve().parents[1] / "mutants" / "config_mutants.py"


def _shape(c: PreprocessConfig) -> tuple:
    return c.patch_size, c.merge_kernel_size, c.fixed_output_tokens, (c.image_mean, c.image_std)


# ---------------------------------------------------------------------------------------------
# the choice lists


@pytest.mark.parametrize("profile", PROFILES)
def test_choices_start_with_the_base_and_every_drawn_merge_keeps_the_side_assert(profile):
    base = PreprocessConfig.profile(profile)
    c = config_choices(base)
    assert (c.patch_sizes[0], c.merge_sizes[0], c.fixed_tokens[0], c.norms[0]) == _shape(base)
    assert {14, 16} <= set(c.patch_sizes) and {1, 2} <= set(c.merge_sizes)
    assert None in c.fixed_tokens and any(t is not None for t in c.fixed_tokens)
    assert HALF in c.norms and CLIP in c.norms and len(set(c.norms)) >= 4
    # Every cap but the profile's own is a multiple of every merge size: a drawn merge size never
    # makes the checkpoint's side assert fail (that would turn correct candidates' results into
    # accepts_invalid findings).
    assert all(cap % m == 0 for cap in c.caps[1:] for m in c.merge_sizes)
    for patch in c.patch_sizes:  # every combination is a config the checkpoint accepts
        for merge in c.merge_sizes:
            for tokens in c.fixed_tokens:
                for mean, std in c.norms:
                    PreprocessConfig(patch, merge, 16, 8, tokens, mean, std)


def test_the_draw_varies_them_in_a_quarter_of_the_cases_and_shrinks_back_to_the_base():
    n = 800
    drawn = [draw_config(RandomSource(derive(3, i)), K3) for i in range(n)]
    c = config_choices(K3)
    varied = collections.Counter()
    for d in drawn:
        assert d.patch_size in c.patch_sizes and d.merge_kernel_size in c.merge_sizes
        assert d.fixed_output_tokens in c.fixed_tokens and (d.image_mean, d.image_std) in c.norms
        for i, (got, want) in enumerate(zip(_shape(d), _shape(K3))):
            varied[i] += got != want
    # One case in four draws them; each list then leaves the base's value with 1/len of the draws:
    # patch 2/3, merge 1/2, tokens 3/4, mean/std 3/4 of a quarter.
    for i, share in enumerate((1 / 6, 1 / 8, 3 / 16, 3 / 16)):
        assert abs(varied[i] / n - share) < 0.05, (i, varied[i] / n)
    assert {d.patch_size for d in drawn} == set(c.patch_sizes)
    assert {(d.image_mean, d.image_std) for d in drawn} == set(c.norms)
    # The simplest choices (all zeros: what hypothesis shrinks to) are the profile's own values.
    assert _shape(draw_config(ChoiceSource([0] * 32), K3)) == _shape(K3)
    # --fixed-config draws none of them.
    fixed = draw_fuzz_case(RandomSource(1), K3, DrawOptions(vary_config=False))
    assert fixed.config == K3


def test_the_planner_fuzz_draws_from_the_same_choices():
    c = config_choices(K3)
    configs = {id(cfg): cfg for _, _, cfg, _ in planner_fuzz.cases(K3, 20_000, seed=1)}.values()
    assert {cfg.patch_size for cfg in configs} == set(c.patch_sizes)
    assert {cfg.merge_kernel_size for cfg in configs} == set(c.merge_sizes)
    assert {cfg.fixed_output_tokens for cfg in configs} == set(c.fixed_tokens)


# ---------------------------------------------------------------------------------------------
# the planted mutants


@pytest.mark.parametrize("mutant", CANDIDATE_MUTANTS, ids=[m.name for m in CANDIDATE_MUTANTS])
def test_mutant_agrees_with_the_checkpoint_on_the_profile(mutant):
    images = [make_image(CaseParams(53, 37, "RGBA", "gradient", "noise", 1)),
              make_image(CaseParams(40, 90, "P", "opaque", "edges", 2))]
    for config in (K3, PreprocessConfig.k3_small()):
        want, got = reference(images, config), mutant.func(images, config)
        assert torch.equal(want.grid_thws, got.grid_thws) and torch.equal(want.pixel_values, got.pixel_values)


@pytest.mark.parametrize("mutant", CANDIDATE_MUTANTS, ids=[m.name for m in CANDIDATE_MUTANTS])
def test_mutant_is_caught_within_300_examples(mutant):
    run = fuzz(Candidate(mutant.name, mutant.func), K3, FuzzOptions(examples=300, seed=0, max_side=48, **FAST))
    found = [f for f in run.findings if f.check in mutant.checks]
    assert found, (mutant.name, [f.check for f in run.findings])
    assert min(run.first_found[c] for c in mutant.checks if c in run.first_found) <= 300
    # Shrunk, the failing case still needs the key the mutant ignores.
    value = getattr(found[0].config, mutant.key)
    assert value != getattr(K3, mutant.key), (mutant.name, found[0].config)


def test_planner_that_ignores_fixed_tokens_is_caught_within_300_sizes():
    sizes = [(w, h, K3, None) for w in (1, 29, 640, 7200) for h in (1, 30, 480)]
    assert check_sizes(Planner("tokens", tokens_from_grid_plan), sizes).ok  # right on the profile
    for seed in range(5):
        report = planner_fuzz.fuzz_planner(Planner(PLANNER_MUTANT.name, PLANNER_MUTANT.func), K3, sizes=300,
                                           seed=seed)
        assert report.checked == 300 and PLANNER_MUTANT.checks[0] in report.findings, (seed, list(report.findings))
        finding = report.findings[PLANNER_MUTANT.checks[0]]
        assert finding.field == "num_tokens" and finding.config.fixed_output_tokens is not None
        assert f"{finding.size[0]}x{finding.size[1]}" in finding.message


def test_the_engine_form_loads_by_path_and_its_planner_is_judged():
    # `file.py:tokens_from_grid` is an engine (plan + preprocess), loaded by path as the CLI does.
    report = planner_fuzz.fuzz_planner(f"{MUTANT_FILE}:tokens_from_grid", K3, sizes=300, seed=0)
    assert "planner_mismatch[num_tokens]" in report.findings


# ---------------------------------------------------------------------------------------------
# the k3-p16m1 profile and its goldens


def _golden_entries(kind: str) -> dict[str, dict]:
    path = golden.package_golden_dir() / kind / "k3-p16m1.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["_meta"]["profile"] == "k3-p16m1" and lines[0]["_meta"]["config"]["patch_size"] == 16
    return {golden.entry_key(kind, e): e for e in lines[1:]}


def test_profile_has_a_non_default_patch_and_merge_size():
    config = PreprocessConfig.profile("k3-p16m1")
    assert (config.patch_size, config.merge_kernel_size) == (16, 1)
    assert config.patch_limit_on_one_side * config.patch_size == 512 * 14  # K3's 7168-pixel side


def test_grid_goldens_match_hand_calculations():
    grids = _golden_entries("grids")
    # p = 16, m = 1 (f = 16), S = 448, L = 65536.
    # 1x1: nothing to scale; pad 15/15 to 16x16; grid (1, 1, 1); one token per patch.
    assert [grids["1x1"][k] for k in ("new_w", "new_h", "pad_w", "pad_h", "grid_thw", "num_tokens")] == \
        [1, 1, 15, 15, [1, 1, 1], 1]
    # 640x480: 40 x 30 patches, already multiples of 16: grid (1, 30, 40), 1200 tokens.
    assert [grids["640x480"][k] for k in ("pad_w", "pad_h", "grid_thw", "num_tokens")] == [0, 0, [1, 30, 40], 1200]
    # 1920x1080: 120 x 67 patches, no scaling; 1080 = 67*16 + 8 -> pad 8 -> (1, 68, 120), 8160 tokens
    # (under k3's 14/2 the same size pads to 1092 x 1932: (1, 78, 138)).
    assert [grids["1920x1080"][k] for k in ("new_w", "new_h", "pad_w", "pad_h", "grid_thw", "num_tokens")] == \
        [1920, 1080, 0, 8, [1, 68, 120], 8160]
    # 14336x16: the side cap binds, s2 = 448*16/14336 = 0.5 exactly: 7168 x 8, pad 0/8 -> (1, 1, 448).
    assert [grids["14336x16"][k] for k in ("new_w", "new_h", "pad_w", "pad_h", "grid_thw", "num_tokens")] == \
        [7168, 8, 0, 8, [1, 1, 448], 448]


def test_every_grid_entry_matches_the_spec_restatement():
    for e in _golden_entries("grids").values():
        assert "error" not in e  # S = 448 is a multiple of m = 1: the side assert cannot fail
        want = spec_plan(e["width"], e["height"], 16, 1, 65536, 448)
        assert (e["new_w"], e["new_h"], e["pad_w"], e["pad_h"], tuple(e["grid_thw"]), e["num_tokens"]) == want, e


@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
def test_every_pixel_digest_matches_the_spec_restatement():
    """sha256 of the checkpoint's computation re-stated in tests/helpers/checkpoint_model.py, under p16/m1."""
    for e in _golden_entries("pixels").values():
        case = golden.PixelCase.from_entry("k3-p16m1", e)
        want_pixels, want_grids = spec_preprocess([generators.make_image(case.params)], case.config().to_hf_json())
        assert e["grid_thw"] == want_grids[0].tolist(), e["id"]
        assert want_pixels.shape[1:] == (3, 16, 16)
        assert e["sha256"] == hashlib.sha256(want_pixels.astype(np.float32).tobytes()).hexdigest(), e["id"]


def test_pixel_goldens_of_the_profile_check_clean_and_resample_at_the_side_cap():
    pixels = _golden_entries("pixels")
    side = [e for k, e in pixels.items() if k.startswith("side_cap/")]
    # 7200x30: s2 = 7168/7200 = 0.9956, new 7168 x int(29.87) = 29, padded to 7168 x 32: (1, 2, 448).
    assert side and all(e["grid_thw"] in ([1, 2, 448], [1, 448, 2]) for e in side)
    report = golden.check(golden.package_golden_dir(), profiles=["k3-p16m1"], write_obtained=False)
    assert report.ok, report.render()


def test_a_kernel_that_hard_codes_the_patch_size_fails_the_profiles_goldens():
    report = golden.check_pixels(CANDIDATE_MUTANTS[0].func, golden.package_golden_dir(), profiles=["k3-p16m1"],
                                 write_obtained=False)
    assert not report.ok and report.num_changes >= 40
