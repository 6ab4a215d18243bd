"""The fuzzers' draw of a case, defined once over a tiny source of integers.

`draw_fuzz_case(source, base, ...)` turns a stream of bounded integers into a `FuzzCase` (a
configuration around `base` and a batch of 1..max_images images). The same function runs over two
sources:

- `RandomSource(seed)`: seeded pseudo-random integers, recorded as they are returned. The fast
  fuzzing loop (`fuzzers.fuzzing.fuzz`) draws example i from `RandomSource(derive(seed, i))`, so
  an example depends only on (seed, i, the drawing options, the base configuration);
- hypothesis (`inputs.strategies`): `st.integers(lo, hi)` per integer, so a recorded choice list
  of a `RandomSource` IS a hypothesis choice sequence of the matching strategy, and hypothesis can
  replay and shrink a case the fast loop found.

A source is anything with `integer(lo, hi) -> int` (both bounds included). `lo == hi` draws
nothing (neither source records a choice for it). Every choice lists its simplest option first
(index 0, the lowest integer), because hypothesis shrinks integers towards their lower bound: a
case shrinks towards an RGB, opaque image of the smallest size class, one image, the base config.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Any, Callable, Protocol, Sequence, TypeVar

from kimi_oracle.core.config import PreprocessConfig
from kimi_oracle.inputs.generators import (
    ALPHA_PATTERNS,
    CHECKER_SQUARES,
    CONTENTS,
    DEFAULT_MAX_SIDE,
    MODES,
    MORE_KEY_MODES,
    CaseParams,
    ConfigChoices,
    FuzzCase,
    alpha_patterns_for,
    config_choices,
    ratio_long_side,
    special_sides,
    threshold_sizes,
    tiny_sizes,
    vary_config,
)
from kimi_oracle.inputs.requests import draw_request
from kimi_oracle.inputs.sizes import PHOTO_SIZES, photo_kinds, same_plan_sizes

T = TypeVar("T")

# Modes whose resize path is special (premultiplied, NEAREST, own-domain) are drawn more often.
MODE_WEIGHTS = {"RGB": 2, "RGBA": 4, "LA": 2, "P": 4, "1": 2, "CMYK": 2, "I;16": 2}

# Sides that cross a kernel's tiles: around 256, 512, 1024 and 2048 pixels (each ±1). A share of
# the examples (`FuzzOptions.tile_share`) draws one image with both sides from this list.
TILE_BASES = (256, 512, 1024, 2048)
TILE_SIDES = tuple(s + d for s in TILE_BASES for d in (-1, 0, 1))

# The size classes in drawing order, the smallest first (hypothesis lowers a branch index, never
# raises it: a failure that a 1x1 image shows shrinks to one): medium sizes (both sides at least
# one patch) are listed three times, so that they get three draws in eight (they are the ones
# that resample).
SIZE_CLASS_ORDER = ("tiny", "medium", "medium", "medium", "any", "special", "special_by_any", "ratio",
                    "threshold")

SEED_MAX = 2**32 - 1


class Source(Protocol):
    """Where a draw's integers come from."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer in lo..hi (both included; lo <= hi)."""
        ...

    def sub(self, function: Callable[..., T], *args: Any) -> T:
        """`function(self, *args)`: a part of the draw (an image, a size, a config). It changes
        no value; hypothesis records it as a span, which its shrinker needs to delete, reorder
        and re-draw whole parts (an image of a batch, a size class's branch)."""
        ...


class _Plain:
    """`sub` for the sources that need no spans."""

    __slots__ = ()

    def sub(self, function: Callable[..., T], *args: Any) -> T:
        return function(self, *args)


