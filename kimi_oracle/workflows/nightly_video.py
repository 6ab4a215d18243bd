"""Nightly's video stage (`--media video|both`, issue 42): after the workers, the campaign's
candidate fuzzed on `video_examples` drawn batches of K2.5 chunks (with images, `both`) in a
forked run (`fuzzers.video_fuzz.run_media_isolated`), within what the campaign left of its budget;
OUT/video.json, the summary's `video`, its JUnit cases (one per group, and one for an error) and
the exit code (a group or an error: 1; a run stopped by its budget, `stopped`, judged fewer
batches and is not a failure). The workers leave it `VIDEO_SHARE` of the budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.files import utc_now, versions, write_json
from kimi_oracle.core.video import require_video
from kimi_oracle.results.report import JUnitCase

CLASSNAME = "kimi-oracle.nightly.video"
VIDEO_SHARE = 0.25  # of --budget, kept from the workers for the video stage


def kept_s(budget_s: float, media: str) -> float:
    """The seconds the workers leave for the video stage (none with `--media image`)."""
    return VIDEO_SHARE * budget_s if media != "image" else 0.0


def run(candidate: str, media: str, config: PreprocessConfig, examples: int, seed: int, tolerance: str,
        out: Path, budget_s: float) -> dict[str, Any]:
    """The video fuzz; OUT/video.json; the report as a dict (with its text `lines`). Raises
    ConfigError / CandidateError when the config has no video rules or the candidate cannot load
    or take chunks (the campaign's errors: exit 2)."""
    from kimi_oracle.fuzzers.video_fuzz import run_media_isolated

    require_video(config)
    report = run_media_isolated(candidate, config, media, examples, seed, tolerance=tolerance, budget_s=budget_s)
    data = report.to_dict()
    write_json(out / "video.json", {"schema": "kimi-oracle.nightly-video", "schema_version": 1,
                                    "created": utc_now(), "versions": versions(), **data})
    data["lines"] = report.lines()
    return data


def junit_cases(video: Mapping[str, Any] | None) -> list[JUnitCase]:
    """One failing case per group, one error case for a run error, one passing case otherwise."""
    if not video:
        return []
    cases = [JUnitCase(str(g.get("key")), CLASSNAME, failure=f"{g.get('count')} batches ({g.get('explanation')})",
                       details=str((g.get("smallest") or {}).get("message", ""))) for g in video.get("groups") or []]
    if video.get("error"):
        cases.append(JUnitCase("video", CLASSNAME, error=str(video["error"]), details=str(video["error"])))
    return cases or [JUnitCase("video", CLASSNAME)]


def failed(video: Mapping[str, Any] | None) -> bool:
    """Whether the video stage failed (a group, or a run that hung or died)."""
    return bool(video) and not video.get("ok", False)


__all__ = ["VIDEO_SHARE", "failed", "junit_cases", "kept_s", "run"]
