"""The search of one attribution: variants swapped into the reference's steps, one family at a
time, keeping the swaps that bring its output closest to the candidate's (rule: docs/diagnosis.md).

Every reference run is shared: within a search, the resized and filled array of a prefix of
steps is computed once for every variant of the later steps (pad, normalize, patchify); across
searches, an image's patches under a given `Steps` are kept per process (`run_patches`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from PIL import Image

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.images import encoded_bytes
from kimi_oracle.oracle.diagnosis.catalogue import RootCause, Variant, full_name
from kimi_oracle.oracle.diagnosis.fitted import FitInput
from kimi_oracle.oracle.diagnosis.levels import LevelSummary, Target, merge
from kimi_oracle.pipelines.reference import CHECKPOINT, Steps

# A variant is taken when it leaves at most this share of the remaining total level difference
# (or none at all): it must remove at least a quarter of what is still unexplained.
KEEP_AT_MOST = 0.75
# When the greedy search leaves a residual, it is run again with each of the next this many
# qualifying first swaps; the run with the smallest residual wins.
RESTARTS = 2
PAIR_FIRST = -1  # and once more, starting with the best pair of swaps
# When no single swap qualifies, pairs are tried: the best swaps that changed the output (one per
# root cause, this many) each combined with every variant of every other root cause.
PAIR_SEEDS = 4
# When the greedy search leaves a residual, a beam search over stacks of up to MAX_STACK variants
# (one per family) looks for an exact reproduction: at each depth the BEAM closest stacks are
# kept, and besides them the closest stack of each enabling family that changed the output (a
# step that only pays off with the next). It ends at the first stack with a residual of 0.
MAX_STACK = 4
BEAM = 4
STACK_RUNS = 1200  # reference runs the stacked search may spend (then the restarts run)
STACK_MIN_RUNS = 600  # it is not started with fewer runs left (the restarts get them)
# The greedy search and its restarts spend at most this many runs (the stacked search's besides;
# 400 in all before issue 25's larger catalogue).
GREEDY_RUNS = 600


@dataclass(frozen=True)
class Explained:
    """One step taken: the root cause (family), its variant, and what was left after it."""

    root_cause: str
    variant: str
    # What was left of this image's difference after this step (levels).
    residual_max_levels: float
    residual_mean_levels: float
    residual_total_levels: float
    # Other root causes whose best variant gave bit-identical output at this step (the
    # candidate's output cannot tell them apart; the first by the tie rule was taken).
    equivalent: tuple[str, ...] = ()
    image: int = 0  # the image of the batch this step explains
    # Every other variant (`family/variant`, this family's included) with bit-identical output here.
    alternatives: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """`family/variant`."""
        return full_name(self.root_cause, self.variant)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = dataclasses.asdict(self)
        out["equivalent"] = list(self.equivalent)
        out["alternatives"] = list(self.alternatives)
        return out


@dataclass
class _Option:
    """A trial swap: its total level difference, its place in the catalogue, what it produced."""

    total: float
    cause_index: int
    variant_index: int
    cause: Any  # RootCause; None for the starting point
    variant: Any  # Variant; None for the starting point
    steps: Steps
    model: dict[int, torch.Tensor]
    dist: dict[int, LevelSummary]
    changed: bool
    parent: "_Option | None" = None  # the stack this swap was applied on top of

    def chain(self) -> list["_Option"]:
        """The swaps of this stack, first first (the starting point left out)."""
        out, o = [], self
        while o is not None and o.cause is not None:
            out.append(o)
            o = o.parent
        return out[::-1]


class OutOfRuns(Exception):
    """The attribution's budget of reference runs is spent."""


@dataclass
class Budget:
    """Reference runs spent by one attribution, and how many it may spend."""

    max_runs: int | None
    runs: int = 0

    @contextlib.contextmanager
    def capped(self, limit: int) -> Iterator[None]:
        """Within the block, at most `limit` runs in all (the attribution's own bound still holds)."""
        before = self.max_runs
        self.max_runs = limit if before is None else min(before, limit)
        try:
            yield
        finally:
            self.max_runs = before

    def left(self) -> int | None:
        """Runs left (None: no bound)."""
        return None if self.max_runs is None else self.max_runs - self.runs

    def spend(self) -> None:
        if self.max_runs is not None and self.runs >= self.max_runs:
            raise OutOfRuns
        self.runs += 1




# Reference runs of attributions (an image's patches under a variant of the steps) kept per
# process, oldest dropped first past VARIANT_RUNS_BYTES, keyed by the image's digest, the config
# and the steps.
VARIANT_RUNS_BYTES = 256 * 2**20
VARIANT_RUNS: dict[tuple, torch.Tensor] = {}
VARIANT_BYTES = [0]