class RandomSource(_Plain):
    """Seeded pseudo-random integers; `choices` lists every integer returned (except for lo == hi).

    `forced` values are returned (and recorded) first, in order: the fast loop forces the
    tile-crossing choice of an example by its index."""

    __slots__ = ("_rng", "_forced", "choices")

    def __init__(self, seed: int, forced: Sequence[int] = ()):
        self._rng = random.Random(seed)
        self._forced = list(reversed(forced))
        self.choices: list[int] = []

    def integer(self, lo: int, hi: int) -> int:
        if lo == hi:
            return lo
        if self._forced:
            value = self._forced.pop()
            if not lo <= value <= hi:
                raise ValueError(f"forced choice {value} is outside {lo}..{hi}")
        else:
            value = lo + self._rng.randrange(hi - lo + 1)
        self.choices.append(value)
        return value


class ChoiceSource(_Plain):
    """Replays a recorded choice list (a saved failure); `ReplayError` when it does not fit."""

    __slots__ = ("_choices", "_at")

    def __init__(self, choices: Sequence[int]):
        self._choices = list(choices)
        self._at = 0

    def integer(self, lo: int, hi: int) -> int:
        if lo == hi:
            return lo
        if self._at >= len(self._choices):
            raise ReplayError("the recorded choices ran out")
        value = self._choices[self._at]
        self._at += 1
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise ReplayError(f"recorded choice {value!r} is outside {lo}..{hi}")
        return value

    @property
    def exhausted(self) -> bool:
        """True when every recorded choice was used."""
        return self._at == len(self._choices)


class ReplayError(ValueError):
    """A recorded choice list does not describe a case of these drawing options."""


class ProviderSource(_Plain):
    """A fuzzed data provider (`atheris.FuzzedDataProvider` or `fuzzers.harnesses`' pure-Python
    twin) as a source: each integer is one `ConsumeIntInRange(lo, hi)`, so the atheris harness
    draws the case that `ChoiceSource` draws from the same integers."""

    __slots__ = ("_fdp",)

    def __init__(self, fdp: Any):
        self._fdp = fdp

    def integer(self, lo: int, hi: int) -> int:
        if lo == hi:
            return lo  # ConsumeIntInRange(lo, lo) reads no byte either
        return int(self._fdp.ConsumeIntInRange(lo, hi))


# Integers a GeneratorSource takes from its generator at a time, and their range (2**62: the
# modulo bias for any range a draw uses, at most 2**32 values, is below 2**-30).
_BLOCK = 4096
_RAW = 1 << 62


class GeneratorSource(_Plain):
    """A NumPy `Generator` as a source (the planner fuzz's): integers are taken from it in
    blocks, and each `integer(lo, hi)` is lo + the next one modulo the range's size."""

    __slots__ = ("_rng", "_buffer")

    def __init__(self, rng: Any):
        self._rng = rng
        self._buffer: list[int] = []

    def integer(self, lo: int, hi: int) -> int:
        if lo == hi:
            return lo
        if hi - lo >= _RAW:
            raise ValueError(f"range {lo}..{hi} is too wide for a GeneratorSource")
        if not self._buffer:
            self._buffer = self._rng.integers(0, _RAW, size=_BLOCK).tolist()
        return lo + self._buffer.pop() % (hi - lo + 1)


def derive(seed: int, index: int) -> int:
    """The seed of example `index` of a run seeded `seed` (distinct for every pair)."""
    return (int(seed) << 40) ^ int(index)


def choice(source: Source, options: Sequence[T]) -> T:
    """One of `options`, the first being the simplest."""
    return options[source.integer(0, len(options) - 1)]


# ---------------------------------------------------------------------------------------------
# sizes


@functools.lru_cache(maxsize=64)
def _side_lists(max_side: int) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...], int]:
    return special_sides(max_side), tuple(tiny_sizes()), ratio_long_side(max_side)


def _medium(source: Source, max_side: int) -> tuple[int, int]:
    lo = min(14, max_side)
    return source.integer(lo, max_side), source.integer(lo, max_side)


def _any(source: Source, max_side: int) -> tuple[int, int]:
    return source.integer(1, max_side), source.integer(1, max_side)


def _tiny(source: Source, max_side: int) -> tuple[int, int]:
    return choice(source, _side_lists(max_side)[1])


