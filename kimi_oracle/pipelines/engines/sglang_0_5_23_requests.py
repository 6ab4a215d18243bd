"""A model of SGLang 0.5.23's kimi_k3 request layer: the built-in engine `sglang-0.5.23`.

What it models (docs/spec.md, "Engine model: sglang-0.5.23 request layer"), from the facts the
engine's source states:

prepare   each `<|media_pad|>` of the prompt becomes `<|media_begin|>image {W}x{H}<|media_content|>`,
          `num_tokens` pads and `<|media_end|>` (W x H: the decoded size); an item's `offsets` is
          its inclusive pad run. The per-image artifacts (plan, staged uint8 tensor, eager rows)
          are cached under (content digest, configuration fingerprint): a hit skips preprocessing
deferred  an item holding its uint8 CHW tensor and a deferred config (mean, std, background, its
          resize plan), preprocessed in the encoder batch by the image model
          (`sglang_0_5_23.from_tensors`)
eager     an item whose rows are materialized at prepare time (the processor's CPU path: the
          reference)
encode    images sorted by prod(grid) (largest first, stable), each to the least-loaded of
          `dp_size` ranks (ties to the lowest); per rank the deferred items are grouped by backend,
          a group runs with its FIRST item's mean, std and background (the engine's known defect:
          a batch that mixes configurations is normalized with one of them); the grids it produced
          are checked against `grid_thws_host[global_indices]` and the row count against the grids,
          with the engine's own two messages

The parts a planted mutant replaces are methods (`cache_key`, `span_tokens`, `frame_size`,
`global_indices`), so that tests can subclass the model.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.pipelines.engines import sglang_0_5_23 as image_model
from kimi_oracle.pipelines.reference import preprocess_image
from kimi_oracle.pipelines.request_contract import assign_ranks

ENGINE = "sglang-0.5.23"
PATHS = ("deferred", "eager")
# The engine's messages (models/kimi_k3.py, get_image_feature).
WRONG_GRIDS = "deferred GPU preprocessing produced wrong grids"
WRONG_LENGTH = "deferred feature length does not match image grids"
# The engine's prompt framing, as it writes it.
_BEGIN, _CONTENT, _END = "<|media_begin|>", "<|media_content|>", "<|media_end|>"
# Deferred items are grouped by backend; on CPU there is one.
_BACKEND = "torch"


@dataclass
class Artifact:
    """A cache entry: the plan, the staged uint8 tensor and (once computed) the eager rows."""

    plan: ResizePlan
    tensor: torch.Tensor
    rows: torch.Tensor | None = None


@dataclass
class Item:
    """One image of a prepared request."""

    grid_thw: tuple[int, int, int]
    offsets: tuple[int, int]
    path: str
    digest: str
    config: PreprocessConfig  # the deferred config: mean, std, background of the config in force
    plan: ResizePlan
    tensor: torch.Tensor | None = None
    rows: torch.Tensor | None = field(default=None, repr=False)
    backend: str = _BACKEND


def content_digest(img: Image.Image) -> str:
    """SHA-256 of an image's mode, size, palette, transparency and pixels."""
    h = hashlib.sha256(f"{img.mode} {img.size}".encode())
    palette = img.getpalette() if img.mode in ("P", "PA") else None
    h.update(repr((palette, img.info.get("transparency"))).encode())
    h.update(img.tobytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=512)
def fingerprint(config: PreprocessConfig) -> str:
    """The processor configuration's fingerprint (every checkpoint key)."""
    return json.dumps(config.to_hf_json(), sort_keys=True)


