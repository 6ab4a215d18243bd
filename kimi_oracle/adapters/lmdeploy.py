"""LMDeploy 0.18's Kimi-K2.5 image front end, the release's class called by name (candidate `lmdeploy`).

LMDeploy has no Kimi preprocessing of its own: `vl/model/kimi_k25.py` `KimiK25VisionModel` is glue
around the checkpoint's own processor (`AutoProcessor.from_pretrained(model_path)`, the snapshot's
`kimi_k25_processor.py`). What the glue does, and the candidate runs as shipped:

- decode: `vl/media/image.py` `ImageMediaIO` (`image_mode="RGB"`): `Image.open(...).convert("RGB")`,
  transparency dropped (the candidate stages each image with the class's own `image_mode`);
- `build_preprocessor`: refuses a checkpoint whose `vision_config.patch_size` is not 14 or whose
  `merge_kernel_size` is not (2, 2) (a ValueError per refusal);
- `preprocess(messages, input_prompt)`: the processor's `image_processor.preprocess(medias,
  return_tensors="pt")`, `_validate_vision_outputs` (t == 1, grids divisible by the merge kernel,
  rows == sum(t*h*w)), then `VisionModel._postprocess_mm_output` casts the rows to the model's
  dtype (`vl/engine.py` `_get_hf_config_mm_feature_dtype`: the checkpoint's `torch_dtype`,
  bfloat16 for K2.5) and `_expand_media_tokens` expands each pad; each image's rows are one
  multimodal item, concatenated here in prompt order.

The checkpoint's processor is stood in by kimi-oracle's reference (`pipelines.reference`, which is
that processor bit for bit: docs/spec.md), so a finding is LMDeploy's glue, not the processor.
Imports: those four files run as shipped (`loading.load_modules`); `mmengine`, `pybase64`,
`transformers`, `lmdeploy.archs`, `lmdeploy.utils` and the rest of LMDeploy are stood in.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import torch

from kimi_oracle.adapters.loading import load_modules, require, require_class
from kimi_oracle.adapters.sources import Tree
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.tokenizer import MEDIA_PAD, Tokenizer

MODEL_FILE = "vl/model/kimi_k25.py"
BASE_FILE = "vl/model/base.py"
MEDIA_FILE = "vl/media/image.py"
ENGINE_FILE = "vl/engine.py"
HELPERS = ("vl/constants.py", "vl/model/preprocess_utils.py")
MODEL = "KimiK25VisionModel"
CHECKPOINT_DTYPE = "bfloat16"  # Kimi-K2.5's config.json torch_dtype
_PROMPT_IDS = (1, 2)  # text tokens around each raw pad (any non-special ids)


class _Snapshot:
    """The checkpoint snapshot's processor: its tokenizer's pad id and its image processor (the
    reference pipeline, which is the checkpoint's processor bit for bit)."""

    def __init__(self, config: PreprocessConfig):
        self.tokenizer = Tokenizer()
        self.config = config
        self.image_processor = self

    def preprocess(self, medias: list, return_tensors: str = "pt") -> dict[str, Any]:
        from kimi_oracle.pipelines.reference import preprocess

        result = preprocess([m["image"] for m in medias], self.config)
        return {"pixel_values": result.pixel_values, "grid_thws": torch.as_tensor(result.grid_thws)}


def hf_config(config: PreprocessConfig) -> Any:
    """The checkpoint's `config.json` as the glue reads it (vision_config, pad id, dtype)."""
    return SimpleNamespace(media_placeholder_token_id=Tokenizer().media_pad_id, torch_dtype=CHECKPOINT_DTYPE,
                           vision_config=SimpleNamespace(patch_size=config.patch_size,
                                                         merge_kernel_size=config.merge_kernel_size))


def _checked(tree: Tree, known: tuple[str, ...]) -> tuple[Any, ...]:
    modules = load_modules(tree, [MODEL_FILE, BASE_FILE, MEDIA_FILE, ENGINE_FILE, *HELPERS])
    model, base, media, engine, constants = modules[:5]
    require_class(model, tree, MODEL_FILE, MODEL, "preprocess", ("messages", "input_prompt"), known)
    require_class(model, tree, MODEL_FILE, MODEL, "build_preprocessor", ("trust_remote_code",), known)
    require_class(base, tree, BASE_FILE, "VisionModel", "set_mm_feature_dtype", ("dtype",), known)
    require_class(media, tree, MEDIA_FILE, "ImageMediaIO", "__init__", ("image_mode",), known)
    require(engine, tree, ENGINE_FILE, "_get_hf_config_mm_feature_dtype", ("hf_config",), known)
    return model, media, engine, constants.Modality.IMAGE


def vision_model_path(tree: Tree, known: tuple[str, ...]) -> tuple[Callable[..., Any], None]:
    """(preprocess(images, config), None) of LMDeploy's `tree` (no planner of its own)."""
    model, media, engine, image_type = _checked(tree, known)
    mode = media.ImageMediaIO().image_mode
    built: dict[PreprocessConfig, Any] = {}

    def vision_model(config: PreprocessConfig) -> Any:
        if config not in built:
            built.clear()
            snapshot = _Snapshot(config)
            model.AutoProcessor = SimpleNamespace(from_pretrained=lambda *a, **k: snapshot)  # the snapshot's
            vm = object.__new__(getattr(model, MODEL))  # (its __init__ reads the checkpoint from disk)
            vm.backend, vm.model_path, vm.hf_config = "pytorch", "kimi-k2.5", hf_config(config)
            vm.build_preprocessor(trust_remote_code=True)  # refuses other patch / merge sizes
            vm.set_mm_feature_dtype(engine._get_hf_config_mm_feature_dtype(vm.hf_config))
            built[config] = vm
        return built[config]

    def preprocess(images: list, config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """LMDeploy's KimiK25VisionModel.preprocess around the checkpoint's processor."""
        vm = vision_model(config)
        staged = [img.convert(mode) for img in images]  # ImageMediaIO.load_bytes after decoding
        pad = vm.image_token_id
        prompt = [t for _ in staged for t in (_PROMPT_IDS[0], pad)] + [_PROMPT_IDS[1]]
        out = vm.preprocess([{"role": "user", "content": [{"type": image_type, "data": img} for img in staged]}],
                            prompt)
        items = out["multimodal"]
        return (torch.cat([i["pixel_values"] for i in items]), torch.cat([i["grid_thws"] for i in items]))

    return preprocess, None


__all__ = ["CHECKPOINT_DTYPE", "MEDIA_PAD", "MODEL", "MODEL_FILE", "hf_config", "vision_model_path"]
