"""The committed golden files: they pass, they hold what the spec says, they cover the catalogue.

Expected values come from the spec's worked examples, from hand calculations and from
`tests/helpers/checkpoint_model.py` (a plain re-statement of the spec with Pillow and NumPy), never
from the pipeline that recorded the goldens.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from checkpoint_model import spec_plan, spec_preprocess
from golden_testlib import FILES, entries
from PIL import Image

from kimi_oracle.core.config import FILL_STAGES, PATTERNS, PreprocessConfig
from kimi_oracle.inputs import generators
from kimi_oracle.workflows import golden

GOLDEN = golden.package_golden_dir()


def _by_key(kind: str, profile: str) -> dict[str, dict]:
    out = {}
    for e in entries(GOLDEN / kind / f"{profile}.jsonl"):
        out[f"{e['width']}x{e['height']}" if kind == "grids" else e["id"]] = e
    return out


def test_check_passes_on_the_committed_files():
    before = sorted(p.name for p in GOLDEN.rglob("*"))
    report = golden.check(GOLDEN, write_obtained=False)
    assert report.ok, report.render()
    assert len(report.files) == 8  # 2 kinds x 4 profiles
    assert not report.warnings, report.warnings
    assert sorted(p.name for p in GOLDEN.rglob("*")) == before


def test_top_level_golden_dir_is_the_packaged_copy():
    top = Path(__file__).resolve().parents[3] / "golden"
    assert (top / "grids" / "k3.jsonl").is_file()
    assert top.resolve() == GOLDEN
    for kind, profile in FILES:
        assert (GOLDEN / kind / f"{profile}.jsonl").is_file()


def test_total_size_is_small():
    total = sum(p.stat().st_size for kind, prof in FILES for p in [GOLDEN / kind / f"{prof}.jsonl"])
    assert total < 2.5 * 1024 * 1024, total


@pytest.mark.parametrize("kind,profile", FILES)
def test_metadata(kind, profile):
    path = GOLDEN / kind / f"{profile}.jsonl"
    head = json.loads(path.read_text().split("\n", 1)[0])
    meta = head["_meta"]
    config = PreprocessConfig.profile(profile)
    assert meta["schema_version"] == golden.SCHEMA_VERSION == 1
    assert (meta["kind"], meta["profile"]) == (kind, profile)
    # image goldens: the image keys; the video golden: every key (its video keys included)
    assert meta["config"] == (config.to_hf_json() if kind == "video" else config.image_hf_json())
    canonical = json.dumps(meta["config"], sort_keys=True, separators=(",", ":")).encode()
    assert meta["config_sha256"] == hashlib.sha256(canonical).hexdigest()
    assert meta["generator_version"] == generators.GENERATOR_VERSION
    assert set(meta["versions"]) >= {"pillow", "numpy", "torch"}
    assert meta["count"] == len(entries(path))


@pytest.mark.parametrize("profile", ["k3", "k25", "k3-small"])
def test_grid_file_is_sorted_unique_and_covers_every_size_class(profile):
    es = entries(GOLDEN / "grids" / f"{profile}.jsonl")
    keys = [(e["width"], e["height"]) for e in es]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert len(es) >= 3000
    assert {e["class"] for e in es} == set(generators.SIZE_CLASSES)
    for size in [(640, 480), (1920, 1080), (4032, 3024), (7680, 4320), (1, 1), (7168, 1), (7169, 1)]:
        assert size in set(keys), size
    # Sides that are multiples of 14 and 28 and their neighbours, primes, extreme ratios.
    sides = {w for w, _ in keys}
    assert {27, 28, 29, 55, 56, 57, 335, 336, 337, 8191} <= sides
    assert any(w >= 100 * h for w, h in keys) and any(h >= 100 * w for w, h in keys)


@pytest.mark.parametrize("profile", ["k3", "k25", "k3-small"])
def test_every_grid_entry_matches_the_spec_restatement(profile):
    config = PreprocessConfig.profile(profile)
    for e in entries(GOLDEN / "grids" / f"{profile}.jsonl"):
        assert "error" not in e  # S = 512 is a multiple of m = 2: the side assert cannot fail
        new_w, new_h, pad_w, pad_h, grid, tokens = spec_plan(
            e["width"], e["height"], 14, 2, config.in_patch_limit, 512)
        assert (e["new_w"], e["new_h"], e["pad_w"], e["pad_h"], tuple(e["grid_thw"]), e["num_tokens"]) == \
            (new_w, new_h, pad_w, pad_h, grid, tokens), e


def test_grid_goldens_hold_the_spec_worked_examples():
    k25 = _by_key("grids", "k25")

    def fields(e):
        return e["new_w"], e["new_h"], e["pad_w"], e["pad_h"], tuple(e["grid_thw"]), e["num_tokens"]

    assert fields(k25["1x1"]) == (1, 1, 27, 27, (1, 2, 2), 1)
    assert tuple(k25["29x29"]["grid_thw"]) == (1, 4, 4)
    assert fields(k25["640x480"]) == (640, 480, 4, 24, (1, 36, 46), 414)
    assert (k25["8000x100"]["new_w"], k25["8000x100"]["new_h"]) == (7168, 89)
    assert tuple(k25["8000x100"]["grid_thw"]) == (1, 8, 512)
    # Float order: 100000 x 10 gives 7167, not 7168 (where the side cap binds before the budget).
    for profile in ("k3", "k25"):
        assert _by_key("grids", profile)["100000x10"]["new_w"] == 7167
    # K3: floored patch counts let a padded image exceed the budget.
    assert _by_key("grids", "k3")["3597x3597"]["num_tokens"] == 16641


def test_k3_small_hand_calculations():
    # 97 x 73: floored 6 x 5 = 30 patches > 16; scale sqrt(16/30) = 0.7303 -> 70 x 53,
    # padded to 84 x 56 -> grid (1, 4, 6), 3 x 2 = 6 tokens.
    pixels = [e for e in entries(GOLDEN / "pixels" / "k3-small.jsonl")
              if (e["params"]["width"], e["params"]["height"]) == (97, 73)]
    assert pixels
    for e in pixels:
        assert e["grid_thw"] == [1, 4, 6], e["id"]
        assert e["stats"]["patches"] == 24
    # 61 x 150: 4 x 10 = 40 patches; scale sqrt(0.4) = 0.6325 -> 38 x 94 -> 56 x 112 -> (1, 8, 4).
    tall = [e for e in entries(GOLDEN / "pixels" / "k3-small.jsonl")
            if (e["params"]["width"], e["params"]["height"]) == (61, 150)]
    assert tall and all(e["grid_thw"] == [1, 8, 4] for e in tall)


def test_pixel_catalogue_of_the_small_profile_is_the_full_matrix():
    es = entries(GOLDEN / "pixels" / "k3-small.jsonl")
    got = {(e["params"]["mode"], e["params"]["alpha"], e["overrides"]["transparent_bg_fill_stage"],
            e["overrides"]["background"]["pattern"]) for e in es}
    want = {(m, a, s, p) for m in generators.MODES for a in generators.alpha_patterns_for(m)
            for s, p in itertools.product(FILL_STAGES, PATTERNS)}
    assert got == want and len(es) == len(want)
    assert len({e["sha256"] for e in es}) > 0.8 * len(es)  # fully transparent ones repeat
    for e in es:
        w, h = e["params"]["width"], e["params"]["height"]
        new_w, new_h, *_ = spec_plan(w, h, 14, 2, 16, 512)
        assert (new_w, new_h) != (w, h), f"{e['id']}: {w}x{h} is not resampled under k3-small"


@pytest.mark.parametrize("profile", ["k3", "k25"])
def test_pixel_catalogue_of_full_profiles_covers_every_mode_and_alpha(profile):
    es = entries(GOLDEN / "pixels" / f"{profile}.jsonl")
    got = {(e["params"]["mode"], e["params"]["alpha"]) for e in es}
    want = {(m, a) for m in generators.MODES for a in generators.alpha_patterns_for(m)}
    assert got >= want
    resampled = [e for e in es if spec_plan(e["params"]["width"], e["params"]["height"], 14, 2,
                                             PreprocessConfig.profile(profile).in_patch_limit, 512)[:2]
                 != (e["params"]["width"], e["params"]["height"])]
    assert len(resampled) >= 6


@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
@pytest.mark.parametrize("profile", ["k3", "k25", "k3-small"])
def test_every_pixel_digest_matches_the_spec_restatement(profile):
    """sha256 of the checkpoint's computation, re-stated in tests/helpers/checkpoint_model.py."""
    for e in entries(GOLDEN / "pixels" / f"{profile}.jsonl"):
        case = golden.PixelCase.from_entry(profile, e)
        img = generators.make_image(case.params)
        want_pixels, want_grids = spec_preprocess([img], case.config().to_hf_json())
        assert e["grid_thw"] == want_grids[0].tolist(), e["id"]
        assert e["sha256"] == hashlib.sha256(want_pixels.astype(np.float32).tobytes()).hexdigest(), e["id"]
        assert e["stats"]["patches"] == want_pixels.shape[0]
        assert e["stats"]["min"] == float(want_pixels.min()) and e["stats"]["max"] == float(want_pixels.max())


