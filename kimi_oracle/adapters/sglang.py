"""SGLang's K3 deferred GPU image path, from the release's own functions (candidate `sglang`).

The functions are SGLang's, called by name, staged as `KimiK3ForConditionalGeneration.
get_image_feature` (`srt/models/kimi_k3.py`) stages one deferred group of the `gpu` backend:

- `prepare_kimi_k3_encoder_inputs(use_gpu_preprocessing=True)` keeps each image as
  `to_chw_uint8(image)` with `navit_resize_config(width, height, patch_size, merge_kernel_size,
  in_patch_limit, patch_limit_on_one_side, fixed_output_tokens)` of the `media_proc_cfg`;
- `get_image_feature` calls `normalization_tensors(image_mean, image_std, device)` of the group's
  first item and `_gpu_preprocess_images(features, resize_configs, scale, bias, patch_size,
  to_chw=to_chw_uint8(image, device=device), post_resize=fill_transparent_bg(x,
  transparent_bg_config))`.

Here `device` is CUDA when a CUDA device is visible and kernels are not interpreted
(`engine_device`): SGLang's own `normalize_and_patchify` then launches its Triton kernel, what
production runs; else the CPU, where it takes its torch branch. The rows come back on the CPU.
One call is one group: every image of a call shares the call's config, as the oracle's batches do.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

from kimi_oracle.adapters.loading import load_modules, require
from kimi_oracle.adapters.sources import Tree
from kimi_oracle.core.config import PreprocessConfig

K25_FILE = "srt/multimodal/processors/kimi_k25.py"
K3_FILE = "srt/multimodal/kimi_k3_image_processing.py"
# SGLang's own kernel module (kimi_k25.py imports normalize_and_patchify from its package).
KERNEL_FILES = ("kernels/ops/mm/process/__init__.py", "kernels/ops/mm/process/image.py")
_PLANNER_PARAMS = ("width", "height", "patch_size", "merge_kernel_size", "in_patch_limit",
                   "patch_limit_on_one_side", "fixed_output_tokens")


def engine_device() -> str:
    """`cuda` when a CUDA device is visible and TRITON_INTERPRET is not set, else `cpu`: where the
    engine paths that have a CUDA branch (SGLang's deferred GPU path) run here."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return "cuda" if torch.cuda.is_available() and not interpreted else "cpu"


def deferred_gpu_path(tree: Tree, known: tuple[str, ...]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(preprocess(images, config), plan(width, height, config)) taken from SGLang's `tree`."""
    k25, k3 = load_modules(tree, [K25_FILE, K3_FILE, *KERNEL_FILES])[:2]
    resize_config = require(k25, tree, K25_FILE, "navit_resize_config", _PLANNER_PARAMS, known)
    run = require(k25, tree, K25_FILE, "_gpu_preprocess_images",
                  ("images", "resize_configs", "image_scale", "image_bias", "patch_size", "to_chw", "post_resize"), known)
    to_chw = require(k3, tree, K3_FILE, "to_chw_uint8", ("image", "device"), known)
    fill = require(k3, tree, K3_FILE, "fill_transparent_bg", ("x", "bg_config"), known)
    tensors = require(k3, tree, K3_FILE, "normalization_tensors", ("image_mean", "image_std", "device"), known)

    def plan(width: int, height: int, config: PreprocessConfig) -> dict:
        cfg = config.to_hf_json()
        return resize_config(width, height, cfg["patch_size"], cfg["merge_kernel_size"], cfg["in_patch_limit"],
                             cfg["patch_limit_on_one_side"], cfg.get("fixed_output_tokens"))

    device = engine_device()

    def preprocess(images: list, config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """SGLang's K3 deferred GPU path (its own functions, on CUDA tensors where a device is visible)."""
        cfg = config.to_hf_json()
        features = [to_chw(image) for image in images]
        configs = [plan(*image.size, config) for image in images]
        scale, bias = tensors(list(cfg["image_mean"]), list(cfg["image_std"]), device)
        bg = cfg.get("transparent_bg_config")
        pixel_values, grids = run(features, configs, scale, bias, cfg["patch_size"],
                                  to_chw=lambda image: to_chw(image, device=device),
                                  post_resize=lambda x: fill(x, bg))
        return pixel_values.cpu(), torch.as_tensor(grids).cpu()

    return preprocess, plan


def cpu_backend_path(tree: Tree, known: tuple[str, ...]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(preprocess, plan) of SGLang's K3 `cpu` backend from `tree`: each image an item whose
    feature is the image itself and whose `grid_thws` are SGLang's own (`navit_resize_config`,
    `_grid_thw_from_resize_config`, as `prepare_kimi_k3_encoder_inputs` makes them), materialized
    by SGLang's `materialize_kimi_k3_cpu_features(items, image_processor)`, which runs "the
    checkpoint's exact processor" and raises "deferred CPU preprocessing produced wrong grids"
    when its grids are not SGLang's. The checkpoint's processor is the checkpoint's remote code,
    not SGLang's: here it is the reference pipeline (`pipelines.reference`, bit for bit that code),
    so what this path checks is SGLang's own part: its items, its grids and that check."""
    from kimi_oracle.pipelines import reference

    k25, k3 = load_modules(tree, [K25_FILE, K3_FILE, *KERNEL_FILES])[:2]
    resize_config = require(k25, tree, K25_FILE, "navit_resize_config", _PLANNER_PARAMS, known)
    grid_of = require(k25, tree, K25_FILE, "_grid_thw_from_resize_config", ("config", "patch_size"), known)
    materialize = require(k3, tree, K3_FILE, "materialize_kimi_k3_cpu_features", ("items", "image_processor"), known)

    def plan(width: int, height: int, config: PreprocessConfig) -> dict:
        cfg = config.to_hf_json()
        return resize_config(width, height, cfg["patch_size"], cfg["merge_kernel_size"], cfg["in_patch_limit"],
                             cfg["patch_limit_on_one_side"], cfg.get("fixed_output_tokens"))

    class _Item:  # the fields of SGLang's MultimodalDataItem that the function reads
        def __init__(self, feature: Any, grid: tuple[int, int, int]):
            self.feature = feature
            self.model_specific_data = {"grid_thws": torch.tensor([grid], dtype=torch.int64)}

    class _CheckpointProcessor:  # `image_processor.preprocess(medias, return_tensors="pt")`
        def __init__(self, config: PreprocessConfig):
            self.config = config

        def preprocess(self, medias: list, return_tensors: str = "pt") -> dict:
            out = reference.preprocess([m["image"] for m in medias], self.config)
            return {"pixel_values": out.pixel_values, "grid_thws": out.grid_thws}

    def preprocess(images: list, config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """SGLang's K3 CPU backend (its items, grids and check; the checkpoint's processor)."""
        grids = [tuple(int(v) for v in grid_of(plan(*image.size, config), config.patch_size)) for image in images]
        items = [_Item(image, grid) for image, grid in zip(images, grids)]
        pixel_values = materialize(items, _CheckpointProcessor(config))
        return pixel_values, torch.tensor(grids, dtype=torch.int64)

    return preprocess, plan


__all__ = ["KERNEL_FILES", "K25_FILE", "K3_FILE", "cpu_backend_path", "deferred_gpu_path", "engine_device"]
