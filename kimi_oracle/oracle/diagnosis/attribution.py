"""Attribution: the root causes (families and variants) of a candidate's pixel differences.

`attribute` explains each image of a batch on its own: the greedy search of `search.Search`
(with its restarts), then, when a residual is left, the beam search for a stack of variants that
reproduces the candidate bit for bit. A finding is `explained` when a stack reproduces it
exactly, `partly explained` when the variants taken leave a residual (in levels), `unexplained`
when no variant moves the reference towards it. Rule: docs/diagnosis.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import CandidateError, KimiOracleError
from kimi_oracle.core.explanation import EXPLAINED, PARTLY_EXPLAINED
from kimi_oracle.core.geometry import plan
from kimi_oracle.core.images import ImageSource, load_images
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.core.threads import one_torch_thread
from kimi_oracle.oracle.candidates import as_result
from kimi_oracle.oracle.diagnosis.batch_layout import batch_layout
from kimi_oracle.oracle.diagnosis.catalogue import (BY_ELIMINATION, BY_ID, CATALOGUE, ROOT_CAUSE_IDS, UNEXPLAINED,
                                                    assumed_steps, full_name, steps_for)
from kimi_oracle.oracle.diagnosis.levels import LevelSummary, Target, merge
from kimi_oracle.oracle.diagnosis.regions import PAD_FAMILIES, locate
from kimi_oracle.oracle.diagnosis.search import (GREEDY_RUNS, PAIR_FIRST, RESTARTS, Budget, Explained, OutOfRuns,
                                                 Search, _Option)
from kimi_oracle.pipelines.reference import Steps
from kimi_oracle.pipelines.variants.request import lossy_file



@dataclass(frozen=True)
class Attribution:
    """Root causes of a pixel difference and the magnitudes before and after explaining them.

    `max_levels` / `mean_levels` are the candidate's own distance from the reference, over the
    values that differ (bitwise); the `residual_*` fields are the distance left once the root
    causes' variants are applied. Each image is attributed on its own; `root_causes` is the
    union, in catalogue order; `("unexplained",)` when no variant explains any of it, `()` when
    the candidate equals the reference; `per_image` holds each image's own root causes."""

    root_causes: tuple[str, ...]
    max_levels: float
    mean_levels: float
    differing: int
    residual_max_levels: float
    residual_mean_levels: float
    residual_differing: int
    explained: tuple[Explained, ...] = ()
    images: tuple[int, ...] = ()
    per_image: tuple[tuple[str, ...], ...] = ()  # the root causes of each image in `images`
    runs: int = 0
    complete: bool = True
    seconds: float = field(default=0.0, compare=False)
    assumed: tuple[str, ...] = ()  # the variants the reference was compared with applied (`--assume`)
    # Where each image's difference lies (`regions.Where.to_dict`), one per image in `images`.
    where: tuple[dict[str, Any], ...] = ()

    @property
    def fully_explained(self) -> bool:
        """True when the root causes' variants reproduce the candidate's values bit for bit."""
        return self.residual_differing == 0

    @property
    def sub_level(self) -> bool:
        """True when the candidate is everywhere less than one level from the reference."""
        return is_sub_level(self.max_levels)

    @property
    def explanation(self) -> str:
        """`explained` (reproduced bit for bit), `partly explained` (a residual is left),
        `unexplained` (no variant taken), or "" when nothing differs."""
        if not self.differing:
            return ""
        if self.residual_differing == 0:
            return EXPLAINED
        return PARTLY_EXPLAINED if any(c != UNEXPLAINED for c in self.root_causes) else UNEXPLAINED

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants taken, `family/variant`, in the order taken (each once over a batch)."""
        return tuple(dict.fromkeys(e.name for e in self.explained))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (lists, plain numbers; an infinite level is written as None)."""
        def num(v: float) -> float | None:
            return float(v) if np.isfinite(v) else None

        return {
            "root_causes": list(self.root_causes),
            "explanation": self.explanation,
            "variants": list(self.variants),
            "max_levels": num(self.max_levels),
            "mean_levels": num(self.mean_levels),
            "differing": self.differing,
            "residual_max_levels": num(self.residual_max_levels),
            "residual_mean_levels": num(self.residual_mean_levels),
            "residual_differing": self.residual_differing,
            "fully_explained": self.fully_explained,
            "explained": [e.to_dict() for e in self.explained],
            "images": list(self.images),
            "per_image": [list(r) for r in self.per_image],
            "assumed": list(self.assumed),
            "where": [dict(w) for w in self.where],
            "runs": self.runs,
            "complete": self.complete,
            "seconds": self.seconds,
        }


