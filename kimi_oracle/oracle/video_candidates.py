"""Video candidates and planners (issue 42): what `--media video|both --candidate/--planner SPEC`
load.

- A video candidate is a callable `(chunks: list[list[PIL.Image.Image]], config) ->
  (pixel_values, grid_thws)` (or a `PreprocessResult`): one `(t, h, w)` grid row per chunk.
- A candidate module (or function) that declares `kimi_oracle_media = ("image", "video")` takes
  a mixed list of images and chunks (`--media both`); one that does not is given chunks only,
  and `--media both` refuses it (exit 2).
- A video planner is `(width, height, num_frames, config) -> dict` with the image planner's keys
  (`num_tokens, new_width, new_height, pad_width, pad_height`).

Specs: `reference` (the K2.5 checkpoint's rules), `gpu` (the Triton pipeline, `pipelines.gpu.video`), `transformers@SOURCE` (its
`Kimi_K25VideoProcessor`, `adapters.transformers_k25_video`), `vllm@SOURCE` (its
`KimiK25FusedVisionProcessor` on `video_chunk` items, images and chunks mixed, `adapters.vllm`), `package.module:function`,
`path/to/file.py:function`, or a module with `preprocess` (a candidate) / `plan_video` or `plan`
(a planner).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.candidates import first_doc_line, named_function, resolve, stripped_spec
from kimi_oracle.oracle.checks import as_result

MEDIA_ATTR = "kimi_oracle_media"
VIDEO_ENGINES = ("transformers", "vllm")  # engines with a video path an adapter reaches (docs/video.md)


@dataclass(frozen=True)
class MediaCandidate:
    """A loaded video candidate: its spec, function, description and the media it takes."""

    spec: str
    func: Callable[[list, PreprocessConfig], Any]
    description: str = ""
    media: tuple[str, ...] = ("video",)

    def __call__(self, items: list, config: PreprocessConfig) -> PreprocessResult:
        """The candidate's result, validated (CandidateError for a return that is no result)."""
        return as_result(self.func(items, config), self.spec)


@dataclass(frozen=True)
class VideoPlanner:
    """A loaded video planner `(width, height, num_frames, config) -> dict`."""

    spec: str
    func: Callable[[int, int, int, PreprocessConfig], Any]
    description: str = ""


def declared_media(obj: Any) -> tuple[str, ...]:
    """What `obj` (a module or a function) declares it takes: its own `kimi_oracle_media`, or its
    module's; ("video",) when neither declares."""
    for holder in (obj, sys.modules.get(getattr(obj, "__module__", "") or "")):
        value = getattr(holder, MEDIA_ATTR, None)
        if value is not None:
            if isinstance(value, str):
                value = (value,)
            media = tuple(str(v) for v in value)
            unknown = [m for m in media if m not in ("image", "video")]
            if unknown:
                raise CandidateError(f"{MEDIA_ATTR} = {value!r}: unknown medium {unknown[0]!r}; "
                                     "expected 'image' and/or 'video'")
            return media
    return ("video",)


def load_media_candidate(spec: str, media: str = "video") -> MediaCandidate:
    """The candidate `spec` for `media` ("video" or "both"); CandidateError when it cannot load
    or does not take `media`."""
    spec = stripped_spec(spec, "empty candidate spec; give reference, transformers@VERSION, "
                               "package.module:function, path/to/file.py:function or a module with preprocess()")
    if spec == "reference":
        from kimi_oracle.pipelines.video import preprocess_media

        found = MediaCandidate(spec, preprocess_media, "the K2.5 checkpoint's video processing", ("image", "video"))
    elif spec == "gpu":
        from kimi_oracle.pipelines.gpu.video import preprocess_media as gpu_media

        found = MediaCandidate(spec, gpu_media, "the Triton GPU pipeline on chunks (interpreter on CPU)",
                               ("image", "video"))
    elif "@" in spec and spec.split("@", 1)[0] in ("sglang", "vllm", "transformers"):
        found = _engine_candidate(spec)
    else:
        obj = resolve(spec, "candidate")
        func = named_function(getattr(obj, "preprocess", obj) if not callable(obj) else obj, "candidate", spec,
                              "preprocess")
        found = MediaCandidate(spec, func, first_doc_line(obj), declared_media(obj if not callable(obj) else func))
    wanted = ("image", "video") if media == "both" else ("video",)
    missing = [m for m in wanted if m not in found.media]
    if missing:
        raise CandidateError(f"candidate {spec!r} does not take {' and '.join(missing)} (it declares "
                             f"{MEDIA_ATTR} = {found.media!r}); --media {media} needs "
                             f"{MEDIA_ATTR} = {tuple(wanted)!r}")
    return found


def _engine_candidate(spec: str) -> MediaCandidate:
    name, source = spec.split("@", 1)
    if name == "vllm":  # its fused processor takes images and video_chunk items in one call
        from kimi_oracle.adapters.engines import engine_candidate

        preprocess, description, _ = engine_candidate(spec)
        return MediaCandidate(spec, preprocess, description + " (video_chunk items)", ("image", "video"))
    if name != "transformers":
        raise CandidateError(f"candidate {spec!r}: {name} has no video path in its releases (kimi-oracle engines "
                             "lists which engines have one); --media video judges transformers@VERSION and "
                             "vllm@VERSION")
    from kimi_oracle.adapters.transformers_k25_video import video_path

    preprocess, _ = video_path(source)
    return MediaCandidate(spec, preprocess, "transformers' Kimi_K25VideoProcessor (the release's own class)")


def reference_video_plan(width: int, height: int, num_frames: int, config: PreprocessConfig) -> dict[str, Any]:
    """The checkpoint's plan of a chunk of `num_frames` frames whose first frame is W x H."""
    from kimi_oracle.core.video import plan_chunk

    p = plan_chunk(width, height, num_frames, config)
    return {"num_tokens": p.num_tokens, "new_width": p.new_w, "new_height": p.new_h, "pad_width": p.pad_w,
            "pad_height": p.pad_h, "grid_thw": list(p.grid_thw)}


def load_video_planner(spec: str) -> VideoPlanner:
    """The video planner `spec`; CandidateError when it cannot load."""
    spec = stripped_spec(spec, "empty planner spec; give reference, transformers@VERSION, package.module:function, "
                               "path/to/file.py:function or a module with plan_video()")
    if spec == "reference":
        return VideoPlanner(spec, reference_video_plan, "the K2.5 checkpoint's navit_resize_video")
    if "@" in spec and spec.split("@", 1)[0] in ("sglang", "vllm", "transformers"):
        name, source = spec.split("@", 1)
        if name != "transformers":
            raise CandidateError(f"planner {spec!r}: {name} has no video planner in its releases")
        from kimi_oracle.adapters.transformers_k25_video import video_path

        _, plan = video_path(source)
        return VideoPlanner(spec, plan, "transformers' Kimi_K25VideoProcessor planner (its navit_resize)")
    obj = resolve(spec, "planner")
    if not callable(obj):
        obj = getattr(obj, "plan_video", None) or getattr(obj, "plan", obj)
    func = named_function(obj, "planner", spec, "plan_video")
    return VideoPlanner(spec, func, first_doc_line(obj))


__all__ = ["MEDIA_ATTR", "MediaCandidate", "VideoPlanner", "declared_media", "load_media_candidate",
           "load_video_planner", "reference_video_plan"]
