"""Planted mutants of the built-in request-layer model: each breaks one rule of the request layer.

Each factory is `engine(config, tokenizer)`, so that a spec `tests/helpers/planted_engines.py:NAME`
names it like any engine.
"""

from __future__ import annotations

from kimi_oracle.pipelines.engines.sglang_0_5_23_requests import RequestLayer


class RankLocal(RequestLayer):
    """Indexes the batch's grid table with the group's rank-local positions."""

    def global_indices(self, image_indices, positions):
        return list(positions)


class DigestOnlyCache(RequestLayer):
    """Keys the artifact cache on the content digest alone: stale after `configure`."""

    def cache_key(self, digest):
        return digest


class SpanFromGrid(RequestLayer):
    """Prompt spans of prod(grid) // merge² pads: ignores `fixed_output_tokens`."""

    def span_tokens(self, plan):
        t, h, w = plan.grid_thw
        return t * h * w // self.config.merge_kernel_size ** 2


class ResizedFraming(RequestLayer):
    """The framing prints the resized size instead of the decoded one."""

    def frame_size(self, img, plan):
        return plan.new_w, plan.new_h


def rank_local(config, tokenizer):
    return RankLocal(config, tokenizer)


def digest_only_cache(config, tokenizer):
    return DigestOnlyCache(config, tokenizer)


def span_from_grid(config, tokenizer):
    return SpanFromGrid(config, tokenizer)


def resized_framing(config, tokenizer):
    return ResizedFraming(config, tokenizer)


MUTANTS = {"rank_local": "grid_mismatch", "digest_only_cache": "grid_mismatch", "span_from_grid": "input_ids",
           "resized_framing": "input_ids"}


class EagerOnly(RequestLayer):
    """The built-in model with only its eager route (the processor's CPU path: the reference's rows)."""

    paths = ("eager",)


def eager_only(config, tokenizer):
    return EagerOnly(config, tokenizer)