def remember_run(key: tuple, patches: torch.Tensor) -> None:
    size = patches.numel() * patches.element_size()
    if size > VARIANT_RUNS_BYTES // 4:
        return
    while VARIANT_RUNS and VARIANT_BYTES[0] + size > VARIANT_RUNS_BYTES:
        old = VARIANT_RUNS.pop(next(iter(VARIANT_RUNS)))
        VARIANT_BYTES[0] -= old.numel() * old.element_size()
    VARIANT_RUNS[key] = patches
    VARIANT_BYTES[0] += size


def image_key(img: Image.Image) -> bytes:
    """A digest of everything a reference run reads from a decoded image: mode, size, pixels,
    palette, frames, info and the encoded file it came from."""
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((img.mode, img.size, getattr(img, "n_frames", 1), sorted(
        (str(k), repr(v)) for k, v in img.info.items()))).encode())
    h.update(img.tobytes())
    if img.palette is not None:  # P and PA: the same indices under another palette differ
        h.update(img.palette.mode.encode() + b"|" + bytes(img.getpalette(img.palette.mode) or b""))
    h.update(encoded_bytes(img) or b"")
    return h.digest()



def _closest_first(o: _Option) -> tuple:
    # Exact ties go to an enumerated variant before a measured one (`Variant.measured`: fewer
    # free parameters), to an enabling root cause (what was done) before an arithmetic one (how
    # it was computed), then to the catalogue order.
    return (o.total, o.variant.measured, not o.cause.enabling, o.cause_index, o.variant_index)


