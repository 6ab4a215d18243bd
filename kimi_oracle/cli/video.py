"""The video options of `kimi-oracle fuzz` (issue 42): `--media image|video|both`, `--chunker
SPEC` and `--video-rules k25`.

`--media video --chunker SPEC` fuzzes a chunker `(num_frames, fps, config) -> list[dict]`
against the K2.5 checkpoint's sampling (`fuzzers.chunker_fuzz`): exit 0 when every drawn video's
chunks are the checkpoint's, 1 on a finding (or a chunker that crashed or hung), 2 on a usage
or load error. Video candidates and planners (`--media video --candidate/--planner`) and mixed
batches (`--media both`) are not judged yet: they are refused with exit 2, never run as images.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK

MEDIA = ("image", "video", "both")
NOT_YET = ("--media {media}: only a chunker is judged on video today (--chunker SPEC); video candidates, "
           "planners, engines and mixed batches are not (docs/video.md, 'What is judged')")


def video_options(func: Callable[..., int]) -> Callable[..., int]:
    """Add `--media`, `--chunker`, `--video-rules` to a command: the image run goes on unchanged
    unless video is asked for."""

    @functools.wraps(func)
    def wrapper(*args: Any, media: str = "image", chunker_spec: str | None = None, video_rules: str | None = None,
                **kwargs: Any) -> int:
        if media == "image" and chunker_spec is None:
            return func(*args, **kwargs)
        return _video_fuzz(media, chunker_spec, video_rules, kwargs)

    wrapper = click.option("--video-rules", "video_rules", type=click.Choice(["k25"]), default=None,
                           help="Apply the K2.5 checkpoint's video rules to a config without them (K3's "
                                "processor is image-only; engines serve K3 video with K2.5's rules).")(wrapper)
    wrapper = click.option("--chunker", "chunker_spec", default=None, metavar="SPEC",
                           help="With --media video: fuzz this chunker (num_frames, fps, config) -> "
                                "[{frame_indices, prompt}, ...] against the checkpoint's frame sampling, "
                                "timestamps and chunk prompts (--examples videos, default 2000).")(wrapper)
    wrapper = click.option("--media", type=click.Choice(MEDIA), default="image", show_default=True,
                           help="What is judged: images, K2.5 video chunks, or both in one batch.")(wrapper)
    return wrapper


def _video_fuzz(media: str, chunker_spec: str | None, video_rules: str | None, kw: dict[str, Any]) -> int:
    from kimi_oracle.cli.common import check_outputs, parse_duration, resolve_config
    from kimi_oracle.core.defaults import fresh_seed
    from kimi_oracle.core.files import to_json, write_json
    from kimi_oracle.core.video import require_video
    from kimi_oracle.fuzzers.chunker_fuzz import DEFAULT_BUDGET_S, DEFAULT_VIDEOS, run_chunker_isolated

    if media != "video" or chunker_spec is None or any(kw.get(k) for k in ("candidate_spec", "planner_spec",
                                                                              "engine_spec")):
        raise click.UsageError(NOT_YET.format(media=media))
    config = resolve_config(kw.get("profile"), kw.get("config_path"))
    if video_rules is not None:
        config = config.with_video_rules(video_rules)
    require_video(config)
    json_path = kw.get("json_path")
    check_outputs(None, json_path, None)
    seed = kw.get("seed")
    seed = fresh_seed() if seed is None else seed
    videos = kw.get("examples") or DEFAULT_VIDEOS
    budget = parse_duration(kw["budget"]) if kw.get("budget") else DEFAULT_BUDGET_S
    click.echo(f"fuzzing chunker {chunker_spec} on {videos} videos ({config.name}, seed {seed})", err=True)
    report = run_chunker_isolated(chunker_spec, config, videos, seed, budget_s=budget)
    for line in report.lines():
        click.echo(line)
    doc = report.to_dict()
    if json_path is not None:
        if str(json_path) == "-":
            sys.stdout.write(to_json(doc) + "\n")
        else:
            write_json(json_path, doc)
    return EXIT_OK if report.ok else EXIT_FINDINGS
