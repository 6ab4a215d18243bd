"""Requests with K2.5 video chunks drawn for the request layer (issue 42, item 6).

Each request is one drawn batch of `inputs.video_media`: one video's chunks, and images with
`--media both`. Text goes before, between and after the items. Now and then the video's chunks
are repeated (the same video twice in a prompt: the engine's cache). Each chunk's prompt is
`CHUNK_PROMPT` with its timestamp (chunk j starts at j * chunk size / sample_fps seconds). Each
request names 1-4 data-parallel ranks: an engine that takes `dp_size` spreads the items over them
(`request_contract.assign_ranks`) and must still return every item's rows in placeholder order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.tokenizer import MEDIA_PAD
from kimi_oracle.core.video import CHUNK_PROMPT, timestamp_text
from kimi_oracle.inputs.video_media import media_cases
from kimi_oracle.pipelines.video import is_chunk

TEXTS = ("", "Describe ", " and ", "\n", "视频 ")


@dataclass
class RequestCase:
    """One drawn request: its prompt text, the media in placeholder order, the config."""

    text: str
    media: list[Any]
    config: PreprocessConfig
    describe: str = ""
    dp_size: int = 1  # data-parallel ranks the engine spreads the items over (1-4)


def request_cases(base: PreprocessConfig, count: int, seed: int, media: str = "both") -> Iterator[RequestCase]:
    """`count` requests (see the module), deterministic from `seed`."""
    rng = np.random.default_rng([int(seed), 0x2E9])
    for case in media_cases(base, count, seed, media):
        items = case.media()
        if rng.integers(0, 4) == 0:  # the same video again (its chunks repeated)
            items = items + [item for item in items if is_chunk(item)]
        k = int(case.config.temporal_merge_kernel_size)  # type: ignore[arg-type]
        pieces, chunk = [], 0
        for item in items:
            pieces.append(TEXTS[int(rng.integers(0, len(TEXTS)))])
            if is_chunk(item):
                t = chunk * k / float(case.config.sample_fps)  # type: ignore[arg-type]
                pieces.append(CHUNK_PROMPT.format(timestamp=timestamp_text(t, str(case.config.timestamp_mode))))
                chunk += 1
            else:
                pieces.append(MEDIA_PAD)
        pieces.append(TEXTS[int(rng.integers(0, len(TEXTS)))])
        yield RequestCase("".join(pieces), items, case.config, case.describe(),
                          dp_size=int(rng.integers(1, 5)))


__all__ = ["TEXTS", "RequestCase", "request_cases"]