@dataclass
class _ImageOutcome:
    """One image's attribution: the swaps taken and the distance before and after them."""

    taken: list[Explained]
    before: LevelSummary
    after: LevelSummary
    complete: bool
    where: dict[str, Any] = field(default_factory=dict)


def _offsets(decoded: list, config: PreprocessConfig, act: PreprocessResult) -> list[int]:
    offsets = [0]
    for img in decoded:
        offsets.append(offsets[-1] + plan(img.width, img.height, config).num_patches)
    want = [offsets[-1], 3, config.patch_size, config.patch_size]
    if list(act.pixel_values.shape) != want:
        raise CandidateError(f"pixel_values shape {list(act.pixel_values.shape)} != {want}: "
                             "attribution needs the reference's grids")
    return offsets


def _greedy(search: Search, start: _Option) -> tuple[_Option, bool]:
    """The greedy search within GREEDY_RUNS: its last swap (or `start`), and whether it finished."""
    try:
        with search.budget.capped(search.budget.runs + GREEDY_RUNS):
            found = search.greedy(start)
        assert found is not None
        return found[1], True
    except OutOfRuns:
        return (search.best_so_far[1] if search.best_so_far is not None else start), False


def _restarts(search: Search, start: _Option, current: _Option, runs: int) -> _Option:
    """The greedy search again from the next-best first swaps, within `runs`: the closest end."""
    with search.budget.capped(search.budget.runs + runs):
        for rank in [*range(1, RESTARTS + 1), PAIR_FIRST]:
            other = search.greedy(start, rank)
            if other is not None and other[1].total < current.total:
                current = other[1]
    return current


def _search_image(search: Search, start: _Option) -> tuple[list[Explained], _Option, bool]:
    """The greedy search; when it leaves a residual, the stacked search for an exact
    reproduction, else the restarts (docs/diagnosis.md): the swaps taken, the last one, and
    whether the search finished within its budget."""
    first = search.budget.runs
    current, complete = _greedy(search, start)
    greedy_spent = search.budget.runs - first
    try:
        if current.total > 0:
            exact = search.stacked(start)
            if exact is not None:
                current, complete = exact, True
            elif complete and current is not start:
                current = _restarts(search, start, current, GREEDY_RUNS - greedy_spent)
    except OutOfRuns:
        complete = False
    taken = [search.explained(o) for o in current.chain()]
    if not taken:
        return taken, current, complete
    try:
        current = search.prune(start, current)
        return search.name_alternatives([search.explained(o) for o in current.chain()], start), current, complete
    except OutOfRuns:
        return taken, current, False


