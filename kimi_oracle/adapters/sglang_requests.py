"""SGLang's K3 request layer, from the release's own code: request engine `--engine sglang[@SOURCE]`.

The functions are SGLang's, called by name (docs/adapters.md, "Request-layer engines"):

prepare   `KimiK3ImageProcessor.prepare_media_artifacts(images)` (`media_artifacts/base.py`: the
          artifact cache, `MultimodalPreprocessCache` of `multimodal/cache/preprocess_cache.py`,
          keys by `build_artifact_key` over the content digest and `build_processor_fingerprint`),
          whose misses run the K3 processor's `prepare_artifact_batch` (`processors/kimi_k3.py`:
          `navit_resize_config`, `to_chw_uint8` and a `KimiK3DeferredPreprocessing` for a deferred
          image; `KimiK3GPUProcessorWrapper.prepare_image_features` for an eager one), then
          `KimiK3ImageProcessor.compose_request(prompt_ids, artifacts)`: the expanded ids and one
          `MultimodalDataItem` per image (grid from `image_grid_thw`, offsets from its span);
encode    `KimiK3ForConditionalGeneration.get_image_feature(items)` (`models/kimi_k3.py`), run by
          `dp_size` threads, one per simulated rank, through SGLang's own
          `run_dp_sharded_mrope_vision_model` (`multimodal/mm_utils.py`: rank assignment, the
          deferred groups, the padded all-gather and the re-assembly).

What stands in for infrastructure (never for a value SGLang computes with):

- the route: the release defers an image when its raw bytes are no larger than its processed
  ones on a CUDA machine (`_should_defer_gpu_preprocessing`); here the oracle's path for the
  image decides (`"deferred"` / `"eager"`), and the route joins the artifact key through
  `artifact_preprocess_kwargs`, SGLang's hook for options that change an artifact (in the
  release an image's route is fixed by the image and the server, so an artifact never changes
  route);
- the checkpoint's HF processor (what `_cpu_call`, the eager path on a machine without CUDA,
  calls): the oracle's reference pipeline, which reproduces the checkpoint bit for bit;
- `MultimodalDataItem` / `MultimodalProcessorOutput` (msgspec structs in `schedule_batch.py`,
  not loaded): plain records of the same fields; `envs` (the one flag read,
  `SGLANG_MM_SKIP_COMPUTE_HASH`, at its release default False); the runtime context
  (`get_parallel`: the simulated ranks; `get_model` / `get_mm` / `transformers.__version__`
  in the fingerprint: constants);
- the vision tower and projector: a recorder whose "embeddings" are the patch rows it received,
  `merge²` rows per token, so that SGLang's gather and re-assembly hand back the rows in order.

GPU-only calls run on CPU tensors (`normalize_and_patchify` takes its torch branch). A tree without
one of the functions or parameters called here is one CandidateError line (exit 2) naming the file
and the function.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from PIL import Image

from kimi_oracle.adapters.loading import _StandInFinder, _StandModule, load_modules, require
from kimi_oracle.adapters.sources import Tree
from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.geometry import plan as checkpoint_plan
from kimi_oracle.pipelines.reference import preprocess_image

PATHS = ("deferred", "eager")
MEDIA_PAD = "<|media_pad|>"
PROCESSOR = "srt/multimodal/processors/kimi_k3.py"
ARTIFACTS = "srt/multimodal/media_artifacts/base.py"
ARTIFACT_TYPES = "srt/multimodal/media_artifacts/kimi_k3.py"
CACHE = "srt/multimodal/cache/preprocess_cache.py"
IDENTITY = "srt/multimodal/cache/identity.py"
MODEL = "srt/models/kimi_k3.py"
MM_UTILS = "srt/multimodal/mm_utils.py"
# Every file run as shipped (the rest of SGLang is stood in by adapters.loading).
FILES = (PROCESSOR, "srt/multimodal/processors/kimi_k25.py", "srt/multimodal/kimi_k3_image_processing.py",
         "kernels/ops/mm/process/__init__.py", "kernels/ops/mm/process/image.py",
         "srt/multimodal/media_artifacts/__init__.py", ARTIFACTS, ARTIFACT_TYPES,
         "srt/multimodal/cache/__init__.py", IDENTITY, CACHE, "srt/multimodal/processors/kimi_common.py",
         "srt/multimodal/processors/base_processor.py", "srt/multimodal/modality.py", MODEL, MM_UTILS,
         "srt/multimodal/encoder_preprocessing.py")
# (file, function, the parameters passed): what this adapter calls or overrides, checked first.
CALLED = (
    (PROCESSOR, "KimiK3GPUProcessorWrapper.__init__", ("hf_processor", "image_token", "image_token_id", "config")),
    (PROCESSOR, "KimiK3ImageProcessor.prepare_artifact_batch", ("entries", "processor")),
    (PROCESSOR, "KimiK3ImageProcessor.compose_request", ("input_text", "artifacts")),
    (PROCESSOR, "KimiK3ImageProcessor._should_defer_gpu_preprocessing", ("images",)),
    (ARTIFACTS, "MediaArtifactCacheMixin.prepare_media_artifacts", ("media_data", "content_hashes")),
    (ARTIFACTS, "MediaArtifactCacheMixin.artifact_preprocess_kwargs", ("source", "modality")),
    (ARTIFACT_TYPES, "KimiK3PreprocessConfig.from_media_processor", ("media_processor",)),
    (CACHE, "MultimodalPreprocessCache.__init__", ("max_size_bytes", "max_entries")),
    (IDENTITY, "build_processor_fingerprint", ("processor", "hf_config")),
    (MODEL, "KimiK3ForConditionalGeneration.get_image_feature", ("items",)),
    (MM_UTILS, "run_dp_sharded_mrope_vision_model", (
        "vision_model", "pixel_values", "grid_thw_list", "rope_type", "pool_temporal_dimension",
        "load_local_pixel_values", "pixel_values_device", "pixel_values_dtype", "pass_grid_thw_list")),
)
_CACHE_BYTES = 256 * 1024 * 1024  # the K3 processor's own auto_mm_preprocess_cache_size_mb
_RANK_WAIT_S = 300.0


# ---------------------------------------------------------------------------------------------
# stand-ins for infrastructure


@dataclass(eq=False)
class _DataItem:
    """SGLang's `MultimodalDataItem` fields (a msgspec struct there; msgspec is not loaded)."""

    modality: Any
    feature: Any = None
    offsets: Any = None
    model_specific_data: dict = field(default_factory=dict)
    hash: int | None = None
    identity: bytes | None = None
    precomputed_embeddings: Any = None

    def set_hash(self, value: int) -> None:
        self.hash, self.identity = value, None

    def set_identity(self, identity: bytes) -> None:
        self.identity, self.hash = bytes(identity), int.from_bytes(identity[:8], "big")


