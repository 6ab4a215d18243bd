"""transformers' `Kimi_K25ImageProcessor`, the release's own class called by name (candidate
`transformers`).

The class lives in `models/kimi_k25/image_processing_kimi_k25.py` and runs on transformers' own
image machinery (`TorchvisionBackend`, `BatchFeature`, `image_utils`, `image_transforms`) and
torchvision. None of that is a dependency of kimi-oracle, and none of it is copied here: the
adapter imports the real `transformers` package from the tree, in the candidate's own process,
with the packages it needs on the image path fetched pinned with `pip download --no-deps` into
the engine cache (`DEPENDENCIES`, unpacked once into `deps/`; `.ci/run` fetches them) and put on
that process's `sys.path` only.

Called as a checkpoint's `preprocessor_config.json` would build it: `Kimi_K25ImageProcessor(
patch_size, merge_size, max_patches, size={"max_height": s, "max_width": s}, image_mean,
image_std)` with the config's `patch_size`, `merge_kernel_size`, `in_patch_limit`,
`patch_limit_on_one_side` and statistics, then `processor(images=..., return_tensors="pt")`; its
`pixel_values` (N, 3, p, p) and `image_grid_thw` are the result. The class takes no
`fixed_output_tokens` and no transparent background (`transparent_bg_config`): configs that set
them are processed without them, as the release does. Its own planner, `navit_resize`, is the
candidate's `plan` (self-check).

Before anything runs, the file is loaded with stand-ins (`loading.load_module`) and checked for
the class and the parameters passed (one exit-2 line otherwise). The one stand-in in the real
run: torchvision's wheel on PyPI is built against CUDA torch, so on a CPU-only torch its C++
extension (detection ops: `nms`, `roi_align`, ...) does not load, and torchvision's import then
fails registering a fake kernel for `torchvision::nms` / `qnms`. Their schemas are declared so that
the import succeeds; the image path (`transforms.v2.functional`) never calls them.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from kimi_oracle.adapters.loading import load_module, require, require_class
from kimi_oracle.adapters.sources import Tree, unpacked_site
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError

PROCESSOR_FILE = "models/kimi_k25/image_processing_kimi_k25.py"
PROCESSOR = "Kimi_K25ImageProcessor"
_MODULE = "transformers.models.kimi_k25.image_processing_kimi_k25"
# What Kimi_K25ImageProcessor._preprocess takes of ours (the kwargs built below).
_PARAMS = ("patch_size", "merge_size", "max_patches", "size", "image_mean", "image_std", "do_resize",
           "do_rescale", "do_normalize")
NAVIT_PARAMS = ("height", "width", "patch_size", "merge_kernel_size", "max_patches", "max_size_per_side")
# What transformers 5.23.0 imports on the image path beyond kimi-oracle's own dependencies (torch,
# numpy, pillow, click, rich and theirs), pinned, by torch release (torchvision is built per torch).
_COMMON = ("huggingface_hub==1.33.0", "httpx==0.28.1", "httpcore==1.0.9", "anyio==4.15.1", "h11==0.16.0",
           "certifi==2026.7.22", "idna==3.20", "tokenizers==0.23.2", "safetensors==0.8.0", "regex==2026.9.29",
           "tqdm==4.70.1", "pyyaml==6.0.3", "packaging==26.3")
DEPENDENCIES = {"2.13": ("torchvision==0.28.0", *_COMMON)}
_KEEP: list[Any] = []  # torch.library fragments stay alive as long as the process


def torch_release() -> str:
    """This torch's `major.minor` (`2.13` of `2.13.0+cpu`)."""
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def dependency_site() -> Path:
    """The cache's site directory of the pinned dependencies for this torch (fetched once)."""
    pins = DEPENDENCIES.get(torch_release())
    if pins is None:
        raise CandidateError(f"candidate transformers: no torchvision pinned for torch {torch.__version__} "
                             f"(the adapter pins torch {', '.join(sorted(DEPENDENCIES))})")
    digest = hashlib.sha256(" ".join(pins).encode()).hexdigest()[:10]  # new pins: a new folder
    return unpacked_site("candidate transformers (its dependencies)", f"transformers-torch{torch_release()}-{digest}",
                         pins)


