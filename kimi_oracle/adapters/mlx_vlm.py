"""mlx-vlm 0.7's own Kimi image processors, the release's classes called by name (candidates
`mlx-vlm`, K2.5, and `mlx-vlm-k3`, K3), on MLX's Linux CPU backend.

- K2.5: `models/kimi_k25/processing_kimi_k25.py` `KimiK25ImageProcessor(patch_size, image_mean,
  image_std, in_token_limit, merge_kernel_size, patch_limit_on_one_side).preprocess(images)`:
  `rescale` (plan inline, `convert("RGB")`, Pillow bicubic, black pad by `Image.paste`), `to_mlx`
  (`/ 255.0` in MLX float32), `normalize` (`(x - mean) / std` in MLX float32), `patchify`;
  its grids are (h, w) `image_grid_hws`, given here as (1, h, w).
- K3: `models/kimi_k3/processing_kimi_k3.py` `KimiK3ImageProcessor(..., in_patch_limit,
  transparent_bg_config, transparent_bg_fill_stage)`: `rescale` (filled before the resize by
  `_fill_transparent_bg`, or, filling after it, a palette converted to RGBA first), then
  numpy `(arr / 255.0 - mean) / std` with float64 statistics, `patchify`, cast to MLX float32;
  the config's background and fill stage are passed as its `transparent_bg_config` and
  `transparent_bg_fill_stage` (left out when the config has none: the processor's default).

Neither has a planner function of its own (the plan is inline in `rescale`): no planner path.
Imports: the processor file runs as shipped (`loading.load_modules`) with the real transformers
5.23.0 of candidate `transformers` (`BaseImageProcessor`, `BatchFeature`, `make_list_of_images`,
`valid_images`, `ProcessorMixin`); the rest of mlx-vlm (`..base`, `.encoding_k3`) is stood in.
`mlx` and `mlx-cpu` 0.32.4 (MLX's CPU backend for Linux) are fetched pinned into the engine
cache (`pip download --no-deps`) and put on the candidate process's `sys.path` only.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from kimi_oracle.adapters.loading import load_module, require_class
from kimi_oracle.adapters.sources import Tree, unpacked_site
from kimi_oracle.adapters.transformers_k25 import declare_torchvision_ops, transformers_entries
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError

K25_FILE = "models/kimi_k25/processing_kimi_k25.py"
K3_FILE = "models/kimi_k3/processing_kimi_k3.py"
K25 = "KimiK25ImageProcessor"
K3 = "KimiK3ImageProcessor"
RUNTIME = ("mlx==0.32.4", "mlx-cpu==0.32.4")
TRANSFORMERS = "5.23.0"
_K25_PARAMS = ("patch_size", "image_mean", "image_std", "in_token_limit", "merge_kernel_size",
               "patch_limit_on_one_side")
_K3_PARAMS = ("patch_size", "image_mean", "image_std", "in_patch_limit", "merge_kernel_size",
              "patch_limit_on_one_side", "transparent_bg_config", "transparent_bg_fill_stage")


def runtime_site() -> Path:
    """The cache's site directory holding mlx and its CPU backend (fetched once)."""
    return unpacked_site("candidate mlx-vlm (mlx 0.32.4, its CPU backend)", "mlx-vlm-mlx-0.32.4", RUNTIME)


def _on_path(tree: Tree) -> None:
    entries = [runtime_site(), *transformers_entries(TRANSFORMERS)]
    for entry in map(str, entries):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    importlib.invalidate_caches()
    declare_torchvision_ops()
    try:
        importlib.import_module("mlx.core")
    except Exception as exc:
        raise CandidateError(f"candidate mlx-vlm ({tree.root}): importing mlx.core failed: "
                             f"{type(exc).__name__}: {exc}") from None


def _kwargs(config: PreprocessConfig, k3: bool) -> dict[str, Any]:
    m = config.merge_kernel_size
    out: dict[str, Any] = {"patch_size": config.patch_size, "image_mean": tuple(config.image_mean),
                           "image_std": tuple(config.image_std), "merge_kernel_size": [m, m],
                           "patch_limit_on_one_side": config.patch_limit_on_one_side}
    if not k3:  # from_pretrained maps media_proc_cfg's in_patch_limit to in_token_limit
        return {**out, "in_token_limit": config.in_patch_limit}
    bg = config.transparent_bg_config.to_dict() if config.transparent_bg_config is not None else None
    out = {**out, "in_patch_limit": config.in_patch_limit, "transparent_bg_config": bg}
    if config.transparent_bg_fill_stage is not None:  # (else the processor's own default)
        out["transparent_bg_fill_stage"] = config.transparent_bg_fill_stage
    return out


def image_processor_path(tree: Tree, known: tuple[str, ...], k3: bool) -> tuple[Callable[..., Any], None]:
    """(preprocess(images, config), None) of mlx-vlm's `tree`: K2.5's or K3's (`k3`) processor."""
    relative, name = (K3_FILE, K3) if k3 else (K25_FILE, K25)
    checked = load_module(tree, relative)  # stand-ins only: refused before mlx is fetched
    require_class(checked, tree, relative, name, "__init__", _K3_PARAMS if k3 else _K25_PARAMS, known)
    require_class(checked, tree, relative, name, "preprocess", ("images", "return_tensors"), known)
    _on_path(tree)
    module = load_module(tree, relative)
    processors: dict[PreprocessConfig, Any] = {}

    def preprocess(images: list, config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """mlx-vlm's Kimi image processor (its own class, MLX on the CPU)."""
        if config not in processors:
            processors.clear()
            processors[config] = getattr(module, name)(**_kwargs(config, k3))
        out = processors[config].preprocess(list(images))
        pixels = torch.from_numpy(np.array(out["pixel_values"], dtype=np.float32, copy=True))
        grids = torch.from_numpy(np.array(out["grid_thws" if k3 else "image_grid_hws"], dtype=np.int64))
        if not k3:
            grids = torch.cat([torch.ones(grids.shape[0], 1, dtype=torch.int64), grids.reshape(-1, 2)], dim=1)
        return pixels, grids

    return preprocess, None


__all__ = ["K25", "K25_FILE", "K3", "K3_FILE", "RUNTIME", "image_processor_path", "runtime_site"]