class RequestLayer:
    """The engine: `prepare` one request, `encode` items of any requests over dp ranks."""

    paths = PATHS

    def __init__(self, config: PreprocessConfig, tokenizer: Any):
        self.config = config
        self.tokenizer = tokenizer
        self.cache: dict[Any, Artifact] = {}

    def configure(self, config: PreprocessConfig) -> None:
        """The processor reloaded with `config`; the cache is kept."""
        self.config = config

    # -- the parts a mutant replaces ------------------------------------------------------------

    def cache_key(self, digest: str) -> Any:
        """The artifact cache's key: content digest and configuration fingerprint."""
        return digest, fingerprint(self.config)

    def span_tokens(self, plan: ResizePlan) -> int:
        """Pads per image: the plan's token count (`fixed_output_tokens` when set)."""
        return plan.num_tokens

    def frame_size(self, img: Image.Image, plan: ResizePlan) -> tuple[int, int]:
        """The W x H the framing prints: the decoded size."""
        return img.size

    def global_indices(self, image_indices: list[int], positions: list[int]) -> list[int]:
        """A group's rows of the batch's grid table."""
        return [image_indices[i] for i in positions]

    # -- prepare ----------------------------------------------------------------------------------

    def _artifact(self, img: Image.Image, digest: str) -> Artifact:
        key = self.cache_key(digest)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = Artifact(image_model.engine_plan(img.width, img.height, self.config),
                                             image_model.stage(img))
        return hit

    def _span(self, img: Image.Image, plan: ResizePlan) -> tuple[list[int], int]:
        w, h = self.frame_size(img, plan)
        head = self.tokenizer.encode(f"{_BEGIN}image {w}x{h}{_CONTENT}", allowed_special="all")
        pads = [self.tokenizer.media_pad_id] * self.span_tokens(plan)
        return head + pads + self.tokenizer.encode(_END, allowed_special="all"), len(head)

    def prepare(self, prompt_ids: list[int], images: list[Image.Image], paths: list[str]
                ) -> tuple[list[int], list[Item]]:
        """One request: the expanded ids and one item per image."""
        pad = self.tokenizer.media_pad_id
        if sum(1 for t in prompt_ids if t == pad) != len(images) or len(paths) != len(images):
            raise ValueError(f"{len(images)} image(s), {len(paths)} path(s) and "
                             f"{sum(1 for t in prompt_ids if t == pad)} placeholder(s) do not match")
        ids: list[int] = []
        items: list[Item] = []
        for token in prompt_ids:
            if token != pad:
                ids.append(token)
                continue
            img, path = images[len(items)], paths[len(items)]
            if path not in PATHS:
                raise ValueError(f"unknown path {path!r}")
            digest = content_digest(img)
            art = self._artifact(img, digest)
            span, first = self._span(img, art.plan)
            start = len(ids) + first
            ids.extend(span)
            item = Item(tuple(art.plan.grid_thw), (start, start + self.span_tokens(art.plan) - 1), path, digest,
                        self.config, art.plan)
            if path == "eager":
                if art.rows is None:
                    art.rows = preprocess_image(img, self.config)[0]
                item.rows = art.rows
            else:
                item.tensor = art.tensor
            items.append(item)
        return ids, items

    # -- encode -----------------------------------------------------------------------------------

    def _run_group(self, items: Sequence[Item], grid_table: Sequence[tuple[int, ...]], image_indices: list[int],
                   positions: list[int], rows: list[torch.Tensor | None]) -> None:
        global_indices = self.global_indices(image_indices, positions)
        members = [items[image_indices[i]] for i in positions]
        first = members[0].config  # the group's mean, std and background: its first item's
        result = image_model.from_tensors([m.tensor for m in members], [m.plan for m in members], None, first)
        produced = [tuple(int(v) for v in g) for g in result.grid_thws.tolist()]
        if produced != [tuple(grid_table[g]) for g in global_indices]:
            raise RuntimeError(WRONG_GRIDS)
        if int(result.pixel_values.shape[0]) != sum(math.prod(grid_table[g]) for g in global_indices):
            raise RuntimeError(WRONG_LENGTH)
        at = 0
        for g in global_indices:
            n = math.prod(grid_table[g])
            rows[g] = result.pixel_values[at:at + n]
            at += n

    def encode(self, items: list[Item], dp_size: int) -> torch.Tensor:
        """The patch rows of `items` in the order given, after sharding over `dp_size` ranks."""
        grid_table = [tuple(int(v) for v in it.grid_thw) for it in items]  # grid_thws_host
        rows: list[torch.Tensor | None] = [None] * len(items)
        for image_indices in assign_ranks(grid_table, dp_size):
            groups: dict[str, list[int]] = {}
            for pos, g in enumerate(image_indices):
                if items[g].path == "eager":
                    rows[g] = items[g].rows
                else:
                    groups.setdefault(items[g].backend, []).append(pos)
            for positions in groups.values():
                self._run_group(items, grid_table, image_indices, positions, rows)
        if not items:
            p = self.config.patch_size
            return torch.empty(0, 3, p, p)
        return torch.cat([r for r in rows if r is not None], 0)


def engine(config: PreprocessConfig, tokenizer: Any) -> RequestLayer:
    """The engine factory: SGLang 0.5.23's kimi_k3 request layer under `config`."""
    return RequestLayer(config, tokenizer)


__all__ = ["ENGINE", "PATHS", "WRONG_GRIDS", "WRONG_LENGTH", "Artifact", "Item", "RequestLayer",
           "content_digest", "engine", "fingerprint"]
