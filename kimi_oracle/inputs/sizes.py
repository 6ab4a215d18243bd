"""Size classes: deterministic image sizes at every threshold of the plan, and the catalogue of them."""

from __future__ import annotations

import functools
import math
from typing import Iterable

import numpy as np

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.core.errors import KimiOracleError

# Largest side the fuzzers draw by default (ratio sizes reach about four times that).
DEFAULT_MAX_SIDE = 64
# Real-photo sizes (`FuzzOptions.photo_examples`): a 12 Mpx phone photo and a 4K frame, each
# landscape and portrait; the fuzzers' ordinary sizes never reach them (longest side 64).
PHOTO_SIZES = ((4032, 3024), (3840, 2160), (3024, 4032), (2160, 3840))
# The (mode, alpha pattern) of the k-th real-photo example, k taken in turn: every mode class, the
# commonest first (RGB, L, P, then RGBA, LA and PA with transparency).
PHOTO_KINDS = (("RGB", "opaque"), ("L", "opaque"), ("P", "opaque"), ("RGBA", "gradient"),
               ("LA", "checker"), ("PA", "gradient"), ("CMYK", "opaque"), ("I;16", "opaque"),
               ("1", "opaque"), ("RGBA", "opaque"), ("P", "transparent"), ("I", "opaque"),
               ("F", "opaque"), ("YCbCr", "opaque"), ("LAB", "opaque"), ("I;16B", "opaque"))
# One generated example in this many is a real-photo one (the k-th at index k * PHOTO_EVERY +
# PHOTO_EVERY - 1), until a run's `photo_examples` are drawn.
PHOTO_EVERY = 8
# The real-photo examples (`FuzzOptions.photo_examples`, `gate --photo-examples`) the gate's fuzz stage draws per side by
# default: generated examples 7 and 15, a 12 Mpx one and a 4K one, their mode classes in turn from
# the seed's (`sizes.photo_forced`). Measured (docs/measurements.md, round 10): the README's gate
# (--budget 2m) ran 118 s with them, its fuzz stage 31.7 s; a photo costs a few seconds a side
# since its comparison, diff picture and outputs.npz are bounded (`results.diffs`,
# `gate.observations.outputs_window`).
GATE_PHOTO_EXAMPLES = 2


def photo_slot(index: int, count: int, every: int = PHOTO_EVERY) -> int | None:
    """Which real-photo example (k, 0-based) generated example `index` is, or None: example
    k * every + every - 1 for k < count (a run draws `count` of them at most: a fixed cost)."""
    every = max(1, int(every))
    if count <= 0 or index % every != every - 1 or index // every >= count:
        return None
    return index // every


