"""Fitted variants: a family's variant whose constant the data determines, measured from the outputs.

Where the catalogue enumerates a few values (`pad-white`, `channels-bgr`), a fitted variant takes
the value the candidate shows: the pad's level (or normalized value), normalization constants
solved from the affine relation between the reference's levels and the candidate's values, the
order of the patchify's axes, a channel order, a permutation of the patches. Each is a frozen
value (equal by its parameters, so reference runs under it are shared) that fills one field of
`reference.Steps`; its name is `family/variant-PARAM` (`pad/level-1`,
`normalize-float/mean-0.48,0.46,0.41`) and parses back (`parse_*`), so a stored finding's
variants can be applied again. A fitted variant explains a finding only as every variant does:
when its output reproduces the candidate bit for bit. Rule: docs/diagnosis.md ("Fitted variants").
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.geometry import ResizePlan
from kimi_oracle.oracle.diagnosis.regions import canvas
from kimi_oracle.pipelines import reference
from kimi_oracle.pipelines.reference import Steps, pad_bottom_right
from kimi_oracle.pipelines.variants import normalize as normalizers

# A fitted variant as the catalogue takes it: (name, apply: Steps -> Steps).
Fitted = tuple[str, Callable[[Steps], Steps]]
# The checkpoint's order of the (gh, p, gw, p, C) axes: (gh, gw, C, p, p).
CHECKPOINT_AXES = (0, 2, 4, 1, 3)
# Axis orders the catalogue names already (channels-last, patches-column-major, patch-transposed).
CATALOGUED_AXES = frozenset({(0, 2, 1, 3, 4), (2, 0, 4, 1, 3), (0, 2, 4, 3, 1)})
CATALOGUED_CHANNELS = frozenset({(2, 1, 0)})  # channels-bgr
# A permutation of the patches is named in full (`permuted-2,0,1,...`) up to this many patches.
MAX_NAMED_PERMUTATION = 256
# Normalization constants are tried rounded to 1..MAX_DIGITS decimals (the shortest that
# reproduces the candidate is named).
MAX_DIGITS = 8
# A channel with fewer distinct levels than this does not determine mean and std (a line passes
# through any two points): its constants are then tried rounded to UNDERDETERMINED_DIGITS at most.
MIN_LEVELS = 3
UNDERDETERMINED_DIGITS = 3
# Statistics a fitted normalization may have (per channel, of levels / 255): beyond them the
# affine fit is no normalization (a fit through values another step made: a mean of 1e16).
MAX_MEAN, MIN_STD, MAX_STD = 4.0, 1e-3, 16.0
# The arithmetics a fitted normalization is tried in: the checkpoint's table first.
NORMALIZE_KINDS = ("table", "scale-bias", "fused", "fused-float64-constants", "divide", "reciprocal",
                   "fused-255", "bfloat16", "float16")


def _num(v: float) -> str:
    return np.format_float_positional(float(v), trim="-")


def _f32(v: float) -> str:
    return np.format_float_positional(np.float32(v), trim="-")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(","))


@dataclass(frozen=True)
class FitInput:
    """What a fit reads: one image's patches under the base steps, the candidate's values of
    that image (float32, the same shape), its plan and config, and the base steps."""

    model: torch.Tensor
    target: np.ndarray
    plan: ResizePlan
    config: PreprocessConfig
    steps: Steps


# ---------------------------------------------------------------------------------------------
# pad


@dataclass(frozen=True)
class PadLevels:
    """A `Steps.pad`: the padding filled with these 8-bit levels (per channel), bottom and right."""

    levels: tuple[int, int, int]

    @property
    def name(self) -> str:
        a, b, c = self.levels
        return f"level-{a}" if a == b == c else f"levels-{a},{b},{c}"

    def __call__(self, values: np.ndarray, p: ResizePlan, normalized: Callable, back: Callable) -> np.ndarray:
        out = pad_bottom_right(values, p, normalized, back)
        fill = normalized(np.array(self.levels, dtype=np.uint8).reshape(1, 1, 3))[0, 0]
        out[p.new_h:, :] = fill
        out[:, p.new_w:] = fill
        return out


@dataclass(frozen=True)
class PadValues:
    """A `Steps.pad`: the padding filled with these model values (float32, per channel), added
    after the normalization; values that are no level's."""

    values: tuple[float, float, float]

    @property
    def name(self) -> str:
        a, b, c = (_f32(v) for v in self.values)
        return f"normalized-{a}" if a == b == c else f"normalized-{a},{b},{c}"

    def __call__(self, values: np.ndarray, p: ResizePlan, normalized: Callable, back: Callable) -> np.ndarray:
        out = pad_bottom_right(values, p, normalized, back)
        fill = np.array(self.values, dtype=np.float32)
        out[p.new_h:, :] = fill
        out[:, p.new_w:] = fill
        return out


