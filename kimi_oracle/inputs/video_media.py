"""Batches of video chunks (and images) drawn where a chunk's processing breaks (issue 42, item 3).

A `MediaCase` is one batch as a candidate gets it: the chunks of one video (its sampled frames
split in runs of `temporal_merge_kernel_size`, the last run shorter) and, with `--media both`,
images before, between and after them, as the engines batch them; and the config it is judged
under. Every frame and image is a `CaseParams` (`make_image` builds it), so that a case is
plain data: written in a finding's `case.json`, replayed bit for bit.

What is drawn:
- the video's sampled frames: 1..3, around multiples of the chunk size (4k - 1 .. 4k + 1), or 9;
- frame sizes: small (the default suite's cost), tall, wide, odd and tiny (1 pixel) sides;
- frame modes: RGB, RGBA with alpha patterns, palettes with transparency (a GIF's frames), L;
- now and then frames of unequal sizes in one chunk (the checkpoint resizes every frame to the
  first frame's plan: the oracle's answer);
- `in_patch_limit_video`: absent, or small enough that dividing it by the chunk's frames (or by
  all the video's) shrinks the frames; `in_patch_limit_each_frame` now and then small, and
  `fixed_output_tokens_each_frame` now and then set (the checkpoint never reads it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.video import require_video
from kimi_oracle.inputs.images import make_image
from kimi_oracle.inputs.params import CaseParams

MEDIA = ("image", "video", "both")
MAX_SIDE = 72  # frames and images drawn up to this side (the oracle's cost per example)
_MODES = (("RGB", "opaque"), ("RGB", "opaque"), ("RGB", "opaque"), ("RGBA", "gradient"), ("RGBA", "checker"),
          ("P", "key"), ("P", "opaque"), ("L", "opaque"))
_CONTENTS = ("noise", "gradient", "edges", "flat")


@dataclass(frozen=True)
class MediaCase:
    """One drawn batch: `items`, each a `CaseParams` (an image) or a tuple of them (a chunk's
    frames), and its config."""

    items: tuple[CaseParams | tuple[CaseParams, ...], ...]
    config: PreprocessConfig

    def media(self) -> list[Any]:
        """The batch as a candidate gets it: PIL images and lists of PIL frames."""
        return [[make_image(p) for p in item] if isinstance(item, tuple) else make_image(item) for item in self.items]

    @property
    def chunks(self) -> int:
        """How many items are chunks."""
        return sum(isinstance(item, tuple) for item in self.items)

    @property
    def frames(self) -> int:
        """The video's sampled frames (all chunks' frames)."""
        return sum(len(item) for item in self.items if isinstance(item, tuple))

    def describe(self) -> str:
        """One line: each item's kind, frames, size and mode."""
        out = []
        for i, item in enumerate(self.items):
            if isinstance(item, tuple):
                sizes = sorted({f"{p.width}x{p.height}" for p in item})
                out.append(f"chunk {i}: {len(item)} frames {'/'.join(sizes)} {item[0].mode}")
            else:
                out.append(f"image {i}: {item.width}x{item.height} {item.mode}")
        return "; ".join(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (`from_dict` reads it back)."""
        return {"items": [{"chunk": [p.to_dict() for p in item]} if isinstance(item, tuple) else {"image": item.to_dict()}
                          for item in self.items],
                "config": self.config.to_hf_json()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], config: PreprocessConfig) -> "MediaCase":
        """A case from `to_dict`'s items, judged under `config`."""
        items: list[Any] = []
        for entry in data["items"]:
            if "chunk" in entry:
                items.append(tuple(CaseParams.from_dict(p) for p in entry["chunk"]))
            else:
                items.append(CaseParams.from_dict(entry["image"]))
        return cls(tuple(items), config)


def _side(rng: np.random.Generator) -> int:
    pick = rng.integers(0, 8)
    if pick == 0:
        return int(rng.integers(1, 4))
    if pick == 1:
        return int(28 * rng.integers(1, 3))  # whole merged patches: no pad
    return int(rng.integers(4, MAX_SIDE + 1))


def _size(rng: np.random.Generator) -> tuple[int, int]:
    w, h = _side(rng), _side(rng)
    if rng.integers(0, 6) == 0:  # tall or wide
        w, h = (max(1, w // 6), MAX_SIDE) if rng.integers(0, 2) else (MAX_SIDE, max(1, h // 6))
    return w, h


def _params(rng: np.random.Generator, size: tuple[int, int], look: tuple[str, str, str]) -> CaseParams:
    mode, alpha, content = look
    return CaseParams(size[0], size[1], mode, alpha, content, seed=int(rng.integers(0, 2**31)))


def _look(rng: np.random.Generator) -> tuple[str, str, str]:
    mode, alpha = _MODES[int(rng.integers(0, len(_MODES)))]
    return mode, alpha, _CONTENTS[int(rng.integers(0, len(_CONTENTS)))]


def _sampled(rng: np.random.Generator, k: int) -> int:
    pick = rng.integers(0, 4)
    if pick == 0:
        return int(rng.integers(1, 4))
    if pick == 3:
        return 2 * k + 1
    return max(1, k * int(rng.integers(1, 3)) + int(rng.integers(-1, 2)))


def _video(rng: np.random.Generator, k: int) -> list[tuple[CaseParams, ...]]:
    n = _sampled(rng, k)
    size, look = _size(rng), _look(rng)
    frames = []
    unequal = rng.integers(0, 8) == 0
    for j in range(n):
        frames.append(_params(rng, _size(rng) if unequal and j % k else size, look))
    return [tuple(frames[s: s + k]) for s in range(0, n, k)]


def _config(rng: np.random.Generator, base: PreprocessConfig, frames: int, size: tuple[int, int]) -> PreprocessConfig:
    patches = max(1, (size[0] // base.patch_size) * (size[1] // base.patch_size))
    changes: dict[str, Any] = {}
    pick = rng.integers(0, 4)
    if pick:  # a video total that shrinks frames when divided by the chunk's or the video's frames
        changes["in_patch_limit_video"] = max(1, int(round(frames * patches * rng.uniform(0.15, 1.3))))
    if rng.integers(0, 6) == 0:
        changes["in_patch_limit_each_frame"] = max(1, int(patches * rng.uniform(0.2, 1.0)))
    if rng.integers(0, 4) == 0:
        changes["fixed_output_tokens_each_frame"] = int(rng.integers(1, 6))
    return dataclasses.replace(base, **changes) if changes else base


def media_cases(base: PreprocessConfig, count: int, seed: int, media: str = "video") -> Iterator[MediaCase]:
    """`count` batches for `media` ("video": one video's chunks; "both": its chunks and images
    interleaved; "image" is refused: images have their own fuzzer), deterministic from `seed`."""
    if media not in ("video", "both"):
        raise ValueError(f"media_cases draws video or both, not {media!r}")
    require_video(base)
    rng = np.random.default_rng([int(seed), 0x3ED1A])
    k = int(base.temporal_merge_kernel_size)  # type: ignore[arg-type]
    for _ in range(int(count)):
        chunks = _video(rng, k)
        items: list[Any] = list(chunks)
        if media == "both":
            for _ in range(int(rng.integers(1, 3))):
                items.insert(int(rng.integers(0, len(items) + 1)), _params(rng, _size(rng), _look(rng)))
        first = chunks[0][0]
        yield MediaCase(tuple(items), _config(rng, base, sum(len(c) for c in chunks), first.size))


def frames_of(media: list[Any]) -> list[Image.Image]:
    """Every frame and image of a batch, in order (flattened)."""
    out: list[Image.Image] = []
    for item in media:
        out.extend(item if isinstance(item, list) else [item])
    return out


__all__ = ["MAX_SIDE", "MEDIA", "MediaCase", "frames_of", "media_cases"]