def test_pixel_entry_of_a_flat_image_by_hand():
    """A flat colour survives bicubic exactly; the padding is level 0 -> -1.0."""
    params = generators.CaseParams(97, 73, mode="RGB", content="flat", seed=5)
    case = golden.PixelCase("flat", "k3-small", params, {})
    from kimi_oracle.pipelines import reference

    entry = golden.pixel_entry(case, reference.preprocess([case.make_image()], case.config()))
    colour = Image.Image.getpixel(generators.make_image(params), (0, 0))
    # 70 x 53 of the colour, padded to 84 x 56 with 0; x = (v / 255 as float32 - 0.5) * 2.
    canvas = np.zeros((56, 84, 3), np.uint8)
    canvas[:53, :70] = colour
    x = (canvas / 255.0).astype(np.float32)
    x = ((x.astype(np.float64) - 0.5).astype(np.float32).astype(np.float64) * 2.0).astype(np.float32)
    patches = np.stack([x[gy * 14:(gy + 1) * 14, gx * 14:(gx + 1) * 14].transpose(2, 0, 1)
                        for gy in range(4) for gx in range(6)])
    assert entry["grid_thw"] == [1, 4, 6]
    assert entry["stats"]["patches"] == 24 and entry["stats"]["min"] == -1.0
    assert entry["sha256"] == hashlib.sha256(patches.tobytes()).hexdigest()
