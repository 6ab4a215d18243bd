"""Video golden files (issue 42): `video/<profile>.jsonl` for the profiles with the K2.5 video rules.

Three kinds of entry, each keyed by its `id`:

- `chunks/N@FPS/MODE`: a video of N frames at FPS, sampled and chunked (`core.video.split_chunks`):
  the sampled and chunk counts, the first two and the last chunk's frame indices, the first three
  and the last timestamps, and the SHA-256 of all indices, timestamps and
  prompts (JSON, compact), for a recorded table of frame counts
  (1 to 20,000, around multiples of the chunk size), fps values (integral, NTSC, 0.5, 240, at and
  around `sample_fps`) and every `timestamp_mode`;
- `plan/WxH/tT[/videoV]`: a chunk of T frames whose first frame is W x H, under an
  `in_patch_limit_video` of V (absent: none): resized size, padding, grid `(t, h, w)`, tokens;
- `pixels/NAME`: a few chunks (and one mixed batch) of generated frames (`CaseParams`), the
  SHA-256 of their `pixel_values` bytes (float32, C order) and their grids, computed by the
  candidate (the reference by default; `golden check --media video --candidate SPEC` runs a video
  candidate, `oracle.video_candidates`, in a forked process).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Callable

import numpy as np

from kimi_oracle.core.config import TIMESTAMP_MODES, PreprocessConfig
from kimi_oracle.core.errors import KimiOracleError
from kimi_oracle.core.video import plan_chunk, split_chunks, timestamp_text

FRAME_COUNTS = (1, 2, 3, 7, 8, 15, 16, 17, 25, 59, 60, 61, 119, 120, 121, 300, 301, 1799, 1800, 20000)
FPS_VALUES = (0.5, 1.0, 1.999, 2.0, 2.001, 10.0, 23.976, 24.0, 25.0, 29.97, 30.0, 59.94, 60.0, 240.0)
PLAN_SIZES = ((640, 360), (854, 480), (1280, 720), (1920, 1080), (3840, 2160), (1080, 1920), (1080, 1080),
              (13, 7), (1, 1))
PLAN_FRAMES = (1, 2, 3, 4)
VIDEO_LIMITS = (None, 4096, 8192)
# Pixel chunks: (name, frames as (w, h, mode, alpha, content, seed), config overrides). A mixed
# batch puts an image between two chunks.
PIXEL_CHUNKS: tuple[tuple[str, tuple[tuple[Any, ...], ...], dict[str, Any]], ...] = (
    ("rgb-4-frames-61x45", tuple((61, 45, "RGB", "opaque", "noise", s) for s in range(4)), {}),
    ("rgba-3-frames-40x28-video-budget", tuple((40, 28, "RGBA", "gradient", "edges", 10 + s) for s in range(3)),
     {"in_patch_limit_video": 6}),
    ("palette-2-frames-33x17", tuple((33, 17, "P", "key", "gradient", 20 + s) for s in range(2)), {}),
    ("unequal-frames-50x30-then-28x28", ((50, 30, "RGB", "opaque", "noise", 30), (28, 28, "RGB", "opaque", "edges", 31)),
     {}),
    ("one-frame-tail-17x70", ((17, 70, "L", "opaque", "noise", 40),), {}),
)


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, separators=(",", ":")).encode()).hexdigest()


def _stamp(mode: str) -> str:
    return {"hh:mm:ss.fff": "hms", "mm:ss.fff": "ms", "mm:ss": "m"}[mode]


def chunk_entries(config: PreprocessConfig) -> list[dict[str, Any]]:
    """The sampling table's entries."""
    out = []
    for mode in TIMESTAMP_MODES:
        cfg = dataclasses.replace(config, timestamp_mode=mode)
        for n in FRAME_COUNTS:
            for fps in FPS_VALUES:
                chunks = split_chunks(n, fps, cfg)
                indices = [list(c.frame_indices) for c in chunks]
                stamps = [timestamp_text(c.timestamp, mode) for c in chunks]
                out.append({"id": f"chunks/{n}@{fps:g}/{_stamp(mode)}", "num_frames": n, "fps": fps,
                            "timestamp_mode": mode, "sampled": sum(map(len, indices)), "chunks": len(chunks),
                            "head": indices[:2], "tail": indices[-1], "timestamps_head": stamps[:3],
                            "timestamp_tail": stamps[-1],
                            "indices_sha256": _sha(indices), "timestamps_sha256": _sha(stamps),
                            "prompts_sha256": _sha([c.prompt for c in chunks])})
    return out