@dataclass
class _Output:
    """SGLang's `MultimodalProcessorOutput` fields."""

    input_ids: Any = None
    mm_items: Any = None
    im_token_id: Any = None


class _Flag:
    def __init__(self, value: bool):
        self.value = value

    def get(self) -> bool:
        return self.value


class _Envs:
    """`sglang.srt.environ.envs` for the one flag the called code reads (release default)."""

    SGLANG_MM_SKIP_COMPUTE_HASH = _Flag(False)


class _Ranks:
    """`dp_size` ranks in one process: each rank a thread, collectives over a barrier."""

    def __init__(self, size: int):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=_RANK_WAIT_S)
        self.slots: list[Any] = [None] * size
        self.local = threading.local()

    def get_parallel(self) -> Any:
        """What `runtime_context.get_parallel()` answers on the calling rank."""
        rank = self.local.rank
        return types.SimpleNamespace(attn_tp_size=self.size, attn_tp_rank=rank, tp_size=self.size, tp_rank=rank,
                                     attn_tp_group=_Group(self, rank))


class _Group:
    def __init__(self, ranks: _Ranks, rank: int):
        self.ranks, self.rank = ranks, rank

    def all_gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        self.ranks.slots[self.rank] = tensor
        self.ranks.barrier.wait()
        out = torch.cat(list(self.ranks.slots), dim=dim)
        self.ranks.barrier.wait()
        return out

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        if self.rank == src:
            self.ranks.slots[src] = tensor
        self.ranks.barrier.wait()
        if self.rank != src:
            tensor.copy_(self.ranks.slots[src])
        self.ranks.barrier.wait()


