"""Judging a request layer on prompts with K2.5 video chunks (issue 42, item 6).

A **video request engine** is `(prompt_ids: list[int], media: list, config) -> dict`, where `media`
holds the images and chunks (lists of frames) in placeholder order. The dict has these keys:

- `input_ids`: the expanded ids;
- `offsets`: each item's inclusive (start, end) pad run;
- `grid_thws`: one `(t, h, w)` row per item;
- `pixel_values`: the items' rows, concatenated.

It is judged against the contract (`pipelines.video_request`). The checks, in order:

| check | fails when |
|---|---|
| `engine_error` | it raised |
| `input_ids` | the expanded ids differ (the first differing position is named) |
| `offsets` | an item's (start, end) is not its pad run |
| `grid_mismatch` | an item's grid differs |
| `feature_length` | the rows are not the grids' sum |
| `pixel_mismatch` | an item's rows differ from the reference's |

Drawn requests (`inputs.video_requests`) take each batch of `inputs.video_media` (one video's
chunks, and images with `both`). They put text before, between and after the items, and repeat
the video's chunks now and then (a repeated video: the engine's cache). The fuzz loop is
`fuzzers.video_request_fuzz`.

A difference in ids, offsets or grids is named by reproduction. Differing rows are named
`dp-ranks/rank-order` when they are the items' rows concatenated rank by rank (an engine that
takes `dp_size` is called with the request's 1-4 ranks), else by the video candidates' diagnosis
(`video_judge.explain_case`). A feature length is named by nothing. The expansion variants are
`expansion/per-frame` (a chunk expanded to `t` times its tokens: one placeholder per frame's
embeddings) and `expansion/image-framing` (a chunk framed as an image). The chunk rules of
`variants.chunk_rules` are tried as well.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.core.tokenizer import Tokenizer
from kimi_oracle.oracle.checks import FEATURE_LENGTH, GRID_MISMATCH, PIXEL_MISMATCH
from kimi_oracle.oracle.request_checks import ENGINE_ERROR, INPUT_IDS, OFFSETS
from kimi_oracle.pipelines.request_contract import ExpectedRequest, assign_ranks, expand_spans, framing_for
from kimi_oracle.pipelines.variants.chunk_rules import all_rules, plan_for
from kimi_oracle.pipelines.video import is_chunk, preprocess_media
from kimi_oracle.pipelines.video_request import expected_media_request, media_span

EXPANSIONS = ("per-frame", "image-framing")


def item_sizes(media: Sequence[Any]) -> list[tuple[int, ...]]:
    """The contract's item sizes: (w, h) for an image, (w, h, t) for a chunk (its first frame's)."""
    return [(item[0].width, item[0].height, len(item)) if is_chunk(item) else (item.width, item.height)
            for item in media]


@dataclass
class RequestVerdict:
    """A failed check on one request, and what explains it."""

    check: str
    message: str
    item: int | None = None
    explained_by: list[str] = field(default_factory=list)

    def key(self) -> str:
        """The group: check and names (an engine error: its message's type)."""
        return f"{self.check}{{{'+'.join(self.explained_by) or 'unexplained'}}}"


def _variant_request(prompt_ids: Sequence[int], sizes: Sequence[tuple[int, ...]], plans: Sequence[ResizePlan],
                     expansion: str | None, config: PreprocessConfig, tokenizer: Tokenizer) -> ExpectedRequest:
    framing = framing_for(config)
    spans = []
    for size, p in zip(sizes, plans):
        n = p.num_tokens * (size[2] if len(size) == 3 and expansion == "per-frame" else 1)
        framed = size[:2] if expansion == "image-framing" else size  # (a chunk framed as an image)
        spans.append(media_span(tokenizer, framed, n, framing))  # type: ignore[arg-type]
    out, offsets = expand_spans(prompt_ids, spans, tokenizer.media_pad_id, "item")
    return ExpectedRequest(tuple(out), tuple(plans), tuple(offsets))


def _plans(sizes: Sequence[tuple[int, ...]], config: PreprocessConfig, rule: Any) -> list[ResizePlan]:
    from kimi_oracle.core.geometry import plan

    total = sum(s[2] for s in sizes if len(s) == 3)
    return [plan_for(rule, [s[:2]] * s[2], total, config) if len(s) == 3 else plan(s[0], s[1], config) for s in sizes]


def explain(prompt_ids: Sequence[int], sizes: Sequence[tuple[int, ...]], config: PreprocessConfig,
            tokenizer: Tokenizer, ids: Sequence[int], grids: Sequence[Sequence[int]] | None) -> list[str]:
    """The fewest named steps (expansion variants, chunk rules) that give the engine's ids (and
    grids, when it gave them); [] when none does."""
    tried = []
    for rule in [r for r in all_rules() if r.size_from == "first" and r.layout == "hwc"]:
        for expansion in (None, *EXPANSIONS):
            names = list(rule.changes) + ([f"expansion/{expansion}"] if expansion else [])
            if names:
                tried.append((len(names), names, rule, expansion))
    for _, names, rule, expansion in sorted(tried, key=lambda x: x[0]):
        try:
            plans = _plans(sizes, config, rule)
        except Exception:  # noqa: BLE001 - a rule that cannot plan this request
            continue
        want = _variant_request(prompt_ids, sizes, plans, expansion, config, tokenizer)
        if list(want.input_ids) != list(ids):
            continue
        if grids is not None and [list(g) for g in want.grids] != [list(g) for g in grids]:
            continue
        return names
    return []


def _ids(value: Any) -> list[int]:
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    return [int(v) for v in value]


class RequestCase(Protocol):
    """What the judge needs of a drawn request (`inputs.video_requests.RequestCase`)."""

    text: str
    media: list[Any]
    config: PreprocessConfig


def judge_request(engine: Callable[..., Any], case: RequestCase, tokenizer: Tokenizer) -> RequestVerdict | None:
    """The first failed check on one request (explained), or None."""
    prompt_ids = tokenizer.encode(case.text)
    sizes = item_sizes(case.media)
    expected = expected_media_request(prompt_ids, sizes, case.config, tokenizer)
    try:
        media = [list(i) if is_chunk(i) else i for i in case.media]
        dp = getattr(case, "dp_size", 1)
        out = (engine(list(prompt_ids), media, case.config, dp_size=dp) if _takes_dp(engine)
               else engine(list(prompt_ids), media, case.config))
        ids, offsets = _ids(out["input_ids"]), [tuple(int(v) for v in o) for o in out["offsets"]]
        grids = torch.as_tensor(out["grid_thws"]).reshape(-1, 3).tolist()
        rows = torch.as_tensor(out["pixel_values"])
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - the engine's raise on a valid request is a finding
        return RequestVerdict(ENGINE_ERROR, f"{type(exc).__name__}: {exc}"[:300], explained_by=[type(exc).__name__])
    verdict = _first_failure(expected, ids, offsets, grids, rows, case)
    if verdict is not None and verdict.check in (INPUT_IDS, OFFSETS, GRID_MISMATCH):
        verdict.explained_by = explain(prompt_ids, sizes, case.config, tokenizer, ids, grids)
    elif verdict is not None and verdict.check == PIXEL_MISMATCH:  # the candidates' diagnosis of the rows
        verdict.explained_by = _rank_order(case, rows, grids) or _rows_explained(case, rows, grids)
    return verdict


def _takes_dp(engine: Callable[..., Any]) -> bool:
    try:
        return "dp_size" in inspect.signature(engine).parameters
    except (TypeError, ValueError):
        return False


def _rank_order(case: RequestCase, rows: torch.Tensor, grids: list[list[int]]) -> list[str]:
    """`dp-ranks/rank-order` when the rows are the reference's items concatenated rank by rank
    (`assign_ranks` of the grids over `dp_size`), not in placeholder order."""
    dp = getattr(case, "dp_size", 1)  # (one rank too: its items largest grid first)
    ref = preprocess_media([list(i) if is_chunk(i) else i for i in case.media], case.config)
    order = [i for rank in assign_ranks(grids, dp) for i in rank]
    blocks = [ref.image(i).pixel_values for i in order]
    shuffled = torch.cat(blocks, dim=0) if blocks else ref.pixel_values
    same = shuffled.shape == rows.shape and shuffled.dtype == rows.dtype and torch.equal(shuffled, rows)
    return ["dp-ranks/rank-order"] if same else []


@dataclass
class _Batch:
    """A request's media as `video_judge` takes a drawn batch."""

    items: list[Any]
    config: PreprocessConfig

    @property
    def chunks(self) -> int:
        return sum(1 for i in self.items if is_chunk(i))

    def media(self) -> list[Any]:
        return [list(i) if is_chunk(i) else i for i in self.items]

    def describe(self) -> str:
        return f"{len(self.items)} items"

    def to_dict(self) -> dict[str, Any]:
        return {"items": []}


def _rows_explained(case: RequestCase, rows: torch.Tensor, grids: list[list[int]]) -> list[str]:
    from kimi_oracle.core.result import PreprocessResult
    from kimi_oracle.oracle.checks import compare
    from kimi_oracle.oracle.video_judge import explain_case

    batch = _Batch(list(case.media), case.config)
    expected = preprocess_media(batch.media(), case.config)
    verdict = compare(expected, PreprocessResult(rows, torch.tensor(grids, dtype=torch.int64)), case.config)
    if verdict.check != PIXEL_MISMATCH:
        return []
    found = explain_case(batch, verdict, batch.media())
    return list(found.explained_by) if found.explanation == "explained" else []


def _first_failure(expected: ExpectedRequest, ids: list[int], offsets: list[tuple[int, ...]], grids: list[list[int]],
                   rows: torch.Tensor, case: RequestCase) -> RequestVerdict | None:
    if ids != list(expected.input_ids):
        at = next((i for i, (a, b) in enumerate(zip(ids, expected.input_ids)) if a != b), min(len(ids), len(expected.input_ids)))
        return RequestVerdict(INPUT_IDS, f"expanded ids differ from position {at} ({len(ids)} ids, expected "
                              f"{len(expected.input_ids)})")
    for i, (got, want) in enumerate(zip(offsets, expected.offsets)):
        if tuple(got) != tuple(want):
            return RequestVerdict(OFFSETS, f"item {i}: offsets {tuple(got)} != expected {tuple(want)}", i)
    if len(offsets) != len(expected.offsets):
        return RequestVerdict(OFFSETS, f"{len(offsets)} offsets for {len(expected.offsets)} items")
    want_grids = [list(g) for g in expected.grids]
    for i, (got, want) in enumerate(zip(grids, want_grids)):
        if list(got) != want:
            return RequestVerdict(GRID_MISMATCH, f"item {i}: grid {tuple(got)} != expected {tuple(want)}", i)
    if len(grids) != len(want_grids):
        return RequestVerdict(GRID_MISMATCH, f"{len(grids)} grids for {len(want_grids)} items")
    total = sum(int(np.prod(g)) for g in grids)
    if rows.ndim == 0 or rows.shape[0] != total:
        return RequestVerdict(FEATURE_LENGTH, f"{rows.shape[0] if rows.ndim else 0} rows for grids of {total}")
    reference = preprocess_media([list(i) if is_chunk(i) else i for i in case.media], case.config).pixel_values
    if rows.shape != reference.shape or rows.dtype != reference.dtype or not torch.equal(rows, reference):
        return RequestVerdict(PIXEL_MISMATCH, "the rows differ from the reference's")
    return None


__all__ = ["EXPANSIONS", "RequestVerdict", "explain", "item_sizes", "judge_request"]