def _special(source: Source, max_side: int) -> tuple[int, int]:
    special = _side_lists(max_side)[0]
    return choice(source, special), choice(source, special)


def _special_by_any(source: Source, max_side: int) -> tuple[int, int]:
    return choice(source, _side_lists(max_side)[0]), source.integer(1, max_side)


def _ratio_long(source: Source, short: int, long_side: int) -> tuple[int, int]:
    return source.integer(100 * short, max(100 * short, long_side)), short


def _ratio(source: Source, max_side: int) -> tuple[int, int]:
    short = source.integer(1, 2)
    wh = source.sub(_ratio_long, short, _side_lists(max_side)[2])
    return source.sub(choice, (wh, (wh[1], wh[0])))


_SIZE_BRANCHES: dict[str, Callable[[Source, int], tuple[int, int]]] = {
    "medium": _medium, "any": _any, "tiny": _tiny, "special": _special, "special_by_any": _special_by_any,
    "ratio": _ratio,
}


def _size(source: Source, thresholds: Sequence[tuple[int, int]], max_side: int) -> tuple[int, int]:
    klass = SIZE_CLASS_ORDER[source.integer(0, len(SIZE_CLASS_ORDER) - (1 if thresholds else 2))]
    if klass == "threshold":
        return source.sub(choice, thresholds)
    return source.sub(_SIZE_BRANCHES[klass], max_side)


def draw_size(source: Source, thresholds: Sequence[tuple[int, int]], max_side: int = DEFAULT_MAX_SIDE
              ) -> tuple[int, int]:
    """(width, height) from one of the size classes (`SIZE_CLASS_ORDER`); sides <= max_side except
    for the >100:1 ratio class, whose long side reaches ~4x max_side; the config's threshold sizes
    are a class of their own when there are any."""
    return source.sub(_size, thresholds, max_side)


_THRESHOLDS: dict[tuple, tuple[tuple[int, int], ...]] = {}


def _thresholds_key(config: PreprocessConfig, max_side: int) -> tuple:
    # What threshold sizes depend on: the plan's fields and whether the config is the k3 profile.
    return (config.patch_size, config.merge_kernel_size, config.in_patch_limit, config.patch_limit_on_one_side,
            config.fixed_output_tokens, config.name == "k3", max_side)


def config_thresholds(config: PreprocessConfig, max_side: int) -> tuple[tuple[int, int], ...]:
    """`generators.threshold_sizes`, cached by what those sizes depend on (the plan's fields and
    whether the config is the k3 profile), not by the whole config: drawn configurations differ
    in backgrounds and stages that leave the thresholds alone, and recomputing them (a walk over
    hundreds of plans) once cost more than judging the example."""
    key = _thresholds_key(config, max_side)
    sizes = _THRESHOLDS.get(key)
    if sizes is None:
        if len(_THRESHOLDS) > 4096:
            _THRESHOLDS.clear()
        sizes = _THRESHOLDS[key] = threshold_sizes(config, max_side)
    return sizes


class LazyThresholds(Sequence[tuple[int, int]]):
    """`config_thresholds(config, max_side)`, computed when a size is first taken from it.

    A draw needs the sizes only when it draws the "threshold" size class (one image in nine);
    before that it needs only to know that there are some, and `threshold_sizes` never returns
    none: `bool()` is True without computing them. Equal (and hashed) by what the sizes depend
    on, so that hypothesis' per-argument strategy caches (`inputs.strategies`) still hit."""

    __slots__ = ("_config", "_max_side", "_key", "_sizes")

    def __init__(self, config: PreprocessConfig, max_side: int):
        self._config = config
        self._max_side = max_side
        self._key = _thresholds_key(config, max_side)
        self._sizes: tuple[tuple[int, int], ...] | None = None

    def _get(self) -> tuple[tuple[int, int], ...]:
        if self._sizes is None:
            self._sizes = config_thresholds(self._config, self._max_side)
        return self._sizes

    def __bool__(self) -> bool:
        return True  # generators.threshold_sizes falls back to 1x1: never empty

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, index):  # type: ignore[override]
        return self._get()[index]

    def __iter__(self):
        return iter(self._get())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyThresholds):
            return self._key == other._key
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"LazyThresholds({self._key!r})"