def _attribute_image(search: Search, i: int, target: Target, expected: torch.Tensor | None,
                     decoder_allowed: bool, actual: torch.Tensor) -> _ImageOutcome | None:
    """Image i explained (None when the budget ends before the reference's own run). Where
    its difference lies is measured first: one confined to the padding is searched among the
    families that can touch the padding only (`regions.PAD_FAMILIES`)."""
    try:
        model = expected if expected is not None else search.run(i, search.base)
    except OutOfRuns:
        return None
    dist = target.summary(model)
    where = locate(actual, model, search.decoded[i], search.plans[i], search.config, i)
    if where.confined_to_pad:
        search.catalogue = tuple(c for c in search.catalogue if c.id in PAD_FAMILIES)
    start = _Option(dist.total_levels, -1, -1, None, None, search.base, {i: model}, {i: dist}, False)
    taken, current, complete = _search_image(search, start)
    if complete and not taken and dist.differing and lossy_file(search.decoded[i]) and decoder_allowed:
        # Nothing in the catalogue moves the reference towards the candidate and the image is
        # a lossy file: the candidate decoded it its own way (docs/inputs.md).
        left = current.dist[i]
        taken = [Explained("decoder", BY_ELIMINATION, left.max_levels, left.mean_levels, left.total_levels, (), i)]
    return _ImageOutcome(taken, dist, current.dist[i], complete, where.to_dict())


def _attribute_one(search: Search, i: int, expected: PreprocessResult | None, offsets: list[int],
                   act: PreprocessResult, batch_rows: bool, decoder_allowed: bool) -> _ImageOutcome | None:
    """Image i of `attribute`'s scope: another image's rows (a batch whose images share a row
    count), else the search (None when the budget ends first)."""
    lo, hi = offsets[i], offsets[i + 1]
    target = search.targets[i]
    mine = None if expected is None else expected.pixel_values[lo:hi]
    if batch_rows and any(offsets[j + 1] - offsets[j] == hi - lo for j in range(len(offsets) - 1) if j != i):
        try:
            mine = search.run(i, search.base) if mine is None else mine
        except OutOfRuns:
            return None
        outcome = _rows_of_another(search, i, target, mine, expected, offsets, act)
        if outcome is not None:
            return outcome
        # (the batch's values in another axis order)
        laid = batch_layout(search, i, target, offsets, Target(act.pixel_values, search.config))
        if laid is not None:
            where = locate(act.pixel_values[lo:hi], mine, search.decoded[i], search.plans[i], search.config, i)
            return _ImageOutcome(laid[0], target.summary(mine), laid[1], True, where.to_dict())
    return _attribute_image(search, i, target, mine, decoder_allowed, act.pixel_values[lo:hi])


# Another image's rows (a batch-only defect: a stale buffer of a group of same-size images) are
# named in this family, `rows-of-image-J` (the gate's invariance stage names them so too).
ROWS_FAMILY = "patch-order"


def _rows_of_another(search: Search, i: int, target: Target, own: torch.Tensor, expected: PreprocessResult | None,
                     offsets: list[int], act: PreprocessResult) -> _ImageOutcome | None:
    """Image i's rows when they are, bit for bit, the reference's rows of another image j of the
    batch (with as many rows, and rows of its own, `own`, that differ):
    `patch-order/rows-of-image-J`, explained; else None (the search goes on). Earlier images
    are tried first."""
    lo, hi = offsets[i], offsets[i + 1]

    def model(j: int) -> torch.Tensor:
        if expected is not None:
            return expected.pixel_values[offsets[j]:offsets[j + 1]]
        return Search(search.decoded, search.config, [j], {}, (), search.budget, search.base).run(j, search.base)

    try:
        before = target.summary(own)
        if not before.differing:
            return None
        for j in range(len(offsets) - 1):
            if j == i or offsets[j + 1] - offsets[j] != hi - lo:
                continue
            if target.summary(model(j)).differing == 0:
                where = locate(act.pixel_values[lo:hi], own, search.decoded[i], search.plans[i], search.config, i)
                step = Explained(ROWS_FAMILY, f"rows-of-image-{j}", 0.0, 0.0, 0.0, (), i)
                return _ImageOutcome([step], before, LevelSummary(0.0, 0.0, 0, 0.0), True, where.to_dict())
    except OutOfRuns:
        return None
    return None


def _ids(taken: Sequence[Explained]) -> tuple[str, ...]:
    mine = {e.root_cause for e in taken}
    return tuple(c for c in ROOT_CAUSE_IDS if c in mine)


