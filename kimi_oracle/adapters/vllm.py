"""vLLM 0.33's own Kimi image processors, the release's classes and functions called by name
(candidates `vllm` and `vllm-k3`; their planner, `navit_resize_image`, is wired in `adapters.engines`).

vLLM 0.33 no longer runs the checkpoint's remote image processor for Kimi: both models take
`transformers_utils/processors/kimi_k25_vision_fused.py` `KimiK25FusedVisionProcessor` (a CPU
processor: Pillow's bicubic resize, then one numba kernel `_write_fused_patches` that pads,
normalizes through a float32 look-up table and patchifies), passed as `processor_cls_overrides`:

- K2.5 (`model_executor/models/kimi_k25.py` `KimiK25ProcessingInfo`, when numba imports) calls
  its `preprocess([{"type": "image", "image": ...}], return_tensors="pt")`;
  Video chunks (issue 42) are the same call's `{"type": "video_chunk", "video_chunk": frames}`
  items (the processor plans a chunk by `navit_resize_video` of its first frame, fps 1, sample fps
  infinite; vLLM 0.33 itself has no `split_video_chunks`: the chunks are the caller's, as here);
  video candidate `vllm@SOURCE` takes images and chunks mixed (`--media video|both`);
- K3 (`models/kimi_k3/common/mm_preprocess.py` `KimiK3ProcessingInfo`) wraps it in
  `transformers_utils/processors/kimi_k3.py` `KimiK3Processor(image_processor, tokenizer)`,
  called as `processor(images=[...], return_tensors="pt")`.

Both count tokens with the processor's `media_tokens_calculator` -> `get_resize_config` ->
`navit_resize_image(width, height, patch_size, merge_kernel_size, in_patch_limit,
patch_limit_on_one_side, fixed_output_tokens)` of the same file: the planner, and the
candidates' self-check. An uploaded image reaches the processor through vLLM's media loader
(`multimodal/media/image.py` `ImageMediaIO.load_bytes`, image_mode "RGB", background white by
default): `multimodal/image.py` `normalize_image` (EXIF orientation) then `convert_image_mode(
image, "RGB", (255, 255, 255))` (transparency flattened onto white). The candidates stage each
image with those two functions, then call the processor; the config's fields are passed as the
processor's `media_proc_cfg` on every call. Neither takes `transparent_bg_config`.

Imports: the four files run as shipped (`loading.load_modules`), with `utils/jit_monitor.py`
(the `numba_workqueue_threading_layer` context) and `utils/import_utils.py`
(`is_numba_available`); the rest of vLLM is stood in. numba 0.68.1 and llvmlite 0.50.0 (the
kernel's JIT) are fetched pinned into the engine cache (`pip download --no-deps`) and
transformers 5.23.0 (`BaseImageProcessor`, `BatchFeature`, `ProcessorMixin`) is the tree and
pinned site of candidate `transformers` (`adapters.transformers_k25`); all go on the candidate
process's `sys.path` only (after the environment's own packages for an installed vLLM).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from kimi_oracle.adapters.loading import load_modules, require, require_class
from kimi_oracle.adapters.sources import Tree, cache_dir, unpacked_site
from kimi_oracle.adapters.transformers_k25 import declare_torchvision_ops, transformers_entries
from kimi_oracle.core.config import VIDEO_KEYS, PreprocessConfig
from kimi_oracle.core.errors import CandidateError

FUSED_FILE = "transformers_utils/processors/kimi_k25_vision_fused.py"
K3_FILE = "transformers_utils/processors/kimi_k3.py"
IMAGE_FILE = "multimodal/image.py"
_HELPER_FILES = ("utils/import_utils.py", "utils/jit_monitor.py")
FUSED = "KimiK25FusedVisionProcessor"
K3 = "KimiK3Processor"
PLANNER = "navit_resize_image"
PLANNER_PARAMS = ("width", "height", "patch_size", "merge_kernel_size", "in_patch_limit",
                  "patch_limit_on_one_side", "fixed_output_tokens")
NUMBA = ("numba==0.68.1", "llvmlite==0.50.0")  # the kernel's JIT (built for CPython 3.11, numpy 2)
TRANSFORMERS = "5.23.0"  # BaseImageProcessor, BatchFeature, ProcessorMixin
# ImageMediaIO's defaults: image_mode "RGB", rgba_background_color (255, 255, 255).
WHITE = (255, 255, 255)
# The checkpoint's media_proc_cfg value; the processor reads it for video chunks only.
TEMPORAL_MERGE = 4


def numba_site() -> Path:
    """The cache's site directory holding the pinned numba and llvmlite (fetched once)."""
    return unpacked_site("candidate vllm (numba, its kernel's JIT)", "vllm-numba-0.68.1-llvmlite-0.50.0", NUMBA)


def _on_path(tree: Tree) -> None:
    # numba and transformers for the engine's files: the environment's own when it has them.
    # numba's on-disk cache of the kernel (`cache=True`) goes to the engine cache, not the tree.
    os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir() / "numba"))
    entries = [numba_site(), *transformers_entries(TRANSFORMERS)]
    for entry in map(str, entries):
        if entry in sys.path:
            continue
        if tree.origin == "installed":
            sys.path.append(entry)
        else:
            sys.path.insert(0, entry)
    importlib.invalidate_caches()
    declare_torchvision_ops()  # as for candidate transformers: a CUDA torchvision on a CPU torch


