"""The request checks: a program's trace judged against the request contract and against itself.

Each failed check is a `RequestFinding` of one kind (`REQUEST_CHECKS`, in report order) naming the
request, image and rank it concerns:

grid_mismatch    an item's grid differs from the checkpoint plan; or the engine raised its
                 "produced wrong grids" error on a batch whose items were all consistent
feature_length   an encode returned a row count other than the sum of its items' grids; or the
                 engine raised its feature-length error on a consistent batch
input_ids        the expanded ids differ from the contract (first differing position, decoded)
offsets          an item's (start, end) is not exactly its pad run
rows_invariance  an image's rows in the batch differ (bitwise) from the rows the same engine gives
                 it prepared and encoded alone in a fresh engine of the same config and path
shape_dtype      an encode's rows are not (N, 3, p, p) float
pixel_mismatch   (with `pixels`) an image's rows differ from the reference under the tolerance
engine_error     the engine raised on a valid request or consistent batch (named by its message)

The rank of an image is where the documented balancer puts it (`request_contract.assign_ranks`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import PlanError
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.checks import (CRASH, FEATURE_LENGTH, GRID_MISMATCH, PIXEL_MISMATCH, SHAPE_DTYPE, TIMEOUT,
                                       compare)
from kimi_oracle.oracle.engines import Encoded, Prepared, Raised, Step, Trace
from kimi_oracle.pipelines.request_contract import ExpectedRequest, assign_ranks, expected_request, reference_rows

# The request layer's own kinds (the others are `oracle.checks`'): defined here, once.
INPUT_IDS = "input_ids"
OFFSETS = "offsets"
ROWS_INVARIANCE = "rows_invariance"
ENGINE_ERROR = "engine_error"
REQUEST_CHECKS = (GRID_MISMATCH, FEATURE_LENGTH, INPUT_IDS, OFFSETS, ROWS_INVARIANCE, SHAPE_DTYPE,
                  PIXEL_MISMATCH, ENGINE_ERROR, CRASH, TIMEOUT)
# The engine's own two messages and the checks they are (SGLang's get_image_feature).
ENGINE_MESSAGES = {"produced wrong grids": GRID_MISMATCH, "feature length does not match": FEATURE_LENGTH}
_WINDOW = 6  # ids shown either side of a first difference


@dataclass
class RequestFinding:
    """One failed request check."""

    check: str
    message: str
    request: int | None = None
    image: int | None = None
    rank: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # What a diagnosis needs (images, config, expected and actual results); not in the JSON form.
    evidence: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"check": self.check, "message": self.message, "request": self.request, "image": self.image,
                "rank": self.rank, "details": self.details}

    def where(self) -> str:
        """`request 1 image 0 rank 2` (the parts that are known)."""
        parts = [f"{k} {v}" for k, v in (("request", self.request), ("image", self.image), ("rank", self.rank))
                 if v is not None]
        return " ".join(parts)


def check_of_message(message: str) -> str:
    """The check an engine's error message names (`engine_error` for any other message)."""
    for needle, check in ENGINE_MESSAGES.items():
        if needle in message:
            return check
    return ENGINE_ERROR


def in_force(steps: Sequence[Step], base: PreprocessConfig) -> dict[int, PreprocessConfig]:
    """The config in force when each request was prepared."""
    out: dict[int, PreprocessConfig] = {}
    current = base
    for step in steps:
        if step.kind == "configure" and step.config is not None:
            current = step.config
        elif step.kind == "prepare":
            out[step.request] = current
    return out


def _window(tokenizer: Any, ids: Sequence[int], at: int) -> str:
    return tokenizer.decode(ids[max(0, at - _WINDOW):at + _WINDOW + 1])


def _image_at(exp: ExpectedRequest, position: int) -> int | None:
    # The image whose span (framing included) holds `position`, or the next one after it.
    for k, (start, end) in enumerate(exp.offsets):
        if position <= end + 1:
            return k
    return None


