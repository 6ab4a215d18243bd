"""Deterministic, seed-driven test inputs: image parameters, sizes, modes, alpha, configs.

Everything that feeds the oracle (hypothesis strategies, atheris harnesses, golden catalogue,
benchmarks) builds its inputs here, so a size class or an alpha pattern is defined once.
Images are described by a small frozen `CaseParams` record; `make_image(params)` turns it into
the same PIL image on every machine (NumPy's PCG64 streams are stable across platforms).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple

import numpy as np
from PIL import Image

from kimi_oracle.core.config import FILL_STAGES, PATTERNS, PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.images import PNG_MODES, open_encoded
from kimi_oracle.inputs.requests import check_request, encode

# Bumped whenever make_image or a size builder changes its output for existing parameters
# (golden files record it so a generator change is never mistaken for a pipeline change).
GENERATOR_VERSION = 1

COMMON_MODES = ("RGB", "RGBA", "LA", "L", "P", "1", "CMYK", "I;16")
RARE_MODES = ("I;16B", "I", "F", "LAB", "PA", "YCbCr")
MODES = COMMON_MODES + RARE_MODES
# Modes that carry an alpha band.
ALPHA_BAND_MODES = ("RGBA", "LA", "PA")
# PNG_MODES (from core.images): modes whose files PNG stores losslessly; the rest go to TIFF.

# "key" is colour-key transparency (`info["transparency"]`, PNG tRNS on L/RGB/P images).
ALPHA_PATTERNS = (
    "opaque",
    "transparent",
    "checker",
    "checker_shifted",
    "gradient",
    "single_pixel",
    "random",
    "key",
)
CONTENTS = ("flat", "noise", "gradient", "edges")

# in_patch_limit values small enough that test-sized images are resampled.
SMALL_PATCH_LIMITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 100, 256, 1024)
# Largest side the fuzzers draw by default (ratio sizes reach about four times that).
DEFAULT_MAX_SIDE = 64
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


# Modes whose files (PNG tRNS) also carry a transparency key, besides L, RGB and P. Not in
# `alpha_patterns_for` (the golden catalogue enumerates it): the fuzzers draw them (inputs.draw).
MORE_KEY_MODES = ("1", "I;16")


def key_modes() -> tuple[str, ...]:
    """Every mode a `transparency` key is drawn for."""
    return tuple(m for m in MODES if "key" in alpha_patterns_for(m)) + MORE_KEY_MODES


def alpha_patterns_for(mode: str) -> tuple[str, ...]:
    """The alpha patterns `make_image` can express in `mode` ("opaque" for every mode)."""
    if mode in ALPHA_BAND_MODES:
        return tuple(a for a in ALPHA_PATTERNS if a != "key")
    if mode == "P":
        return ALPHA_PATTERNS
    if mode in ("L", "RGB"):
        return ("opaque", "key")
    return ("opaque",)


@dataclass(frozen=True)
class CaseParams:
    """Everything `make_image` needs: size, mode, alpha pattern, content, seed, checker square,
    and what a request carries (inputs.requests): the container the image is encoded in, its
    EXIF orientation, ICC profile, frames, disposal mode and DPI. With a container, the image
    is the file as Pillow opens it."""

    width: int
    height: int
    mode: str = "RGB"
    alpha: str = "opaque"
    content: str = "noise"
    seed: int = 0
    square: int = 8  # edge of the alpha checkerboard's squares, in source pixels
    container: str = ""  # "": an image built in memory; else a name of inputs.requests.CONTAINERS
    orientation: int = 0  # EXIF Orientation 1..8; 0: no EXIF
    icc: str = ""  # an ICC profile name (inputs.requests.ICC_PROFILES); "": none
    frames: int = 1  # > 1: an animation (frame 1 is smaller than the canvas)
    disposal: int = 0  # the animation's disposal mode
    dpi: int = 0  # 0: no DPI stored

    def __post_init__(self) -> None:
        for key in ("width", "height", "seed", "square", "orientation", "frames", "disposal", "dpi"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"CaseParams.{key} must be an integer, got {value!r}")
            object.__setattr__(self, key, int(value))
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"CaseParams size must be positive, got {self.width}x{self.height}")
        if self.seed < 0:
            raise ValueError(f"CaseParams.seed must be >= 0, got {self.seed}")
        if self.square <= 0:
            raise ValueError(f"CaseParams.square must be positive, got {self.square}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {', '.join(MODES)}")
        if self.content not in CONTENTS:
            raise ValueError(f"unknown content {self.content!r}; expected one of {', '.join(CONTENTS)}")
        if self.alpha not in alpha_patterns_for(self.mode) and not (self.alpha == "key" and self.mode in MORE_KEY_MODES):
            raise ValueError(
                f"alpha pattern {self.alpha!r} is not expressible in mode {self.mode!r}; "
                f"expected one of {', '.join(alpha_patterns_for(self.mode))}"
            )
        check_request(self.mode, self.container, self.orientation, self.icc, self.frames, self.disposal, self.dpi,
                      self.alpha)

    @property
    def request(self) -> dict[str, Any]:
        """The request fields that differ from an in-memory image (empty for one)."""
        return {k: getattr(self, k) for k, v in _REQUEST_DEFAULTS.items() if getattr(self, k) != v}

    @property
    def size(self) -> tuple[int, int]:
        """(width, height), as PIL's `.size`."""
        return self.width, self.height

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; `CaseParams.from_dict(p.to_dict()) == p`. Request fields appear only
        when set, so an in-memory image's dict is what it was before they existed."""
        out = dataclasses.asdict(self)
        for key, default in _REQUEST_DEFAULTS.items():
            if out[key] == default:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CaseParams":
        """Inverse of `to_dict`; unknown keys are an error, missing optional keys take defaults."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"CaseParams: unknown key {unknown[0]!r}")
        return cls(**dict(data))

    def describe(self) -> str:
        """A short human label, e.g. `37x5 RGBA checker/noise seed 3`."""
        alpha = "" if self.alpha == "opaque" else f" {self.alpha}"
        label = f"{self.width}x{self.height} {self.mode}{alpha} {self.content} seed {self.seed}"
        if self.container:
            extra = [self.container]
            if self.orientation:
                extra.append(f"orientation {self.orientation}")
            if self.frames > 1:
                extra.append(f"{self.frames} frames disposal {self.disposal}")
            if self.icc:
                extra.append(f"icc {self.icc}")
            if self.dpi:
                extra.append(f"dpi {self.dpi}")
            label += " (" + ", ".join(extra) + ")"
        return label


_REQUEST_DEFAULTS = {"container": "", "orientation": 0, "icc": "", "frames": 1, "disposal": 0, "dpi": 0}


# ---------------------------------------------------------------------------------------------
# images


def _rng(seed: int, stream: int) -> np.random.Generator:
    # Separate streams, so that shrinking the mode or alpha keeps the colour content unchanged.
    seed, stream = int(seed), int(stream)
    if 0 <= seed < 2**32 and 0 <= stream < 2**32:
        # The entropy of the list [seed, stream] (an int below 2**32 is one uint32 word), given
        # as that uint32 array: NumPy seeds the same state and skips converting each int.
        return np.random.default_rng(np.array([seed, stream], dtype=np.uint32))
    return np.random.default_rng([seed, stream])


def content_array(params: CaseParams) -> np.ndarray:
    """The uint8 (h, w, 3) colour content the image's bands are derived from."""
    w, h = params.width, params.height
    rng = _rng(params.seed, 0)
    if params.content == "flat":
        out = np.empty((h, w, 3), dtype=np.uint8)
        out[...] = rng.integers(0, 256, 3, dtype=np.uint8)
        return out
    if params.content == "noise":
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    xs = np.arange(w, dtype=np.float64)[None, :]
    ys = np.arange(h, dtype=np.float64)[:, None]
    if params.content == "gradient":
        gx = np.rint(255.0 * xs / max(w - 1, 1))  # (1, w): the same ramp on every row
        gy = np.rint(255.0 * ys / max(h - 1, 1))  # (h, 1)
        flip = rng.integers(0, 2, 3)  # channels turned into 255 - value
        out = np.empty((h, w, 3), dtype=np.uint8)  # whole numbers 0..255: cast exactly
        for c, ramp in enumerate((gx, gy, np.floor((gx + gy) / 2.0))):
            out[..., c] = 255.0 - ramp if flip[c] else ramp
        return out
    # edges: stripes of extreme colours with random widths in both directions, which drives
    # bicubic overshoot into both clamps.
    first = rng.integers(0, 2, 3, dtype=np.uint8) * 255  # each channel 0 or 255; the other stripes 255 - first
    col_bounds = np.cumsum(rng.integers(1, 6, w + 1))
    row_bounds = np.cumsum(rng.integers(1, 6, h + 1))
    col_stripe = np.searchsorted(col_bounds, np.arange(w), side="right")
    row_stripe = np.searchsorted(row_bounds, np.arange(h), side="right")
    # 255 where the stripe parity is odd: XOR with 255 turns a 0/255 channel into its opposite.
    odd = (((row_stripe[:, None] ^ col_stripe[None, :]) & 1) * 255).astype(np.uint8)
    return odd[..., None] ^ first