def draw_tile_size(source: Source) -> tuple[int, int]:
    """Both sides around a kernel tile size (`TILE_SIDES`)."""
    return choice(source, TILE_SIDES), choice(source, TILE_SIDES)


# ---------------------------------------------------------------------------------------------
# one image


@dataclasses.dataclass(frozen=True)
class ImageChoices:
    """The lists an image's parameters are drawn from (simplest first), built once per options."""

    modes: tuple[str, ...]  # weighted: a mode appears MODE_WEIGHTS times
    patterns: tuple[str, ...]
    contents: tuple[str, ...]
    squares: tuple[int, ...]  # the config's chessboard square first


@functools.lru_cache(maxsize=256)
def image_choices(modes: tuple[str, ...], alpha_patterns: tuple[str, ...] | None, contents: tuple[str, ...],
                  base_square: int) -> ImageChoices:
    """The choice lists for these drawing options and chessboard square."""
    weighted = tuple(m for m in modes for _ in range(MODE_WEIGHTS.get(m, 1)))
    patterns = tuple(a for a in ALPHA_PATTERNS if alpha_patterns is None or a in alpha_patterns) or ("opaque",)
    squares = tuple(sorted({base_square, *CHECKER_SQUARES}, key=lambda s: (s != base_square, s)))
    return ImageChoices(weighted, patterns, tuple(contents), squares)


def draw_image(source: Source, size: tuple[int, int], choices: ImageChoices, *, request: bool = True) -> CaseParams:
    """An image's parameters for a drawn size (`draw_case_params` draws both); without `request`
    an image built in memory (no container, EXIF, ICC or animation is drawn)."""
    return source.sub(_image, size, choices, request)


def draw_case_params(source: Source, thresholds: Sequence[tuple[int, int]], max_side: int,
                     choices: ImageChoices) -> CaseParams:
    """One image: a size (`draw_size`), then its mode, alpha pattern, content, seed and square."""
    return source.sub(_case_params, thresholds, max_side, choices)


def _case_params(source: Source, thresholds: Sequence[tuple[int, int]], max_side: int,
                 choices: ImageChoices) -> CaseParams:
    return _image(source, draw_size(source, thresholds, max_side), choices)


def _image(source: Source, size: tuple[int, int], choices: ImageChoices, request: bool = True) -> CaseParams:
    """An image's mode, alpha pattern, content, seed and checker square for a drawn size.

    The same draws for every mode (an inexpressible pattern falls back to opaque), so that
    shrinking prefers the first mode (RGB) instead of modes with fewer alpha choices."""
    mode = choice(source, choices.modes)
    alpha = choice(source, choices.patterns)
    if alpha not in alpha_patterns_for(mode) and not (alpha == "key" and mode in MORE_KEY_MODES):
        alpha = "opaque"
    content = choice(source, choices.contents)
    seed = source.integer(0, SEED_MAX)
    square = choice(source, choices.squares)
    if not alpha.startswith("checker"):
        square = 8
    # What the request carries (a file, EXIF orientation, ICC, an animation, DPI): inputs.requests.
    drawn = draw_request(lambda options: choice(source, options), mode, alpha) if request else {}
    return CaseParams(size[0], size[1], mode, alpha, content, seed, square, **drawn)


def _base_square(config: PreprocessConfig) -> int:
    bg = config.transparent_bg_config
    return bg.chessboard_square_size if bg is not None else 8


# ---------------------------------------------------------------------------------------------
# configurations


def draw_config(source: Source, base: PreprocessConfig, vary: bool = True) -> PreprocessConfig:
    """A variation around `base` (`_config`), as one part of the draw."""
    if not vary:
        return base
    return source.sub(_config, base)


