"""Diagnosis: which step of the checkpoint's pipeline a candidate does differently.

The catalogue names the root causes of pixel differences. Each is one or more *variants* of
the reference: a step of `kimi_oracle.pipelines.reference.Steps` replaced by the way engines
commonly do it. `attribute` runs the reference with variants swapped in, greedily, keeping the
swap that brings its output closest to the candidate's, and reports the ids taken and the
difference left over. The rule is documented in docs/diagnosis.md.

Magnitudes are in levels: one level is one step of the 8-bit input (`checks.levels_of`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import io
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps

from kimi_oracle.core.config import FILL_STAGES, PreprocessConfig, TransparentBgConfig
from kimi_oracle.core.errors import CandidateError, KimiOracleError
from kimi_oracle.core.geometry import ResizePlan, plan
from kimi_oracle.core.levels import is_sub_level
from kimi_oracle.core.images import (ORIENTATION_TAG, ImageSource, call_copy, convert, encoded_bytes, has_alpha,
                                     load_images)
from kimi_oracle.core.result import PreprocessResult
from kimi_oracle.oracle.candidates import as_result
from kimi_oracle.oracle.checks import PIXEL_MISMATCH, levels_at, levels_of, update_digest
from kimi_oracle.pipelines.reference import (
    CHECKPOINT,
    PATTERN_VALUES,
    Steps,
    background,
    fill_conversion,
    pad_bottom_right,
)

UNEXPLAINED = "unexplained"
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


# ---------------------------------------------------------------------------------------------
# normalize-float: the normalization in float32, in another order or fused


@functools.lru_cache(maxsize=64)
def _float_lut(kind: str, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    x = torch.arange(256, dtype=torch.float32).repeat(3, 1)
    m = torch.tensor(mean, dtype=torch.float32).view(3, 1)
    s = torch.tensor(std, dtype=torch.float32).view(3, 1)
    scale = 1.0 / (255.0 * s)
    bias = -m / s
    if kind == "scale-bias":
        out = x * scale + bias
    elif kind == "fused":
        # addcmul / a fused multiply-add: one rounding of the exact x·scale + bias (a product of
        # two float32 is exact in float64). torch's CPU addcmul gives these values (measured).
        out = (x.double() * scale.double() + bias.double()).float()
    elif kind == "fused-float64-constants":
        # addcmul with scale and bias computed in float64 and stored as float32 (SGLang 0.5.23).
        scale = torch.tensor([1.0 / (255.0 * v) for v in std], dtype=torch.float32).view(3, 1)
        bias = torch.tensor([-a / v for a, v in zip(mean, std)], dtype=torch.float32).view(3, 1)
        out = (x.double() * scale.double() + bias.double()).float()
    elif kind == "divide":
        out = (x / 255.0 - m) / s
    else:  # "reciprocal"
        out = (x / 255.0 - m) * (1.0 / s)
    lut = np.ascontiguousarray(out.numpy())
    lut.setflags(write=False)
    return lut


def _normalize_in_float(kind: str) -> Callable[[PreprocessConfig], np.ndarray]:
    def normalize(config: PreprocessConfig) -> np.ndarray:
        return _float_lut(kind, tuple(config.image_mean), tuple(config.image_std))

    normalize.__name__ = f"normalize_{kind.replace('-', '_')}"
    return normalize


NORMALIZE_SCALE_BIAS = _normalize_in_float("scale-bias")
NORMALIZE_FUSED = _normalize_in_float("fused")
NORMALIZE_FUSED_FLOAT64_CONSTANTS = _normalize_in_float("fused-float64-constants")
NORMALIZE_DIVIDE = _normalize_in_float("divide")
NORMALIZE_RECIPROCAL = _normalize_in_float("reciprocal")


# ---------------------------------------------------------------------------------------------
# resample-float: 8-bit images resized in floating point


def _torch_bicubic(arr: np.ndarray, size: tuple[int, int], *, antialias: bool, rounding: str) -> np.ndarray:
    x = torch.from_numpy(np.array(arr.transpose(2, 0, 1), dtype=np.float32))[None]
    y = F.interpolate(x, size=(size[1], size[0]), mode="bicubic", align_corners=False, antialias=antialias)
    y = torch.round(y) if rounding == "round" else y
    return y.clamp(0, 255).to(torch.uint8)[0].permute(1, 2, 0).numpy()


def torch_bicubic_antialias(arr: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """float32 torch bicubic with antialias (a = −0.5), rounded half to even, clamped."""
    return _torch_bicubic(arr, size, antialias=True, rounding="round")


def torch_bicubic_no_antialias(arr: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """float32 torch bicubic without antialias (a = −0.75), rounded half to even, clamped."""
    return _torch_bicubic(arr, size, antialias=False, rounding="round")


def torch_bicubic_antialias_truncated(arr: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """float32 torch bicubic with antialias, clamped and truncated to uint8 (no rounding)."""
    return _torch_bicubic(arr, size, antialias=True, rounding="truncate")


# ---------------------------------------------------------------------------------------------
# convert: which images count as transparent


def convert_ignoring_key(img: Image.Image, bg: TransparentBgConfig | None) -> str | None:
    """The fill's conversion with a `transparency` key ignored: only an "A" band composites."""
    if "transparency" in img.info and "A" not in img.getbands():
        return None if img.mode == "RGB" else "RGB"
    return fill_conversion(img, bg)


