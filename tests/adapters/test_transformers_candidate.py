"""Candidate `transformers`: transformers 5.23.0's own `Kimi_K25ImageProcessor`, imported from the
release with its pinned dependencies (torchvision 0.28.0, huggingface_hub, ...) in the candidate's
own process; and the transformers planner's finding naming `fixed_output_tokens`.

Expected values come from hand arithmetic, Pillow and torch's own `F.interpolate` (the op
torchvision's `resize` runs on uint8 tensors on a CPU), never from the adapter."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from engine_images import noise, patch_levels
from kimi_oracle.adapters import loading
from kimi_oracle.adapters.engines import engine_candidate
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.geometry import plan
from kimi_oracle.oracle.diagnosis import attribute
from kimi_oracle.oracle.planner import Planner, PlannerReport, check_sizes, judge_size, load_planner
from kimi_oracle.pipelines.reference import preprocess as reference

K25 = PreprocessConfig.k25()
SMALL = dataclasses.replace(K25, in_patch_limit=16)  # a patch budget that makes 112x56 resample
# What the issue names for transformers' image path, as our diagnosis's root-cause ids.
KNOWN_CAUSES = {"resample-float", "normalize-float", "flatten-white"}


@pytest.fixture(scope="module")
def candidate(transformers_tree):
    """The candidate in its own executor process (transformers is never imported into this one)."""
    from kimi_oracle.adapters.transformers_k25 import dependency_site
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    try:
        dependency_site()
    except CandidateError as exc:  # no index reachable and nothing cached
        pytest.skip(f"transformers' pinned dependencies cannot be fetched here: {exc}")
    with IsolatedCandidate("transformers@5.23.0", timeout_s=120) as cand:
        yield cand


def test_an_image_without_resize_is_the_hand_normalization(candidate):
    # 84x56 RGB under K2.5 (24 patches, no resize): only normalized, (x/255 - 0.5)/0.5, and patchified.
    arr = noise(56, 84)
    result = candidate([Image.fromarray(arr)], K25)
    assert result.grid_thws.tolist() == [[1, 4, 6]]
    assert tuple(result.pixel_values.shape) == (24, 3, 14, 14) and result.pixel_values.dtype == torch.float32
    patch0_red = torch.from_numpy(arr[:14, :14, 0].astype(np.float64) / 127.5 - 1)
    assert torch.allclose(result.pixel_values[0, 0].double(), patch0_red, atol=2.5e-7)
    assert candidate.description.startswith("transformers 5.23.0 Kimi_K25ImageProcessor (release: ")


def test_the_resize_is_torchs_uint8_bicubic_not_pillows(candidate):
    # 112x56 with a budget of 16 patches: scale sqrt(16 / 32), int(56 * 0.7071) = 39 rows,
    # int(112 * 0.7071) = 79 columns, padded to multiples of 28: 56 x 84, a 4 x 6 grid.
    arr = noise(56, 112, seed=1)
    image = Image.fromarray(arr)
    result = candidate([image], SMALL)
    assert result.grid_thws.tolist() == [[1, 4, 6]]
    levels = patch_levels(result.pixel_values, (4, 6))
    torch_u8 = F.interpolate(torch.from_numpy(arr).permute(2, 0, 1)[None], size=(39, 79), mode="bicubic",
                             antialias=True)[0].permute(1, 2, 0).numpy()
    assert np.array_equal(levels[:39, :79], torch_u8)
    assert (levels[39:] == 0).all() and (levels[:, 79:] == 0).all()  # padded with level 0 (value -1)
    pillow = np.asarray(image.resize((79, 39), Image.Resampling.BICUBIC)).astype(np.float64)
    assert 0 < np.abs(levels[:39, :79] - pillow).max() <= 3  # the checkpoint's resampler differs
    # ... and the diagnosis explains the whole difference from the reference pipeline
    found = attribute([image], SMALL, result, expected=reference([image], SMALL))
    assert found.fully_explained and set(found.root_causes) <= KNOWN_CAUSES
    assert "resample-float" in found.root_causes


def test_transparency_is_flattened_onto_white_before_anything(candidate):
    # 28x28 RGBA, left half fully transparent: transformers composites onto white (level 255,
    # value 1.0); the K2.5 checkpoint (no background) drops the alpha and keeps the colour.
    arr = noise(28, 28, channels=4, seed=2)
    arr[:, :14, 3], arr[:, 14:, 3] = 0, 255
    image = Image.fromarray(arr, "RGBA")
    result = candidate([image], K25)
    levels = patch_levels(result.pixel_values, (2, 2))
    assert (levels[:, :14] == 255).all() and np.array_equal(levels[:, 14:], arr[:, 14:, :3])
    want = reference([image], K25)
    assert np.array_equal(patch_levels(want.pixel_values, (2, 2))[:, :14], arr[:, :14, :3])
    found = attribute([image], K25, result, expected=want)
    assert found.fully_explained and "flatten-white" in found.root_causes
    assert set(found.root_causes) <= KNOWN_CAUSES


def test_the_planner_finding_names_fixed_output_tokens(transformers_tree):
    planner = load_planner("transformers@5.23.0")
    fixed = dataclasses.replace(K25, fixed_output_tokens=64)
    # 1000x700: padded to 1008 x 700, (1008 / 28) * (700 / 28) = 36 * 25 = 900 tokens by hand;
    # the checkpoint's plan gives the fixed 64.
    report = check_sizes(planner, [(1000, 700, fixed, None), (1000, 700, K25, None)])
    assert report.passed == 1 and list(report.findings) == ["planner_mismatch[num_tokens]"]
    finding = report.findings["planner_mismatch[num_tokens]"]
    assert finding.cause and "ignores fixed_output_tokens (64)" in finding.cause and "900 tokens" in finding.cause
    assert finding.message.endswith(finding.cause) and (finding.expected, finding.actual) == (64, 900)
    assert json.loads(json.dumps(report.to_dict()))["findings"][0]["cause"] == finding.cause
    assert PlannerReport.from_dict(report.to_dict()).findings[finding.key].cause == finding.cause
    # no stand-in module of the load stays behind (transformers' torchvision import included)
    assert not [n for n, m in sys.modules.items() if isinstance(m, loading._StandModule)]


def test_a_mismatch_not_explained_by_fixed_tokens_names_no_cause():
    fixed = dataclasses.replace(K25, fixed_output_tokens=64)

    def off_by_one(w: int, h: int, config: PreprocessConfig):  # ignores the fixed count and plans wrong
        good = plan(w, h, dataclasses.replace(config, fixed_output_tokens=None))
        return dataclasses.replace(good, new_w=good.new_w - 1)

    report = PlannerReport("off-by-one")
    judge_size(Planner("off-by-one", off_by_one), report, 1000, 700, fixed)
    finding = report.findings["planner_mismatch[new_w]"]
    assert finding.cause is None and "fixed_output_tokens" not in finding.message


def _tree(tmp_path, processor_source: str):
    root = tmp_path / "tree"
    (root / "transformers" / "models" / "kimi_k25").mkdir(parents=True)
    (root / "transformers" / "__init__.py").write_text('__version__ = "5.99.0"\n')
    (root / "transformers" / "models" / "kimi_k25" / "image_processing_kimi_k25.py").write_text(processor_source)
    return root


_NAVIT = ("def navit_resize(height, width, patch_size, merge_kernel_size, max_patches, max_size_per_side):\n"
          "    return (height, width), (height, width)\n")


def test_a_tree_without_the_processor_class_is_exit_2_naming_file_and_class(tmp_path):
    root = _tree(tmp_path, _NAVIT)
    proc = subprocess.run([sys.executable, "-m", "kimi_oracle", "fuzz", "--candidate", f"transformers@{root}",
                           "--profile", "k25", "--examples", "1", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "models/kimi_k25/image_processing_kimi_k25.py: no class Kimi_K25ImageProcessor" in errors[0]
    assert "knows 5.23.0" in errors[0] and "5.99.0" in errors[0]


def test_a_processor_without_a_parameter_passed_is_refused_before_anything_runs(tmp_path):
    source = _NAVIT + ("class Kimi_K25ImageProcessor:\n"
                       "    def _preprocess(self, images, do_resize, size, patch_size, merge_size, image_mean,\n"
                       "                    image_std, do_rescale, do_normalize, **kwargs):\n"
                       "        raise AssertionError('never called')\n")
    root = _tree(tmp_path, source)
    with pytest.raises(CandidateError, match=r"Kimi_K25ImageProcessor\._preprocess\(\) takes no parameter max_patches"):
        engine_candidate(f"transformers@{root}")
    assert "transformers" not in sys.modules


@pytest.mark.slow
def test_the_fuzz_of_the_issue_has_no_unexplained_pixel_finding(candidate, tmp_path):
    # issue 31's done-when: `fuzz --candidate transformers --profile k25 --examples 300`, every
    # pixel finding explained (about 20-40 s here).
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "kimi_oracle", "fuzz", "--candidate", "transformers@5.23.0",
                           "--profile", "k25", "--examples", "300", "--seed", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # it differs from the checkpoint, explained
    cases = [json.loads(p.read_text()) for p in (out / "findings").glob("*/case.json")]
    pixel = [c for c in cases if c["check"] == "pixel_mismatch"]
    assert pixel and all(c["root_causes"] and set(c["root_causes"]) <= KNOWN_CAUSES for c in pixel)
    assert {c["check"] for c in cases} == {"pixel_mismatch"}
