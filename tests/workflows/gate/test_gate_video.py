"""The gate's video stage (`--media video|both`, issue 42): absolute without a baseline; with one, a
group NEW adds fails and one it fixes is reported; a profile without video rules or a candidate
that takes no chunks is the stage's error."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.workflows.gate import video
from kimi_oracle.workflows.gate.budget import VIDEO_SHARE, Budget
from kimi_oracle.workflows.gate.options import GateOptions

MUTANTS = str(Path(__file__).resolve().parents[2] / "mutants" / "video_candidates.py")


def _ctx(new, old=None, media="video", profile="k25"):
    options = GateOptions(profile=profile, media=media, video_examples=40, budget_s=120.0)
    budget = Budget(120.0, time.monotonic(), with_video=media != "image")
    return SimpleNamespace(options=options, config=PreprocessConfig.profile(profile), seed=4, findings=[], budget=budget,
                           new=SimpleNamespace(spec=new), old=SimpleNamespace(spec=old) if old else None,
                           progress=lambda m: None)


def test_without_a_baseline_any_video_group_fails_and_faithful_passes():
    assert video.run(_ctx(f"{MUTANTS}:faithful")).status == "pass"
    ctx = _ctx(f"{MUTANTS}:no_divisor")
    stage = video.run(ctx)
    assert stage.status == "fail" and any("budget-divisor/none" in r for r in stage.reasons)
    assert ctx.findings and all(f["stage"] == "video" for f in ctx.findings)


def test_with_a_baseline_only_what_new_adds_fails():
    same = video.run(_ctx(f"{MUTANTS}:no_divisor", f"{MUTANTS}:no_divisor"))
    assert same.status == "pass"
    fixed = video.run(_ctx(f"{MUTANTS}:faithful", f"{MUTANTS}:no_divisor"))
    assert fixed.status == "pass" and fixed.details["fixed"]
    added = video.run(_ctx(f"{MUTANTS}:last_frame", f"{MUTANTS}:faithful"))
    assert added.status == "fail" and all("chunk-size/last" in r for r in added.reasons)


def test_image_media_skips_and_bad_setups_are_errors():
    assert video.run(_ctx(f"{MUTANTS}:faithful", media="image")).status == "skipped"
    k3 = video.run(_ctx(f"{MUTANTS}:faithful", profile="k3"))
    assert k3.status == "error" and "--video-rules k25" in k3.reasons[0]
    images_only = video.run(_ctx(f"{MUTANTS}:images_only"))
    assert images_only.status == "error" and "kimi_oracle_media" in images_only.reasons[0]


def test_the_video_share_is_kept_from_the_stages_before_it():
    t0 = time.monotonic()
    plain, video = Budget(100.0, t0), Budget(100.0, t0, with_video=True)
    assert plain.fuzz_s() - video.fuzz_s() == pytest.approx(VIDEO_SHARE * 100.0, abs=0.01)
    assert plain.invariance_s() - video.invariance_s() == pytest.approx(VIDEO_SHARE * 100.0, abs=0.01)
    assert video.video_s() == pytest.approx(VIDEO_SHARE * 100.0) and plain.video_s() == 0.0