def alpha_array(params: CaseParams) -> np.ndarray:
    """The uint8 (h, w) alpha of the pattern ("key" and "opaque" give all 255)."""
    w, h = params.width, params.height
    pattern = params.alpha
    if pattern in ("opaque", "key"):
        return np.full((h, w), 255, dtype=np.uint8)
    if pattern == "transparent":
        return np.zeros((h, w), dtype=np.uint8)
    ys = np.arange(h)[:, None]
    xs = np.arange(w)[None, :]
    if pattern in ("checker", "checker_shifted"):
        s = params.square
        shift = max(1, s // 2) if pattern == "checker_shifted" else 0
        # Opaque where the checkpoint's chessboard (on_top_left=True) is white.
        parity = (((ys + shift) // s + (xs + shift) // s) % 2) == 0
        return np.where(parity, 255, 0).astype(np.uint8)
    if pattern == "gradient":
        ramp = np.rint(255.0 * (xs + ys) / max(w + h - 2, 1))
        return np.broadcast_to(ramp, (h, w)).astype(np.uint8)
    rng = _rng(params.seed, 1)  # (built only for the patterns that draw from it)
    if pattern == "single_pixel":
        out = np.zeros((h, w), dtype=np.uint8)
        out[int(rng.integers(0, h)), int(rng.integers(0, w))] = 255
        return out
    return rng.integers(0, 256, (h, w), dtype=np.uint8)  # random


def _palette(params: CaseParams) -> bytes:
    return _rng(params.seed, 2).integers(0, 256, 768, dtype=np.uint8).tobytes()


def make_image(params: CaseParams) -> Image.Image:
    """The PIL image described by `params`; identical bytes, palette and info on every call.

    With a container, the image Pillow opens from the encoded file (frame 0 loaded; the file
    bytes travel with it, `core.images.encoded_bytes`)."""
    if not params.container:
        return _memory_image(params)
    # The frames are built from what `_memory_image` reads (no request fields).
    frames = [_memory_image(params)]
    for k in range(1, params.frames):
        # Frame k: other content; odd frames smaller than the canvas (placed at the top left).
        w, h = params.width, params.height
        if k % 2:
            w, h = max(1, w - w // 3), max(1, h - h // 3)
        frames.append(_memory_image(_Look(w, h, params.mode, params.alpha, params.content,
                                          (params.seed * 31 + k) % 2**32, params.square)))
    data = encode(frames, params.container, orientation=params.orientation, icc=params.icc,
                  disposal=params.disposal, dpi=params.dpi)
    return open_encoded(data, max_pixels=0, name=params.describe())


def _with_band(bands: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """uint8 (h, w, n + 1): `bands` ((h, w, n) or (h, w)) and then `extra` (h, w), as np.dstack."""
    if bands.ndim == 2:
        bands = bands[..., None]
    out = np.empty(bands.shape[:2] + (bands.shape[2] + 1,), dtype=np.uint8)
    out[..., :-1] = bands
    out[..., -1] = extra
    return out


# A palette image's per-entry alpha: 16 levels, by the low four bits of the index.
_P_ALPHA_LEVELS = bytes((i & 15) * 17 for i in range(256))


class _Look(NamedTuple):
    """What `_memory_image` reads of a `CaseParams` (an animation's later frames)."""

    width: int
    height: int
    mode: str
    alpha: str
    content: str
    seed: int
    square: int

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


# The modes whose pixels use the alpha pattern's array (P: unless opaque or keyed).
_ALPHA_ARRAY_MODES = frozenset({"RGBA", "LA", "PA", "P"})


def _memory_image(params: "CaseParams | _Look") -> Image.Image:
    mode = params.mode
    size = params.size
    rgb = content_array(params)  # type: ignore[arg-type]
    if mode in _ALPHA_ARRAY_MODES and not (mode == "P" and params.alpha in ("opaque", "key")):
        alpha = alpha_array(params)  # type: ignore[arg-type]
    lum = np.ascontiguousarray(rgb[..., 0])
    if mode == "RGB":
        img = Image.frombytes("RGB", size, rgb.tobytes())
        if params.alpha == "key":
            img.info["transparency"] = tuple(int(v) for v in rgb[0, 0])
        return img
    if mode == "RGBA":
        return Image.frombytes("RGBA", size, _with_band(rgb, alpha).tobytes())
    if mode == "L":
        img = Image.frombytes("L", size, lum.tobytes())
        if params.alpha == "key":
            img.info["transparency"] = int(lum[0, 0])
        return img
    if mode == "LA":
        return Image.frombytes("LA", size, _with_band(lum, alpha).tobytes())
    if mode == "1":
        img = Image.frombytes("L", size, np.where(lum > 127, 255, 0).astype(np.uint8).tobytes()).convert(
            "1", dither=Image.Dither.NONE
        )
        if params.alpha == "key":
            img.info["transparency"] = 255 if lum[0, 0] > 127 else 0
        return img
    if mode == "P":
        if params.alpha in ("opaque", "key"):
            index = lum
        else:
            # 16 colours x 16 alpha levels; binary patterns keep exact 0 / 255 alpha.
            index = ((lum >> 4) << 4) | (alpha >> 4)
        img = Image.frombytes("P", size, np.ascontiguousarray(index).tobytes())
        img.putpalette(_palette(params), rawmode="RGB")
        if params.alpha == "key":
            img.info["transparency"] = int(index[0, 0])
        elif params.alpha != "opaque":
            img.info["transparency"] = _P_ALPHA_LEVELS
        return img
    if mode == "PA":
        img = Image.frombytes("PA", size, _with_band(lum, alpha).tobytes())
        img.putpalette(_palette(params), rawmode="RGB")
        return img
    if mode == "CMYK":
        brightest = np.maximum(np.maximum(rgb[..., 0], rgb[..., 1]), rgb[..., 2])
        return Image.frombytes("CMYK", size, _with_band(rgb, (255 - brightest) // 2).tobytes())
    if mode in ("I;16", "I;16B"):
        # 0..382: half the values survive the clip to 0..255 of the RGB conversion.
        values = (lum.astype(np.uint32) * 3 // 2).astype(np.uint16)
        dtype = "<u2" if mode == "I;16" else ">u2"
        img = Image.frombytes(mode, size, values.astype(dtype).tobytes())
        if params.alpha == "key":
            img.info["transparency"] = int(values[0, 0])
        return img
    if mode == "I":
        values = lum.astype(np.int32) * 2 - 128  # -128..382: both clips of the conversion
        return Image.frombytes("I", size, values.astype("<i4").tobytes())
    if mode == "F":
        frac = rgb[..., 1].astype(np.float32) / 256.0
        values = lum.astype(np.float32) * np.float32(1.5) - np.float32(64.0) + frac
        return Image.frombytes("F", size, values.astype("<f4").tobytes())
    if mode in ("LAB", "YCbCr"):
        return Image.frombytes(mode, size, rgb.tobytes())
    raise ValueError(f"unknown mode {mode!r}")  # pragma: no cover - CaseParams validates


def images_equal(a: Image.Image, b: Image.Image) -> bool:
    """Same mode, size, bytes, palette and transparency (what decides the checkpoint's output)."""
    if a.mode != b.mode or a.size != b.size or a.tobytes() != b.tobytes():
        return False
    if a.mode in ("P", "PA") and a.getpalette() != b.getpalette():
        return False
    return _transparency(a) == _transparency(b)


def _transparency(img: Image.Image) -> Any:
    value = img.info.get("transparency")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).rstrip(b"\xff")  # PNG may trim trailing opaque entries
    return value


# ---------------------------------------------------------------------------------------------
# sizes


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


@dataclass(frozen=True)
class FuzzCase:
    """One differential-test case: a configuration and the batch of images it is run on."""

    config: PreprocessConfig
    images: tuple[CaseParams, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "images", tuple(self.images))
        if not self.images:
            raise ValueError("FuzzCase needs at least one image")

    def make_images(self) -> list[Image.Image]:
        """Fresh PIL images for the batch (a candidate may not alter the reference's inputs)."""
        return [make_image(p) for p in self.images]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the config as the checkpoint's dict, the images as `CaseParams` dicts."""
        return {
            "profile": self.config.name,
            "config": self.config.to_hf_json(),
            "images": [p.to_dict() for p in self.images],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FuzzCase":
        """Inverse of `to_dict`."""
        config = PreprocessConfig.from_hf_json(data["config"])
        config = dataclasses.replace(config, name=str(data.get("profile") or config.name))
        return cls(config, tuple(CaseParams.from_dict(p) for p in data["images"]))

    def describe(self) -> str:
        """A short human label of the batch and the config."""
        images = "; ".join(p.describe() for p in self.images)
        return f"[{images}] under {config_label(self.config)}"


# ---------------------------------------------------------------------------------------------
# configurations


def side_caps(config: PreprocessConfig, max_cap: int | None = None) -> list[int]:
    """Side caps that are multiples of the merge size (so the checkpoint's assert cannot fail)."""
    m = config.merge_kernel_size
    top = config.patch_limit_on_one_side if max_cap is None else max_cap
    caps = {m * k for k in (1, 2, 3, 4, 6, 8, 16, 32, 64, 128, 256)}
    caps.add(config.patch_limit_on_one_side)
    return sorted(c for c in caps if c <= max(top, m))


def vary_config(base: PreprocessConfig, **changes: Any) -> PreprocessConfig:
    """`base` with some fields replaced; `background={...}` updates the background's fields.

    Example: `vary_config(k3, in_patch_limit=16, background={"pattern": "white"})`.
    """
    bg_changes = changes.pop("background", None)
    if bg_changes:
        bg = base.transparent_bg_config or TransparentBgConfig()
        changes["transparent_bg_config"] = dataclasses.replace(bg, **bg_changes)
    if not changes:
        return base
    name = changes.pop("name", None) or (base.name if base.name.endswith("~var") else f"{base.name}~var")
    return dataclasses.replace(base, name=name, **changes)


def config_variants(base: PreprocessConfig) -> list[PreprocessConfig]:
    """A deterministic set of variations around `base` that make small images resample.

    Small budgets × (when `base` has a background) every pattern, both fill stages and a few
    chessboard squares; plus small side caps. Used by golden catalogues and smoke tests.
    """
    out: list[PreprocessConfig] = []
    for limit in (4, 16, 64):
        out.append(vary_config(base, in_patch_limit=limit))
    for cap in side_caps(base, max_cap=8):
        out.append(vary_config(base, in_patch_limit=1024, patch_limit_on_one_side=cap))
    if base.transparent_bg_config is not None:
        for pattern in PATTERNS:
            for stage in FILL_STAGES:
                out.append(vary_config(base, in_patch_limit=16, transparent_bg_fill_stage=stage,
                                       background={"pattern": pattern}))
        for square, top_left in ((1, True), (3, False), (5, True), (16, False)):
            out.append(vary_config(base, in_patch_limit=16, background={
                "pattern": "chessboard", "chessboard_square_size": square,
                "chessboard_square_on_top_left": top_left}))
    unique: list[PreprocessConfig] = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique


# ---------------------------------------------------------------------------------------------
# the fuzzers' input space: one definition for the hypothesis strategies and the atheris harness

# Chessboard squares and (white, grey) values the fuzzers vary the background with.
CHECKER_SQUARES = (1, 2, 3, 5, 8, 16)
CHESS_VALUES = ((255, 180), (255, 200), (240, 0), (0, 255))
# What a candidate could hard-code, varied within what the checkpoint's processor accepts (positive
# integer patch and merge sizes, a positive token count or null, finite non-zero stds); few,
# realistic values, the base's own put first by `config_choices`.
PATCH_SIZES = (14, 16, 8)
MERGE_SIZES = (2, 1)
FIXED_TOKENS = (None, 1, 64, 729)
NORMALIZATIONS = (
    ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # Kimi K2.5 / K3
    ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),  # CLIP
    ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # ImageNet
    ((0.0, 1.0, 0.25), (1.0, 0.1, 3.0)),  # odd but valid: every channel different, mean 0 and 1
)


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


@dataclass(frozen=True)
class ConfigChoices:
    """What the fuzzers vary a base configuration over, each list with the base's own value first
    (so both engines shrink towards the profile)."""

    tiny_limits: tuple[int, ...]      # budgets of at most 16 patches: small images resample
    other_limits: tuple[int, ...]     # larger budgets and the base's
    caps: tuple[int, ...]             # side caps, multiples of the merge size
    patterns: tuple[str, ...]         # empty when the base has no background
    squares: tuple[int, ...]
    top_left: tuple[bool, ...]
    chess_values: tuple[tuple[int, int], ...]
    stages: tuple[str | None, ...]    # the base's stage first
    # What a kernel could hard-code (`PATCH_SIZES`, ...), the base's value first; the caps above
    # are multiples of every merge size here, so a drawn merge never trips the side assert.
    patch_sizes: tuple[int, ...] = ()
    merge_sizes: tuple[int, ...] = ()
    fixed_tokens: tuple[int | None, ...] = ()
    norms: tuple[tuple[tuple[float, float, float], tuple[float, float, float]], ...] = ()

    @property
    def limits(self) -> tuple[int, ...]:
        """Every budget, the 16-patch one first."""
        return self.tiny_limits + self.other_limits


@functools.lru_cache(maxsize=64)
def config_choices(base: PreprocessConfig) -> ConfigChoices:
    """The choices `vary_config` is drawn from around `base`."""
    tiny = (16,) + tuple(v for v in SMALL_PATCH_LIMITS if v <= 16 and v != 16)
    other = tuple(v for v in SMALL_PATCH_LIMITS if v > 16) + (base.in_patch_limit,)
    shape = dict(
        patch_sizes=_base_first(base.patch_size, PATCH_SIZES),
        merge_sizes=_base_first(base.merge_kernel_size, MERGE_SIZES),
        fixed_tokens=_base_first(base.fixed_output_tokens, FIXED_TOKENS),
        norms=_base_first((base.image_mean, base.image_std), NORMALIZATIONS),
    )
    every_merge = vary_config(base, merge_kernel_size=math.lcm(*shape["merge_sizes"]))
    caps = (base.patch_limit_on_one_side,) + tuple(c for c in side_caps(every_merge, max_cap=16)
                                                   if c != base.patch_limit_on_one_side)
    bg = base.transparent_bg_config
    if bg is None:
        return ConfigChoices(tiny, other, caps, (), (), (), (), (base.transparent_bg_fill_stage,), **shape)
    base_values = (bg.chessboard_white_value, bg.chessboard_gray_value)
    return ConfigChoices(
        tiny, other, caps, **shape,
        patterns=(bg.pattern,) + tuple(p for p in PATTERNS if p != bg.pattern),
        squares=(bg.chessboard_square_size,) + tuple(q for q in CHECKER_SQUARES if q != bg.chessboard_square_size),
        top_left=(bg.chessboard_square_on_top_left, not bg.chessboard_square_on_top_left),
        chess_values=(base_values,) + tuple(v for v in CHESS_VALUES if v != base_values),
        stages=(base.transparent_bg_fill_stage,) + tuple(s for s in (*FILL_STAGES, None)
                                                         if s != base.transparent_bg_fill_stage),
    )


def _base_first(base: Any, values: tuple) -> tuple:
    return (base,) + tuple(v for v in values if v != base)


def config_label(config: PreprocessConfig) -> str:
    """A compact description of how a config differs from nothing (for reports and ids); patch,
    merge, fixed tokens and mean/std only when they differ from the Kimi profiles'."""
    bg = config.transparent_bg_config
    parts = [f"limit={config.in_patch_limit}", f"side={config.patch_limit_on_one_side}"]
    if (config.patch_size, config.merge_kernel_size) != (14, 2):
        parts.append(f"patch={config.patch_size} merge={config.merge_kernel_size}")
    if config.fixed_output_tokens is not None:
        parts.append(f"tokens={config.fixed_output_tokens}")
    if (config.image_mean, config.image_std) != NORMALIZATIONS[0]:
        parts.append(f"mean={list(config.image_mean)} std={list(config.image_std)}")
    if bg is not None:
        parts.append(f"bg={bg.pattern}")
        if bg.pattern == "chessboard":
            parts.append(f"sq={bg.chessboard_square_size}{'' if bg.chessboard_square_on_top_left else '!'}")
        parts.append(f"fill={config.fill_stage}")
    return " ".join(parts)


__all__ = [
    "CHECKER_SQUARES",
    "CHESS_VALUES",
    "ConfigChoices",
    "FIXED_TOKENS",
    "MERGE_SIZES",
    "NORMALIZATIONS",
    "PATCH_SIZES",
    "config_choices",
    "ratio_long_side",
    "special_sides",
    "threshold_sizes",
    "ALPHA_BAND_MODES",
    "ALPHA_PATTERNS",
    "COMMON_MODES",
    "CONTENTS",
    "CaseParams",
    "FuzzCase",
    "GENERATOR_VERSION",
    "MODES",
    "PNG_MODES",
    "RARE_MODES",
    "REAL_WORLD_SIZES",
    "SIZE_CLASSES",
    "SMALL_PATCH_LIMITS",
    "alpha_array",
    "alpha_patterns_for",
    "key_modes",
    "MORE_KEY_MODES",
    "budget_sizes",
    "config_label",
    "config_variants",
    "content_array",
    "images_equal",
    "make_image",
    "multiple_sides",
    "pass_order_sizes",
    "pow2_sides",
    "primes",
    "random_sizes",
    "ratio_sizes",
    "real_world_sizes",
    "side_cap_sizes",
    "side_caps",
    "size_catalogue",
    "tiny_sizes",
    "vary_config",
]