def transformers_entries(version: str) -> list[Path]:
    """What another engine's files need on `sys.path` to import transformers (`version`'s tree and
    this adapter's pinned site), or nothing when the environment has transformers."""
    if importlib.util.find_spec("transformers") is not None:
        return []
    from kimi_oracle.adapters.sources import locate

    return [locate("transformers", "transformers", version).root, dependency_site()]


def declare_torchvision_ops() -> None:
    """Declare torchvision's detection ops where its C++ extension cannot load (see above)."""
    # Only where torchvision's extension cannot load (it defines the ops itself when it can).
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations or "torchvision" in sys.modules:
        return
    extension = next(iter(sorted(Path(list(spec.submodule_search_locations)[0]).glob("_C.*"))), None)
    try:
        if extension is not None:
            torch.ops.load_library(str(extension))
            return
    except OSError:
        pass
    fragment = torch.library.Library("torchvision", "FRAGMENT")
    fragment.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    fragment.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP.append(fragment)


def import_processor(tree: Tree, site: Path, *, module_name: str = _MODULE, relative: str = PROCESSOR_FILE,
                     class_name: str = PROCESSOR) -> type:
    """The release's real `Kimi_K25ImageProcessor` (or `class_name` of `module_name`), imported
    from `tree` with `site` on sys.path (before the installed packages, or after them for an
    installed transformers)."""
    loaded = sys.modules.get("transformers")
    if loaded is not None and Path(loaded.__file__ or "").resolve().parent != tree.package_dir.resolve():
        raise CandidateError(f"candidate transformers ({tree.root}): another transformers is already imported in "
                             f"this process ({loaded.__file__})")
    if tree.origin == "installed":  # its own dependencies are installed: the site only fills gaps
        if str(site) not in sys.path:
            sys.path.append(str(site))
    else:
        for entry in (str(site), str(tree.root)):  # the tree first, then the pinned dependencies
            if entry not in sys.path:
                sys.path.insert(0, entry)
    importlib.invalidate_caches()
    declare_torchvision_ops()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise CandidateError(f"{tree.file(relative)}: importing {module_name} failed: "
                             f"{type(exc).__name__}: {exc}") from None
    if Path(module.__file__ or "").resolve() != tree.file(relative).resolve():
        raise CandidateError(f"candidate transformers: {module_name} imported from {module.__file__}, "
                             f"not from {tree.file(relative)}")
    return getattr(module, class_name)


def processor_kwargs(config: PreprocessConfig) -> dict[str, Any]:
    """The processor's own arguments for `config` (its `preprocessor_config.json` keys)."""
    side = config.patch_limit_on_one_side
    return {"patch_size": config.patch_size, "merge_size": config.merge_kernel_size,
            "max_patches": config.in_patch_limit, "size": {"max_height": side, "max_width": side},
            "image_mean": list(config.image_mean), "image_std": list(config.image_std),
            "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True}


def image_processor_path(tree: Tree, known: tuple[str, ...],
                         plan: Callable[[Callable[..., Any]], Callable[..., Any]]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(preprocess(images, config), plan(width, height, config)) of transformers' `tree`; `plan`
    wraps its `navit_resize` (engines' planner wrapper)."""
    checked = load_module(tree, PROCESSOR_FILE)  # stand-ins: refused before anything runs
    require_class(checked, tree, PROCESSOR_FILE, PROCESSOR, "_preprocess", _PARAMS, known)
    navit = require(checked, tree, PROCESSOR_FILE, "navit_resize", NAVIT_PARAMS, known)
    processor_class = import_processor(tree, dependency_site())
    processors: dict[PreprocessConfig, Any] = {}

    def preprocess(images: list, config: PreprocessConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' Kimi_K25ImageProcessor (the release's own class, its torchvision backend)."""
        if config not in processors:
            processors.clear()
            processors[config] = processor_class(**processor_kwargs(config))
        out = processors[config](images=list(images), return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    return preprocess, plan(navit)


__all__ = ["DEPENDENCIES", "declare_torchvision_ops", "transformers_entries", "PROCESSOR", "PROCESSOR_FILE", "dependency_site", "image_processor_path",
           "import_processor", "processor_kwargs", "torch_release"]
