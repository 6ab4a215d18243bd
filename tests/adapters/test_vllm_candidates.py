"""Candidates `vllm` and `vllm-k3` and planner `vllm`: vLLM 0.33.0's own KimiK25FusedVisionProcessor
(and KimiK3Processor over it), called by name from the release (issue 31).

The default tests need no wheel: a tree laid out like vLLM's package, written here, that lacks a
function or class the adapter calls is exit 2 in one line naming the file and the name. The
tests on the real 336 MB wheel are `slow`; they fetch it through the loader (`vllm@0.33.0`).
Expected values come from hand arithmetic, Pillow and the spec, never from the adapter."""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from engine_images import noise, patch_levels
from kimi_oracle.adapters.engines import ENGINES, engine_planner
from kimi_oracle.adapters.loading import load_modules
from kimi_oracle.adapters.sources import Tree, locate
from kimi_oracle.adapters.vllm import FUSED_FILE, K3_FILE, media_proc_cfg
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.geometry import plan as checkpoint_plan
from kimi_oracle.core.images import ORIENTATION_TAG, open_encoded

K25 = PreprocessConfig.k25()
SMALL = dataclasses.replace(K25, in_patch_limit=16)  # a patch budget that makes 112x56 resample

# Files of a tree in vLLM's layout, written by this test (no vLLM code): each as the adapter
# reads it, the fused file without its processor class.
_FUSED_WITHOUT_CLASS = '''
from vllm.utils.import_utils import is_numba_available

if is_numba_available():
    from numba import njit, prange

    @njit(parallel=True, cache=True)
    def _write_fused_patches(frames, out):
        for i in prange(out.shape[0]):
            out[i] = frames[i]


def navit_resize_image(width, height, patch_size, merge_kernel_size, in_patch_limit,
                       patch_limit_on_one_side, fixed_output_tokens):
    return {"num_tokens": 1, "new_width": width, "new_height": height, "pad_width": 0, "pad_height": 0}
'''
_K3 = '''
class KimiK3Processor:
    def __call__(self, text=None, images=None, return_tensors=None):
        raise NotImplementedError
'''
_IMAGE = '''
def normalize_image(image):
    return image


def convert_image_mode(image, to_mode, background_color=(255, 255, 255)):
    return image.convert(to_mode)
'''


def _tree(root: Path, fused: str = _FUSED_WITHOUT_CLASS) -> Path:
    files = {"__init__.py": '__version__ = "0.33.0"\n', FUSED_FILE: fused, K3_FILE: _K3, "multimodal/image.py": _IMAGE}
    for relative, text in files.items():
        path = root / "vllm" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kimi_oracle", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def test_the_vllm_paths_name_the_releases_files():
    rows = {(p.name, p.role): p for p in ENGINES["vllm"].paths}
    assert rows[("vllm", "candidate")].file == "transformers_utils/processors/kimi_k25_vision_fused.py"
    assert rows[("vllm-k3", "candidate")].file == "transformers_utils/processors/kimi_k3.py"
    assert rows[("vllm", "planner")].function == rows[("vllm-k3", "planner")].function == "navit_resize_image"
    assert all(p.adapted for p in rows.values())


