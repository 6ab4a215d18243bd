"""Judging a video chunker (issue 42): `(num_frames, fps, config) -> list[dict]`, one dict a chunk
with `frame_indices` (list of int) and `prompt` (the chunk's prompt text before expansion), against
the K2.5 checkpoint's sampling (`core.video.split_chunks`).

A difference is diagnosed by reproduction, as the image families are: the chunker variants of
`CHUNK_VARIANTS` (timestamp rounding and format, chunk tail, frame-index rounding, frame order)
are run on the same video, and those that give the candidate's chunks exactly are named.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.video import CHUNK_PROMPT, require_video, sample_frames, split_chunks, timestamp_text
from kimi_oracle.oracle.candidates import first_doc_line, named_function, resolve, stripped_spec

ChunkerFn = Callable[[int, float, PreprocessConfig], Any]


@dataclass(frozen=True)
class Chunker:
    """A loaded chunker: its spec, the function and a one-line description."""

    spec: str
    func: ChunkerFn
    description: str = ""


def reference_chunker(num_frames: int, fps: float, config: PreprocessConfig) -> list[dict[str, Any]]:
    """The checkpoint's chunks in the chunker interface's form."""
    return [{"frame_indices": list(c.frame_indices), "prompt": c.prompt} for c in split_chunks(num_frames, fps, config)]


def load_chunker(spec: str) -> Chunker:
    """`reference`, `package.module:function`, `path/to/file.py:function` or a module with a
    `chunk` function; CandidateError otherwise."""
    spec = stripped_spec(spec, "empty chunker spec; give reference, package.module:function, "
                               "path/to/file.py:function or a module with chunk()")
    if spec == "reference":
        return Chunker(spec, reference_chunker, "the K2.5 checkpoint's split_video_chunks")
    obj = resolve(spec, "chunker")
    func = named_function(obj, "chunker", spec, "chunk", describe=lambda o: type(o).__name__)
    return Chunker(spec, func, first_doc_line(obj))


# ---------------------------------------------------------------------------------------------
# variants (what engines do otherwise)


def _indices(num_frames: int, fps: float, config: PreprocessConfig, rounding: str) -> list[int]:
    sample_fps = min(float(config.sample_fps), fps)  # type: ignore[arg-type]
    if rounding == "arange-floor":  # transformers 5.23's default_sample_indices_fn
        n = max(1, int(num_frames / fps * sample_fps))
        return [int(i) for i in np.arange(n, dtype=np.int64) * num_frames // n]
    if rounding == "round":
        return sample_frames(num_frames, fps, config)  # the checkpoint's
    n = max(round(num_frames * sample_fps / fps), 1)
    return [int(i) for i in np.floor(np.linspace(0, num_frames - 1, n)).astype(int)]


def _stamp(t: float, mode: str, how: str) -> str:
    if how == "truncate":
        return timestamp_text(t, mode)
    if how == "round":  # milliseconds rounded (a total of ms, then the clock)
        total = round(t * 1000)
        whole, ms = divmod(total, 1000)
        t_whole = float(whole)
        head = timestamp_text(t_whole, mode)
        return head if mode == "mm:ss" else head[:-3] + f"{ms:03d}"
    # "datetime": the clock's own microseconds (datetime rounds t to microseconds), cut to ms
    clock = datetime.fromtimestamp(t, tz=timezone.utc)
    fmt = {"hh:mm:ss.fff": "%H:%M:%S.%f", "mm:ss.fff": "%M:%S.%f", "mm:ss": "%M:%S"}[mode]
    text = clock.strftime(fmt)
    return text if mode == "mm:ss" else text[:-3]


def variant_chunker(*, rounding: str = "round", stamp: str = "truncate", tail: str = "short",
                    order: str = "forward") -> ChunkerFn:
    """A chunker that does one step otherwise (the defaults are the checkpoint's)."""

    def chunk(num_frames: int, fps: float, config: PreprocessConfig) -> list[dict[str, Any]]:
        require_video(config)
        k = int(config.temporal_merge_kernel_size)  # type: ignore[arg-type]
        indices = _indices(int(num_frames), float(fps), config, rounding)
        out = []
        for start in range(0, len(indices), k):
            frames = indices[start: start + k]
            if len(frames) < k and tail == "dropped" and start > 0:
                break
            if len(frames) < k and tail == "repeat-last":
                frames = frames + [frames[-1]] * (k - len(frames))
            t = frames[0] / float(fps)
            if order == "reversed":
                frames = frames[::-1]
            text = _stamp(t, str(config.timestamp_mode), stamp)
            out.append({"frame_indices": list(frames), "prompt": CHUNK_PROMPT.format(timestamp=text)})
        return out

    return chunk


# family/variant -> chunker: the ways engines were seen (or are likely) to differ
CHUNK_VARIANTS: Mapping[str, ChunkerFn] = {
    "timestamp-rounding/round": variant_chunker(stamp="round"),
    "timestamp-rounding/datetime-microseconds": variant_chunker(stamp="datetime"),
    "chunk-tail/repeat-last": variant_chunker(tail="repeat-last"),
    "chunk-tail/dropped": variant_chunker(tail="dropped"),
    "frame-index-rounding/floor": variant_chunker(rounding="floor"),
    "frame-index-rounding/arange-floor": variant_chunker(rounding="arange-floor"),
    "frame-order/reversed": variant_chunker(order="reversed"),
}


# ---------------------------------------------------------------------------------------------
# judging


@dataclass
class ChunkFinding:
    """One video on which the candidate's chunks differ from the checkpoint's (or that it fails
    on): what differs first, both outputs, and the variants that give the candidate's."""

    num_frames: int
    fps: float
    timestamp_mode: str
    field: str
    message: str
    expected: Any
    actual: Any
    explained_by: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dataclasses.asdict(self)


def normalized(out: Any) -> list[dict[str, Any]]:
    """A chunker's output as plain lists (CandidateError when it is not the interface's form)."""
    if not isinstance(out, (list, tuple)):
        raise CandidateError(f"a chunker returns a list of dicts, got {type(out).__name__}")
    chunks = []
    for i, c in enumerate(out):
        if not isinstance(c, Mapping) or "frame_indices" not in c or "prompt" not in c:
            raise CandidateError(f"chunk {i}: expected a dict with frame_indices and prompt, got {c!r:.80}")
        idx = c["frame_indices"]
        idx = idx.tolist() if hasattr(idx, "tolist") else idx
        if not isinstance(idx, (list, tuple)) or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                                          for v in idx):
            raise CandidateError(f"chunk {i}: frame_indices must be a list of int, got {idx!r:.80}")
        if not isinstance(c["prompt"], str):
            raise CandidateError(f"chunk {i}: prompt must be a str, got {type(c['prompt']).__name__}")
        chunks.append({"frame_indices": [int(v) for v in idx], "prompt": c["prompt"]})
    return chunks


