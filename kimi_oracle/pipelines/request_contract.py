"""The request contract (docs/spec.md, "Request contract"): a prompt's expansion, grids, offsets, rows.

For a prompt holding one `<|media_pad|>` per image and a configuration, the reference says:

- K3 framing: each placeholder becomes `<|media_begin|>image {W}x{H}<|media_content|>`, then
  `num_tokens` x `<|media_pad|>`, then `<|media_end|>`; W x H is the image's decoded size (PIL
  `.size`), `num_tokens` the plan's (`fixed_output_tokens` when set);
- K2.5 framing: each placeholder becomes `num_tokens` pads (the template frames it);
- each image's `offsets` is the inclusive (start, end) of its pad run in the expanded ids;
- each image's grid is the checkpoint plan's `grid_thw`, its rows the reference's patches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import math

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import InputError
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.tokenizer import MEDIA_BEGIN, MEDIA_CONTENT, MEDIA_END
from kimi_oracle.pipelines.reference import preprocess_image

FRAMINGS = ("k3", "k25")


class TokenizerLike(Protocol):
    """What the contract needs of a tokenizer (the oracle's `core.tokenizer.Tokenizer`)."""

    media_pad_id: int

    def encode(self, text: str, allowed_special: object = "all") -> list[int]: ...


def framing_for(config: PreprocessConfig) -> str:
    """The prompt framing of a profile: "k25" for the K2.5 checkpoint, "k3" otherwise."""
    return "k25" if config.name.split("~")[0] == "k25" else "k3"


def image_span(tokenizer: TokenizerLike, size: tuple[int, int], num_tokens: int, framing: str = "k3"
               ) -> tuple[list[int], int]:
    """The ids one placeholder expands to and the position of its first pad within them."""
    if framing not in FRAMINGS:
        raise InputError(f"unknown framing {framing!r}; expected one of {', '.join(FRAMINGS)}")
    pads = [tokenizer.media_pad_id] * num_tokens
    if framing == "k25":
        return pads, 0
    head = tokenizer.encode(f"{MEDIA_BEGIN}image {size[0]}x{size[1]}{MEDIA_CONTENT}", allowed_special="all")
    return head + pads + tokenizer.encode(MEDIA_END, allowed_special="all"), len(head)


@dataclass(frozen=True)
class Step:
    """One program step: `configure` (config), `prepare` (request, prompt ids, image numbers,
    paths) or `encode` (members as (request, image) pairs, dp_size)."""

    kind: str
    config: PreprocessConfig | None = None
    request: int = -1
    prompt_ids: tuple[int, ...] = ()
    images: tuple[int, ...] = ()
    paths: tuple[str, ...] = ()
    members: tuple[tuple[int, int], ...] = ()
    dp_size: int = 1


Span = tuple[list[int], int, int]  # an item's ids, the position of its first pad, its pad count


def expand_spans(prompt_ids: Sequence[int], spans: Sequence[Span], pad: int, noun: str = "image"
                 ) -> tuple[list[int], list[tuple[int, int]]]:
    """The prompt with its k-th placeholder (`pad`) replaced by `spans[k]`'s ids, and each item's
    inclusive pad-run offsets; InputError when the placeholders do not match the spans one to one."""
    count = sum(1 for i in prompt_ids if i == pad)
    if count != len(spans):
        raise InputError(f"the prompt holds {count} media placeholder(s) for {len(spans)} {noun}(s)")
    out: list[int] = []
    offsets: list[tuple[int, int]] = []
    k = 0
    for token in prompt_ids:
        if token != pad:
            out.append(int(token))
            continue
        span, first, n = spans[k]
        start = len(out) + first
        offsets.append((start, start + n - 1))
        out.extend(span)
        k += 1
    return out, offsets


def expand(prompt_ids: Sequence[int], sizes: Sequence[tuple[int, int]], num_tokens: Sequence[int],
           tokenizer: TokenizerLike, framing: str = "k3") -> tuple[list[int], list[tuple[int, int]]]:
    """Expanded ids and each image's inclusive pad-run offsets; InputError when the prompt's
    placeholders do not match the images one to one."""
    if len(sizes) != len(num_tokens):
        raise ValueError(f"{len(sizes)} sizes for {len(num_tokens)} token counts")
    spans = [(*image_span(tokenizer, size, n, framing), n) for size, n in zip(sizes, num_tokens)]
    return expand_spans(prompt_ids, spans, tokenizer.media_pad_id)


@dataclass(frozen=True)
class ExpectedRequest:
    """What the contract says one request becomes: ids, and per image its plan and offsets."""

    input_ids: tuple[int, ...]
    plans: tuple[ResizePlan, ...]
    offsets: tuple[tuple[int, int], ...]

    @property
    def grids(self) -> tuple[tuple[int, int, int], ...]:
        """Each image's grid_thw."""
        return tuple(p.grid_thw for p in self.plans)


def expected_request(prompt_ids: Sequence[int], sizes: Sequence[tuple[int, int]], config: PreprocessConfig,
                     tokenizer: TokenizerLike, framing: str = "k3") -> ExpectedRequest:
    """The contract's expansion, plans and offsets for a prompt and its images' sizes."""
    plans = tuple(plan(w, h, config) for w, h in sizes)
    ids, offsets = expand(prompt_ids, sizes, [p.num_tokens for p in plans], tokenizer, framing)
    return ExpectedRequest(tuple(ids), plans, tuple(offsets))


def assign_ranks(grids: Sequence[Sequence[int]], dp_size: int) -> list[list[int]]:
    """Image indices per rank: sorted by prod(grid), largest first (stable), each to the
    least-loaded rank, ties to the lowest."""
    sizes = [math.prod(int(v) for v in g) for g in grids]
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    loads = [0] * max(1, dp_size)
    ranks: list[list[int]] = [[] for _ in loads]
    for i in order:
        r = min(range(len(loads)), key=lambda k: (loads[k], k))
        ranks[r].append(i)
        loads[r] += sizes[i]
    return ranks


def reference_rows(image: Image.Image, config: PreprocessConfig) -> torch.Tensor:
    """The reference's rows (prod(grid), 3, p, p) of one image."""
    return preprocess_image(image, config)[0]


__all__ = ["FRAMINGS", "ExpectedRequest", "Span", "Step", "expand_spans", "assign_ranks", "TokenizerLike", "expand", "expected_request", "framing_for",
           "image_span", "reference_rows"]