def _limit(source: Source, lists: tuple[tuple[int, ...], ...]) -> int:
    return source.sub(choice, lists[source.integer(0, len(lists) - 1)])


def draw_limit(source: Source, c: ConfigChoices) -> int:
    """A patch budget from `c`, two thirds of them at most 16 patches (the small-budget weighting)."""
    return source.sub(_limit, (c.tiny_limits, c.tiny_limits[1:], c.other_limits))


def _config(source: Source, base: PreprocessConfig) -> PreprocessConfig:
    """A variation around `base`: budget, side cap (multiples of every drawn merge size) and, when
    `base` has a background, pattern, chessboard square, phase, colours and fill stage; one case in
    four also draws the patch size, merge size, fixed token count and mean/std (base's first).

    Two thirds of the budgets are at most 16 patches (most of them below 9), so that images of a
    few dozen pixels resample; the base's fill stage gets half of the stage draws."""
    c = config_choices(base)
    changes: dict = {
        "in_patch_limit": draw_limit(source, c),
        "patch_limit_on_one_side": source.sub(choice, c.caps),
    }
    if base.transparent_bg_config is not None:
        pattern = source.sub(choice, c.patterns)
        background: dict = {"pattern": pattern}
        if pattern == "chessboard":
            background["chessboard_square_size"] = source.sub(choice, c.squares)
            background["chessboard_square_on_top_left"] = source.sub(choice, c.top_left)
            white, gray = source.sub(choice, c.chess_values)
            background["chessboard_white_value"] = white
            background["chessboard_gray_value"] = gray
        changes["background"] = background
        changes["transparent_bg_fill_stage"] = source.sub(choice, c.stages[:1] + c.stages)
    if source.integer(0, 3) == 3:
        # One case in four also varies what a kernel could hard-code (generators.PATCH_SIZES, ...).
        changes["patch_size"] = source.sub(choice, c.patch_sizes)
        changes["merge_kernel_size"] = source.sub(choice, c.merge_sizes)
        changes["fixed_output_tokens"] = source.sub(choice, c.fixed_tokens)
        changes["image_mean"], changes["image_std"] = source.sub(choice, c.norms)
    return vary_config(base, **changes)


# ---------------------------------------------------------------------------------------------
# a case


@dataclasses.dataclass(frozen=True)
class DrawOptions:
    """What a case is drawn from (hashable: one set of lists per options)."""

    vary_config: bool = True
    max_images: int = 3
    max_side: int = DEFAULT_MAX_SIDE
    modes: tuple[str, ...] = MODES
    alpha_patterns: tuple[str, ...] | None = None
    contents: tuple[str, ...] = CONTENTS
    tiles: bool = False  # a leading choice says whether the case is a tile-crossing one
    photos: bool = False  # ... or (its third value) a real-photo one (sizes.PHOTO_SIZES)

    def __post_init__(self) -> None:
        object.__setattr__(self, "modes", tuple(self.modes))
        object.__setattr__(self, "contents", tuple(self.contents))
        if self.alpha_patterns is not None:
            object.__setattr__(self, "alpha_patterns", tuple(self.alpha_patterns))


# The forced-resample choice: no, yes, yes (two thirds of the varied cases force it).
_FORCE_RESAMPLE = (False, True, True)