def _check_ids(r: int, exp: ExpectedRequest, got: Prepared, tokenizer: Any) -> list[RequestFinding]:
    want, have = list(exp.input_ids), got.input_ids
    if want == have:
        return []
    at = next((k for k, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
    e = want[at] if at < len(want) else None
    g = have[at] if at < len(have) else None
    image = _image_at(exp, at)
    msg = (f"input ids differ from the contract at position {at}: expected "
           f"{tokenizer.decode([e]) if e is not None else '(end)'!r}, got {tokenizer.decode([g]) if g is not None else '(end)'!r}"
           f" (length {len(want)} expected, {len(have)} got); expected ...{_window(tokenizer, want, at)!r}..., "
           f"got ...{_window(tokenizer, have, at)!r}...")
    return [RequestFinding(INPUT_IDS, msg, r, image, None, {"position": at, "expected": e, "got": g,
                                                              "expected_length": len(want), "got_length": len(have)})]


def _check_offsets(r: int, exp: ExpectedRequest, got: Prepared, pad: int) -> list[RequestFinding]:
    out = []
    for i, (want, have) in enumerate(zip(exp.offsets, got.offsets)):
        s, e = have
        ids = got.input_ids
        covers = (0 <= s <= e < len(ids) and all(t == pad for t in ids[s:e + 1])
                  and (s == 0 or ids[s - 1] != pad) and (e + 1 == len(ids) or ids[e + 1] != pad))
        if tuple(want) != tuple(have) or not covers:
            out.append(RequestFinding(OFFSETS, f"offsets {tuple(have)} expected {tuple(want)}"
                                      + ("" if covers else " (not exactly a pad run of the returned ids)"),
                                      r, i, None, {"expected": list(want), "got": list(have)}))
    return out


def _stale(f: RequestFinding, size: tuple[int, int], got: tuple, config: PreprocessConfig,
           earlier: Sequence[tuple[int, PreprocessConfig]]) -> None:
    # A grid that is this image's plan under the config of an earlier request: a stale entry.
    for r, old in earlier:
        if old != config and tuple(plan(size[0], size[1], old).grid_thw) == got:
            f.details["stale_from_request"] = r
            f.message += (f"; it is the grid this image had under request {r}'s config (budget {old.in_patch_limit}, "
                          f"side cap {old.patch_limit_on_one_side}): a cache entry from before the configure was served")
            return


def _stale_ids(f: RequestFinding, got: Prepared, sizes: Sequence[tuple[int, int]], prompt_ids: Sequence[int],
               config: PreprocessConfig, tokenizer: Any, framing: str,
               earlier: Sequence[Sequence[tuple[int, PreprocessConfig]]]) -> None:
    # Ids that are the contract's expansion under an earlier request's config: stale entries.
    for r, old in dict.fromkeys(x for per_image in earlier for x in per_image):
        if old != config and list(expected_request(prompt_ids, sizes, old, tokenizer, framing).input_ids) == got.input_ids:
            f.details["stale_from_request"] = r
            f.message += (f"; they are this request's ids under request {r}'s config (fixed tokens "
                          f"{old.fixed_output_tokens}, budget {old.in_patch_limit}): a cache entry from before the "
                          "configure was served")
            return


def check_prepared(r: int, got: Prepared, sizes: Sequence[tuple[int, int]], prompt_ids: Sequence[int],
                   config: PreprocessConfig, tokenizer: Any, framing: str,
                   earlier: Sequence[Sequence[tuple[int, PreprocessConfig]]] = ()) -> list[RequestFinding]:
    """Request r's expansion, grids and offsets against the contract (`earlier`: per image, the
    earlier requests that prepared the same image and their configs)."""
    if got.raised is not None:
        return [RequestFinding(check_of_message(got.raised.message),
                               f"prepare raised {got.raised.exc_type}: {got.raised.message}", r, None, None,
                               {"traceback": got.raised.traceback})]
    try:
        exp = expected_request(prompt_ids, sizes, config, tokenizer, framing)
    except PlanError:
        return []  # the checkpoint rejects an image: no contract to hold the engine to
    out: list[RequestFinding] = []
    if got.ids_error:
        out.append(RequestFinding(INPUT_IDS, f"prepare returned input ids that are not token ids: {got.ids_error}", r))
    if len(got.grids) != len(sizes):
        out.append(RequestFinding(GRID_MISMATCH, f"prepare returned {len(got.grids)} item(s) for {len(sizes)} "
                                  "image(s)", r))
        return out
    for i, (want, have) in enumerate(zip(exp.grids, got.grids)):
        if tuple(want) != tuple(have):
            w, h = sizes[i]
            f = RequestFinding(GRID_MISMATCH, f"{w}x{h}: grid_thw {list(have)} expected {list(want)} "
                               f"(budget {config.in_patch_limit}, side cap {config.patch_limit_on_one_side})",
                               r, i, None, {"expected": list(want), "got": list(have)})
            _stale(f, (w, h), tuple(have), config, earlier[i] if earlier else ())
            out.append(f)
    ids = [] if got.ids_error else _check_ids(r, exp, got, tokenizer)
    for f in ids:
        _stale_ids(f, got, sizes, prompt_ids, config, tokenizer, framing, earlier)
    out += ids
    out += _check_offsets(r, exp, got, tokenizer.media_pad_id)
    return out


def _ranks(grids: Sequence[Sequence[int]], dp_size: int) -> list[int]:
    where = [0] * len(grids)
    for rank, members in enumerate(assign_ranks(grids, dp_size)):
        for g in members:
            where[g] = rank
    return where


def checkpoint_grid(size: tuple[int, int], config: PreprocessConfig) -> tuple[int, int, int] | None:
    """The checkpoint's grid for an image of `size` under `config` (None: the checkpoint rejects it)."""
    try:
        return tuple(int(v) for v in plan(size[0], size[1], config).grid_thw)  # type: ignore[return-value]
    except PlanError:
        return None


def _count(grid: Sequence[int]) -> int:
    return int(grid[0]) * int(grid[1]) * int(grid[2])


def _grids_after(enc: Encoded, want: Sequence[tuple[int, int, int] | None], ranks: Sequence[int],
                 base: dict) -> list[RequestFinding]:
    # Each item's grid as it read after the call, against the checkpoint's for its image: an
    # engine that writes its own (wrong) grid back into an item must not split its rows by it.
    out = []
    for k, ((r, i), have, need) in enumerate(zip(enc.members, enc.item_grids, want)):
        if need is not None and (have is None or tuple(have) != tuple(need)):
            shown = "no grid" if have is None else f"grid_thw {list(have)}"
            out.append(RequestFinding(GRID_MISMATCH, f"after encode the item holds {shown}; the checkpoint's grid "
                                      f"for this image is {list(need)} (the engine rewrote its item's grid)",
                                      r, i, ranks[k], {**base, "expected": list(need),
                                                       "got": None if have is None else list(have)}))
    return out


def split_rows(enc: Encoded, want: Sequence[Sequence[int]]) -> list[torch.Tensor] | None:
    """The call's rows per member, split by the checkpoint's grids `want` (None when its rows are
    not (sum of the grids, ...))."""
    if enc.data is None or enc.data.dim() == 0 or int(enc.data.shape[0]) != sum(_count(g) for g in want):
        return None
    out, at = [], 0
    for g in want:
        out.append(enc.data[at:at + _count(g)])
        at += _count(g)
    return out


def check_encoded(call: int, enc: Encoded, trace: Trace, consistent: bool, config: PreprocessConfig,
                  want: Sequence[tuple[int, int, int] | None] | None = None) -> list[RequestFinding]:
    """One encode call: its raise; each item's grid after the call and the row count against the
    checkpoint's grids `want` (per member; None where the checkpoint rejects the image: its
    prepared grid stands in), before anything is split; its shape; and each image's rows (split
    by the checkpoint's grids) against the same image alone."""
    grids = [trace.prepared[r].grids[i] for r, i in enc.members]
    ranks = _ranks(grids, enc.dp_size)
    base = {"call": call, "dp_size": enc.dp_size, "members": [list(m) for m in enc.members]}
    if enc.raised is not None:
        if not consistent:
            return []  # the inconsistent item is its own finding
        check = check_of_message(enc.raised.message)
        return [RequestFinding(check, f"encode raised {enc.raised.exc_type}: {enc.raised.message} on a consistent "
                               f"batch of {len(enc.members)} item(s) over {enc.dp_size} rank(s)", None, None, None,
                               {**base, "traceback": enc.raised.traceback})]
    if not enc.members:
        return []
    want = list(want) if want is not None else [None] * len(grids)
    sizes = [w if w is not None else g for w, g in zip(want, grids)]
    out = _grids_after(enc, want, ranks, base) if enc.item_grids else []
    want_rows = sum(_count(g) for g in sizes)
    if enc.total_rows != want_rows:
        return out + [RequestFinding(FEATURE_LENGTH, f"encode returned {enc.total_rows} rows (shape {list(enc.shape)}) "
                                     f"for {len(enc.members)} item(s) whose checkpoint grids hold {want_rows} rows",
                                     None, None, None, {**base, "expected_rows": want_rows,
                                                        "got_rows": enc.total_rows})]
    enc.rows = split_rows(enc, sizes)
    p = config.patch_size
    if enc.rows is None or len(enc.shape) != 4 or tuple(enc.shape[1:]) != (3, p, p) or not enc.rows[0].is_floating_point():
        out.append(RequestFinding(SHAPE_DTYPE, f"encode returned shape {list(enc.shape)}, expected (N, 3, {p}, {p})"
                                  " floats", None, None, None, base))
        return out
    for k, ((r, i), rows) in enumerate(zip(enc.members, enc.rows)):
        alone = trace.alone.get((r, i))
        if isinstance(alone, Raised):
            out.append(RequestFinding(ENGINE_ERROR, f"alone, the image raised {alone.exc_type}: {alone.message}",
                                      r, i, ranks[k], base))
        elif alone is not None and (alone.dim() == 0 or int(alone.shape[0]) != _count(sizes[k])):
            out.append(RequestFinding(FEATURE_LENGTH, f"alone, the image's encode returned shape {list(alone.shape)}; "
                                      f"its checkpoint grid {list(sizes[k])} holds {_count(sizes[k])} rows",
                                      r, i, ranks[k], {**base, "expected_rows": _count(sizes[k])}))
        elif alone is not None and not same_bits(alone, rows):
            out.append(_rows_finding(r, i, ranks[k], rows, alone, base))
    return out


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT_OF_SIZE[t.element_size()]) if t.element_size() in _INT_OF_SIZE else t


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same dtype, shape and bytes (a NaN equals the same NaN)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _rows_finding(r: int, i: int, rank: int, rows: torch.Tensor, alone: torch.Tensor, base: dict) -> RequestFinding:
    if alone.shape != rows.shape:
        how = f"shape {list(rows.shape)} in the batch, {list(alone.shape)} alone"
        count = None
    else:
        differ = _bits(rows) != _bits(alone) if rows.dtype == alone.dtype else torch.ones_like(rows, dtype=torch.bool)
        count = int(differ.sum())
        a, b = rows.double(), alone.double()
        nans = int(torch.isnan(a).sum()), int(torch.isnan(b).sum())
        finite = differ & torch.isfinite(a) & torch.isfinite(b)
        worst = float((a - b).abs()[finite].max()) if bool(finite.any()) else 0.0
        how = (f"{count} of {rows.numel()} values differ in their bits, max |diff| {worst:.6g} among the finite ones"
               + (f"; NaN values: {nans[0]} in the batch, {nans[1]} alone" if any(nans) else ""))
        if rows.dtype != alone.dtype:
            how += f"; dtype {str(rows.dtype).replace('torch.', '')} in the batch, {str(alone.dtype).replace('torch.', '')} alone"
    return RequestFinding(ROWS_INVARIANCE, f"rows in the batch differ from the same image encoded alone in a "
                          f"fresh engine: {how}", r, i, rank, {**base, "differing_values": count})


def _norm_of(config: PreprocessConfig) -> tuple:
    return config.image_mean, config.image_std, config.transparent_bg_config


def explain_rows(finding: RequestFinding, steps: Sequence[Step], trace: Trace, base: PreprocessConfig,
                 table: Sequence[Image.Image], alone: Callable[[PreprocessConfig, Image.Image, str], Any],
                 tries: int = 4) -> str | None:
    """For a `rows_invariance` finding: whether the image's rows in the batch are its rows alone
    under another batch item's mean, std and background (its own resize config kept); said in the
    finding's message and details when so (at most `tries` other configs are tried)."""
    call = finding.details.get("call")
    if finding.check != ROWS_INVARIANCE or call is None:
        return None
    enc = trace.encoded[call]
    me = (finding.request, finding.image)
    rows = enc.rows[enc.members.index(me)] if enc.rows else None
    configs = in_force(steps, base)
    where = {(s.request, i): (k, p) for s in steps if s.kind == "prepare" for i, (k, p) in enumerate(zip(s.images, s.paths))}
    grids = [trace.prepared[r].grids[i] for r, i in enc.members]
    by_rank = assign_ranks(grids, enc.dp_size)
    rank_of = {enc.members[g]: rank for rank, gs in enumerate(by_rank) for g in gs}
    own = configs[me[0]]
    path = where[me][1]
    # Same rank first, in the balancer's order; then the rest of the call.
    order = [enc.members[g] for g in by_rank[rank_of[me]]] + list(enc.members)
    seen: set = {_norm_of(own)}
    for m in order:
        cfg = configs[m[0]]
        if tries <= 0 or rows is None:
            break
        if m == me or where[m][1] != path or _norm_of(cfg) in seen:
            continue
        seen.add(_norm_of(cfg))
        tries -= 1
        hybrid = dataclasses.replace(own, image_mean=cfg.image_mean, image_std=cfg.image_std,
                                     transparent_bg_config=cfg.transparent_bg_config)
        got = alone(hybrid, table[where[me][0]], path)
        if isinstance(got, torch.Tensor) and same_bits(got, rows):
            same_path = [x for x in (enc.members[g] for g in by_rank[rank_of[me]]) if where[x][1] == path]
            # One rank: SGLang 0.5.23 skips its balancer there (attn_tp_size == 1) and keeps the
            # batch order; the model sorts as on many ranks. Either order's first item is "first".
            firsts = {same_path[0]}
            if enc.dp_size == 1:
                firsts.add(next(x for x in enc.members if where[x][1] == path))
            first = m in firsts
            bg = cfg.transparent_bg_config.pattern if cfg.transparent_bg_config else "none"
            text = (f"the rows are this image's rows under the mean {list(cfg.image_mean)}, std {list(cfg.image_std)} "
                    f"and background {bg} of request {m[0]} image {m[1]}"
                    + (f", the first {path} item of the group on rank {rank_of[me]}: the first item's mean/std/"
                       "background was applied to the whole group" if first else ", another item of the batch"))
            finding.details["explanation"] = text
            finding.details["applied_from"] = list(m)
            finding.message += f"; explained: {text}"
            return text
    return None


def check_pixels(r: int, i: int, rows: torch.Tensor, image: Image.Image, config: PreprocessConfig,
                 tolerance: str) -> RequestFinding | None:
    """An image's rows against the reference under the tolerance policy (`checks.compare`)."""
    try:
        want = reference_rows(image, config)
    except PlanError:
        return None
    grid = torch.tensor([[1, 1, int(want.shape[0])]], dtype=torch.int64)
    verdict = compare(PreprocessResult(want, grid), PreprocessResult(rows, grid), config, tolerance,
                      sizes=[image.size])
    if verdict.ok:
        return None
    return RequestFinding(str(verdict.check), f"against the reference: {verdict.message}", r, i, None,
                          {"stats": verdict.stats},
                          {"images": [image], "config": config, "expected": verdict.expected,
                           "actual": verdict.actual})


def judge(steps: Sequence[Step], trace: Trace, base: PreprocessConfig, table: Sequence[Image.Image],
          tokenizer: Any, framing: str, *, pixels: bool = False, tolerance: str = "exact") -> list[RequestFinding]:
    """Every request check on a program's trace, in `REQUEST_CHECKS` order (stable within one)."""
    configs = in_force(steps, base)
    found: list[RequestFinding] = []
    consistent_items: set[tuple[int, int]] = set()
    history: dict[int, list[tuple[int, PreprocessConfig]]] = {}
    for step in steps:
        if step.kind != "prepare" or step.request not in trace.prepared:
            continue
        sizes = [table[k].size for k in step.images]
        got = trace.prepared[step.request]
        earlier = [list(history.get(k, ())) for k in step.images]
        own = check_prepared(step.request, got, sizes, step.prompt_ids, configs[step.request], tokenizer, framing,
                             earlier)
        for k in step.images:
            history.setdefault(k, []).append((step.request, configs[step.request]))
        found += own
        bad_images = {f.image for f in own if f.check == GRID_MISMATCH}
        if got.raised is None and None not in bad_images:
            consistent_items |= {(step.request, i) for i in range(len(got.grids)) if i not in bad_images}
    sizes_of = {(s.request, i): table[k].size for s in steps if s.kind == "prepare" for i, k in enumerate(s.images)}
    for call, enc in enumerate(trace.encoded):
        consistent = all(m in consistent_items for m in enc.members)
        want = [checkpoint_grid(sizes_of[m], configs[m[0]]) for m in enc.members]
        found += check_encoded(call, enc, trace, consistent, base, want)
    if pixels:
        found += _pixel_findings(steps, trace, configs, table, tolerance)
    order = {c: k for k, c in enumerate(REQUEST_CHECKS)}
    return sorted(found, key=lambda f: order.get(f.check, len(order)))


def _pixel_findings(steps: Sequence[Step], trace: Trace, configs: dict[int, PreprocessConfig],
                    table: Sequence[Image.Image], tolerance: str) -> list[RequestFinding]:
    out = []
    seen: set[tuple] = set()
    for step in steps:
        if step.kind != "prepare":
            continue
        for i, (k, path) in enumerate(zip(step.images, step.paths)):
            rows = trace.alone.get((step.request, i))
            key = (k, path, configs[step.request])
            if not isinstance(rows, torch.Tensor) or key in seen:
                continue
            seen.add(key)
            f = check_pixels(step.request, i, rows, table[k], configs[step.request], tolerance)
            if f is not None:
                f.details["path"] = path
                out.append(f)
    return out


__all__ = ["ENGINE_ERROR", "ENGINE_MESSAGES", "INPUT_IDS", "OFFSETS", "REQUEST_CHECKS", "ROWS_INVARIANCE", "RequestFinding", "check_encoded", "checkpoint_grid", "check_of_message", "check_pixels",
           "check_prepared", "explain_rows", "in_force", "judge", "same_bits", "split_rows"]