def _pad_region(fi: FitInput) -> np.ndarray | None:
    return pad_region(fi.target, fi.plan, fi.config.patch_size)


def pad_region(values: np.ndarray | torch.Tensor, p: ResizePlan, patch: int) -> np.ndarray | None:
    """An image's (N, 3, p, p) values in the padding, (n, 3); None when it has no padding."""
    if not (p.pad_w or p.pad_h):
        return None
    laid = canvas(values, p, patch)
    mask = np.ones(laid.shape[:2], dtype=bool)
    mask[: p.new_h, : p.new_w] = False
    return laid[mask]


def fit_pad(fi: FitInput) -> list[Fitted]:
    """The pad the candidate shows, when its padding holds one value per channel: the levels of
    the base's normalization those values are (`level-N`), else the values (`normalized-V`)."""
    region = _pad_region(fi)
    fn = None if region is None else pad_fill(region, fi.steps.normalize(fi.config))
    if fn is None or fn in (PadLevels((0, 0, 0)), PadLevels((255, 255, 255)), PadValues((0.0, 0.0, 0.0))):
        return []  # (none, or the checkpoint's own pad, or the catalogue's pad-white, pad-after-normalize)
    return [_pad_variant(fn)]


def pad_fill(region: np.ndarray, lut: np.ndarray) -> PadLevels | PadValues | None:
    """The fill of (n, 3) padding values when they hold one value per channel: the levels of
    table `lut` they are, else the values; None when they are not one value per channel."""
    if not len(region):
        return None
    first = region[0]
    if not np.array_equal(region.view(np.int32), np.broadcast_to(first, region.shape).view(np.int32)):
        return None
    levels = []
    for c in range(3):
        hit = np.flatnonzero(lut[c].view(np.int32) == np.float32(first[c]).view(np.int32))
        levels.append(int(hit[0]) if len(hit) else None)
    if all(v is not None for v in levels):
        return PadLevels(tuple(levels))  # type: ignore[arg-type]
    return PadValues(tuple(float(v) for v in first))  # type: ignore[arg-type]


def _pad_variant(fn: PadLevels | PadValues) -> Fitted:
    return fn.name, lambda s: s.replace(pad=fn)


def parse_pad(name: str) -> Fitted | None:
    """`level-N`, `levels-a,b,c`, `normalized-V`, `normalized-a,b,c` (None for another name)."""
    try:
        if m := re.fullmatch(r"level-(\d{1,3})", name):
            levels = (int(m[1]),) * 3
        elif m := re.fullmatch(r"levels-(\d{1,3},\d{1,3},\d{1,3})", name):
            levels = _ints(m[1])
        elif m := re.fullmatch(r"normalized-([^,]+)(?:,([^,]+),([^,]+))?", name):
            vals = [m[1], m[2] or m[1], m[3] or m[1]]
            parsed = tuple(float(np.float32(v)) for v in vals)
            if not all(np.isfinite(parsed)):
                return None
            return _pad_variant(PadValues(parsed))  # type: ignore[arg-type]
        else:
            return None
    except ValueError:
        return None
    if not all(0 <= v <= 255 for v in levels):
        return None
    return _pad_variant(PadLevels(levels))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# normalize


