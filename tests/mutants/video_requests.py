"""Planted video request engines (issue 42, item 6): `(prompt_ids, media, config) -> {input_ids,
offsets, grid_thws, pixel_values}`. The expansion is written here from the spec's request contract
(an image's placeholder K2.5-framed as its pads, a chunk's as its plan's pads: one frame's tokens);
the rows are the planted chunk pipeline's (video_candidates.ChunkPipeline)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from kimi_oracle.core.geometry import plan
from kimi_oracle.core.tokenizer import Tokenizer


def _neighbour(name: str):
    if f"mutants.{name}" in sys.modules:
        return sys.modules[f"mutants.{name}"]
    spec = importlib.util.spec_from_file_location(f"kimi_mutants_{name}", Path(__file__).resolve().parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_VIDEO = _neighbour("video_candidates")
PAD = Tokenizer().media_pad_id


def _serve(prompt_ids, media, config, *, per_frame=False, divisor="chunk"):
    pipeline = type("P", (_VIDEO.ChunkPipeline,), {"divisor": divisor})(config)
    total = sum(len(m) for m in media if isinstance(m, list))
    ids, offsets, k = [], [], 0
    for token in prompt_ids:
        if token != PAD:
            ids.append(token)
            continue
        item = media[k]
        if isinstance(item, list):
            first = item[0]
            n = plan(first.width, first.height, config, limit=pipeline.frame_limit(len(item), total)).num_tokens
            n = n * len(item) if per_frame else n
        else:
            n = plan(item.width, item.height, config).num_tokens
        offsets.append((len(ids), len(ids) + n - 1))
        ids += [PAD] * n
        k += 1
    out = pipeline.media(list(media))
    return {"input_ids": ids, "offsets": offsets, "grid_thws": out.grid_thws, "pixel_values": out.pixel_values}


def faithful(prompt_ids, media, config):
    """The contract as the spec writes it (must fuzz clean)."""
    return _serve(prompt_ids, media, config)


def per_frame(prompt_ids, media, config):
    """A chunk's placeholder expanded per frame: t times one frame's tokens."""
    return _serve(prompt_ids, media, config, per_frame=True)


def no_divisor(prompt_ids, media, config):
    """The video budget not divided (tokens and rows of the frame limit alone)."""
    return _serve(prompt_ids, media, config, divisor="none")


def rank_order(prompt_ids, media, config, dp_size=1):
    """Spreads the items over dp_size ranks, largest grid first to the least-loaded rank, and
    returns the rows rank by rank instead of in placeholder order."""
    out = _serve(prompt_ids, media, config)
    grids = out["grid_thws"].tolist()
    sizes = [g[0] * g[1] * g[2] for g in grids]
    loads, ranks = [0] * dp_size, [[] for _ in range(dp_size)]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        r = min(range(dp_size), key=lambda k: (loads[k], k))
        ranks[r].append(i)
        loads[r] += sizes[i]
    starts = [0]
    for s in sizes:
        starts.append(starts[-1] + s)
    rows = out["pixel_values"]
    out["pixel_values"] = torch.cat([rows[starts[i]:starts[i + 1]] for rank in ranks for i in rank])
    return out


def short_rows(prompt_ids, media, config):
    """Drops the last row (the "deferred feature length does not match image grids" defect)."""
    out = _serve(prompt_ids, media, config)
    out["pixel_values"] = out["pixel_values"][:-1]
    return out