def draw_fuzz_case(source: Source, base: PreprocessConfig, options: DrawOptions = DrawOptions()) -> FuzzCase:
    """A configuration around `base` and a batch of 1..max_images images drawn for it.

    With `options.tiles` the first choice says whether the case is a tile-crossing one (1: one
    image with both sides in `TILE_SIDES`, the drawn config, or with a second choice of 1, the
    base's budget and side cap, so that the output is large too). The fast loop forces that
    choice by example index (`RandomSource(..., forced=(1,))`), so that the share is exact.
    """
    kind = source.integer(0, 2) if options.photos else source.integer(0, 1) if options.tiles else 0
    if kind == 2:
        return _photo_case(source, base, options)
    config = draw_config(source, base, options.vary_config)
    if kind == 1:
        if source.integer(0, 1) == 1:
            config = dataclasses.replace(config, in_patch_limit=base.in_patch_limit,
                                         patch_limit_on_one_side=base.patch_limit_on_one_side)
        choices = image_choices(options.modes, options.alpha_patterns, options.contents, _base_square(config))
        # Built in memory: what it crosses is the kernel's tiles. Encoding a 4-Mpx noise frame
        # as a request's file costs hundreds of ordinary examples' worth (docs/measurements.md);
        # the request containers are drawn at the ordinary sizes.
        return FuzzCase(config, (draw_image(source, draw_tile_size(source), choices, request=False),))
    count = source.integer(1, max(1, options.max_images))
    thresholds = LazyThresholds(config, options.max_side)
    choices = image_choices(options.modes, options.alpha_patterns, options.contents, _base_square(config))
    images = [draw_case_params(source, thresholds, options.max_side, choices)]
    if options.vary_config and choice(source, _FORCE_RESAMPLE):
        # Force the first image to resample: a budget just below its floored patch count.
        first = images[0]
        patches = max(1, first.width // config.patch_size) * max(1, first.height // config.patch_size)
        if patches >= 2:
            config = dataclasses.replace(config, in_patch_limit=source.integer(1, patches - 1))
    for _ in range(1, count):
        images.append(source.sub(_batch_image, tuple(images), config, thresholds, options.max_side, choices))
    return FuzzCase(config, tuple(images))


# A later image of a batch: drawn on its own, or given the target size of an earlier one (a
# different source: its own mode, alpha, content and seed; the same size, or a nearby source
# size that the plan resizes to the same target). Engines group a call's images by target size
# (SGLang stacks each group into one tensor), so their batch-only code is reached often.
_SHARED_PLAN = ("own", "same-size", "same-plan")


def _batch_image(source: Source, earlier: tuple[CaseParams, ...], config: PreprocessConfig,
                 thresholds: Sequence[tuple[int, int]], max_side: int, choices: ImageChoices) -> CaseParams:
    how = choice(source, _SHARED_PLAN)
    if how == "own":
        return _case_params(source, thresholds, max_side, choices)
    like = earlier[source.integer(0, len(earlier) - 1)]
    size = (like.width, like.height)
    if how == "same-plan":
        size = choice(source, same_plan_sizes(size, config, max_side))
    return _image(source, size, choices)


def _photo_case(source: Source, base: PreprocessConfig, options: DrawOptions) -> FuzzCase:
    """A real-photo case (kind 2): the base config and one image of a PHOTO_SIZES size, its mode
    and transparency from `sizes.PHOTO_KINDS` (the fast loop forces both by the example's slot:
    `sizes.photo_forced`), built in memory like the tile-crossing ones."""
    mode, alpha = choice(source, photo_kinds(options.modes))
    width, height = choice(source, PHOTO_SIZES)
    content = choice(source, options.contents)
    return FuzzCase(base, (CaseParams(width, height, mode, alpha, content, source.integer(0, SEED_MAX), 8),))


def is_tile_example(index: int, share: float) -> bool:
    """Whether example `index` (0-based) of a run is a tile-crossing one: exactly
    floor(n * share) of the first n examples are, evenly spread."""
    if share <= 0:
        return False
    share = min(float(share), 1.0)
    return int((index + 1) * share) > int(index * share)


__all__ = [
    "ChoiceSource",
    "DrawOptions",
    "GeneratorSource",
    "ImageChoices",
    "MODE_WEIGHTS",
    "ProviderSource",
    "RandomSource",
    "ReplayError",
    "SIZE_CLASS_ORDER",
    "Source",
    "TILE_BASES",
    "TILE_SIDES",
    "choice",
    "derive",
    "draw_case_params",
    "draw_config",
    "draw_fuzz_case",
    "draw_image",
    "draw_limit",
    "draw_size",
    "draw_tile_size",
    "config_thresholds",
    "LazyThresholds",
    "image_choices",
    "is_tile_example",
]