def plan_entries(config: PreprocessConfig) -> list[dict[str, Any]]:
    """The chunk-plan table's entries."""
    out = []
    for limit in VIDEO_LIMITS:
        cfg = dataclasses.replace(config, in_patch_limit_video=limit)
        for w, h in PLAN_SIZES:
            for t in PLAN_FRAMES:
                p = plan_chunk(w, h, t, cfg)
                out.append({"id": f"plan/{w}x{h}/t{t}" + (f"/video{limit}" if limit else ""), "new_w": p.new_w,
                            "new_h": p.new_h, "pad_w": p.pad_w, "pad_h": p.pad_h, "grid_thw": list(p.grid_thw),
                            "num_tokens": p.num_tokens})
    return out


def pixel_batches(config: PreprocessConfig) -> list[tuple[str, list[Any], PreprocessConfig, list[dict[str, Any]]]]:
    """(id, media, config, frame params) of each pixel entry: the chunks, then one mixed batch."""
    from kimi_oracle.inputs.images import make_image
    from kimi_oracle.inputs.params import CaseParams

    out = []
    for name, frames, overrides in PIXEL_CHUNKS:
        params = [CaseParams(w, h, mode, alpha, content, seed=seed) for w, h, mode, alpha, content, seed in frames]
        cfg = dataclasses.replace(config, **overrides) if overrides else config
        out.append((f"pixels/{name}", [[make_image(p) for p in params]], cfg, [p.to_dict() for p in params]))
    first, image = out[0][1][0], make_image(CaseParams(30, 20, "RGB", "opaque", "gradient", seed=50))
    tail = out[-1][1][0]
    out.append(("pixels/mixed-chunk-image-chunk", [first, image, tail], config, []))
    return out


def pixel_entries(config: PreprocessConfig, candidate: Callable[[list, PreprocessConfig], Any], *,
                  mixed: bool = True) -> list[dict[str, Any]]:
    """The pixel entries computed by `candidate` (an error is that entry's `error`); without
    `mixed`, the batch with an image is left out (a candidate that takes chunks only)."""
    from kimi_oracle.oracle.checks import as_result

    out = []
    for key, media, cfg, params in pixel_batches(config):
        if not mixed and not all(isinstance(item, list) for item in media):
            continue
        entry: dict[str, Any] = {"id": key, "frames": params, "overrides": {
            k: getattr(cfg, k) for k in ("in_patch_limit_video",) if getattr(cfg, k) != getattr(config, k)}}
        try:
            result = as_result(candidate(media, cfg))
        except KimiOracleError:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded: the entry differs from its golden
            entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
            out.append(entry)
            continue
        values = np.ascontiguousarray(result.pixel_values.detach().cpu().contiguous().numpy())
        entry["grid_thws"] = result.grid_thws.reshape(-1, 3).tolist()
        entry["sha256"] = hashlib.sha256(values.tobytes()).hexdigest()
        entry["dtype"] = str(values.dtype)
        out.append(entry)
    return out


def video_entries(config: PreprocessConfig, candidate: str | Callable | None = None) -> list[dict[str, Any]]:
    """Every entry of a profile's video golden; the pixels by `candidate`: a video candidate spec
    (run in a forked process), a callable `(media, config) -> result` (in this process, as given:
    mixed batches included), or the reference (None or `reference`)."""
    entries = chunk_entries(config) + plan_entries(config)
    if candidate in (None, "reference"):
        from kimi_oracle.pipelines.video import preprocess_media

        return entries + pixel_entries(config, preprocess_media)
    if callable(candidate):
        return entries + pixel_entries(config, candidate)
    from kimi_oracle.fuzzers.isolated import run_forked

    kind, pixels = run_forked(f"kimi-golden-video[{candidate}]", _candidate_pixels, (config, candidate), {}, 600.0)
    if kind != "result":
        return entries + [{"id": key, "error": f"the candidate's run: {pixels}"} for key, *_ in pixel_batches(config)]
    return entries + pixels


def _candidate_pixels(config: PreprocessConfig, spec: str) -> list[dict[str, Any]]:
    from kimi_oracle.oracle.video_candidates import load_media_candidate

    candidate = load_media_candidate(spec, "video")
    return pixel_entries(config, candidate, mixed="image" in candidate.media)


def describe_change(key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> str:
    """One line for a changed video entry: the fields that differ."""
    if old is None:
        return f"+ {key}: not in the golden file"
    if new is None:
        return f"- {key}: in the golden file but not computed now"
    fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    parts = []
    for k in fields:
        a, b = old.get(k), new.get(k)
        if k == "sha256":
            parts.append(f"digest {str(a)[:12]} -> {str(b)[:12]}")
        else:
            parts.append(f"{k} {str(a)[:80]} -> {str(b)[:80]}")
    return f"~ {key}: " + "; ".join(parts)


__all__ = ["FPS_VALUES", "FRAME_COUNTS", "PIXEL_CHUNKS", "PLAN_SIZES", "chunk_entries", "describe_change",
           "pixel_batches", "pixel_entries", "plan_entries", "video_entries"]
