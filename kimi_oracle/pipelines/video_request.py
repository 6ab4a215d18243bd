"""The request contract with K2.5 video chunks (issue 42, item 6): a prompt that holds a video's chunk
prompts (`core.video.CHUNK_PROMPT`: each chunk's timestamp, its framing and one `<|media_pad|>`)
and images' placeholders, in any order.

- Each placeholder is one media item, in order: an image (`(width, height)`) or a chunk
  (`(width, height, frames)`, its first frame's size and its frame count).
- An image's placeholder expands as `request_contract.image_span` (K3 or K2.5 framing). A chunk's
  expands to `num_tokens` pads only: its prompt already carries its framing.
- The token count is `plan_chunk`'s, one frame's spatial count, never `t` times it.
- Each item's offsets are the inclusive (start, end) of its pad run. Its grid is its plan's
  `grid_thw`, `(t, h, w)` for a chunk, and its rows are `t * h * w` reference rows.

`video_prompt(num_frames, fps, config)` is the text a video contributes: its chunks' prompts,
concatenated.
"""

from __future__ import annotations

from typing import Sequence

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.video import plan_chunk, split_chunks
from kimi_oracle.pipelines.request_contract import (ExpectedRequest, Span, TokenizerLike, expand_spans, framing_for,
                                                   image_span)

MediaSize = tuple[int, int] | tuple[int, int, int]  # (w, h) an image, (w, h, t) a chunk


def video_prompt(num_frames: int, fps: float, config: PreprocessConfig) -> str:
    """A video's text in a prompt: its chunks' prompts (timestamp, framing, one pad), in order."""
    return "".join(c.prompt for c in split_chunks(num_frames, fps, config))


def item_plan(item: MediaSize, config: PreprocessConfig) -> ResizePlan:
    """An item's plan: `plan_chunk` for a chunk, `plan` for an image."""
    if len(item) == 3:
        w, h, t = item  # type: ignore[misc]
        return plan_chunk(w, h, t, config)
    w, h = item  # type: ignore[misc]
    return plan(w, h, config)


def expected_media_request(prompt_ids: Sequence[int], items: Sequence[MediaSize], config: PreprocessConfig,
                           tokenizer: TokenizerLike, framing: str | None = None) -> ExpectedRequest:
    """The contract's expanded ids, plans and offsets for a prompt of images and chunks;
    InputError when the placeholders do not match the items one to one."""
    framing = framing or framing_for(config)
    plans = tuple(item_plan(item, config) for item in items)
    spans = [media_span(tokenizer, item, p.num_tokens, framing) for item, p in zip(items, plans)]
    out, offsets = expand_spans(prompt_ids, spans, tokenizer.media_pad_id, "item")
    return ExpectedRequest(tuple(out), plans, tuple(offsets))


def media_span(tokenizer: TokenizerLike, item: MediaSize, num_tokens: int, framing: str) -> Span:
    """One item's span: a chunk's `num_tokens` pads alone (its prompt carries its framing), an
    image's `image_span`."""
    if len(item) == 3:
        return [tokenizer.media_pad_id] * num_tokens, 0, num_tokens
    return (*image_span(tokenizer, (item[0], item[1]), num_tokens, framing), num_tokens)


__all__ = ["MediaSize", "expected_media_request", "item_plan", "media_span", "video_prompt"]