def attribute(
    images: Sequence[ImageSource],
    config: PreprocessConfig,
    actual: Any,
    *,
    expected: PreprocessResult | None = None,
    image: int | None = None,
    causes: Sequence[str] | None = None,
    max_runs: int | None = None,
    assume: Sequence[tuple[str, str]] = (),
    base: Steps | None = None,
) -> Attribution:
    """The root causes of the candidate's pixel differences (rule: docs/diagnosis.md).

    `actual` is the candidate's result for `images` under `config` (a PreprocessResult or a
    (pixel_values, grid_thws) pair), with the reference's grids and shape (a pixel finding);
    `expected`, when given, is the reference's result (saves one run); `image` restricts the
    diagnosis to one image's rows; `causes` to some root-cause ids; `max_runs` bounds the
    reference runs spent (the search stops where it is, `complete` False); `assume` holds
    (family, variant) pairs the reference is taken with (`--assume`: `expected` is then the
    reference with them applied) and whose families are not searched; `base`, when given, is the
    steps the search starts from instead (every family searched: `change.diagnose_change` starts
    from a baseline's inferred steps). Raises CandidateError
    when the candidate's shape is not the reference's."""
    start = time.perf_counter()
    decoded = load_images(images)
    act = as_result(actual)
    offsets = _offsets(decoded, config, act)
    if image is not None and not 0 <= image < len(decoded):
        raise IndexError(f"image {image} of a batch of {len(decoded)}")
    scope = list(range(len(decoded))) if image is None else [image]
    assumed_families = {family for family, _ in assume}
    catalogue = tuple(c for c in (CATALOGUE if causes is None else tuple(BY_ID[c] for c in causes))
                      if c.id not in assumed_families)
    base = assumed_steps(config, assume) if base is None else base
    budget = Budget(max_runs)
    outcomes: list[_ImageOutcome] = []
    # (also when a per-image patch order is assumed: a batch's mixed rows are another order of it)
    batch_rows = len(decoded) > 1 and (any(c.id == ROWS_FAMILY for c in catalogue) or ROWS_FAMILY in assumed_families)
    with one_torch_thread():  # small tensors: a thread pool only adds its overhead (core.threads)
        for i in scope:
            search = Search(decoded, config, [i], {i: Target(act.pixel_values[offsets[i]:offsets[i + 1]], config)},
                            catalogue, budget, base)
            outcome = _attribute_one(search, i, expected, offsets, act, batch_rows,
                                     causes is None or "decoder" in causes)
            if outcome is None:
                break
            outcomes.append(outcome)
            if not outcome.complete:
                break
    return _combined(outcomes, scope, budget, time.perf_counter() - start,
                     tuple(full_name(f, v) for f, v in assume))


def _same(a: Any, b: float) -> bool:
    if a is None:
        return not np.isfinite(b)
    return isinstance(a, (int, float)) and not isinstance(a, bool) and bool(np.isclose(float(a), b, rtol=1e-9, atol=0))


# The most variants a stored diagnosis may name (the search takes one per stage, a handful).
MAX_HELD_VARIANTS = 32