def convert_honouring_key(img: Image.Image, bg: TransparentBgConfig | None) -> str | None:
    """The fill's conversion with a `transparency` key honoured on RGB images too."""
    if bg is not None and img.mode == "RGB" and "transparency" in img.info:
        return "RGBA"
    return fill_conversion(img, bg)


# ---------------------------------------------------------------------------------------------
# composite-rounding


def _alpha(rgba: np.ndarray, dtype: type) -> np.ndarray:
    a = rgba[..., 3:4].astype(dtype) / dtype(255.0)
    return a


def blend_rounded(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """float32 composite rounded half to even instead of truncated."""
    a = _alpha(rgba, np.float32)
    return np.clip(np.rint(a * rgba[..., :3] + (1 - a) * back), 0, 255).astype(np.uint8)


def blend_half_up(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """float32 composite rounded half up (floor(x + 0.5))."""
    a = _alpha(rgba, np.float32)
    return np.clip(np.floor(a * rgba[..., :3] + (1 - a) * back + np.float32(0.5)), 0, 255).astype(np.uint8)


def blend_float64(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """The composite in float64, truncated."""
    a = _alpha(rgba, np.float64)
    return (a * rgba[..., :3] + (1 - a) * back).astype(np.uint8)


def blend_integer_rounded(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """Integer composite (α·c + (255 − α)·b + 127) // 255."""
    a = rgba[..., 3:4].astype(np.int32)
    return ((a * rgba[..., :3] + (255 - a) * back.astype(np.int32) + 127) // 255).astype(np.uint8)


def blend_integer_truncated(rgba: np.ndarray, back: np.ndarray) -> np.ndarray:
    """Integer composite (α·c + (255 − α)·b) // 255."""
    a = rgba[..., 3:4].astype(np.int32)
    return ((a * rgba[..., :3] + (255 - a) * back.astype(np.int32)) // 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# background


@dataclass(frozen=True)
class OtherBackground:
    """The background step with the config's background replaced by `change(bg)`."""

    name: str
    change: Callable[[TransparentBgConfig], TransparentBgConfig]

    def __call__(self, bg: TransparentBgConfig, height: int, width: int) -> np.ndarray:
        return background(self.change(bg), height, width)


def _background_variants(config: PreprocessConfig) -> list[tuple[str, Callable[[TransparentBgConfig], TransparentBgConfig]]]:
    bg = config.transparent_bg_config
    if bg is None:
        return []
    out: list[tuple[str, Callable[[TransparentBgConfig], TransparentBgConfig]]] = []

    def to(**changes: Any) -> Callable[[TransparentBgConfig], TransparentBgConfig]:
        return lambda b: dataclasses.replace(b, **changes)

    default = TransparentBgConfig()
    if bg.pattern == "chessboard":
        out.append(("chessboard-phase-flipped", to(chessboard_square_on_top_left=not bg.chessboard_square_on_top_left)))
        s = bg.chessboard_square_size
        for square in dict.fromkeys((default.chessboard_square_size, 8, 2 * s, s // 2)):
            if square >= 1 and square != s:
                out.append((f"chessboard-square-{square}", to(chessboard_square_size=square)))
        for gray in dict.fromkeys((default.chessboard_gray_value, 180, PATTERN_VALUES["gray"], 192)):
            if gray != bg.chessboard_gray_value:
                out.append((f"chessboard-gray-{gray}", to(chessboard_gray_value=gray)))
        if bg.chessboard_white_value != 255:
            out.append(("chessboard-white-255", to(chessboard_white_value=255)))
    for pattern in ("black", "white", "gray"):
        if pattern != bg.pattern:
            out.append((f"solid-{pattern}", to(pattern=pattern)))
    if bg.pattern != "chessboard":
        out.append(("chessboard-default", lambda b: dataclasses.replace(default, pattern="chessboard")))
        out.append(("chessboard-k3", lambda b: TransparentBgConfig("chessboard", 8, True, 255, 180)))
    return out


# ---------------------------------------------------------------------------------------------
# pad


def pad_top_left(values, p, normalized, back):
    """Level 0 at the top and left instead of the bottom and right."""
    out = pad_bottom_right(values, p, normalized, back)
    out[...] = normalized(np.zeros((1, 1, 3), dtype=np.uint8))[0, 0]
    out[p.pad_h:, p.pad_w:] = values
    return out


def pad_background(values, p, normalized, back):
    """The padding filled with the background pattern instead of level 0."""
    hp, wp = p.new_h + p.pad_h, p.new_w + p.pad_w
    board = back(hp, wp)
    if board is None:
        return pad_bottom_right(values, p, normalized, back)
    out = normalized(board).astype(np.float32)
    out[: p.new_h, : p.new_w] = values
    return out


def pad_white(values, p, normalized, back):
    """The padding filled with level 255."""
    out = pad_bottom_right(values, p, normalized, back)
    out[p.new_h:, :] = normalized(np.full((1, 1, 3), 255, dtype=np.uint8))[0, 0]
    out[:, p.new_w:] = normalized(np.full((1, 1, 3), 255, dtype=np.uint8))[0, 0]
    return out


def pad_after_normalize(values, p, normalized, back):
    """The padding added after the normalization, as 0.0 (the mean level, not level 0)."""
    out = pad_bottom_right(values, p, normalized, back)
    out[p.new_h:, :] = 0.0
    out[:, p.new_w:] = 0.0
    return out


# ---------------------------------------------------------------------------------------------
# patch-order


def _grid(values: np.ndarray, patch: int) -> tuple[int, int]:
    return values.shape[0] // patch, values.shape[1] // patch


def patches_channels_last(values: np.ndarray, patch: int) -> torch.Tensor:
    """Patches cut as (p, p, C) and read as (C, p, p)."""
    gh, gw = _grid(values, patch)
    tiles = values.reshape(gh, patch, gw, patch, 3).transpose(0, 2, 1, 3, 4)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


def patches_column_major(values: np.ndarray, patch: int) -> torch.Tensor:
    """Patch index gx·gh + gy (columns first)."""
    gh, gw = _grid(values, patch)
    tiles = values.reshape(gh, patch, gw, patch, 3).transpose(2, 0, 4, 1, 3)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


def patches_transposed(values: np.ndarray, patch: int) -> torch.Tensor:
    """Inside a patch (C, px, py) instead of (C, py, px)."""
    gh, gw = _grid(values, patch)
    tiles = values.reshape(gh, patch, gw, patch, 3).transpose(0, 2, 4, 3, 1)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


def patches_bgr(values: np.ndarray, patch: int) -> torch.Tensor:
    """Channels in BGR order."""
    gh, gw = _grid(values, patch)
    tiles = values[..., ::-1].reshape(gh, patch, gw, patch, 3).transpose(0, 2, 4, 1, 3)
    return torch.from_numpy(np.ascontiguousarray(tiles, dtype=np.float32).reshape(gh * gw, 3, patch, patch))


# ---------------------------------------------------------------------------------------------
# the request: what an engine does to the decoded file before the checkpoint's steps
# (`Steps.prepare`); each function leaves an image it does not apply to unchanged


def exif_orientation(img: Image.Image) -> int:
    """The EXIF Orientation of `img` as Pillow reads it (1 when there is none or it is bad)."""
    try:
        value = img.getexif().get(ORIENTATION_TAG, 1)
    except Exception:  # a damaged EXIF block: as Pillow's exif_transpose, no orientation
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def exif_transposed(img: Image.Image) -> Image.Image:
    """`ImageOps.exif_transpose` (what vLLM's normalize_image applies)."""
    if exif_orientation(img) == 1:
        return img
    return ImageOps.exif_transpose(img)


@functools.lru_cache(maxsize=16)
def frame_taker(k: int) -> Callable[[Image.Image], Image.Image]:
    """A function taking frame k of an animation (k < 0 counts from the end) as Pillow seeks to it."""

    def take(img: Image.Image) -> Image.Image:
        n = getattr(img, "n_frames", 1)
        index = k if k >= 0 else n + k
        if n <= 1 or not 0 < index < n:
            return img
        out = call_copy(img)  # seeking a copy: the image the others use stays on frame 0
        out.seek(index)
        return out.copy()

    take.__name__ = f"frame_{k}"
    return take


def _rgba(img: Image.Image) -> Image.Image:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return convert(img, "RGBA")


def flattened_on_white(img: Image.Image) -> Image.Image:
    """Transparency pasted onto white (`Image.paste` with the alpha as mask; vLLM's rgba_to_rgb)."""
    if not has_alpha(img):
        return img
    rgba = _rgba(img)
    out = Image.new("RGB", img.size, (255, 255, 255))
    out.paste(rgba, mask=rgba.getchannel("A"))
    return out


def alpha_composited_on_white(img: Image.Image) -> Image.Image:
    """Transparency composited onto white with `Image.alpha_composite`."""
    if not has_alpha(img):
        return img
    return Image.alpha_composite(Image.new("RGBA", img.size, (255, 255, 255, 255)), _rgba(img)).convert("RGB")


def _is_jpeg(img: Image.Image) -> bool:
    data = encoded_bytes(img)
    return data is not None and data[:3] == b"\xff\xd8\xff"


def jpeg_pillow_ycbcr(img: Image.Image) -> Image.Image:
    """The JPEG decoded to YCbCr by libjpeg and converted to RGB by Pillow's own arithmetic
    (another colour conversion than libjpeg's: up to 1 level on about half the pixels, measured)."""
    if not _is_jpeg(img):
        return img
    data = encoded_bytes(img)
    assert data is not None
    raw = Image.open(io.BytesIO(data))
    raw.draft("YCbCr", raw.size)
    if raw.mode != "YCbCr":
        return img
    out = raw.convert("RGB")
    out.info = dict(img.info)
    return out


BY_ELIMINATION = "by-elimination"
# Pillow format names whose files are lossy (a decoder of its own may give other pixels).
LOSSY_FORMATS = frozenset({"JPEG", "WEBP", "MPO"})


def _lossy_file(img: Image.Image) -> bool:
    return encoded_bytes(img) is not None and (img.format or "") in LOSSY_FORMATS


def _prepared(*functions: Callable[[Image.Image], Image.Image]) -> Callable[[Steps], Steps]:
    return lambda s: s.replace(prepare=s.prepare + functions)


# ---------------------------------------------------------------------------------------------
# the catalogue


@dataclass(frozen=True)
class Variant:
    """One way an engine does a step differently: `apply` swaps it into a `Steps`."""

    name: str
    apply: Callable[[Steps], Steps]


Touches = Callable[[Image.Image, ResizePlan, PreprocessConfig, Steps], bool]


@dataclass(frozen=True)
class RootCause:
    """A named deviation: its id, meaning, variants (per config), and which images it can touch.

    `touches(img, plan, config, steps)` is False only when no variant of this cause can change
    that image's output, whatever other variants `steps` already holds (attribution skips it)."""

    id: str
    meaning: str
    variants: Callable[[PreprocessConfig], Sequence[Variant]]
    touches: Touches
    # Changes what is done to an image (which images are converted or composited, and when), so
    # that a variant of another root cause may only show once this one is applied.
    enabling: bool = False


def _resized(img: Image.Image, p: ResizePlan) -> bool:
    return img.size != (p.new_w, p.new_h)


def _composited(img: Image.Image, config: PreprocessConfig) -> bool:
    return config.transparent_bg_config is not None and has_alpha(img)


def _fixed(*variants: Variant) -> Callable[[PreprocessConfig], Sequence[Variant]]:
    return lambda config: variants


# Modes the checkpoint resizes in their own domain and engines convert first. "P" and "1"
# belong to palette-bicubic, "RGBA" needs no conversion.
CONVERTED_FIRST = frozenset(Image.MODES) - {"P", "1", "RGBA", "RGBa", "La"}
ALL_MODES = frozenset(Image.MODES)
# Modes whose conversion to RGB commutes with the resize (unless a transparency key is set).
_COMMUTING = frozenset({"RGB", "L", "LA"})


def _other_stage(config: PreprocessConfig) -> str:
    return next(s for s in FILL_STAGES if s != config.fill_stage)


def _fill_stage_variants(config: PreprocessConfig) -> tuple[Variant, ...]:
    other = _other_stage(config)
    out = [Variant(f"fill-{other}", lambda s: s.replace(stage=other))]
    if other == "after_resize":
        # As engines that decode to RGB / RGBA: every mode converted first, composited after.
        out.append(Variant("fill-after_resize-decoded-to-rgb",
                           lambda s: s.replace(stage=other, convert_first=s.convert_first | ALL_MODES)))
    return tuple(out)


CATALOGUE: tuple[RootCause, ...] = (
    RootCause(
        "exif-orientation",
        "the EXIF orientation applied (ImageOps.exif_transpose) where the checkpoint ignores it; a "
        "transposing orientation of a non-square image is a grid_mismatch instead",
        _fixed(Variant("exif_transpose", _prepared(exif_transposed))),
        lambda img, p, config, steps: exif_orientation(img) != 1,
        enabling=True,
    ),
    RootCause(
        "animation-frame",
        "another frame of an animation than the one Pillow opens on (frame 0), which the checkpoint uses",
        _fixed(
            Variant("last-frame", _prepared(frame_taker(-1))),
            Variant("frame-1", _prepared(frame_taker(1))),
            Variant("frame-2", _prepared(frame_taker(2))),
        ),
        lambda img, p, config, steps: getattr(img, "n_frames", 1) > 1,
        enabling=True,
    ),
    RootCause(
        "decoder",
        "pixels that differ only by decoding the file: another JPEG colour conversion, IDCT or chroma "
        "upsampling (by elimination when no decoder variant matches a lossy file)",
        _fixed(Variant("jpeg-pillow-ycbcr-to-rgb", _prepared(jpeg_pillow_ycbcr))),
        lambda img, p, config, steps: _is_jpeg(img),
        enabling=True,
    ),
    RootCause(
        "normalize-float",
        "normalization done in float32 arithmetic in another order or fused (x·scale+bias, addcmul, "
        "(x/255−mean)/std) instead of the checkpoint's table; differs by less than one level",
        _fixed(
            Variant("x*scale+bias", lambda s: s.replace(normalize=NORMALIZE_SCALE_BIAS)),
            Variant("addcmul(bias,x,scale)", lambda s: s.replace(normalize=NORMALIZE_FUSED)),
            Variant("addcmul(bias,x,scale), float64 constants",
                    lambda s: s.replace(normalize=NORMALIZE_FUSED_FLOAT64_CONSTANTS)),
            Variant("(x/255-mean)/std", lambda s: s.replace(normalize=NORMALIZE_DIVIDE)),
            Variant("(x/255-mean)*(1/std)", lambda s: s.replace(normalize=NORMALIZE_RECIPROCAL)),
        ),
        lambda img, p, config, steps: True,
    ),
    RootCause(
        "resample-float",
        "8-bit images resized in floating point (torch bicubic, then round and clamp) instead of "
        "Pillow's fixed-point two passes",
        _fixed(
            Variant("torch-bicubic-antialias", lambda s: s.replace(resample=torch_bicubic_antialias)),
            Variant("torch-bicubic", lambda s: s.replace(resample=torch_bicubic_no_antialias)),
            Variant("torch-bicubic-antialias-truncated", lambda s: s.replace(resample=torch_bicubic_antialias_truncated)),
        ),
        lambda img, p, config, steps: _resized(img, p),
    ),
    RootCause(
        "alpha-straight",
        "images with alpha resized without premultiplying, so hidden colours bleed",
        _fixed(Variant("straight-alpha", lambda s: s.replace(straight_alpha=True))),
        lambda img, p, config, steps: _resized(img, p) and has_alpha(img),
    ),
    RootCause(
        "palette-bicubic",
        "\"P\" and \"1\" images converted and resized bicubically, where Pillow resizes them with NEAREST",
        _fixed(Variant("palette-converted-first", lambda s: s.replace(convert_first=s.convert_first | {"P", "1"}))),
        lambda img, p, config, steps: _resized(img, p) and img.mode in ("P", "1"),
        enabling=True,
    ),
    RootCause(
        "convert-before-resize",
        "a mode converted to RGB/RGBA before the resize, where the checkpoint resizes in the source "
        "mode and converts after (16-bit, I, F, CMYK, YCbCr, LAB, PA, ...)",
        _fixed(Variant("converted-first", lambda s: s.replace(convert_first=s.convert_first | CONVERTED_FIRST))),
        lambda img, p, config, steps: (_resized(img, p) and img.mode in CONVERTED_FIRST
                                       and (img.mode not in _COMMUTING or "transparency" in img.info)),
        enabling=True,
    ),
    RootCause(
        "fill-stage",
        "the background composited at the other stage than transparent_bg_fill_stage says",
        _fill_stage_variants,
        lambda img, p, config, steps: _resized(img, p) and (img.mode != "RGB" or "transparency" in img.info),
        enabling=True,
    ),
    RootCause(
        "flatten-white",
        "transparency pasted onto white before the resize (as vLLM's rgba_to_rgb), instead of the "
        "config's background at its fill stage, or no composite at all without a background",
        _fixed(
            Variant("paste-on-white", _prepared(flattened_on_white)),
            Variant("alpha-composite-on-white", _prepared(alpha_composited_on_white)),
        ),
        lambda img, p, config, steps: has_alpha(img),
        enabling=True,
    ),
    RootCause(
        "transparency-key",
        "a transparency key honoured where the checkpoint ignores it, or ignored where it honours it",
        _fixed(
            Variant("key-ignored", lambda s: s.replace(convert=convert_ignoring_key)),
            Variant("key-honoured", lambda s: s.replace(convert=convert_honouring_key)),
            # As engines that convert at decode time do: RGB with a key becomes RGBA first.
            Variant("key-honoured-before-resize",
                    lambda s: s.replace(convert=convert_honouring_key, convert_first=s.convert_first | {"RGB"})),
        ),
        lambda img, p, config, steps: "transparency" in img.info,
        enabling=True,
    ),
    RootCause(
        "composite-rounding",
        "the composite rounded or truncated differently",
        _fixed(
            Variant("round-half-even", lambda s: s.replace(composite=blend_rounded)),
            Variant("round-half-up", lambda s: s.replace(composite=blend_half_up)),
            Variant("integer-rounded", lambda s: s.replace(composite=blend_integer_rounded)),
            Variant("integer-truncated", lambda s: s.replace(composite=blend_integer_truncated)),
            Variant("float64", lambda s: s.replace(composite=blend_float64)),
        ),
        lambda img, p, config, steps: _composited(img, config),
    ),
    RootCause(
        "background",
        "another background: chessboard phase, square size, grey or white value, solid level",
        lambda config: tuple(Variant(name, (lambda c, n: lambda s: s.replace(background=OtherBackground(n, c)))(change, name))
                             for name, change in _background_variants(config)),
        lambda img, p, config, steps: (_composited(img, config)
                                       or (steps.pad is pad_background and bool(p.pad_w or p.pad_h))),
    ),
    RootCause(
        "pad",
        "padding with another value or on other sides",
        _fixed(
            Variant("pad-top-left", lambda s: s.replace(pad=pad_top_left)),
            Variant("pad-background", lambda s: s.replace(pad=pad_background)),
            Variant("pad-white", lambda s: s.replace(pad=pad_white)),
            Variant("pad-after-normalize", lambda s: s.replace(pad=pad_after_normalize)),
        ),
        lambda img, p, config, steps: bool(p.pad_w or p.pad_h),
    ),
    RootCause(
        "patch-order",
        "patches or channels in another order",
        _fixed(
            Variant("channels-last", lambda s: s.replace(patchify=patches_channels_last)),
            Variant("patches-column-major", lambda s: s.replace(patchify=patches_column_major)),
            Variant("patch-transposed", lambda s: s.replace(patchify=patches_transposed)),
            Variant("channels-bgr", lambda s: s.replace(patchify=patches_bgr)),
        ),
        lambda img, p, config, steps: True,
    ),
)

MEANINGS: dict[str, str] = {c.id: c.meaning for c in CATALOGUE}
MEANINGS[UNEXPLAINED] = "none of the catalogued deviations accounts for the difference"
# Every id that can appear in `root_causes`, in catalogue order.
ROOT_CAUSE_IDS: tuple[str, ...] = tuple(MEANINGS)
_BY_ID = {c.id: c for c in CATALOGUE}


def meaning(root_cause: str) -> str:
    """The one-sentence meaning of a root-cause id (KeyError for an unknown id)."""
    return MEANINGS[root_cause]


def steps_for(config: PreprocessConfig, variants: Sequence[tuple[str, str]]) -> Steps:
    """The reference's steps with the named (root cause, variant) pairs swapped in, in order."""
    steps = CHECKPOINT
    for cause_id, name in variants:
        matches = [v for v in _BY_ID[cause_id].variants(config) if v.name == name]
        if not matches:
            raise KeyError(f"{cause_id}: no variant {name!r} under this config")
        steps = matches[0].apply(steps)
    return steps


# ---------------------------------------------------------------------------------------------
# attribution


@dataclass(frozen=True)
class Explained:
    """One greedy step: the root cause taken, its variant, and what was left after it."""

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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = dataclasses.asdict(self)
        out["equivalent"] = list(self.equivalent)
        return out


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

    @property
    def fully_explained(self) -> bool:
        """True when the root causes' variants reproduce the candidate's values bit for bit."""
        return self.residual_differing == 0

    @property
    def sub_level(self) -> bool:
        """True when the candidate is everywhere less than one level from the reference."""
        return is_sub_level(self.max_levels)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (lists, plain numbers; an infinite level is written as None)."""
        def num(v: float) -> float | None:
            return float(v) if np.isfinite(v) else None

        return {
            "root_causes": list(self.root_causes),
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
            "runs": self.runs,
            "complete": self.complete,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class LevelSummary:
    """Max and mean level difference over the values that differ, and how many differ."""

    max_levels: float
    mean_levels: float
    differing: int
    total_levels: float


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


class _OutOfRuns(Exception):
    """The attribution's budget of reference runs is spent."""


@dataclass
class _Budget:
    """Reference runs spent by one attribution, and how many it may spend."""

    max_runs: int | None
    runs: int = 0

    def spend(self) -> None:
        if self.max_runs is not None and self.runs >= self.max_runs:
            raise _OutOfRuns
        self.runs += 1


class _Target:
    """The candidate's values of one image, in levels, and distances of model outputs from them."""

    def __init__(self, values: torch.Tensor, config: PreprocessConfig):
        self.config = config
        # A bfloat16 candidate is compared with model outputs rounded to bfloat16 (the `bf16`
        # tolerance's rule), so that the rounding itself is not a difference.
        self.bf16 = values.dtype == torch.bfloat16
        self.bits = values.float().contiguous().view(torch.int32).numpy()
        self.levels = levels_of(values, config)
        self.finite = np.isfinite(values.float().numpy())

    def summary(self, model: torch.Tensor) -> LevelSummary:
        if self.bf16:
            model = model.to(torch.bfloat16).float()
        differ = self.bits != model.contiguous().view(torch.int32).numpy()
        if not differ.any():
            return LevelSummary(0.0, 0.0, 0, 0.0)
        # Levels of the model's differing finite values (only those, when few): the same values,
        # in the same order, as indexing levels_of(model) by the mask.
        mask = differ & self.finite
        d = np.abs(self.levels[mask] - levels_at(model, mask, self.config))
        total = float(d.sum())
        infinite = int((differ & ~self.finite).sum())
        n = int(differ.sum())
        if infinite:
            return LevelSummary(float("inf"), float("inf"), n, total)
        return LevelSummary(float(d.max()), total / n, n, total)


def _merge(parts: Sequence[LevelSummary]) -> LevelSummary:
    n = sum(s.differing for s in parts)
    if not n:
        return LevelSummary(0.0, 0.0, 0, 0.0)
    total = sum(s.total_levels for s in parts)
    worst = max(s.max_levels for s in parts)
    mean = float("inf") if not np.isfinite(worst) else total / n
    return LevelSummary(worst, mean, n, total)


def level_summary(expected: PreprocessResult, actual: Any, config: PreprocessConfig) -> LevelSummary:
    """The candidate's distance from the reference in levels (the cheap part of a diagnosis)."""
    act = as_result(actual)
    if act.pixel_values.shape != expected.pixel_values.shape:
        raise CandidateError(f"pixel_values shape {list(act.pixel_values.shape)} != "
                             f"{list(expected.pixel_values.shape)}: no level distance")
    return _Target(act.pixel_values, config).summary(expected.pixel_values)


def _closest_first(o: _Option) -> tuple:
    # Exact ties go to an enabling root cause (what was done) before an arithmetic one (how it
    # was computed), then to the catalogue order.
    return (o.total, not o.cause.enabling, o.cause_index, o.variant_index)


class _Search:
    """The greedy search of one attribution: the images, the candidate's values, the runs spent."""

    def __init__(self, decoded: list[Image.Image], config: PreprocessConfig, scope: list[int],
                 targets: dict[int, _Target], catalogue: Sequence[RootCause], budget: _Budget):
        self.decoded = decoded
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

    def run(self, i: int, steps: Steps) -> torch.Tensor:
        """Image i's patches under `steps` (one reference run; the resized, filled array is
        shared by every variant of the later steps, and the patches by every attribution of the
        same image and config in this process: the gate attributes NEW's and OLD's results on
        the same inputs)."""
        self.budget.spend()
        if self.image_keys[i] is None:
            self.image_keys[i] = _image_key(self.decoded[i])
        shared_key = (self.image_keys[i], self.config, steps)
        found_patches = _VARIANT_RUNS.get(shared_key)
        if found_patches is not None:
            return found_patches
        patches = self._run(i, steps)
        _remember_run(shared_key, patches)
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
        return _merge([dist[i] for i in self.scope])

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
            for vi, variant in enumerate(cause.variants(self.config)):
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
                                   {**base.model, **outs}, dist, changed))
        out.sort(key=_closest_first)
        if tried is None:
            self.memo[memo_key] = out
        return out

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
            same = []
            for o in options[1:]:
                if (o.total == best.total and o.cause.id not in (best.cause.id, *same)
                        and all(torch.equal(best.model[i], o.model[i]) for i in self.scope)):
                    same.append(o.cause.id)
            return [best], tuple(same)
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
                left = self.total(o.dist)
                taken.append(Explained(o.cause.id, o.variant.name, left.max_levels, left.mean_levels,
                                       left.total_levels, same if o is chosen[-1] else (), self.scope[0]))
            current = chosen[-1]
            self.best_so_far = (list(taken), current)
        return taken, current


def attribute(
    images: Sequence[ImageSource],
    config: PreprocessConfig,
    actual: Any,
    *,
    expected: PreprocessResult | None = None,
    image: int | None = None,
    causes: Sequence[str] | None = None,
    max_runs: int | None = None,
) -> Attribution:
    """The root causes of the candidate's pixel differences (rule: docs/diagnosis.md).

    `actual` is the candidate's result for `images` under `config` (a PreprocessResult or a
    (pixel_values, grid_thws) pair), with the reference's grids and shape (a pixel finding);
    `expected`, when given, is the reference's result (saves one run); `image` restricts the
    diagnosis to one image's rows; `causes` to some root-cause ids; `max_runs` bounds the
    reference runs spent (the search stops where it is, `complete` False). Raises
    CandidateError when the candidate's shape is not the reference's."""
    start = time.perf_counter()
    decoded = load_images(images)
    act = as_result(actual)
    plans = [plan(img.width, img.height, config) for img in decoded]
    offsets = [0]
    for p in plans:
        offsets.append(offsets[-1] + p.num_patches)
    want = [offsets[-1], 3, config.patch_size, config.patch_size]
    if list(act.pixel_values.shape) != want:
        raise CandidateError(f"pixel_values shape {list(act.pixel_values.shape)} != {want}: "
                             "attribution needs the reference's grids")
    if image is not None and not 0 <= image < len(decoded):
        raise IndexError(f"image {image} of a batch of {len(decoded)}")
    scope = list(range(len(decoded))) if image is None else [image]
    catalogue = CATALOGUE if causes is None else tuple(_BY_ID[c] for c in causes)
    budget = _Budget(max_runs)
    complete = True
    taken: list[Explained] = []
    before_parts: list[LevelSummary] = []
    after_parts: list[LevelSummary] = []
    per_image: list[tuple[str, ...]] = []
    # Each image is attributed on its own (a batch's images may differ for different reasons).
    for i in scope:
        target = _Target(act.pixel_values[offsets[i]:offsets[i + 1]], config)
        search = _Search(decoded, config, [i], {i: target}, catalogue, budget)
        image_taken: list[Explained] = []
        try:
            model = {i: (expected.pixel_values[offsets[i]:offsets[i + 1]] if expected is not None
                         else search.run(i, CHECKPOINT))}
        except _OutOfRuns:
            complete = False
            break
        dist = {i: target.summary(model[i])}
        start_point = _Option(dist[i].total_levels, -1, -1, None, None, CHECKPOINT, model, dist, False)
        current = start_point
        before_parts.append(dist[i])
        if complete:
            try:
                found = search.greedy(start_point)
                assert found is not None
                image_taken, current = found
                if current.total > 0 and image_taken:
                    # A residual left: retry from the next-best first swaps; keep the smallest.
                    for rank in [*range(1, RESTARTS + 1), PAIR_FIRST]:
                        other = search.greedy(start_point, rank)
                        if other is not None and other[1].total < current.total:
                            image_taken, current = other
            except _OutOfRuns:
                complete = False
                if not image_taken and search.best_so_far is not None:  # cut short on its first run
                    image_taken, current = search.best_so_far
        after_parts.append(current.dist[i])
        taken += image_taken
        if (complete and not image_taken and dist[i].differing and _lossy_file(decoded[i])
                and (causes is None or "decoder" in causes)):
            # Nothing in the catalogue moves the reference towards the candidate and the image is
            # a lossy file: the candidate decoded it its own way (docs/inputs.md).
            left = current.dist[i]
            image_taken = [Explained("decoder", BY_ELIMINATION, left.max_levels, left.mean_levels,
                                     left.total_levels, (), i)]
        ids = {e.root_cause for e in image_taken}
        per_image.append(tuple(c for c in ROOT_CAUSE_IDS if c in ids) if ids
                         else (UNEXPLAINED,) if dist[i].differing else ())
    before = _merge(before_parts)
    after = _merge(after_parts)

    if taken:
        ids = {e.root_cause for e in taken}
        root_causes = tuple(c for c in ROOT_CAUSE_IDS if c in ids)
    elif before.differing:
        root_causes = (UNEXPLAINED,)
    else:
        root_causes = ()
    return Attribution(
        root_causes=root_causes,
        max_levels=before.max_levels,
        mean_levels=before.mean_levels,
        differing=before.differing,
        residual_max_levels=after.max_levels,
        residual_mean_levels=after.mean_levels,
        residual_differing=after.differing,
        explained=tuple(taken),
        images=tuple(scope)[:len(per_image)],
        per_image=tuple(per_image),
        runs=budget.runs,
        complete=complete,
        seconds=time.perf_counter() - start,
    )


__all__ = [
    "CATALOGUE",
    "CONVERTED_FIRST",
    "KEEP_AT_MOST",
    "PAIR_SEEDS",
    "RESTARTS",
    "MEANINGS",
    "ROOT_CAUSE_IDS",
    "UNEXPLAINED",
    "Attribution",
    "Explained",
    "LevelSummary",
    "RootCause",
    "Variant",
    "attribute",
    "level_summary",
    "meaning",
    "steps_for",
]


# ---------------------------------------------------------------------------------------------
# the diagnosis fields every finding carries

# Reference runs one finding's attribution may spend (a few milliseconds each on small images).
FINDING_MAX_RUNS = 400


def finding_diagnosis(check: str, stats: Mapping[str, Any] | None, images: Sequence[Any],
                      config: PreprocessConfig, expected: Any = None, actual: Any = None) -> dict[str, Any]:
    """`root_causes`, `max_levels`, `mean_levels`, `residual_max_levels`, `residual_mean_levels`
    and the `attribution` itself for a finding. Pixel mismatches are attributed (on the image at
    fault); other checks have no root cause (`[]`) and carry the levels their stats measured."""
    stats = stats or {}
    fields: dict[str, Any] = {
        "root_causes": [],
        "max_levels": _finite_or_none(stats.get("max_level_diff", 0.0)),
        "mean_levels": _finite_or_none(stats.get("mean_level_diff", 0.0)),
        "residual_max_levels": _finite_or_none(stats.get("max_level_diff", 0.0)),
        "residual_mean_levels": _finite_or_none(stats.get("mean_level_diff", 0.0)),
        "attribution": None,
    }
    if check != PIXEL_MISMATCH or actual is None or not images:
        return fields
    from kimi_oracle.oracle.grouping import image_at_fault

    index = min(image_at_fault(stats), len(images) - 1)
    key = _attribution_key(images, config, actual, expected, index)
    known = _ATTRIBUTIONS.get(key) if key is not None else None
    if known is not None:
        # The same images, config and result attributed before (the gate's baseline returns the
        # candidate's very output on many inputs): the same deterministic answer.
        fields.update(copy.deepcopy(known))
        return fields
    try:
        found = attribute(images, config, actual, expected=expected, image=index, max_runs=FINDING_MAX_RUNS)
    except (KimiOracleError, ValueError) as exc:  # a result the diagnosis cannot line up
        fields["root_causes"] = [UNEXPLAINED]
        fields["attribution"] = {"error": f"{type(exc).__name__}: {exc}"}
        return fields
    fields.update(root_causes=list(found.root_causes) or [UNEXPLAINED],
                  max_levels=_finite_or_none(found.max_levels), mean_levels=_finite_or_none(found.mean_levels),
                  residual_max_levels=_finite_or_none(found.residual_max_levels),
                  residual_mean_levels=_finite_or_none(found.residual_mean_levels),
                  attribution=found.to_dict())
    if key is None:
        return fields
    if len(_ATTRIBUTIONS) >= ATTRIBUTION_MEMO:
        _ATTRIBUTIONS.pop(next(iter(_ATTRIBUTIONS)))
    _ATTRIBUTIONS[key] = copy.deepcopy({k: fields[k] for k in _ATTRIBUTED_FIELDS})
    return fields


# Reference runs of attributions (an image's patches under a variant of the steps) kept per
# process, oldest dropped first past VARIANT_RUNS_BYTES, keyed by the image's digest, the config
# and the steps.
VARIANT_RUNS_BYTES = 256 * 2**20
_VARIANT_RUNS: dict[tuple, torch.Tensor] = {}
_VARIANT_BYTES = [0]


def _remember_run(key: tuple, patches: torch.Tensor) -> None:
    size = patches.numel() * patches.element_size()
    if size > VARIANT_RUNS_BYTES // 4:
        return
    while _VARIANT_RUNS and _VARIANT_BYTES[0] + size > VARIANT_RUNS_BYTES:
        old = _VARIANT_RUNS.pop(next(iter(_VARIANT_RUNS)))
        _VARIANT_BYTES[0] -= old.numel() * old.element_size()
    _VARIANT_RUNS[key] = patches
    _VARIANT_BYTES[0] += size


def _image_key(img: Image.Image) -> bytes:
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


# Attributions kept per process (oldest dropped first), keyed by everything they depend on.
ATTRIBUTION_MEMO = 256
_ATTRIBUTIONS: dict[bytes, dict[str, Any]] = {}
_ATTRIBUTED_FIELDS = ("root_causes", "max_levels", "mean_levels", "residual_max_levels",
                      "residual_mean_levels", "attribution")


def _attribution_key(images: Sequence[Any], config: PreprocessConfig, actual: Any, expected: Any,
                     index: int) -> bytes | None:
    """None, or a digest of what an attribution depends on: the config, every image (mode, size, pixels,
    frames, info, the encoded file it came from), the candidate's result and the expectation."""
    h = hashlib.blake2b(digest_size=20)
    h.update(json.dumps(config.to_hf_json(), sort_keys=True, default=str).encode())
    h.update(str(index).encode())
    for img in images:
        if not isinstance(img, Image.Image):
            return None  # not memoized
        h.update(_image_key(img))
    for result in (actual, expected):
        if result is not None and not isinstance(result, PreprocessResult):
            return None
        h.update(b"-" if result is None else b"+")
        if result is not None:
            update_digest(h, result)
    return h.digest()


def _finite_or_none(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