@dataclass(frozen=True)
class FittedNormalize:
    """A `Steps.normalize`: the table of these statistics, in arithmetic `kind` ("table": the
    checkpoint's; else a kind of `variants.normalize.float_lut`)."""

    kind: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def name_for(self, config: PreprocessConfig) -> str:
        parts = []
        if tuple(self.mean) != tuple(config.image_mean):
            parts.append("mean-" + ",".join(_num(v) for v in self.mean))
        if tuple(self.std) != tuple(config.image_std):
            parts.append("std-" + ",".join(_num(v) for v in self.std))
        if self.kind != "table":
            parts.append(self.kind)
        return "-".join(parts)

    def __call__(self, config: PreprocessConfig) -> np.ndarray:
        return _table(self.kind, self.mean, self.std)


@functools.lru_cache(maxsize=4096)
def _table(kind: str, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    if kind == "table":
        return reference._lut(tuple(mean), tuple(std))
    return normalizers.float_lut(kind, tuple(mean), tuple(std))


def levels_under(values: np.ndarray, config: PreprocessConfig) -> np.ndarray:
    """The nearest 8-bit level of each model value of channel axis 1 ((N, 3, ...) values) under
    `config`'s statistics, -1 where a value is no level (more than 0.01 of a level away)."""
    mean = np.asarray(config.image_mean, dtype=np.float64).reshape(1, 3, *([1] * (values.ndim - 2)))
    std = np.asarray(config.image_std, dtype=np.float64).reshape(mean.shape)
    x = (values.astype(np.float64) * std + mean) * 255.0
    with np.errstate(invalid="ignore"):
        near = np.rint(x)
        ok = np.isfinite(x) & (np.abs(x - near) < 0.01) & (near >= 0) & (near <= 255)
    return np.where(ok, near, -1).astype(np.int64)


def level_pairs(model: np.ndarray, target: np.ndarray, config: PreprocessConfig
                ) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per channel, the distinct levels of `model` and the one candidate value each maps to;
    None when some level maps to two values or a model value is no level (no table explains it)."""
    levels = levels_under(model, config)
    if (levels < 0).any():
        return None
    out = []
    for c in range(3):
        lv = levels[:, c].ravel()
        y = np.ascontiguousarray(target[:, c]).ravel().astype(np.float32)
        order = np.argsort(lv, kind="stable")
        lv, y = lv[order], y[order]
        first = np.r_[True, lv[1:] != lv[:-1]]
        starts = np.flatnonzero(first)
        seg = np.cumsum(first) - 1
        if not np.array_equal(y.view(np.int32), y[starts][seg].view(np.int32)):
            return None
        out.append((lv[starts], y[starts]))
    return out


def fit_constants(pairs: list[tuple[np.ndarray, np.ndarray]], config: PreprocessConfig
                  ) -> FittedNormalize | None:
    """Statistics (rounded to the fewest decimals, per channel) and an arithmetic whose table
    gives every observed level's candidate value bit for bit; None when none does, or when the
    config's own statistics do (the catalogued arithmetics name that)."""
    raw = []
    for c, (lv, y) in enumerate(pairs):
        if not len(lv) or not np.isfinite(y).all():
            return None
        if len(lv) < 2:  # one level seen (a flat image): the mean, with the config's std
            s0 = float(config.image_std[c])
            raw.append((float(lv[0]) / 255.0 - float(y[0]) * s0, s0))
            continue
        a, b = np.polyfit(lv.astype(np.float64), y.astype(np.float64), 1)
        if not a > 0:
            return None
        s = 1.0 / (255.0 * a)
        raw.append((-b * s, s))
    determined = all(len(lv) >= MIN_LEVELS for lv, _ in pairs)
    if not all(abs(m) <= MAX_MEAN and MIN_STD <= s <= MAX_STD for m, s in raw):
        return None  # (statistics no normalization uses: the values are no table of these levels)
    found = _uniform_constants(raw, pairs, config, determined)
    if found is not None:
        return None if found.mean == tuple(config.image_mean) and found.std == tuple(config.image_std) else found
    if not determined:
        return None
    for kind in NORMALIZE_KINDS:
        found = _constants_in(kind, raw, pairs, config)
        if found is not None:
            if found.mean == tuple(config.image_mean) and found.std == tuple(config.image_std):
                return None
            return found
    return None


def _candidates(raw: list[tuple[float, float]], config: PreprocessConfig,
                determined: bool = True) -> list[tuple[tuple, tuple]]:
    """Statistics to try, simplest first: the config's, then per rounding (1..MAX_DIGITS decimals)
    the fitted mean with the config's std, then fitted mean and std; last the raw fit. When the
    data do not determine the two constants (`determined` False: fewer than MIN_LEVELS levels in
    a channel, through which some line always passes), only roundings to UNDERDETERMINED_DIGITS
    decimals: a short constant that reproduces every value is no coincidence, a long one is."""
    mean0, std0 = tuple(config.image_mean), tuple(config.image_std)
    out = [(mean0, std0)]
    for d in range(1, (MAX_DIGITS if determined else UNDERDETERMINED_DIGITS) + 1):
        mean, std = tuple(round(m, d) for m, _ in raw), tuple(round(s, d) for _, s in raw)
        out += [(mean, std0), (mean0, std), (mean, std)]
    if determined:
        out.append((tuple(m for m, _ in raw), tuple(s for _, s in raw)))
    return list(dict.fromkeys(out))


def _uniform_constants(raw: list[tuple[float, float]], pairs: list[tuple[np.ndarray, np.ndarray]],
                       config: PreprocessConfig, determined: bool = True) -> FittedNormalize | None:
    """The simplest statistics (one rounding for all channels) and arithmetic that reproduce
    every observed value."""
    for mean, std in _candidates(raw, config, determined):
        if not all(v > 0 for v in std):
            continue
        for kind in NORMALIZE_KINDS:
            table = _table(kind, mean, std)
            if all(np.array_equal(table[c][lv].view(np.int32), y.view(np.int32)) for c, (lv, y) in enumerate(pairs)):
                return FittedNormalize(kind, tuple(float(v) for v in mean), tuple(float(v) for v in std))  # type: ignore[arg-type]
    return None


def _constants_in(kind: str, raw: list[tuple[float, float]], pairs: list[tuple[np.ndarray, np.ndarray]],
                  config: PreprocessConfig) -> FittedNormalize | None:
    chosen: list[tuple[float, float] | None] = [None, None, None]
    options = [(tuple(config.image_mean), tuple(config.image_std))]
    options += [(tuple(round(m, d) for m, _ in raw), tuple(round(s, d) for _, s in raw)) for d in range(1, MAX_DIGITS + 1)]
    options.append((tuple(m for m, _ in raw), tuple(s for _, s in raw)))
    for mean, std in options:
        if not all(v > 0 for v in std):
            continue
        table = _table(kind, mean, std)
        for c, (lv, y) in enumerate(pairs):
            if chosen[c] is None and np.array_equal(table[c][lv].view(np.int32), y.view(np.int32)):
                chosen[c] = (mean[c], std[c])
        if all(chosen):
            mean3 = tuple(float(v[0]) for v in chosen)  # type: ignore[index]
            std3 = tuple(float(v[1]) for v in chosen)  # type: ignore[index]
            fn = FittedNormalize(kind, mean3, std3)  # type: ignore[arg-type]
            # (channels fitted at different roundings: the table of all three checked again)
            t = fn(config)
            if all(np.array_equal(t[c][lv].view(np.int32), y.view(np.int32)) for c, (lv, y) in enumerate(pairs)):
                return fn
            return None
    return None


def fit_normalize(fi: FitInput) -> list[Fitted]:
    """The statistics the candidate normalizes with, when its values are a table of the base's
    levels (`mean-...`, `std-...`, with the arithmetic when it is not the checkpoint's)."""
    pairs = level_pairs(fi.model.numpy(), fi.target, fi.config)
    if pairs is None:
        return []
    fn = fit_constants(pairs, fi.config)
    if fn is None:
        return []
    return [_normalize_variant(fn, fi.config)]


def _normalize_variant(fn: FittedNormalize, config: PreprocessConfig) -> Fitted:
    return fn.name_for(config), lambda s: s.replace(normalize=fn)


_KIND_SUFFIX = "|".join(re.escape(k) for k in NORMALIZE_KINDS if k != "table")


def parse_normalize(name: str, config: PreprocessConfig) -> Fitted | None:
    """`mean-a,b,c[-std-d,e,f][-KIND]` or `std-d,e,f[-KIND]` (None for another name)."""
    num = r"-?\d+(?:\.\d+)?"
    three = rf"{num},{num},{num}"
    m = re.fullmatch(rf"(?:mean-({three}))?-?(?:std-({three}))?(?:-?({_KIND_SUFFIX}))?", name)
    if not m or not (m[1] or m[2]):
        return None
    try:
        mean = tuple(float(v) for v in m[1].split(",")) if m[1] else tuple(config.image_mean)
        std = tuple(float(v) for v in m[2].split(",")) if m[2] else tuple(config.image_std)
    except ValueError:
        return None
    if len(mean) != 3 or len(std) != 3 or not all(np.isfinite(mean + std)) or not all(v > 0 for v in std):
        return None
    fn = FittedNormalize(m[3] or "table", mean, std)  # type: ignore[arg-type]
    return fn.name_for(config), lambda s: s.replace(normalize=fn)


# ---------------------------------------------------------------------------------------------
# patch order


@dataclass(frozen=True)
class PatchAxes:
    """A `Steps.patchify`: the (gh, p, gw, p, C) axes of the padded values in this order, read as
    (N, 3, p, p) (the checkpoint's is CHECKPOINT_AXES)."""

    axes: tuple[int, ...]

    @property
    def name(self) -> str:
        return "axes-" + ",".join(str(a) for a in self.axes)

    def __call__(self, values: np.ndarray, patch: int) -> torch.Tensor:
        gh, gw = values.shape[0] // patch, values.shape[1] // patch
        tiles = values.reshape(gh, patch, gw, patch, 3).transpose(*self.axes)
        return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


@dataclass(frozen=True)
class ChannelOrder:
    """A `Steps.patchify`: the checkpoint's patches with channel c holding channel order[c]."""

    order: tuple[int, int, int]

    @property
    def name(self) -> str:
        return "channels-" + ",".join(str(c) for c in self.order)

    def __call__(self, values: np.ndarray, patch: int) -> torch.Tensor:
        return reference.patches_chw(np.ascontiguousarray(values[..., list(self.order)]), patch)


@dataclass(frozen=True)
class PatchPermutation:
    """A `Steps.patchify`: the checkpoint's patches, output patch k being patch order[k]."""

    order: tuple[int, ...]

    @property
    def name(self) -> str:
        return "permuted-" + ",".join(str(k) for k in self.order)

    def __call__(self, values: np.ndarray, patch: int) -> torch.Tensor:
        patches = reference.patches_chw(values, patch)
        if len(self.order) != patches.shape[0]:
            raise ValueError(f"a permutation of {len(self.order)} patches applied to {patches.shape[0]}")
        return patches[list(self.order)].contiguous()


def _bits(a: np.ndarray | torch.Tensor) -> np.ndarray:
    arr = a.numpy() if isinstance(a, torch.Tensor) else a
    return np.ascontiguousarray(arr, dtype=np.float32).view(np.int32)


def fit_patch_order(fi: FitInput) -> list[Fitted]:
    """When the candidate's values are the base's in another order, the order that brings them
    closest, of three kinds: an order of the patchify's axes, a channel order, a permutation of
    whole patches (each when it matches more values than the base's own order; the catalogue's
    orders left to it)."""
    patch = fi.config.patch_size
    target = _bits(fi.target)
    model_bits = _bits(fi.model)
    if model_bits.shape != target.shape or not np.array_equal(np.sort(model_bits, axis=None), np.sort(target, axis=None)):
        return []  # (not the base's values in another order: no order reproduces it)
    values = canvas(fi.model, fi.plan, patch)
    own = int((model_bits == target).sum())
    out: list[Fitted] = []
    best: tuple[int, Any] | None = None
    for axes in itertools.permutations(range(5)):
        if axes == CHECKPOINT_AXES or axes in CATALOGUED_AXES:
            continue
        fn = PatchAxes(axes)
        hits = int((_bits(fn(values, patch)) == target).sum())
        if hits > own and (best is None or hits > best[0]):
            best = (hits, fn)
    for order in itertools.permutations(range(3)):
        if order == (0, 1, 2) or order in CATALOGUED_CHANNELS:
            continue
        fn = ChannelOrder(order)  # type: ignore[arg-type]
        hits = int((_bits(fn(values, patch)) == target).sum())
        if hits > own and (best is None or hits > best[0]):
            best = (hits, fn)
    if best is not None:
        out.append(_order_variant(best[1]))
    perm = patch_permutation(fi.model, fi.target)
    if perm is not None:
        out.append(_order_variant(PatchPermutation(perm)))
    return out


def patch_permutation(model: torch.Tensor | np.ndarray, target: np.ndarray | torch.Tensor) -> tuple[int, ...] | None:
    """π with target patch k bit-identical to model patch π(k), every patch found (the first
    unused match of equal patches); None when there is none, it is the identity, or the batch
    has more than MAX_NAMED_PERMUTATION patches."""
    m, t = _bits(model), _bits(target)
    n = m.shape[0]
    if n < 2 or n > MAX_NAMED_PERMUTATION or t.shape != m.shape:
        return None
    where: dict[bytes, list[int]] = {}
    for k in range(n):
        where.setdefault(hashlib.blake2b(m[k].tobytes(), digest_size=16).digest(), []).append(k)
    order = []
    for k in range(n):
        free = where.get(hashlib.blake2b(t[k].tobytes(), digest_size=16).digest())
        if not free:
            return None
        order.append(free.pop(0))
    return None if order == list(range(n)) else tuple(order)


def _order_variant(fn: PatchAxes | ChannelOrder | PatchPermutation) -> Fitted:
    return fn.name, lambda s: s.replace(patchify=fn)


def parse_patch_order(name: str) -> Fitted | None:
    """`axes-a,b,c,d,e`, `channels-a,b,c`, `permuted-k0,k1,...` (None for another name)."""
    try:
        if m := re.fullmatch(r"axes-(\d(?:,\d){4})", name):
            axes = _ints(m[1])
            return _order_variant(PatchAxes(axes)) if sorted(axes) == list(range(5)) else None
        if m := re.fullmatch(r"channels-(\d,\d,\d)", name):
            order = _ints(m[1])
            return _order_variant(ChannelOrder(order)) if sorted(order) == [0, 1, 2] else None  # type: ignore[arg-type]
        if m := re.fullmatch(r"permuted-(\d+(?:,\d+)+)", name):
            perm = _ints(m[1])
            return _order_variant(PatchPermutation(perm)) if sorted(perm) == list(range(len(perm))) else None
    except ValueError:
        return None
    return None