def diagnosis_holds(fields: Mapping[str, Any], images: Sequence[ImageSource], config: PreprocessConfig, actual: Any,
                    expected: PreprocessResult, image: int) -> bool:
    """Whether a stored diagnosis (`findings.finding_diagnosis`'s fields, read back from a cache
    anyone may write) agrees with everything measurable on this result: the candidate's levels
    measured again from `expected` and `actual` on the image at fault; its variants applied again
    to the reference, leaving exactly the residual it states (none when it says `explained`: they
    reproduce the candidate's bytes); its root causes, the variants' families (plus `decoder`
    found by elimination, or `unexplained` alone with no variant and a residual equal to the
    levels). What it cannot measure is the search's own claim that no further variant helps:
    that is taken as the hint it is. False: the caller diagnoses anew."""
    att = fields.get("attribution")
    if not isinstance(att, Mapping) or att.get("assumed") or att.get("images") != [image]:
        return False
    names = att.get("variants")
    if not isinstance(names, list) or not all(isinstance(n, str) and "/" in n for n in names):
        return False
    if len(set(names)) != len(names) or len(names) > MAX_HELD_VARIANTS:  # (as the search never lists them)
        return False
    pairs = [tuple(n.split("/", 1)) for n in names]
    applied = [p for p in pairs if p[1] != BY_ELIMINATION]
    try:
        decoded = load_images(images)
        act = as_result(actual)
        offsets = _offsets(decoded, config, act)
        lo, hi = offsets[image], offsets[image + 1]
        target = Target(act.pixel_values[lo:hi], config)
        before = target.summary(expected.pixel_values[lo:hi])
        after = before
        if applied:
            search = Search(decoded, config, [image], {image: target}, (), Budget(2))
            with one_torch_thread():
                after = target.summary(search.run(image, steps_for(config, applied)))  # type: ignore[arg-type]
    except (KimiOracleError, KeyError, ValueError, IndexError, TypeError, OutOfRuns):
        return False
    causes = fields.get("root_causes")
    families = {family for family, _ in pairs} or {UNEXPLAINED}
    return (isinstance(causes, list) and set(causes) == families
            and all(p[0] == "decoder" for p in pairs if p[1] == BY_ELIMINATION)
            and _same(fields.get("max_levels"), before.max_levels) and _same(fields.get("mean_levels"), before.mean_levels)
            and _same(fields.get("residual_max_levels"), after.max_levels)
            and _same(fields.get("residual_mean_levels"), after.mean_levels)
            and (after.differing == 0) == (att.get("explanation") == EXPLAINED))


def reproduces(variants: Sequence[str], images: Sequence[ImageSource], config: PreprocessConfig, actual: Any,
               image: int) -> bool | None:
    """Whether the reference with `variants` (`family/variant` names) applied gives the
    candidate's rows of image `image` bit for bit (None: not measurable there: another shape,
    a variant found by elimination, a name that does not apply)."""
    pairs = [tuple(n.split("/", 1)) for n in variants if isinstance(n, str) and "/" in n]
    if not pairs or any(v == BY_ELIMINATION for _, v in pairs):
        return None
    try:
        decoded = load_images(images)
        act = as_result(actual)
        offsets = _offsets(decoded, config, act)
        lo, hi = offsets[image], offsets[image + 1]
        search = Search(decoded, config, [image], {}, (), Budget(1))
        with one_torch_thread():
            model = search.run(image, steps_for(config, pairs))  # type: ignore[arg-type]
        got = act.pixel_values[lo:hi].float().contiguous()
        return bool(model.shape == got.shape and torch.equal(model.view(torch.int32), got.view(torch.int32)))
    except (KimiOracleError, KeyError, ValueError, IndexError, TypeError, OutOfRuns):
        return None


def _combined(outcomes: list[_ImageOutcome], scope: list[int], budget: Budget, seconds: float,
              assumed: tuple[str, ...]) -> Attribution:
    before = merge([o.before for o in outcomes])
    after = merge([o.after for o in outcomes])
    taken = [e for o in outcomes for e in o.taken]
    per_image = tuple(_ids(o.taken) or ((UNEXPLAINED,) if o.before.differing else ()) for o in outcomes)
    root_causes = _ids(taken) or ((UNEXPLAINED,) if before.differing else ())
    complete = len(outcomes) == len(scope) and all(o.complete for o in outcomes)
    return Attribution(
        root_causes=root_causes, max_levels=before.max_levels, mean_levels=before.mean_levels,
        differing=before.differing, residual_max_levels=after.max_levels,
        residual_mean_levels=after.mean_levels, residual_differing=after.differing,
        explained=tuple(taken), images=tuple(scope)[:len(outcomes)], per_image=per_image,
        runs=budget.runs, complete=complete, seconds=seconds, assumed=assumed,
        where=tuple(o.where for o in outcomes))
