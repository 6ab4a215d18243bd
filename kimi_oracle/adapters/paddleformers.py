"""PaddleFormers 1.2's own Kimi-K2.5 processor, the release's class called by name (candidate
`paddleformers`; its planner `navit_resize_image` is wired in `adapters.engines`).

PaddleFormers carries its own K2.5 preprocessing in `transformers/kimi_k25/`:
`vision_processor.py` `KimiK25VisionProcessor(media_proc_cfg).preprocess(medias)` plans each item
with `media_utils.py` `navit_resize_image` (SGLang's parameter names), decodes with `_to_pil`
(`convert("RGB")`: transparency dropped), resizes with Pillow's bicubic and pads with numpy
(`resize_image` -> `media_utils.image_to_np`), stacks the batch with `paddle.stack`, normalizes
with `paddle_vision_utils.normalize((x / 255).astype("float32"), mean, std)` and cuts patches
with `media_utils.navit_patchify` (a reshape, `Tensor.transpose(...)` and a reshape).

Imports: those three files run as shipped (`loading.load_modules`); the rest of PaddleFormers
(`image_processing_utils.BaseImageProcessor`, `BatchFeature`, `tokenizer_utils_base`, its logger)
is stood in, `BatchFeature` by a function that hands the data back as a dict. PaddlePaddle 3.3.1's
CPU wheel (about 195 MB) and what `import paddle` needs beyond kimi-oracle's own dependencies are
fetched pinned (`pip download --no-deps`) into the engine cache and unpacked there
(`RUNTIME`), then put on the candidate process's `sys.path` only; never installed.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from kimi_oracle.adapters.loading import load_modules, require, require_class
from kimi_oracle.adapters.sources import Tree, unpacked_site
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError

PROCESSOR_FILE = "transformers/kimi_k25/vision_processor.py"
MEDIA_FILE = "transformers/kimi_k25/media_utils.py"
VISION_UTILS_FILE = "transformers/paddle_vision_utils.py"
PROCESSOR = "KimiK25VisionProcessor"
PLANNER = "navit_resize_image"
PLANNER_PARAMS = ("width", "height", "patch_size", "merge_kernel_size", "in_patch_limit",
                  "patch_limit_on_one_side", "fixed_output_tokens")
# paddlepaddle 3.3.1 (CPU, CPython 3.11) and what its import needs that kimi-oracle does not bring.
RUNTIME = ("paddlepaddle==3.3.1", "protobuf==6.33.5", "opt_einsum==3.3.0", "httpx==0.28.1", "httpcore==1.0.9",
           "anyio==4.15.1", "h11==0.16.0", "certifi==2026.7.22", "idna==3.20", "safetensors==0.8.0")
RUNTIME_NAME = "paddleformers-paddlepaddle-3.3.1"
TEMPORAL_MERGE = 4  # the checkpoint's media_proc_cfg value; the processor's __init__ reads it


def runtime_site() -> Path:
    """The cache's site directory holding paddlepaddle and its imports (fetched once, ~700 MB unpacked)."""
    return unpacked_site("candidate paddleformers (paddlepaddle 3.3.1, its runtime)", RUNTIME_NAME, RUNTIME)


def _batch_feature(data: Any = None, tensor_type: Any = None, **_: Any) -> Any:
    return data  # (the stood-in BatchFeature: the processor's dict as it built it)


def _checked(tree: Tree, known: tuple[str, ...]) -> None:
    processor, media = load_modules(tree, [PROCESSOR_FILE, MEDIA_FILE])  # stand-ins only: no paddle yet
    require_class(processor, tree, PROCESSOR_FILE, PROCESSOR, "preprocess", ("medias", "return_tensors"), known)
    require_class(processor, tree, PROCESSOR_FILE, PROCESSOR, "__init__", ("media_proc_cfg",), known)
    require(media, tree, MEDIA_FILE, PLANNER, PLANNER_PARAMS, known)
    require(media, tree, MEDIA_FILE, "navit_patchify", ("pixel_values", "patch_size"), known)


def import_paddle(tree: Tree) -> Any:
    """`paddle` from the cache's runtime site (on this process's sys.path only)."""
    site = str(runtime_site())
    if site not in sys.path:
        sys.path.insert(0, site)
    importlib.invalidate_caches()
    try:
        return importlib.import_module("paddle")
    except Exception as exc:
        raise CandidateError(f"candidate paddleformers ({tree.root}): importing paddle from {site} failed: "
                             f"{type(exc).__name__}: {exc}") from None


def media_proc_cfg(config: PreprocessConfig) -> dict[str, Any]:
    """The processor's `media_proc_cfg` (the checkpoint's keys and its temporal merge)."""
    return {**config.to_hf_json(), "temporal_merge_kernel_size": TEMPORAL_MERGE}


def vision_processor_path(tree: Tree, known: tuple[str, ...]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(preprocess(images, config), plan(width, height, config)) of PaddleFormers' `tree`."""
    _checked(tree, known)
    import_paddle(tree)
    processor, media, _ = load_modules(tree, [PROCESSOR_FILE, MEDIA_FILE, VISION_UTILS_FILE])
    processor.BatchFeature = _batch_feature
    processors: dict[PreprocessConfig, Any] = {}

    def preprocess(images: list, config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """PaddleFormers' KimiK25VisionProcessor.preprocess (its own class, on paddle's CPU build)."""
        if config not in processors:
            processors.clear()
            processors[config] = getattr(processor, PROCESSOR)(media_proc_cfg=media_proc_cfg(config))
        out = processors[config].preprocess([{"type": "image", "image": img} for img in images])
        return (torch.from_numpy(np.ascontiguousarray(out["pixel_values"].numpy())),
                torch.from_numpy(np.ascontiguousarray(out["grid_thws"].numpy())).long())

    def plan(width: int, height: int, config: PreprocessConfig) -> dict:
        return media.navit_resize_image(width, height, config.patch_size, config.merge_kernel_size,
                                        config.in_patch_limit, config.patch_limit_on_one_side,
                                        config.fixed_output_tokens)

    return preprocess, plan


__all__ = ["MEDIA_FILE", "PLANNER", "PLANNER_PARAMS", "PROCESSOR", "PROCESSOR_FILE", "RUNTIME", "media_proc_cfg",
           "runtime_site", "vision_processor_path"]