class Search:
    """The search of one attribution: the images, the candidate's values, the runs spent."""

    def __init__(self, decoded: list[Image.Image], config: PreprocessConfig, scope: list[int],
                 targets: dict[int, Target], catalogue: Sequence[RootCause], budget: Budget,
                 base: Steps = CHECKPOINT):
        self.decoded = decoded
        self.base = base  # the steps the search starts from (the reference, or its assumed variants)
        self.config = config
        self.plans = [plan(img.width, img.height, config) for img in decoded]
        self.scope = scope
        self.targets = targets
        self.catalogue = catalogue
        self.budget = budget
        self.best_so_far: tuple[list[Explained], _Option] | None = None
        self.resized: dict[tuple[int, Steps], tuple[np.ndarray, ResizePlan]] = {}
        self.memo: dict[tuple[Steps, frozenset], list[_Option]] = {}
        self.image_keys: list[bytes | None] = [None] * len(decoded)
        self.fits: dict[tuple, list[Variant]] = {}

    def run(self, i: int, steps: Steps) -> torch.Tensor:
        """Image i's patches under `steps` (one reference run; the resized, filled array is
        shared by every variant of the later steps, and the patches by every attribution of the
        same image and config in this process: the gate attributes NEW's and OLD's results on
        the same inputs)."""
        self.budget.spend()
        if self.image_keys[i] is None:
            self.image_keys[i] = image_key(self.decoded[i])
        shared_key = (self.image_keys[i], self.config, steps)
        found_patches = VARIANT_RUNS.get(shared_key)
        if found_patches is not None:
            return found_patches
        patches = self._run(i, steps)
        remember_run(shared_key, patches)
        return patches

    def _run(self, i: int, steps: Steps) -> torch.Tensor:
        key = (i, steps.replace(pad=CHECKPOINT.pad, normalize=CHECKPOINT.normalize, patchify=CHECKPOINT.patchify))
        found = self.resized.get(key)
        if found is None:
            img = steps.prepared(self.decoded[i])
            p = self.plans[i]
            if img.size != self.decoded[i].size:
                # A prepare step that transposes (EXIF 5-8): the candidate planned the transposed
                # size; its plan is used when its grid is the reference's (else no pixel finding).
                other = plan(img.width, img.height, self.config)
                p = other if other.grid_thw == p.grid_thw else p
            found = self.resized[key] = (steps.resized_rgb(img, self.config, p), p)
        rgb, p = found
        return steps.patches(rgb, self.config, p)

    def total(self, dist: dict[int, LevelSummary]) -> LevelSummary:
        """The distances of the images in scope, merged."""
        return merge([dist[i] for i in self.scope])

    def options(self, base: _Option, skip: set[str], tried: set[frozenset] | None = None) -> list[_Option]:
        """Every variant of every root cause not in `skip`, applied on top of `base`, closest first."""
        memo_key = (base.steps, frozenset(skip))
        if tried is None and memo_key in self.memo:  # a restart's first round
            return self.memo[memo_key]
        out = []
        for ci, cause in enumerate(self.catalogue):
            if cause.id in skip:
                continue
            touched = [i for i in self.scope
                       if cause.touches(self.decoded[i], self.plans[i], self.config, base.steps)]
            if not touched:
                continue
            for vi, variant in enumerate(self.variants_of(cause, base, touched[0])):
                if tried is not None:  # a pair: each unordered pair once
                    pair = frozenset({(base.cause_index, base.variant_index), (ci, vi)})
                    if pair in tried:
                        continue
                    tried.add(pair)
                trial = variant.apply(base.steps)
                outs = {i: self.run(i, trial) for i in touched}
                dist = {**base.dist, **{i: self.targets[i].summary(outs[i]) for i in touched}}
                changed = any(not torch.equal(outs[i], base.model[i]) for i in touched)
                out.append(_Option(self.total(dist).total_levels, ci, vi, cause, variant, trial,
                                   {**base.model, **outs}, dist, changed, base))
        out.sort(key=_closest_first)
        if tried is None:
            self.memo[memo_key] = out
        return out

    def variants_of(self, cause: RootCause, base: _Option, i: int) -> list[Variant]:
        """The family's variants under the config, then those fitted on image i's outputs under
        `base` (`fitted`: measured once per base; a fitted variant that the catalogue lists
        under the same name is left out)."""
        listed = list(cause.variants(self.config))
        if cause.fit is None or i not in base.model:
            return listed
        key = (cause.id, base.steps, i)
        found = self.fits.get(key)
        if found is None:
            fi = FitInput(base.model[i], self.targets[i].bits.view(np.float32), self.plans[i], self.config,
                          base.steps)
            try:
                found = self.fits[key] = cause.fitted(fi)
            except (ValueError, IndexError):  # (outputs no fit can read: none fitted)
                found = self.fits[key] = []
        names = {v.name for v in listed}
        return listed + [v for v in found if v.name not in names]

    def step(self, current: _Option, done: set[str], rank: int = 0) -> tuple[list[_Option], tuple[str, ...]]:
        """The swaps taken next (one, or a pair; none when nothing qualifies) and the root causes
        whose swap gave the same output as a single swap taken. A restart: `rank` > 0 takes
        the rank-th qualifying single swap instead of the best, `PAIR_FIRST` the best pair."""
        limit = KEEP_AT_MOST * current.total
        options = self.options(current, done)
        qualifying = [o for o in options if o.total == 0 or o.total <= limit]
        if rank > 0:  # the best swap of the rank-th root cause among those that qualify
            firsts = [o for k, o in enumerate(qualifying) if all(o.cause.id != x.cause.id for x in qualifying[:k])]
            return ([firsts[rank]], ()) if rank < len(firsts) else ([], ())
        if qualifying and rank == 0:
            best = qualifying[0]
            same = tuple(dict.fromkeys(o.cause.id for o in self.alternatives(best, options)
                                       if o.cause.id != best.cause.id))
            return [best], same
        if not options:
            return [], ()
        # No single swap qualifies: pairs. Seeds are every swap of an enabling root cause (it
        # may be what lets another one show) and the other swaps that changed the output and
        # came closest (PAIR_SEEDS of them, one per root cause).
        seeds = [o for o in options if o.cause.enabling]
        others: list[_Option] = []
        for o in options:
            if (not o.cause.enabling and o.changed and len(others) < PAIR_SEEDS
                    and all(o.cause.id != x.cause.id for x in others)):
                others.append(o)
        seeds += others
        tried: set[frozenset] = set()
        pairs = []
        for seed in seeds:
            for partner in self.options(seed, done | {seed.cause.id}, tried):
                pairs.append(((partner.total, not (seed.cause.enabling or partner.cause.enabling),
                               seed.cause_index, seed.variant_index, partner.cause_index,
                               partner.variant_index), seed, partner))
        if not pairs:
            return [], ()
        _, seed, partner = min(pairs, key=lambda t: t[0])
        if partner.total == 0 or partner.total <= limit:
            return [seed, partner], ()
        return [], ()

    def greedy(self, start: _Option, first_rank: int = 0) -> tuple[list[Explained], _Option] | None:
        """Swaps taken one step at a time until nothing qualifies (the first step: the
        `first_rank`-th qualifying swap; None when there is no such swap)."""
        taken: list[Explained] = []
        current = start
        self.best_so_far = None
        while current.total > 0:
            rank = first_rank if not taken else 0
            chosen, same = self.step(current, {e.root_cause for e in taken}, rank)
            if not chosen:
                if rank:
                    return None
                break
            for o in chosen:
                taken.append(self.explained(o, same if o is chosen[-1] else ()))
            current = chosen[-1]
            self.best_so_far = (list(taken), current)
        return taken, current

    def alternatives(self, best: _Option, options: Sequence[_Option]) -> list[_Option]:
        """The options other than `best` whose output is bit-identical to its output."""
        return [o for o in options if o is not best and o.total == best.total
                and all(torch.equal(best.model[i], o.model[i]) for i in self.scope)]

    def explained(self, o: _Option, same: tuple[str, ...] = (), alternatives: tuple[str, ...] = ()) -> Explained:
        """The record of swap `o`: what it left, the ties."""
        left = self.total(o.dist)
        return Explained(o.cause.id, o.variant.name, left.max_levels, left.mean_levels, left.total_levels,
                         same, self.scope[0], alternatives)

    def stacked(self, start: _Option) -> _Option | None:
        """The beam search for a stack of at most MAX_STACK variants that reproduces the
        candidate exactly: its last swap (`chain()` gives the stack), None when none is found,
        when a depth brings the stacks no closer, or past STACK_RUNS reference runs."""
        left = self.budget.left()
        if left is not None and left < STACK_MIN_RUNS:
            return None
        beam, best_total, until = [start], start.total, self.budget.runs + STACK_RUNS
        for _ in range(MAX_STACK):
            found: dict[bytes, _Option] = {}
            for state in beam:
                done = {o.cause.id for o in state.chain()}
                if self.budget.runs >= until:
                    return None
                for o in self.options(state, done):
                    key = self._output_key(o)
                    if o.changed and (key not in found or _stack_order(o) < _stack_order(found[key])):
                        found[key] = o
            ranked = sorted(found.values(), key=_stack_order)
            if not ranked or ranked[0].total >= best_total:
                return None
            if ranked[0].total == 0:
                return ranked[0]
            best_total = ranked[0].total
            beam = ranked[:BEAM]
            for cause in dict.fromkeys(o.cause.id for o in ranked if o.cause.enabling):
                best = next(o for o in ranked if o.cause.id == cause)
                if best not in beam:
                    beam.append(best)
        return None

    def _output_key(self, o: _Option) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        for i in self.scope:
            h.update(o.model[i].numpy().tobytes())
        return h.digest()

    def name_alternatives(self, taken: list[Explained], start: _Option) -> list[Explained]:
        """`taken` with each step's ties: `alternatives`, the variants that in its place (on top
        of the steps before it) give the same output, and `equivalent`, their other families
        (the candidate's output cannot tell them apart)."""
        out, current = [], start
        for e in taken:
            options = self.options(current, {x.root_cause for x in out})
            mine = next((o for o in options if o.cause.id == e.root_cause and o.variant.name == e.variant), None)
            if mine is None:  # a step the search did not take on this base (by elimination)
                out.append(e)
                continue
            ties = self.alternatives(mine, options)
            out.append(dataclasses.replace(
                e, alternatives=tuple(full_name(o.cause.id, o.variant.name) for o in ties),
                equivalent=tuple(dict.fromkeys(o.cause.id for o in ties if o.cause.id != e.root_cause))))
            current = mine
        return out

    def prune(self, start: _Option, final: _Option) -> _Option:
        """The stack of `final` without the swaps that change nothing of its output (the fewest
        variants), rebuilt on `start`."""
        kept = final.chain()
        for o in list(kept):
            if len(kept) < 2:
                break
            rest = [x for x in kept if x is not o]
            trial = start.steps
            for x in rest:
                trial = x.variant.apply(trial)
            if all(torch.equal(self.run(i, trial), final.model[i]) for i in self.scope):
                kept = rest
        if len(kept) == len(final.chain()):
            return final
        current = start
        for x in kept:
            trial = x.variant.apply(current.steps)
            outs = {i: self.run(i, trial) for i in self.scope}
            dist = {**current.dist, **{i: self.targets[i].summary(outs[i]) for i in self.scope}}
            current = _Option(self.total(dist).total_levels, x.cause_index, x.variant_index, x.cause, x.variant,
                              trial, {**current.model, **outs}, dist, True, current)
        return current


def _stack_order(o: _Option) -> tuple:
    # closest first, then the shorter stack, then the tie rule of single swaps
    return (o.total, len(o.chain()), not o.cause.enabling, o.cause_index, o.variant_index)