def photo_forced(slot: int, modes: tuple[str, ...], seed: int = 0) -> tuple[int, int]:
    """The indices (into `photo_kinds(modes)` and PHOTO_SIZES) of real-photo example `slot`: the
    kinds in turn from the seed's (kind `seed mod kinds` first: a run that draws fewer photos than
    there are kinds, as the gate's, meets other kinds with other seeds), the sizes shifted by one
    each round so every kind meets 12 Mpx and 4K."""
    kinds = photo_kinds(modes)
    return (slot + seed) % len(kinds), (slot + slot // len(kinds)) % len(PHOTO_SIZES)


def photo_kinds(modes: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """PHOTO_KINDS of the drawn `modes` (none of them listed: the first mode, opaque)."""
    kept = tuple(k for k in PHOTO_KINDS if k[0] in modes)
    return kept or ((modes[0] if modes else "RGB", "opaque"),)
REAL_WORLD_SIZES = (
    (640, 480),
    (480, 640),
    (800, 600),
    (1024, 768),
    (1280, 720),
    (1920, 1080),
    (1080, 1920),
    (2560, 1440),
    (3840, 2160),
    (4032, 3024),
    (3024, 4032),
    (7680, 4320),
    (4320, 7680),
)
SIZE_CLASSES = (
    "tiny",
    "pass_order",
    "budget",
    "side_cap",
    "real_world",
    "ratio",
    "multiple",
    "prime",
    "pow2",
    "random",
)




def tiny_sizes() -> list[tuple[int, int]]:
    """Every W × H with both sides in 1..3."""
    return [(w, h) for h in (1, 2, 3) for w in (1, 2, 3)]


def multiple_sides(limit: int = 12, patch: int = 14) -> list[int]:
    """k·p and k·2p for k ≤ limit, with their neighbours ±1."""
    out: set[int] = set()
    for k in range(1, limit + 1):
        for base in (k * patch, k * 2 * patch):
            out.update((base - 1, base, base + 1))
    return sorted(v for v in out if v > 0)


def primes(upto: int) -> list[int]:
    """Primes ≤ upto (sieve)."""
    if upto < 2:
        return []
    sieve = np.ones(upto + 1, dtype=bool)
    sieve[:2] = False
    for i in range(2, int(math.isqrt(upto)) + 1):
        if sieve[i]:
            sieve[i * i :: i] = False
    return [int(v) for v in np.flatnonzero(sieve)]


PRIME_SIDES = tuple(primes(100)) + (127, 251, 509, 1021, 2039, 4093, 8191)


def pow2_sides(max_exp: int = 13) -> list[int]:
    """2^k − 1, 2^k, 2^k + 1 for k = 1..max_exp."""
    out: set[int] = set()
    for k in range(1, max_exp + 1):
        out.update((2**k - 1, 2**k, 2**k + 1))
    return sorted(v for v in out if v > 0)


def ratio_sizes() -> list[tuple[int, int]]:
    """Aspect ratios of 100:1 and beyond, both orientations."""
    base = [(101, 1), (150, 1), (280, 2), (1000, 3), (1500, 14), (3000, 29), (8000, 100),
            (100000, 10), (20000, 7), (7169, 1), (50000, 499)]
    return base + [(h, w) for w, h in base]


def pass_order_sizes(config: PreprocessConfig, count: int = 12, max_side: int = 20000) -> list[tuple[int, int]]:
    """Sizes on Pillow 13's pass-order boundary (H − h) = 2·(W − w) for this config's plan, ±1.

    The vertical pass runs first iff (H − h) > 0 and (H − h) > 2·(W − w); sizes with
    d = (H − h) − 2·(W − w) in {−1, 0, 1} and H > h sit on either side of that switch.

    The walk: for each width (`_pass_order_widths`) heights from max(2, W // 2) up to
    min(max_side, 3·W + 64), taking the first count // 3 sizes of each d in that order, and
    skipping the sizes the checkpoint's side assert rejects. The plans of every (width, height)
    of the walk are computed at once (`_plan_arrays`: `geometry.plan`'s arithmetic on arrays).
    """
    per = max(1, count // 3)
    widths = [w for w in _pass_order_widths(config) if w <= max_side]
    if not widths:
        return []
    lows = [max(2, w // 2) for w in widths]
    highs = [min(max_side, int(w * 3) + 64) for w in widths]
    lo, hi = min(lows), max(highs)
    if hi < lo:
        return []
    ws = np.array(widths, dtype=np.int64)[:, None]
    hs = np.arange(lo, hi + 1, dtype=np.int64)[None, :]
    in_walk = (hs >= np.array(lows, dtype=np.int64)[:, None]) & (hs <= np.array(highs, dtype=np.int64)[:, None])
    new_w, new_h, ok = _plan_arrays(ws, hs, config)
    d = (hs - new_h) - 2 * (ws - new_w)
    rows, cols = np.nonzero(in_walk & ok & (hs > new_h) & (np.abs(d) <= 1))
    out: list[tuple[int, int]] = []
    found: dict[int, int] = {-1: 0, 0: 0, 1: 0}
    for r, c in zip(rows.tolist(), cols.tolist()):
        k = int(d[r, c])
        if found[k] < per:
            found[k] += 1
            out.append((widths[r], lo + c))
            if min(found.values()) >= per:
                break
    return out


def _pass_order_widths(config: PreprocessConfig) -> list[int]:
    # Start where the plan begins to shrink images and walk outwards; the boundary needs a
    # height shrink of about twice the width shrink, so heights run up to ~2.2x the width.
    start = max(2, int(math.sqrt(config.in_patch_limit)) * config.patch_size)
    return sorted({max(1, int(start * f)) for f in (0.5, 0.75, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)})


def _plan_arrays(ws: np.ndarray, hs: np.ndarray, config: PreprocessConfig
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`geometry.plan`'s new_w and new_h for int64 arrays of widths and heights (broadcast), and
    where it plans at all (False where the checkpoint's side assert raises PlanError).

    The same IEEE operations in the same order: the integers are exact in float64 (far below
    2**53), a quotient of two of them and a square root are correctly rounded in both, and int()
    of a positive float is its floor."""
    p = config.patch_size
    m = config.merge_kernel_size
    side = config.patch_limit_on_one_side
    limit = config.in_patch_limit
    s1 = np.sqrt(limit / (np.maximum(1.0, ws // p) * np.maximum(1.0, hs // p)))
    s2 = (side * p) / ws
    s3 = (side * p) / hs
    scale = np.minimum(np.minimum(np.minimum(1.0, s1), s2), s3)
    cap = side * p
    new_w = np.minimum(np.maximum(1, np.floor(ws * scale).astype(np.int64)), cap)
    new_h = np.minimum(np.maximum(1, np.floor(hs * scale).astype(np.int64)), cap)
    f = m * p
    if config.fixed_output_tokens is not None:
        ok = np.ones(np.broadcast_shapes(ws.shape, hs.shape), dtype=bool)
    else:
        merged_w = (new_w + (f - new_w % f) % f) // f
        merged_h = (new_h + (f - new_h % f) % f) // f
        ok = (merged_h * m <= side) & (merged_w * m <= side)
    return new_w, new_h, ok


def budget_sizes(config: PreprocessConfig) -> list[tuple[int, int]]:
    """Sizes at the patch budget: floored patch counts just at, below and above `in_patch_limit`."""
    p = config.patch_size
    limit = config.in_patch_limit
    out: set[tuple[int, int]] = set()
    n = math.isqrt(limit)
    for side in (n - 1, n, n + 1):
        if side <= 0:
            continue
        for extra in (0, p - 1, p):
            out.add((side * p + extra, side * p + extra))
        out.add((side * p, side * p + p - 1))
    # Non-square factorizations a·b of the limit (and a·b just above it).
    for a in sorted({1, 2, 3, 4, max(1, n // 2), n, limit}):
        b = max(1, limit // a)
        for bb in (b, b + 1):
            out.add((a * p, bb * p))
            out.add((bb * p, a * p))
            out.add((a * p + p - 1, bb * p + p - 1))
    if config.name == "k3" or limit == 65536:
        out.add((3597, 3597))  # spec: padded grid exceeds the budget (16641 tokens), not a bug
    return sorted(out)


def side_cap_sizes(config: PreprocessConfig) -> list[tuple[int, int]]:
    """Sizes at the side cap S·p (±1), with short partners so the budget does not bind first."""
    cap = config.patch_limit_on_one_side * config.patch_size
    out: set[tuple[int, int]] = set()
    for w in (cap - 1, cap, cap + 1, 2 * cap, 2 * cap + 1):
        for h in (1, 2, config.patch_size, config.factor, config.factor + 1):
            out.add((w, h))
            out.add((h, w))
    return sorted(s for s in out if s[0] > 0 and s[1] > 0)


def real_world_sizes() -> list[tuple[int, int]]:
    """Camera, screen and video sizes users actually send."""
    return list(REAL_WORLD_SIZES)


def random_sizes(count: int, seed: int = 0, max_side: int = 8192) -> list[tuple[int, int]]:
    """Log-uniform sizes, deterministic from `seed`."""
    rng = np.random.default_rng([int(seed), 99])
    logs = rng.uniform(0.0, math.log(max_side), (count, 2))
    return [(max(1, int(math.exp(a))), max(1, int(math.exp(b)))) for a, b in logs]


def size_catalogue(config: PreprocessConfig, *, max_side: int | None = None) -> list[tuple[int, int, str]]:
    """Deterministic (width, height, size_class) list covering every size class for `config`.

    Each size appears once, under the first class that produced it (order of SIZE_CLASSES).
    `max_side` drops sizes with a longer side (the geometry does not care; pixel tests do).
    """
    groups: list[tuple[str, Iterable[tuple[int, int]]]] = []
    groups.append(("tiny", tiny_sizes()))
    # Config-specific thresholds first, so those sizes carry their most telling class.
    groups.append(("pass_order", pass_order_sizes(config)))
    groups.append(("budget", budget_sizes(config)))
    groups.append(("side_cap", side_cap_sizes(config)))
    groups.append(("real_world", real_world_sizes()))
    groups.append(("ratio", ratio_sizes()))
    mult = multiple_sides(12, config.patch_size)
    groups.append(("multiple", [(w, h) for w in mult for h in mult]))
    prime_list = list(PRIME_SIDES)
    prime_pairs = [(a, b) for a in prime_list[:25] for b in prime_list[:25] if (a * 7 + b) % 3 == 0]
    prime_pairs += [(a, b) for a in prime_list for b in (2, 13, 29, a)]
    groups.append(("prime", prime_pairs))
    p2 = pow2_sides(13)
    groups.append(("pow2", [(a, b) for a in p2 for b in p2 if abs(a.bit_length() - b.bit_length()) <= 1]))
    groups.append(("random", random_sizes(400, seed=0)))
    seen: set[tuple[int, int]] = set()
    out: list[tuple[int, int, str]] = []
    for name, sizes in groups:
        for w, h in sizes:
            w, h = int(w), int(h)
            if w <= 0 or h <= 0 or (w, h) in seen:
                continue
            if max_side is not None and max(w, h) > max_side:
                continue
            seen.add((w, h))
            out.append((w, h, name))
    return out



@functools.lru_cache(maxsize=512)
def threshold_sizes(config: PreprocessConfig, max_side: int) -> tuple[tuple[int, int], ...]:
    """Sizes at the config's thresholds (pass order, patch budget, side cap) with sides ≤ max_side;
    never empty (falls back to 1×1)."""
    sizes = pass_order_sizes(config, count=9, max_side=max_side) + budget_sizes(config) + side_cap_sizes(config)
    return tuple(sorted({s for s in sizes if max(s) <= max_side})) or ((1, 1),)


@functools.lru_cache(maxsize=64)
def special_sides(max_side: int) -> tuple[int, ...]:
    """Sides at multiples of 14/28 ±1, powers of two ±1 and primes, ≤ max_side (never empty)."""
    specials = multiple_sides(12) + pow2_sides(13) + list(PRIME_SIDES)
    return tuple(sorted({s for s in specials if s <= max_side})) or (1,)


def ratio_long_side(max_side: int) -> int:
    """The longest side of the >100:1 size class drawn for a given max side."""
    return max(100, 4 * max_side)


# How far (in source pixels, each side) a same-plan size is looked for around another one.
SAME_PLAN_REACH = 3


def same_plan_sizes(size: tuple[int, int], config: PreprocessConfig, max_side: int,
                    reach: int = SAME_PLAN_REACH) -> list[tuple[int, int]]:
    """Other source sizes within `reach` pixels of `size` (each side, at most `max_side`) whose
    plan under `config` is the same (target size and padding), nearest first; `[size]` when
    there is none (an image that is not resized has a plan of its own)."""
    from kimi_oracle.core.geometry import plan

    def key(w: int, h: int) -> tuple[int, ...] | None:
        try:
            p = plan(w, h, config)
        except (ValueError, KimiOracleError):
            return None
        return (p.new_w, p.new_h, p.pad_w, p.pad_h)

    want = key(*size)
    found = []
    for dw in range(-reach, reach + 1):
        for dh in range(-reach, reach + 1):
            w, h = size[0] + dw, size[1] + dh
            if (dw or dh) and 1 <= w <= max_side and 1 <= h <= max_side and want is not None and key(w, h) == want:
                found.append((abs(dw) + abs(dh), w, h))
    return [(w, h) for _, w, h in sorted(found)] or [size]
