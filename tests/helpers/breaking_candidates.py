"""Candidates and planners for the breaks of issue 22 (tests only, never users): one that
raises on every call, one that prints floods on stdout, one that rewrites the golden files of the
directory it is checked against, one whose image count differs from call to call, planners that
sleep or return a class of their own module."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

from kimi_oracle.core.geometry import plan as checkpoint_plan
from kimi_oracle.pipelines import reference


def raises(images, config):
    raise ValueError("this candidate raises on every call")


def prints(images, config):
    sys.stdout.write("candidate chatter {not json\n" * 2000)  # 54 kB a call
    sys.stdout.flush()
    sys.stderr.write("candidate stderr chatter\n")
    return reference.preprocess(images, config)


def rewrite_goldens_once(golden_dir: str, forge: bool) -> None:
    """What a golden-rewriting candidate does on its first call: `forge` rewrites every pixel
    golden file of `golden_dir` with this module's `negated` outputs (so that a check that read
    them afterwards would match), else it changes one digit of each; a marker file makes it once."""
    marker = Path(golden_dir) / "pixels" / ".rewritten"
    if marker.exists():
        return
    marker.write_text("done")
    for path in sorted(Path(golden_dir).glob("pixels/*.jsonl")):
        if forge:
            from kimi_oracle.workflows import golden

            path.write_text(golden.record_pixels(path.stem, negated).dumps(), encoding="utf-8")
        else:
            data = path.read_bytes()
            i = data.index(b'"sha256":"') + len(b'"sha256":"')
            path.write_bytes(data[:i] + (b"1" if data[i:i + 1] == b"0" else b"0") + data[i + 1:])


def negated(images, config):
    """A wrong candidate: the reference's pixel values negated."""
    out = reference.preprocess(images, config)
    return type(out)(-out.pixel_values, out.grid_thws)


REWRITER = """
from breaking_candidates import negated, reference, rewrite_goldens_once

def preprocess(images, config):
    rewrite_goldens_once({golden_dir!r}, {forge!r})
    return {result}(images, config)
"""


_CALLS = {"n": 0}


def nondeterministic(images, config):
    """Every second call returns the first image's result only (a different count per call)."""
    _CALLS["n"] += 1
    if _CALLS["n"] % 2 == 0:
        return reference.preprocess(list(images)[:1], config)
    return reference.preprocess(images, config)


def sleeper_plan(width, height, config):
    time.sleep(3600)


class Level(int):
    """An int of the planner's own module (it cannot be unpickled where that module is unknown)."""


def own_class_plan(width, height, config):
    """The checkpoint's plan with a grid of this module's ints, one too wide."""
    plan = checkpoint_plan(width, height, config)
    t, h, w = plan.grid_thw
    return dataclasses.replace(plan, grid_thw=(Level(t), Level(h), Level(w + 1)))


def slow_plan(width, height, config):
    time.sleep(0.02)
    return checkpoint_plan(width, height, config)


def good_plan(width, height, config):
    return checkpoint_plan(width, height, config)