class _Tower:
    """The vision tower as `get_image_feature` sees it: device, dtype, patch and merge sizes; its
    output is the rows it received, `merge²` rows per token (SGLang's gather moves whole tokens)."""

    def __init__(self, config: PreprocessConfig):
        p, m = config.patch_size, config.merge_kernel_size
        self.patch_size, self.merge_kernel_size = p, (m, m)
        self.device = torch.device("cpu")
        self.patch_embed = types.SimpleNamespace(proj=types.SimpleNamespace(weight=torch.empty(0)))
        self.config = types.SimpleNamespace(hidden_size=3 * p * p)

    def __call__(self, pixel_values: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        m2 = self.merge_kernel_size[0] * self.merge_kernel_size[1]
        if pixel_values.shape[0] % m2:
            raise ValueError(f"the tower received {pixel_values.shape[0]} rows, not whole {m2}-row tokens")
        return pixel_values.reshape(pixel_values.shape[0] // m2, m2, self.config.hidden_size)


class _Media:
    """The checkpoint's media processor, as SGLang reads it: `media_proc_cfg` and the token count."""

    def __init__(self, config: PreprocessConfig):
        self.config = config
        self.media_proc_cfg = config.to_hf_json()

    def media_tokens_calculator(self, media: dict) -> int:
        return checkpoint_plan(*media["image"].size, self.config).num_tokens


class _Checkpoint:
    """The checkpoint's HF processor (the eager path's `_cpu_call`): the oracle's reference."""

    def __init__(self, config: PreprocessConfig, tokenizer: Any):
        self.config, self.tokenizer = config, tokenizer
        self.media_processor = self.image_processor = _Media(config)

    def __call__(self, text: Any = None, medias: Any = None, **kwargs: Any) -> dict:
        done = [preprocess_image(m["image"], self.config) for m in medias or ()]
        return {"pixel_values": torch.cat([rows for rows, _ in done]),
                "grid_thws": torch.tensor([list(p.grid_thw) for _, p in done], dtype=torch.int64)}


class _Now:
    """An executor that runs at once (SGLang's io executor, one thread here)."""

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting code as SGLang's would be
            future.set_exception(exc)
        return future


# ---------------------------------------------------------------------------------------------
# the release


def _require(module: Any, tree: Tree, relative: str, qualname: str, params: tuple[str, ...],
             known: tuple[str, ...]) -> Any:
    owner, _, name = qualname.rpartition(".")
    target = getattr(module, owner, None) if owner else module
    func = inspect.getattr_static(target, name, None) if target is not None else None
    if isinstance(func, (classmethod, staticmethod)):
        func = func.__func__
    return require(types.SimpleNamespace(**{qualname: func}), tree, relative, qualname, params, known)


def _bind(module: Any, tree: Tree, relative: str, known: tuple[str, ...], **values: Any) -> None:
    for name, value in values.items():
        if not hasattr(module, name):
            raise CandidateError(f"{tree.file(relative)}: no name {name} (the sglang adapter binds it); the sglang "
                                 f"adapter knows {', '.join(known)}; this tree is {tree.version or 'of unknown version'}")
        setattr(module, name, value)


@dataclass
class Release:
    """SGLang's loaded modules and the functions this adapter calls."""

    tree: Tree
    modules: dict[str, Any]
    routed: type  # KimiK3ImageProcessor with the oracle's route
    modality: Any  # Modality.IMAGE

    def __getitem__(self, relative: str) -> Any:
        return self.modules[relative]

    @contextlib.contextmanager
    def imported(self) -> Iterator[None]:
        """The release's modules in `sys.modules` while its code runs (its functions import
        their helpers when called; SGLang's other modules are stood in as at load), removed
        afterwards."""
        package = self.tree.package
        ours = lambda n: n.split(".")[0] == package or isinstance(sys.modules[n], _StandModule)  # noqa: E731
        saved = {n: m for n, m in sys.modules.items() if ours(n)}
        for n in saved:
            del sys.modules[n]
        sys.modules.update({m.__name__: m for m in self.modules.values()})
        finder = _StandInFinder([package], {})
        sys.meta_path.insert(0, finder)
        try:
            yield
        finally:
            sys.meta_path.remove(finder)
            for n in [n for n in sys.modules if ours(n)]:
                del sys.modules[n]
            sys.modules.update(saved)


def _routed(processor_class: type, modality: Any) -> type:
    class Routed(processor_class):  # type: ignore[misc, valid-type]
        """KimiK3ImageProcessor; the route of the images being prepared is the oracle's."""

        artifact_modality = modality
        route = PATHS[0]

        def _should_defer_gpu_preprocessing(self, images: Any) -> bool:
            return bool(images) and self.route == "deferred"

        def artifact_preprocess_kwargs(self, source: Any, modality: Any) -> Any:
            return {**super().artifact_preprocess_kwargs(source, modality), "kimi_oracle_route": self.route}

    return Routed


@functools.lru_cache(maxsize=8)
def load_release(tree: Tree, known: tuple[str, ...]) -> Release:
    """SGLang's files of `tree`, loaded once per process, every called function checked."""
    modules = dict(zip(FILES, load_modules(tree, FILES)))
    for relative, qualname, params in CALLED:
        _require(modules[relative], tree, relative, qualname, params, known)
    modality = modules["srt/multimodal/modality.py"].Modality
    for relative in (PROCESSOR, ARTIFACTS):
        _bind(modules[relative], tree, relative, known, Modality=modality)
    _bind(modules[PROCESSOR], tree, PROCESSOR, known, envs=_Envs, MultimodalDataItem=_DataItem,
          MultimodalProcessorOutput=_Output)
    if getattr(modules[IDENTITY].transformers, "__version__", None) is None:  # not installed here
        _bind(modules[IDENTITY], tree, IDENTITY, known, transformers=types.SimpleNamespace(__version__="(none)"))
    _bind(modules[IDENTITY], tree, IDENTITY, known, get_model=lambda: types.SimpleNamespace(revision=None),
          get_mm=lambda: types.SimpleNamespace(disable_fast_image_processor=False, mm_process_config={}))
    _bind(modules[MM_UTILS], tree, MM_UTILS, known, get_parallel=None)
    return Release(tree, modules, _routed(modules[PROCESSOR].KimiK3ImageProcessor, modality.IMAGE), modality.IMAGE)


# ---------------------------------------------------------------------------------------------
# the engine


class ItemView:
    """One image of a prepared request: SGLang's item, its grid and span read from it live."""

    def __init__(self, item: Any):
        self.item = item

    @property
    def grid_thw(self) -> list[int]:
        return [int(v) for v in self.item.model_specific_data["image_grid_thw"][0].tolist()]

    @property
    def offsets(self) -> tuple[int, int]:
        start, end = self.item.offsets[0]
        return int(start), int(end)


class SGLangRequests:
    """SGLang's K3 request layer under `config`: `prepare` one request, `encode` items over ranks."""

    paths = PATHS

    def __init__(self, release: Release, config: PreprocessConfig, tokenizer: Any):
        self.release, self.tokenizer = release, tokenizer
        cache_class = release[CACHE].MultimodalPreprocessCache
        self.cache = cache_class(max_size_bytes=_CACHE_BYTES, max_entries=8192)
        self.configure(config)

    def configure(self, config: PreprocessConfig) -> None:
        """The processor rebuilt with `config` (a reloaded server), its artifact cache kept."""
        rel, pad = self.release, self.tokenizer.media_pad_id
        hf = _Checkpoint(config, self.tokenizer)
        wrapper = rel[PROCESSOR].KimiK3GPUProcessorWrapper(
            hf, image_token=MEDIA_PAD, image_token_id=pad,
            config=rel[ARTIFACT_TYPES].KimiK3PreprocessConfig.from_media_processor(hf.media_processor))
        proc = rel.routed.__new__(rel.routed)  # its __init__ starts a server's executors: its state, set here
        proc.__dict__.update(
            _processor=wrapper, _tokenizer=self.tokenizer, mm_preprocess_cache=self.cache, hf_config=None,
            mm_tokens=types.SimpleNamespace(image_token=MEDIA_PAD, image_token_id=pad),
            trust_mm_content_hashes=False, io_executor=_Now(), mm_processor_executor=None,
            mm_feature_transport="cpu", use_cuda_ipc=False, image_processor_backend="pil",
            image_config={}, video_config={}, audio_config={})
        hf_config = types.SimpleNamespace(media_placeholder_token_id=pad, to_dict=lambda: {"model_type": "kimi_k3"})
        proc.processor_fingerprint = rel[IDENTITY].build_processor_fingerprint(proc, hf_config)
        self.config, self.processor, self.tower = config, proc, _Tower(config)

    def prepare(self, prompt_ids: list[int], images: list[Image.Image], paths: list[str]
                ) -> tuple[list[int], list[ItemView]]:
        """One request: SGLang's artifacts (its cache) for the images, composed with the prompt."""
        if len(paths) != len(images) or any(p not in PATHS for p in paths):
            raise ValueError(f"paths {paths!r} for {len(images)} image(s); known paths: {', '.join(PATHS)}")
        artifacts: list[Any] = [None] * len(images)
        with self.release.imported():
            for route in PATHS:
                chosen = [i for i, p in enumerate(paths) if p == route]
                if not chosen:
                    continue
                self.processor.route = route
                done = asyncio.run(self.processor.prepare_media_artifacts([images[i] for i in chosen]))
                for i, artifact in zip(chosen, done):
                    artifacts[i] = artifact
            out = self.processor.compose_request(list(prompt_ids), artifacts)
        return list(out.input_ids), [ItemView(item) for item in out.mm_items]

    def encode(self, items: list[ItemView], dp_size: int) -> torch.Tensor:
        """`get_image_feature` of the items on each of `dp_size` simulated ranks; rank 0's
        re-assembled rows, in the order given."""
        ranks = _Ranks(dp_size)
        model = types.SimpleNamespace(vision_tower=self.tower, mm_projector=lambda x: x, use_data_parallel=True,
                                      _encoder_image_processor=None)
        batch = [view.item for view in items]
        get_image_feature = self.release[MODEL].KimiK3ForConditionalGeneration.get_image_feature
        results: list[Any] = [None] * dp_size

        def rank(r: int) -> None:
            ranks.local.rank = r
            try:
                results[r] = get_image_feature(model, batch)
            except BaseException as exc:  # noqa: BLE001 - raised again below, in the caller's thread
                results[r] = exc
                ranks.barrier.abort()

        self.release[MM_UTILS].get_parallel = ranks.get_parallel
        with self.release.imported():
            threads = [threading.Thread(target=rank, args=(r,), name=f"sglang-dp-rank-{r}") for r in range(dp_size)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        raised = [r for r in results if isinstance(r, BaseException)]
        if raised:  # the engine's own error first (the other ranks then see a broken barrier)
            raise next((e for e in raised if not isinstance(e, threading.BrokenBarrierError)), raised[0])
        p = self.config.patch_size
        return results[0].reshape(-1, 3, p, p)


def request_engine(tree: Tree, known: tuple[str, ...]) -> Any:
    """The factory `engine(config, tokenizer)` over SGLang's `tree` (loaded and checked now)."""
    release = load_release(tree, known)

    def engine(config: PreprocessConfig, tokenizer: Any) -> SGLangRequests:
        return SGLangRequests(release, config, tokenizer)

    return engine


__all__ = ["CALLED", "FILES", "PATHS", "ItemView", "Release", "SGLangRequests", "load_release", "request_engine"]
