"""One fuzz case: its finding, its record in a run, its outcome digest, how example i is drawn."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.fuzzers.options import FuzzOptions
from kimi_oracle.inputs.draw import RandomSource, derive, draw_fuzz_case, is_tile_example
from kimi_oracle.inputs.generators import MODES, FuzzCase
from kimi_oracle.inputs.sizes import PHOTO_EVERY, photo_forced, photo_slot
from kimi_oracle.oracle.checks import INVARIANCE, Tolerance, Verdict, update_digest
from kimi_oracle.oracle.diagnosis import finding_diagnosis, full_name
from kimi_oracle.oracle.grouping import finding_key
from kimi_oracle.results.report import Finding


def finding_from(verdict: Verdict, candidate: str, config: PreprocessConfig, images: Sequence[Image.Image], *,
                 params: Sequence[dict | None] | None = None, tolerance: str = "exact", engine: str = "hypothesis",
                 seed: int | None = None, example: int | None = None, sources: Sequence[str | None] = (),
                 raw_inputs: Sequence[bytes | None] = (), diagnosis: dict[str, Any] | None = None,
                 assume: Sequence[tuple[str, str]] = ()) -> Finding:
    """A Finding for a failed verdict (`diagnosis`: its fields when made already; `assume`: the
    variants the reference was taken with)."""
    extra: dict[str, Any] = {}
    if assume:  # `repro` compares with the same reference
        extra["assume"] = [full_name(f, v) for f, v in assume]
    if verdict.check == INVARIANCE:
        extra["invariance"] = {"kind": verdict.stats.get("kind"), "indices": verdict.stats.get("indices")}
    if diagnosis is None:
        diagnosis = finding_diagnosis(str(verdict.check), verdict.stats, images, config,
                                      expected=verdict.expected, actual=verdict.actual,
                                      **({"assume": tuple(assume)} if assume else {}))
    return Finding(
        check=str(verdict.check),
        message=verdict.message,
        candidate=candidate,
        config=config,
        images=list(images),
        params=list(params) if params is not None else [None] * len(images),
        tolerance=str(Tolerance.parse(tolerance)),
        engine=engine,
        seed=seed,
        example=example,
        stats=verdict.stats,
        sources=list(sources),
        raw_inputs=list(raw_inputs),
        expected=verdict.expected,
        actual=verdict.actual,
        extra=extra,
        key=finding_key(str(verdict.check), verdict.stats, images),
        **diagnosis,
    )


@dataclass
class _Record:
    """A group's case: the smallest failing case so far (the first one until shrunk)."""

    case: FuzzCase
    choices: tuple[int, ...]
    verdict: Verdict
    example: int  # the example number the group was first met at (1-based)
    invariance: bool  # whether the invariances ran on it
    saved: bool = False  # replayed from the database: shrunk in an earlier run
    finding: Finding | None = None  # the case's finding (diagnosed), once made
    cost_to_judge: float = 0.0  # the clock's time judging it took
    cost: float = 0.0  # the clock's time making that finding took
    shrunk: bool = False  # a case the shrink found
    tile: bool = False  # a tile-crossing example's case (one image of ~256-2048 px sides)
    # Peeled (`fuzzers.peel`): the explained causes the reference is taken with for this group
    # (after `--assume`'s), and the group whose explanation they are.
    after: tuple[tuple[str, str], ...] = ()
    peeled_from: str | None = None


def outcome_digest(verdict: Verdict | None) -> str:
    """What a candidate did on one input, as a short digest: equal for two candidates exactly
    when they returned the same bytes (grids and pixel values) or failed the same way."""
    if verdict is None:
        return "not-judged"
    actual = verdict.actual
    if actual is None:
        return f"{verdict.check}:{str(verdict.stats.get('exception', verdict.message)).split(':')[0]}"
    h = hashlib.sha256()
    update_digest(h, actual)
    return h.hexdigest()[:24]


def example_source(seed: int, index: int, tile_share: float, photo_examples: int = 0,
                   photo_every: int = PHOTO_EVERY, modes: tuple[str, ...] = MODES) -> tuple[RandomSource, bool]:
    """Generated example `index`'s source of choices, and whether it is a large one (tile-crossing,
    or a real-photo one: `sizes.photo_slot`): the search's and `generated_case`'s one definition."""
    slot = photo_slot(index, photo_examples, photo_every)
    if slot is not None:  # the kind (2), then the photo's kind and size, forced by its slot
        return RandomSource(derive(seed, index), (2, *photo_forced(slot, tuple(modes), seed))), True
    tiles = tile_share > 0
    tile = tiles and is_tile_example(index, tile_share)
    forced = (int(tile),) if tiles or photo_examples > 0 else ()
    return RandomSource(derive(seed, index), forced), tile


def generated_case(config: PreprocessConfig, options: FuzzOptions, seed: int, index: int) -> FuzzCase:
    """Generated example `index` of a run with this seed and these options (the search draws
    exactly this case: it depends on nothing else)."""
    source, _ = example_source(seed, index, options.tile_share, options.photo_examples, options.photo_every,
                               options.modes)
    return draw_fuzz_case(source, config, options.draw_options())