def test_a_tree_without_the_processor_class_is_exit_2_in_one_line(tmp_path):
    # Refused before anything is fetched (numba, transformers) or run: PIP_NO_INDEX and an empty cache.
    root = _tree(tmp_path / "src")
    env = {**os.environ, "KIMI_ORACLE_ENGINE_CACHE": str(tmp_path / "cache"), "PIP_NO_INDEX": "1"}
    proc = _cli("fuzz", "--candidate", f"vllm@{root}", "--profile", "k25", "--examples", "1",
                "--out", str(tmp_path / "out"), env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert str(root / "vllm" / FUSED_FILE) in errors[0] and "no class KimiK25FusedVisionProcessor" in errors[0]
    assert "the vllm adapter knows 0.33.0; this tree is 0.33.0" in errors[0]
    assert not (tmp_path / "cache").exists()  # nothing fetched


def test_a_tree_without_the_planner_function_is_refused_naming_it(tmp_path):
    root = _tree(tmp_path / "src", _FUSED_WITHOUT_CLASS.replace("def navit_resize_image", "def navit_resize"))
    with pytest.raises(CandidateError, match=r"kimi_k25_vision_fused\.py: no function navit_resize_image\(\)"):
        engine_planner(f"vllm-k3@{root}")


def test_a_stood_in_decorator_factory_leaves_the_function_as_shipped(tmp_path):
    # numba is not installed here: `@njit(parallel=True, cache=True)` under stand-ins must keep the
    # file's own function (the exit-2 check runs the file without numba).
    root = _tree(tmp_path / "src")
    tree = Tree("vllm", "vllm", root, "0.33.0", "directory")
    (fused,) = load_modules(tree, [FUSED_FILE])
    kernel = fused._write_fused_patches
    assert inspect.isfunction(kernel) and kernel.__code__.co_filename == str(root / "vllm" / FUSED_FILE)
    with pytest.raises(TypeError, match="'prange' object is not iterable"):  # a stand-in computes nothing
        kernel(np.zeros(3), np.zeros(3))
    assert fused.navit_resize_image(10, 20, 14, 2, 4, 4, None)["new_height"] == 20


def test_the_processor_gets_the_configs_own_fields():
    cfg = media_proc_cfg(dataclasses.replace(K25, patch_size=16, in_patch_limit=100, fixed_output_tokens=64,
                                             image_mean=(0.1, 0.2, 0.3)))
    assert (cfg["patch_size"], cfg["merge_kernel_size"], cfg["in_patch_limit"]) == (16, 2, 100)
    assert (cfg["patch_limit_on_one_side"], cfg["fixed_output_tokens"]) == (512, 64)
    assert cfg["image_mean"] == [0.1, 0.2, 0.3] and cfg["image_std"] == [0.5, 0.5, 0.5]


# --------------------------------------------------------------------------------------------
# the real release (slow: a 336 MB wheel, fetched once into the engine cache)


@pytest.fixture(scope="module")
def vllm_tree() -> Tree:
    try:
        return locate("vllm", "vllm", "0.33.0")
    except CandidateError as exc:  # no index reachable and nothing cached
        pytest.skip(f"vllm==0.33.0 cannot be fetched here: {exc}")


@pytest.fixture(scope="module")
def candidates(vllm_tree):
    """Both candidates, each in its own executor process (vLLM is never loaded into this one)."""
    from kimi_oracle.fuzzers.sandbox import IsolatedCandidate

    with IsolatedCandidate("vllm@0.33.0", timeout_s=300) as k25, IsolatedCandidate("vllm-k3@0.33.0",
                                                                                      timeout_s=300) as k3:
        yield k25, k3


@pytest.mark.slow
def test_an_image_without_resize_is_the_hand_normalization(candidates):
    # 84x56 RGB under K2.5 (24 patches, no resize): (x/255 - 0.5)/0.5 in float32, patchified.
    arr = noise(56, 84)
    for candidate in candidates:
        result = candidate([Image.fromarray(arr)], K25)
        assert result.grid_thws.tolist() == [[1, 4, 6]]
        assert tuple(result.pixel_values.shape) == (24, 3, 14, 14) and result.pixel_values.dtype == torch.float32
        red = torch.from_numpy(arr[:14, :14, 0].astype(np.float64) / 127.5 - 1)
        assert torch.allclose(result.pixel_values[0, 0].double(), red, atol=2.5e-7)
    assert candidates[0].description.startswith("vllm 0.33.0 KimiK25FusedVisionProcessor (fused CPU processor) (release: ")
    assert candidates[1].description.startswith("vllm 0.33.0 KimiK3Processor (over KimiK25FusedVisionProcessor)")


@pytest.mark.slow
def test_the_resize_is_pillows_bicubic_and_the_padding_is_level_0(candidates):
    # 112x56 with a budget of 16 patches: scale sqrt(16 / 32), int(56 * 0.7071) = 39 rows,
    # int(112 * 0.7071) = 79 columns, padded to multiples of 28: 56 x 84, a 4 x 6 grid.
    arr = noise(56, 112, seed=1)
    want = np.asarray(Image.fromarray(arr).resize((79, 39), Image.Resampling.BICUBIC), dtype=np.float64)
    result = candidates[0]([Image.fromarray(arr)], SMALL)
    assert result.grid_thws.tolist() == [[1, 4, 6]]
    levels = patch_levels(result.pixel_values, (4, 6))
    assert np.array_equal(levels[:39, :79], want)
    assert (levels[39:] == 0).all() and (levels[:, 79:] == 0).all()  # padded with level 0 (value -1)


@pytest.mark.slow
def test_exif_orientation_is_applied_before_the_plan_and_the_resize(candidates):
    # A 84x28 PNG whose EXIF says "rotate 90 CW" (6): vLLM's media loader transposes it to 28x84
    # first, so its grid is (1, 6, 2) where the checkpoint, ignoring EXIF, plans (1, 2, 6).
    arr = noise(28, 84, seed=2)
    exif = Image.Exif()
    exif[ORIENTATION_TAG] = 6
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG", exif=exif.tobytes())
    image = open_encoded(buf.getvalue())
    assert checkpoint_plan(84, 28, K25).grid_thw == (1, 2, 6)
    result = candidates[0]([image], K25)
    assert result.grid_thws.tolist() == [[1, 6, 2]]
    # orientation 6 is displayed turned 90 degrees clockwise: Pillow's ROTATE_270, 28 wide, 84 tall
    want = np.asarray(Image.fromarray(arr).transpose(Image.Transpose.ROTATE_270), dtype=np.float64)
    assert np.array_equal(patch_levels(result.pixel_values, (6, 2)), want)


@pytest.mark.slow
def test_transparency_is_flattened_onto_white_and_k3_takes_no_background(candidates):
    # Fully transparent RGBA noise: the checkpoint's K2.5 drops the alpha (the noise), vLLM pastes
    # onto white (every level 255); vLLM's K3 does the same, whatever transparent_bg_config says.
    arr = np.concatenate([noise(28, 28, seed=3), np.zeros((28, 28, 1), np.uint8)], axis=2)
    image = Image.fromarray(arr, "RGBA")
    for candidate, config in zip(candidates, (K25, PreprocessConfig.k3())):
        result = candidate([image], config)
        assert result.grid_thws.tolist() == [[1, 2, 2]]
        assert (patch_levels(result.pixel_values, (2, 2)) == 255).all(), candidate.spec


@pytest.mark.slow
def test_the_planner_is_the_checkpoints_geometry(vllm_tree):
    # vLLM's navit_resize_image against the spec's geometry, by hand for one size and on a grid of
    # sizes (it has no side assert: the checkpoint's sizes that plan at all).
    plan = engine_planner("vllm@0.33.0")[0]
    # 1000x700 under K2.5 (limit 16384): no scaling; 1000 -> pad 8 to 1008, 700 -> pad 0 (25 * 28).
    assert {k: plan(1000, 700, K25)[k] for k in ("new_width", "new_height", "pad_width", "pad_height", "num_tokens")} \
        == {"new_width": 1000, "new_height": 700, "pad_width": 8, "pad_height": 0, "num_tokens": 36 * 25}
    for w in range(1, 3000, 97):
        for h in range(1, 3000, 89):
            ref, got = checkpoint_plan(w, h, SMALL), plan(w, h, SMALL)
            assert (got["new_width"], got["new_height"], got["pad_width"], got["pad_height"], got["num_tokens"]) \
                == (ref.new_w, ref.new_h, ref.pad_w, ref.pad_h, ref.num_tokens), (w, h)


@pytest.mark.slow
def test_fuzz_names_exif_white_and_float_normalization(vllm_tree, tmp_path):
    # A short fuzz run through the CLI: findings, every pixel finding explained by the causes named
    # in the issue (and the float32 look-up table), none unexplained.
    proc = _cli("fuzz", "--candidate", "vllm@0.33.0", "--profile", "k25", "--examples", "60", "--seed", "5",
                "--json", str(tmp_path / "fuzz.json"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    findings = json.loads((tmp_path / "fuzz.json").read_text())["findings"]
    causes = {c for f in findings for c in f.get("root_causes") or []}
    assert causes and causes <= {"exif-orientation", "flatten-white", "normalize-float"}, causes


@pytest.mark.slow
def test_its_video_chunks_are_the_checkpoints_and_its_images_flatten_on_white():
    # vLLM 0.33's fused processor on video_chunk items (issue 42): every drawn chunk bit for bit
    # the checkpoint's; mixed with images, the one difference is its media loader's white flatten.
    from kimi_oracle.core.config import PreprocessConfig
    from kimi_oracle.fuzzers.video_fuzz import run_media_isolated

    k25 = PreprocessConfig.k25()
    assert run_media_isolated("vllm@0.33.0", k25, "video", 200, seed=2).ok
    mixed = run_media_isolated("vllm@0.33.0", k25, "both", 200, seed=1)
    assert [g.explained_by for g in mixed.groups] == [["flatten-white/paste-on-white"]], mixed.lines()