def _checked(tree: Tree, known: tuple[str, ...]) -> None:
    # With stand-ins only (no numba, no transformers): refused before anything is fetched or run.
    fused, k3, image = load_modules(tree, [FUSED_FILE, K3_FILE, IMAGE_FILE])
    require_class(fused, tree, FUSED_FILE, FUSED, "preprocess", ("medias", "return_tensors"), known)
    require_class(fused, tree, FUSED_FILE, FUSED, "__init__", ("media_proc_cfg",), known)
    require(fused, tree, FUSED_FILE, PLANNER, PLANNER_PARAMS, known)
    require_class(k3, tree, K3_FILE, K3, "__call__", ("images", "return_tensors"), known)
    require(image, tree, IMAGE_FILE, "normalize_image", ("image",), known)
    require(image, tree, IMAGE_FILE, "convert_image_mode", ("image", "to_mode", "background_color"), known)


def media_proc_cfg(config: PreprocessConfig) -> dict[str, Any]:
    """The processor's `media_proc_cfg` for `config` (the checkpoint's keys; with the video
    rules, every video key, a null one as null: K2.5's file has `in_patch_limit_video: null`)."""
    video = {key: getattr(config, key) for key in VIDEO_KEYS} if config.has_video else {}
    return {**config.to_hf_json(), "temporal_merge_kernel_size": TEMPORAL_MERGE, **video}


def fused_processor_path(tree: Tree, known: tuple[str, ...], k3: bool) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(preprocess(images, config), plan(width, height, config)) of vLLM's `tree`: the fused
    processor called directly (K2.5) or through `KimiK3Processor` (`k3`)."""
    _checked(tree, known)
    _on_path(tree)
    fused, k3_module, image, *_ = load_modules(tree, [FUSED_FILE, K3_FILE, IMAGE_FILE, *_HELPER_FILES])
    kernel = getattr(fused, "_write_fused_patches", None)
    if getattr(fused, "njit", None) is None or type(kernel).__module__.split(".")[0] != "numba":
        raise CandidateError(f"{tree.file(FUSED_FILE)}: _write_fused_patches is not numba's kernel here "
                             f"(numba did not import); the vllm adapter pins {', '.join(NUMBA)}")
    # numba finds the kernel's module by name (to compile it and to load its cached build): in
    # the candidate's own process, the last loaded file is that module.
    sys.modules[fused.__name__] = fused
    processors: dict[PreprocessConfig, Any] = {}
    # (original size, staged size) of the last call's images, in order: vLLM plans the staged
    # image (EXIF-transposed), so the self-check's plan of an original size plans that one.
    staged_sizes: list[tuple[tuple[int, int], tuple[int, int]]] = []

    def staged(img: Any) -> Any:  # what ImageMediaIO.load_bytes hands on, after decoding
        out = image.convert_image_mode(image.normalize_image(img), "RGB", WHITE)
        staged_sizes.append((img.size, out.size))
        return out

    def preprocess(images: list, config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """vLLM's KimiK25FusedVisionProcessor (its own class, numba kernel), staged as its media loader."""
        if config not in processors:
            processors.clear()
            processors[config] = getattr(fused, FUSED)(media_proc_cfg=media_proc_cfg(config))
        staged_sizes.clear()
        if any(isinstance(item, (list, tuple)) for item in images):  # K2.5 video chunks among them
            if k3:
                raise CandidateError("candidate vllm-k3: KimiK3Processor takes images only; video chunks go to "
                                     "vllm (KimiK25FusedVisionProcessor, its video_chunk items)")
            medias = [{"type": "video_chunk", "video_chunk": list(item)} if isinstance(item, (list, tuple))
                      else {"type": "image", "image": staged(item)} for item in images]
            out = processors[config].preprocess(medias, return_tensors="pt")
            return out["pixel_values"], out["grid_thws"]
        ready = [staged(img) for img in images]
        if k3:
            out = getattr(k3_module, K3)(image_processor=processors[config], tokenizer=None)(
                images=ready, return_tensors="pt")
        else:
            out = processors[config].preprocess([{"type": "image", "image": img} for img in ready],
                                                return_tensors="pt")
        return out["pixel_values"], out["grid_thws"]

    def plan(width: int, height: int, config: PreprocessConfig) -> dict:
        if staged_sizes and staged_sizes[0][0] == (width, height):
            width, height = staged_sizes.pop(0)[1]
        return fused.navit_resize_image(width, height, config.patch_size, config.merge_kernel_size,
                                        config.in_patch_limit, config.patch_limit_on_one_side,
                                        config.fixed_output_tokens)

    return preprocess, plan


__all__ = ["FUSED", "FUSED_FILE", "IMAGE_FILE", "K3", "K3_FILE", "NUMBA", "PLANNER", "PLANNER_PARAMS",
           "fused_processor_path", "media_proc_cfg", "numba_site"]
