"""transformers' `Kimi_K25VideoProcessor`, the release's own class called by name (video candidate
and video planner `transformers@SOURCE`, issue 42).

The class lives in `models/kimi_k25/video_processing_kimi_k25.py` and runs on transformers' video
machinery (`BaseVideoProcessor`, torchvision). As for the image processor
(`adapters.transformers_k25`), nothing of it is copied or installed: the real package is imported
from the tree in the candidate's process, its pinned dependencies fetched into the engine cache.

Called as a checkpoint's `video_preprocessor_config.json` would build it: `Kimi_K25VideoProcessor(
patch_size, merge_size, temporal_patch_size, max_patches, size={"max_height": s, "max_width": s},
image_mean, image_std)` with the config's `patch_size`, `merge_kernel_size`,
`temporal_merge_kernel_size`, the frame limit `in_patch_limit_each_frame` (or `in_patch_limit`),
`patch_limit_on_one_side` and statistics; each chunk is given as one video of its frames, with
`do_sample_frames=False` (the chunk's frames are already the sampled ones), and its
`pixel_values_videos` and `video_grid_thw` are the result. The class has no total video budget
(`in_patch_limit_video`) and no fixed count: configs that set them are processed without them, as
the release does. Its planner is the file's own `navit_resize` under the same arguments.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from kimi_oracle.adapters.loading import load_module, require, require_class
from kimi_oracle.adapters.transformers_k25 import (NAVIT_PARAMS, declare_torchvision_ops, dependency_site,
                                                   import_processor)
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.video import require_video

VIDEO_FILE = "models/kimi_k25/video_processing_kimi_k25.py"
VIDEO_PROCESSOR = "Kimi_K25VideoProcessor"
_MODULE = "transformers.models.kimi_k25.video_processing_kimi_k25"
_PARAMS = ("patch_size", "temporal_patch_size", "merge_size", "max_patches", "size", "image_mean", "image_std")


def video_kwargs(config: PreprocessConfig) -> dict[str, Any]:
    """The video processor's own arguments for `config`."""
    require_video(config)
    side = config.patch_limit_on_one_side
    return {"patch_size": config.patch_size, "merge_size": config.merge_kernel_size,
            "temporal_patch_size": int(config.temporal_merge_kernel_size),  # type: ignore[arg-type]
            "max_patches": int(config.in_patch_limit_each_frame or config.in_patch_limit),
            "size": {"max_height": side, "max_width": side}, "image_mean": list(config.image_mean),
            "image_std": list(config.image_std), "do_resize": True, "do_rescale": True, "do_normalize": True,
            "do_convert_rgb": True, "do_sample_frames": False}


def video_path(source: str | None) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(preprocess(chunks, config), plan(width, height, num_frames, config)) of transformers'
    release `source` (a version, a wheel or a directory)."""
    from kimi_oracle.adapters.engines import load_tree

    engine, _, tree = load_tree("transformers" + (f"@{source}" if source else ""))
    site = dependency_site()
    if str(site) not in sys.path:  # (the file imports torchvision itself: its pinned one, its ops declared)
        sys.path.append(str(site))
    declare_torchvision_ops()
    checked = load_module(tree, VIDEO_FILE)  # stand-ins: refused before anything runs
    require_class(checked, tree, VIDEO_FILE, VIDEO_PROCESSOR, "_preprocess",
                  ("patch_size", "temporal_patch_size", "merge_size", "max_patches", "size"), engine.known)
    navit = require(checked, tree, VIDEO_FILE, "navit_resize", NAVIT_PARAMS, engine.known)
    processor_class = import_processor(tree, site, module_name=_MODULE, relative=VIDEO_FILE,
                                       class_name=VIDEO_PROCESSOR)
    processors: dict[PreprocessConfig, Any] = {}

    def preprocess(chunks: list, config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' Kimi_K25VideoProcessor (the release's own class), one video a chunk."""
        if config not in processors:
            processors.clear()
            kwargs = video_kwargs(config)
            processors[config] = processor_class(**{k: v for k, v in kwargs.items() if k != "do_sample_frames"})
        out = processors[config](videos=[list(c) for c in chunks], return_tensors="pt", do_sample_frames=False)
        return out["pixel_values_videos"], out["video_grid_thw"]

    def plan(width: int, height: int, num_frames: int, config: PreprocessConfig) -> dict[str, Any]:
        """The release's navit_resize under the video processor's arguments (tokens of one frame)."""
        kwargs = video_kwargs(config)
        p, m = config.patch_size, config.merge_kernel_size
        (new_h, new_w), (padded_h, padded_w) = navit(
            height=height, width=width, patch_size=p, merge_kernel_size=m, max_patches=kwargs["max_patches"],
            max_size_per_side=config.patch_limit_on_one_side)
        return {"new_width": new_w, "new_height": new_h, "pad_width": padded_w - new_w,
                "pad_height": padded_h - new_h, "num_tokens": (padded_h // p) * (padded_w // p) // (m * m),
                "grid_thw": [int(num_frames), padded_h // p, padded_w // p]}

    return preprocess, plan


__all__ = ["VIDEO_FILE", "VIDEO_PROCESSOR", "video_kwargs", "video_path"]