def first_difference(expected: Sequence[Mapping[str, Any]], actual: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(field, message) of the first difference, None when the chunks are the same."""
    for i, (e, a) in enumerate(zip(expected, actual)):
        if e["frame_indices"] != a["frame_indices"]:
            return "frame_indices", f"chunk {i}: frame indices {a['frame_indices']}, expected {e['frame_indices']}"
        if e["prompt"] != a["prompt"]:
            return "prompt", f"chunk {i}: prompt {a['prompt']!r}, expected {e['prompt']!r}"
    if len(expected) != len(actual):
        return "chunks", f"{len(actual)} chunks, expected {len(expected)}"
    return None


def judge_video(chunker: Chunker, num_frames: int, fps: float, config: PreprocessConfig) -> ChunkFinding | None:
    """The finding of one video (None when the candidate's chunks are the checkpoint's). A
    candidate that raises is a finding too (`field` "error")."""
    expected = reference_chunker(num_frames, fps, config)
    mode = str(config.timestamp_mode)
    try:
        actual: Any = normalized(chunker.func(num_frames, fps, config))
    except CandidateError as exc:
        return ChunkFinding(num_frames, fps, mode, "output", str(exc), expected, None)
    except Exception as exc:  # noqa: BLE001 — a candidate's failure is a finding, never a pass
        return ChunkFinding(num_frames, fps, mode, "error", f"{type(exc).__name__}: {exc}", expected, None)
    diff = first_difference(expected, actual)
    if diff is None:
        return None
    return ChunkFinding(num_frames, fps, mode, diff[0], diff[1], expected, actual)


def explain(findings: Sequence[ChunkFinding], base: PreprocessConfig) -> list[str]:
    """The variants that give the candidate's chunks on every finding (the same one for all, or
    none), each finding's video under `base` with its `timestamp_mode`: a candidate's step done
    otherwise, found by reproduction."""
    if not findings or any(f.actual is None for f in findings):
        return []
    configs = [dataclasses.replace(base, timestamp_mode=f.timestamp_mode) for f in findings]
    return [name for name, fn in CHUNK_VARIANTS.items()
            if all(_same(fn, f, c) for f, c in zip(findings, configs))]


def _same(fn: ChunkerFn, f: ChunkFinding, config: PreprocessConfig) -> bool:
    try:
        return normalized(fn(f.num_frames, f.fps, config)) == f.actual
    except Exception:  # noqa: BLE001 — a variant that cannot run this video does not explain it
        return False


def fps_text(fps: float) -> str:
    """An fps for messages: integral ones without decimals."""
    return str(int(fps)) if math.isfinite(fps) and fps == int(fps) else repr(fps)
