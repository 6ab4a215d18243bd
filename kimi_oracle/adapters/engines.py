"""The built-in engines (`sglang`, `transformers`, `vllm`): their paths, and the planners taken
from their own code by name (no code of an engine is copied here).

A spec is `ENGINE[-PATH][@SOURCE]` (`adapters.sources`). So far the adapters provide SGLang's K3
deferred GPU image path as candidate `sglang` (`adapters.sglang`), its K3 request layer as
request engine `sglang` (`adapters.sglang_requests`), transformers'
`Kimi_K25ImageProcessor` as candidate `transformers` (`adapters.transformers_k25`), vLLM's
`KimiK25FusedVisionProcessor` as candidates `vllm` and `vllm-k3` (`adapters.vllm`) and the
*planners*, the engines' host-side resize/token functions:

- `sglang`: `sglang/srt/multimodal/processors/kimi_k25.py` `navit_resize_config(width, height,
  patch_size, merge_kernel_size, in_patch_limit, patch_limit_on_one_side, fixed_output_tokens)`,
  the one planner both K2.5 and K3 processors call; it returns the engine's dict as is.
- `transformers`: `transformers/models/kimi_k25/image_processing_kimi_k25.py` `navit_resize(height,
  width, patch_size, merge_kernel_size, max_patches, max_size_per_side)`, which
  `Kimi_K25ImageProcessor` calls; it returns padded totals, turned here into pad amounts and a
  token count `(pad_h / p) * (pad_w / p) / merge^2`. It takes no `fixed_output_tokens`.
- `vllm` (and `vllm-k3`, whose processor counts tokens with the same function):
  `vllm/transformers_utils/processors/kimi_k25_vision_fused.py` `navit_resize_image`, SGLang's
  parameter names; its dict as returned.

`ENGINES` also lists the paths each engine has for candidates and request engines, and its K2.5
video path (`video candidate`, `video planner`: `--media video`, `oracle.video_candidates`) or
that it has none; those not yet adapted say so (`adapted`), and a spec naming one is a
CandidateError, never a half-loaded run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kimi_oracle.adapters import lmdeploy as _lmdeploy
from kimi_oracle.adapters import mlx_vlm as _mlx
from kimi_oracle.adapters import paddleformers as _paddle
from kimi_oracle.adapters.loading import load_module, require
from kimi_oracle.adapters.sglang import cpu_backend_path, deferred_gpu_path
from kimi_oracle.adapters.sglang_requests import request_engine
from kimi_oracle.adapters.sources import Tree, locate, split_engine_spec
from kimi_oracle.adapters.transformers_k25 import image_processor_path
from kimi_oracle.adapters.vllm import FUSED_FILE as _VL_FUSED
from kimi_oracle.adapters.vllm import PLANNER_PARAMS as _VL_PLANNER_PARAMS
from kimi_oracle.adapters.vllm import fused_processor_path
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError


@dataclass(frozen=True)
class EnginePath:
    """One public path of an engine for Kimi images."""

    name: str  # the spec's `ENGINE-PATH` (or `ENGINE` for the engine's default path)
    role: str  # "planner", "candidate", "request engine"
    file: str  # inside the package
    function: str
    adapted: bool


@dataclass(frozen=True)
class Engine:
    """A built-in engine: its import package, the releases its adapter knows, its paths."""

    name: str
    package: str
    known: tuple[str, ...]
    paths: tuple[EnginePath, ...]
    # What the engine lacks (a path it has no code for, why): `kimi-oracle engines` says so.
    lacks: str = ""


_SG_K25 = "srt/multimodal/processors/kimi_k25.py"
_TF_K25 = "models/kimi_k25/image_processing_kimi_k25.py"
_TF_K25_VIDEO = "models/kimi_k25/video_processing_kimi_k25.py"
ENGINES = {
    "sglang": Engine("sglang", "sglang", ("0.5.23",), (
        EnginePath("sglang", "planner", _SG_K25, "navit_resize_config", True),
        EnginePath("sglang", "candidate", _SG_K25, "_gpu_preprocess_images (K3 deferred GPU path)", True),
        EnginePath("sglang-cpu", "candidate", "srt/multimodal/kimi_k3_image_processing.py",
                   "materialize_kimi_k3_cpu_features (CPU backend)", True),
        EnginePath("sglang", "request engine", "srt/multimodal/processors/kimi_k3.py",
                   "KimiK3ImageProcessor (artifact cache, compose_request) + models/kimi_k3.py get_image_feature", True),
        EnginePath("sglang", "video candidate", "-", "none in 0.5.23 (K2.5/K3 video: open pull requests #37632, "
                   "#35325)", False),
    )),
    "transformers": Engine("transformers", "transformers", ("5.23.0",), (
        EnginePath("transformers", "planner", _TF_K25, "navit_resize", True),
        EnginePath("transformers", "candidate", _TF_K25, "Kimi_K25ImageProcessor", True),
        EnginePath("transformers", "video candidate", _TF_K25_VIDEO, "Kimi_K25VideoProcessor", True),
        EnginePath("transformers", "video planner", _TF_K25_VIDEO, "navit_resize (the video file's own)", True),
    )),
    "vllm": Engine("vllm", "vllm", ("0.33.0",), (
        EnginePath("vllm", "planner", _VL_FUSED, "navit_resize_image", True),
        EnginePath("vllm-k3", "planner", _VL_FUSED, "navit_resize_image", True),  # K3's media_tokens_calculator
        EnginePath("vllm", "candidate", _VL_FUSED, "KimiK25FusedVisionProcessor (fused CPU processor)", True),
        EnginePath("vllm-k3", "candidate", "transformers_utils/processors/kimi_k3.py",
                   "KimiK3Processor (over KimiK25FusedVisionProcessor)", True),
        EnginePath("vllm", "video candidate", _VL_FUSED, "KimiK25FusedVisionProcessor (video_chunk items; 0.33.0 has "
                   "no split_video_chunks: chunk splitting is open pull request #45545)", True),
    )),
    "paddleformers": Engine("paddleformers", "paddleformers", ("1.2.0",), (
        EnginePath("paddleformers", "planner", _paddle.MEDIA_FILE, _paddle.PLANNER, True),
        EnginePath("paddleformers", "candidate", _paddle.PROCESSOR_FILE,
                   f"{_paddle.PROCESSOR}.preprocess (on paddlepaddle 3.3.1's CPU build)", True),
        EnginePath("paddleformers", "video candidate", _paddle.PROCESSOR_FILE,
                   f"{_paddle.PROCESSOR}.preprocess video_chunk items (paddle tensors, paddle's own bicubic)", False),
    ), lacks="no request layer of its own (its processor.py is the checkpoint's prompt code)"),
    "mlx-vlm": Engine("mlx-vlm", "mlx_vlm", ("0.7.10",), (
        EnginePath("mlx-vlm", "candidate", _mlx.K25_FILE, f"{_mlx.K25}.preprocess (MLX, CPU backend)", True),
        EnginePath("mlx-vlm-k3", "candidate", _mlx.K3_FILE, f"{_mlx.K3}.preprocess (MLX, CPU backend)", True),
    ), lacks="no planner function (the plan is inline in each processor's rescale); no video path"),
    "lmdeploy": Engine("lmdeploy", "lmdeploy", ("0.18.0",), (
        EnginePath("lmdeploy", "candidate", _lmdeploy.MODEL_FILE,
                   f"{_lmdeploy.MODEL}.preprocess (glue around the checkpoint's processor)", True),
    ), lacks="no preprocessing of its own: the checkpoint's processor does every step (stood in by the "
             "reference); judged is its decode, its refusals and its dtype cast"),
}
# Engines that carry Kimi code but nothing to adapt (listed by `kimi-oracle engines`, never loaded).
NOTHING_TO_ADAPT = {
    "nemo-automodel": ("0.7.0", "calls the checkpoint's own processor (AutoProcessor, trust_remote_code): no "
                       "preprocessing code of its own"),
    "smg": ("1.13.0", "keeps its Kimi preprocessing in Rust, with no Python entry point to call"),
}
# Which engine function does which step (diagnosis family or check -> `file: function`), per
# candidate path: the conformance report names it beside each defect (a crash's own place is read
# off its traceback instead: workflows.conformance_summary).
STEP_MAP: dict[str, dict[str, str]] = {
    "sglang": {"convert-before-resize": f"{_SG_K25}: _gpu_preprocess_images (mode conversion on upload)",
               "resample-float": "srt/multimodal/kimi_k3_image_processing.py: torch bicubic antialias resize",
               "normalize-float": "srt/multimodal/kimi_k3_image_processing.py: normalize_and_patchify",
               "fill-stage": f"{_SG_K25}: _gpu_preprocess_images (transparent fill after resize)",
               "alpha-straight": f"{_SG_K25}: _gpu_preprocess_images (straight alpha blend)",
               "palette-bicubic": f"{_SG_K25}: _gpu_preprocess_images (palette converted first)",
               "alpha-dropped": f"{_SG_K25}: _gpu_preprocess_images (convert RGB)"},
    "transformers": {"resample-float": f"{_TF_K25}: Kimi_K25ImageProcessor._preprocess (torchvision resize)",
                     "normalize-float": f"{_TF_K25}: Kimi_K25ImageProcessor._preprocess (rescale + normalize)",
                     "alpha-dropped": "image_utils.py: convert_to_rgb", "flatten-white": "image_utils.py: convert_to_rgb",
                     "pad": f"{_TF_K25}: Kimi_K25ImageProcessor._preprocess (pad)"},
    "vllm": {"flatten-white": "multimodal/image.py: convert_image_mode (RGB on white)",
             "normalize-float": f"{_VL_FUSED}: _write_fused_patches (float32 table)"},
    "vllm-k3": {"flatten-white": "multimodal/image.py: convert_image_mode (RGB on white)",
                "normalize-float": f"{_VL_FUSED}: _write_fused_patches (float32 table)"},
    "paddleformers": {"patch-order": f"{_paddle.MEDIA_FILE}: navit_patchify (Tensor.transpose)",
                      "normalize-float": f"{_paddle.PROCESSOR_FILE}: {_paddle.PROCESSOR}.preprocess "
                                         "(paddle_vision_utils.normalize of x / 255)",
                      "alpha-dropped": f"{_paddle.MEDIA_FILE}: _to_pil (convert RGB)"},
    "mlx-vlm": {"normalize-float": f"{_mlx.K25_FILE}: {_mlx.K25}.to_mlx / normalize (MLX float32)",
                "alpha-dropped": f"{_mlx.K25_FILE}: {_mlx.K25}.rescale (convert RGB)"},
    "mlx-vlm-k3": {"normalize-float": f"{_mlx.K3_FILE}: {_mlx.K3}._preprocess (numpy float64 statistics)",
                   "palette-bicubic": f"{_mlx.K3_FILE}: {_mlx.K3}.rescale (palette converted to RGBA before resize)",
                   "fill-stage": f"{_mlx.K3_FILE}: {_mlx.K3}._fill_transparent_bg",
                   "alpha-straight": f"{_mlx.K3_FILE}: {_mlx.K3}._fill_transparent_bg (float32 blend, truncated)"},
    "lmdeploy": {"alpha-dropped": f"{_lmdeploy.MEDIA_FILE}: ImageMediaIO (convert RGB)",
                 "shape_dtype": f"{_lmdeploy.BASE_FILE}: VisionModel._postprocess_mm_output (cast to the model's "
                                "dtype, bfloat16)"},
}


def engine_of(name: str) -> str | None:
    """The built-in engine an `ENGINE[-PATH]` name belongs to (the longest engine name it starts
    with: `mlx-vlm-k3` is mlx-vlm's), else None."""
    found = [e for e in ENGINES if name == e or name.startswith(e + "-")]
    return max(found, key=len) if found else None


def is_engine_spec(spec: str) -> bool:
    """Whether `spec` names a built-in engine: `ENGINE`, `ENGINE-PATH`, either with `@SOURCE`."""
    name, source = split_engine_spec(spec)
    return engine_of(name) is not None and (source is not None or "/" not in name)


def _engine(spec: str) -> tuple[Engine, str, str | None]:
    name, source = split_engine_spec(spec)
    engine = ENGINES[engine_of(name) or name]
    return engine, name, source


def _path(engine: Engine, name: str, role: str, spec: str) -> EnginePath:
    found = [p for p in engine.paths if p.name == name and p.role == role]
    if not found:
        names = sorted({p.name for p in engine.paths if p.role == role}) or ["none"]
        raise CandidateError(f"{role} {spec!r}: {engine.name} has no path {name!r} as a {role} (its {role}s: "
                             f"{', '.join(names)})")
    if not found[0].adapted:
        raise CandidateError(f"{role} {spec!r}: {engine.name}'s {found[0].function} in {found[0].file} is not "
                             f"adapted yet (kimi-oracle engines lists what is)")
    return found[0]


def check_path(spec: str, role: str) -> EnginePath:
    """The engine path an `ENGINE[-PATH][@SOURCE]` spec names in `role`; CandidateError (exit 2)
    when the engine has none or it is not adapted yet (`--engine sglang`: its request layer)."""
    engine, name, _ = _engine(spec)
    return _path(engine, name, role, spec)


def _sglang_planner(func: Callable[..., Any]) -> Callable[[int, int, PreprocessConfig], Any]:
    def plan(width: int, height: int, config: PreprocessConfig) -> Any:
        return func(width=width, height=height, patch_size=config.patch_size,
                    merge_kernel_size=config.merge_kernel_size, in_patch_limit=config.in_patch_limit,
                    patch_limit_on_one_side=config.patch_limit_on_one_side,
                    fixed_output_tokens=config.fixed_output_tokens)
    return plan


def _transformers_planner(func: Callable[..., Any]) -> Callable[[int, int, PreprocessConfig], Any]:
    def plan(width: int, height: int, config: PreprocessConfig) -> Any:
        p, m = config.patch_size, config.merge_kernel_size
        # Kimi_K25ImageProcessor's own arguments: max_patches and size["max_height"] (patches per side).
        (new_h, new_w), (padded_h, padded_w) = func(
            height=height, width=width, patch_size=p, merge_kernel_size=m,
            max_patches=config.in_patch_limit, max_size_per_side=config.patch_limit_on_one_side)
        return {"new_width": new_w, "new_height": new_h, "pad_width": padded_w - new_w,
                "pad_height": padded_h - new_h, "num_tokens": (padded_h // p) * (padded_w // p) // (m * m)}
    return plan


_PLANNER_PARAMS = {
    "sglang": (("width", "height", "patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side",
                "fixed_output_tokens"), _sglang_planner),
    "transformers": (("height", "width", "patch_size", "merge_kernel_size", "max_patches", "max_size_per_side"),
                     _transformers_planner),
    "vllm": (_VL_PLANNER_PARAMS, _sglang_planner),  # the same parameter names as SGLang's
    "paddleformers": (_paddle.PLANNER_PARAMS, _sglang_planner),  # SGLang's parameter names too
}
# Candidates by path name, each its own adapter: (tree, known) -> (preprocess, plan).
_CANDIDATES: dict[str, Callable[..., tuple[Callable[..., Any], Callable[..., Any]]]] = {
    "sglang-cpu": cpu_backend_path,
    "vllm": lambda tree, known: fused_processor_path(tree, known, k3=False),
    "vllm-k3": lambda tree, known: fused_processor_path(tree, known, k3=True),
    "paddleformers": _paddle.vision_processor_path,
    "mlx-vlm": lambda tree, known: _mlx.image_processor_path(tree, known, k3=False),
    "mlx-vlm-k3": lambda tree, known: _mlx.image_processor_path(tree, known, k3=True),
    "lmdeploy": _lmdeploy.vision_model_path,
}


def load_tree(spec: str) -> tuple[Engine, str, Tree]:
    """The engine, the spec's path name and the tree a spec names (fetched when a release)."""
    engine, name, source = _engine(spec)
    return engine, name, locate(engine.name, engine.package, source)


def engine_planner(spec: str) -> tuple[Callable[[int, int, PreprocessConfig], Any], str]:
    """The planner `(width, height, config) -> plan` of an engine spec and its description."""
    engine, name, tree = load_tree(spec)
    path = _path(engine, name, "planner", spec)
    params, wrap = _PLANNER_PARAMS[engine.name]
    module = load_module(tree, path.file)
    func = require(module, tree, path.file, path.function, params, engine.known)
    return wrap(func), (f"{engine.name} {tree.version or '(unknown version)'} {path.function} "
                        f"({tree.origin}: {tree.file(path.file)})")


def engine_candidate(spec: str) -> tuple[Callable[..., Any], str, Callable[..., Any]]:
    """(preprocess, description, plan) of an engine spec's image path: its own functions."""
    engine, name, tree = load_tree(spec)
    path = _path(engine, name, "candidate", spec)
    if path.name in _CANDIDATES:  # vLLM's own processors (adapters.vllm) and the later engines'
        preprocess, plan = _CANDIDATES[path.name](tree, engine.known)
        return preprocess, f"{engine.name} {tree.version or '(unknown version)'} {path.function} ({tree.origin}: {tree.root})", plan
    if engine.name == "transformers":  # its own Kimi_K25ImageProcessor, imported in this process
        preprocess, plan = image_processor_path(tree, engine.known, _transformers_planner)
    else:
        preprocess, plan = deferred_gpu_path(tree, engine.known)
    return preprocess, (f"{engine.name} {tree.version or '(unknown version)'} {path.function} ({tree.origin}: "
                        f"{tree.root}; on {path_device(path)} tensors)"), plan


def engine_request_layer(spec: str) -> tuple[Callable[..., Any], str]:
    """(factory engine(config, tokenizer), description) of an engine spec's request layer: its own
    processor, artifact cache and get_image_feature (`adapters.sglang_requests`)."""
    engine, name, tree = load_tree(spec)
    path = _path(engine, name, "request engine", spec)
    factory = request_engine(tree, engine.known)  # the one adapted request layer so far
    return factory, f"{engine.name} {tree.version or '(unknown version)'} {path.function} ({tree.origin}: {tree.root})"


# The candidate paths with a CUDA branch of their own (run on CUDA tensors where a device is
# visible: `sglang.engine_device`); every other path is CPU code (numba, MLX's CPU backend,
# paddle's CPU build, torchvision's CPU path) or host-side arithmetic (planners).
CUDA_PATHS = ("sglang",)


def path_device(path: EnginePath) -> str:
    """Where a path runs here: `cuda` or `cpu`."""
    from kimi_oracle.adapters.sglang import engine_device

    return engine_device() if path.role == "candidate" and path.name in CUDA_PATHS else "cpu"


def describe_engines() -> list[dict[str, Any]]:
    """For `kimi-oracle engines`: each engine and path, where it would load from here, or why not."""
    rows = []
    for engine in ENGINES.values():
        try:
            tree = locate(engine.name, engine.package, None)
            where, version = str(tree.root), tree.version
        except CandidateError as exc:
            where, version = f"not loadable: {exc}", None
        for path in engine.paths:
            rows.append({"engine": engine.name, "path": path.name, "role": path.role, "file": path.file,
                         "function": path.function, "adapted": path.adapted, "loads_from": where,
                         "version": version, "known_versions": list(engine.known), "device": path_device(path),
                         "steps": STEP_MAP.get(path.name, {}) if path.role == "candidate" else {},
                         "lacks": engine.lacks})
    for name, (version, why) in NOTHING_TO_ADAPT.items():
        rows.append({"engine": name, "path": "-", "role": "none", "file": "-", "function": why, "adapted": False,
                     "loads_from": "not loaded: nothing to adapt", "version": None, "known_versions": [version],
                     "device": None,
                     "steps": {}, "lacks": why})
    return rows


__all__ = ["CUDA_PATHS", "ENGINES", "NOTHING_TO_ADAPT", "STEP_MAP", "path_device", "Engine", "EnginePath", "engine_of", "check_path", "describe_engines", "engine_candidate", "engine_planner", "engine_request_layer", "is_engine_spec", "load_tree"]
