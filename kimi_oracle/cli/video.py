"""The video options of `kimi-oracle fuzz` (issue 42): `--media image|video|both`, `--chunker
SPEC` and `--video-rules k25`.

- `--media video --chunker SPEC` fuzzes a chunker `(num_frames, fps, config) -> list[dict]`
  against the K2.5 checkpoint's sampling (`fuzzers.chunker_fuzz`);
- `--media video|both --candidate SPEC` a video candidate on drawn batches of chunks (and
  images) (`fuzzers.video_fuzz`);
- `--media video --planner SPEC` a video planner `(width, height, num_frames, config) -> dict`
  (`oracle.video_planner`).

- `--media video|both --engine file.py:function` a video request engine (`oracle.video_request`);
  a built-in engine spec is refused with exit 2 (no released engine's request layer takes chunks).

Exit 0 when everything drawn agrees with the checkpoint, 1 on a finding (or a run that crashed
or hung), 2 on a usage or load error; never run as images. `--json` and `--out DIR` (`video-report.json/.md`,
`video-planner-report...`, `chunker-report...`) take the report.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from kimi_oracle.core.errors import EXIT_FINDINGS, EXIT_OK

MEDIA = ("image", "video", "both")
NOT_YET = ("--media {media} --engine: no built-in engine's released request layer takes video chunks (SGLang "
           "0.5.23 has none; vLLM 0.33 has no split_video_chunks): give a video request engine "
           "(prompt_ids, media, config) -> {{input_ids, offsets, grid_thws, pixel_values}} as file.py:function "
           "(docs/video.md)")
DEFAULT_PLANNED = 2000  # chunks a video planner plans by default


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
    from kimi_oracle.cli.common import check_outputs, resolve_config, setup_interpret
    from kimi_oracle.core.video import require_video

    candidate, planner = kw.get("candidate_spec"), kw.get("planner_spec")
    asked = [name for name, value in (("--chunker", chunker_spec), ("--candidate", candidate), ("--planner", planner),
                                      ("--engine", kw.get("engine_spec"))) if value]
    if len(asked) != 1:
        raise click.UsageError(f"--media {media}: give one of --candidate, --planner or --chunker"
                               + (f" (got {', '.join(asked)})" if asked else ""))
    engine = kw.get("engine_spec")
    if engine:
        from kimi_oracle.adapters.engines import is_engine_spec

        if is_engine_spec(engine):
            raise click.UsageError(NOT_YET.format(media=media))
    if media == "image":
        raise click.UsageError("--chunker judges a video's chunks: add --media video")
    if media == "both" and not (candidate or engine):
        raise click.UsageError(f"--media both mixes images and chunks in one batch: it judges a candidate; "
                               f"{asked[0]} takes --media video")
    config = resolve_config(kw.get("profile"), kw.get("config_path"))
    if video_rules is not None:
        config = config.with_video_rules(video_rules)
    require_video(config)
    check_outputs(None, kw.get("json_path"), None)
    if candidate == "gpu":
        setup_interpret(kw.get("interpret"))  # (before the forked run imports triton)
    if chunker_spec:
        return _chunker(chunker_spec, config, kw)
    if planner:
        return _planner(planner, config, kw)
    if engine:
        return _requests(engine, media, config, kw)
    return _candidate(candidate, media, config, kw)  # type: ignore[arg-type]


def _seed(kw: dict[str, Any]) -> int:
    from kimi_oracle.core.defaults import fresh_seed

    seed = kw.get("seed")
    return fresh_seed() if seed is None else int(seed)


def _budget(kw: dict[str, Any], default: float) -> float:
    from kimi_oracle.cli.common import parse_duration

    return parse_duration(kw["budget"]) if kw.get("budget") else default


def _emit(lines: list[str], doc: dict[str, Any], kw: dict[str, Any], ok: bool, name: str) -> int:
    from kimi_oracle.core.files import atomic_write_text, to_json, write_json

    json_path = kw.get("json_path")
    for line in lines:
        click.echo(line, err=str(json_path) == "-")  # (stdout holds the JSON alone)
    if json_path is not None:
        if str(json_path) == "-":
            sys.stdout.write(to_json(doc) + "\n")
        else:
            write_json(json_path, doc)
    out = kw.get("out_dir")
    if out is not None:
        write_json(out / f"{name}.json", doc)
        atomic_write_text(out / f"{name}.md", "\n".join(["# " + lines[0], "", "```", *lines[1:], "```", ""]))
    return EXIT_OK if ok else EXIT_FINDINGS


def _chunker(spec: str, config: Any, kw: dict[str, Any]) -> int:
    from kimi_oracle.fuzzers.chunker_fuzz import DEFAULT_BUDGET_S, DEFAULT_VIDEOS, run_chunker_isolated

    seed, videos = _seed(kw), kw.get("examples") or DEFAULT_VIDEOS
    click.echo(f"fuzzing chunker {spec} on {videos} videos ({config.name}, seed {seed})", err=True)
    report = run_chunker_isolated(spec, config, videos, seed, budget_s=_budget(kw, DEFAULT_BUDGET_S))
    return _emit(report.lines(), report.to_dict(), kw, report.ok, "chunker-report")


def _planner(spec: str, config: Any, kw: dict[str, Any]) -> int:
    from kimi_oracle.fuzzers.isolated import run_forked
    from kimi_oracle.oracle.video_candidates import load_video_planner
    from kimi_oracle.oracle.video_planner import fuzz_video_planner

    seed, count = _seed(kw), kw.get("examples") or DEFAULT_PLANNED
    load_video_planner(spec)  # (one that cannot load: exit 2, here)
    click.echo(f"fuzzing video planner {spec} on {count} chunks ({config.name}, seed {seed})", err=True)
    budget = _budget(kw, 600.0)
    kind, report = run_forked(f"kimi-video-planner[{spec}]", fuzz_video_planner, (spec, config, count, seed), {},
                              budget)
    if kind != "result":
        return _emit([f"video planner {spec}: ERROR: {report}"], {"planner": spec, "ok": False, "error": report},
                     kw, False, "video-planner-report")
    return _emit(report.lines(), report.to_dict(), kw, report.ok, "video-planner-report")


def _requests(spec: str, media: str, config: Any, kw: dict[str, Any]) -> int:
    from kimi_oracle.fuzzers.isolated import run_forked
    from kimi_oracle.fuzzers.video_request_fuzz import fuzz_video_requests

    seed, count = _seed(kw), kw.get("examples") or 300
    click.echo(f"fuzzing video request engine {spec} on {count} requests (--media {media}, {config.name}, "
               f"seed {seed})", err=True)
    kind, report = run_forked(f"kimi-video-requests[{spec}]", fuzz_video_requests, (spec, config, count, seed, media),
                              {}, _budget(kw, 600.0))
    if kind != "result":
        return _emit([f"video request engine {spec}: ERROR: {report}"], {"engine": spec, "ok": False, "error": report},
                     kw, False, "video-requests-report")
    return _emit(report.lines(), report.to_dict(), kw, report.ok, "video-requests-report")


def _candidate(spec: str, media: str, config: Any, kw: dict[str, Any]) -> int:
    from kimi_oracle.fuzzers.video_fuzz import DEFAULT_BUDGET_S, DEFAULT_EXAMPLES, run_media_isolated

    seed, count = _seed(kw), kw.get("examples") or DEFAULT_EXAMPLES
    click.echo(f"fuzzing video candidate {spec} on {count} batches (--media {media}, {config.name}, seed {seed})",
               err=True)
    report = run_media_isolated(spec, config, media, count, seed, tolerance=kw.get("tolerance") or "exact",
                                budget_s=_budget(kw, DEFAULT_BUDGET_S))
    return _emit(report.lines(), report.to_dict(), kw, report.ok, "video-report")
